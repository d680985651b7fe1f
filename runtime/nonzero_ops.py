"""nonzero and argwhere: index ops whose result shape depends on the data (a graph break while
tracing), below the elementwise ops so that `where(cond)` can answer with them."""
import builtins

import numpy as np

from aotgrad.runtime.op_base import as_tensor_like


def nonzero(x, *, as_tuple=False):
    """Indices of the non-zero elements: an (n, ndim) int64 tensor, or one 1-D tensor per dim."""
    v = x._concrete("nonzero (data-dependent shape)")
    nz = np.nonzero(np.atleast_1d(v))
    if as_tuple:
        return tuple(as_tensor_like(i.astype(np.int64)) for i in nz)
    return as_tensor_like(np.stack(nz, axis=1).astype(np.int64).reshape(-1, builtins.max(
        v.ndim, 1)) if v.ndim else np.zeros((int(bool(v)), 0), dtype=np.int64))


def argwhere(x):
    return nonzero(x)
