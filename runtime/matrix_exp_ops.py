"""matrix_exp: the exponential of square matrices (batched), by scaling and squaring a
degree-18 Taylor polynomial evaluated with matmuls, so its gradient comes from matmul's
rule. The scaling reads the matrices' norm: inside a compiled function that is a graph
break (a data-dependent count of squarings).

>>> import aotgrad
>>> from aotgrad.runtime.matrix_exp_ops import matrix_exp
>>> round(matrix_exp(aotgrad.tensor([[1.]])).item(), 5)
2.71828
"""
import math

import numpy as np

from aotgrad.runtime import elementwise_ops as ew
from aotgrad.runtime import linalg_ops as la
from aotgrad.runtime.factories import eye
from aotgrad.runtime.op_base import cast, op

_DEGREE = 18


@op("matrix_exp")
def matrix_exp(A):
    """exp(A) = sum A^k / k! for square matrices (the last two dims)."""
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"linalg.matrix_exp: A must be batches of square matrices, but "
                           f"they are {A.shape[-2] if A.ndim >= 2 else 0} by "
                           f"{A.shape[-1] if A.ndim else 0} matrices")
    if not A.dtype.is_floating_point:
        raise RuntimeError(f"linalg.matrix_exp: expected a floating point tensor, got "
                           f"{A.dtype.name}")
    n = A.shape[-1]
    v = np.abs(np.asarray(A.detach()._concrete("matrix_exp (norm-dependent scaling)"),
                          dtype=np.float64))
    norm = float(v.sum(-2).max()) if v.size else 0.0
    s = max(0, int(math.ceil(math.log2(norm))) + 1) if norm > 0 and math.isfinite(norm) else 0
    B = ew.mul(A, 0.5 ** s)
    eye_n = cast(eye(n), A.dtype)
    E = eye_n
    for k in range(_DEGREE, 0, -1):   # Horner: I + B/k (I + B/(k+1) (...))
        E = ew.add(eye_n, la.matmul(ew.div(B, float(k)), E))
    for _ in range(s):
        E = la.matmul(E, E)
    return E
