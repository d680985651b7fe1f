"""The matmul family: matmul (1-d vectors, matrices, broadcast batch dims), mm, bmm, dot, mv,
outer.

>>> import aotgrad
>>> from aotgrad.runtime import linalg_ops
>>> linalg_ops.matmul(aotgrad.ones(2, 3), aotgrad.ones(3)).tolist()
[3.0, 3.0]
"""
import math

from aotgrad.ir.core import current_builder
from aotgrad.ir.symbolic import hints
from aotgrad.runtime.sizes import hint
from aotgrad.runtime import tprims as tp
from aotgrad.runtime import view_ops
from aotgrad.runtime.elementwise_ops import mul
from aotgrad.runtime.op_base import _named, broadcast_shapes, op


# ---- matmul --------------------------------------------------------------------------------
@op("matmul")
def matmul(a, b):
    """numpy/PyTorch matmul: 1-d vectors, 2-d matrices, broadcast batch dims. The graph is
    PyTorch's: dot, mv or mm for vectors and matrices; a batched left operand against a
    matrix or vector is folded into one mm/mv between two reshapes (ViewBackward0,
    UnsafeViewBackward0); broadcast batches go through one bmm."""
    na, nb = _check_matmul(a, b)
    if na == 2 and nb == 2:
        return _named(tp.dot_general(a, b, contract=((1,), (0,))), "MmBackward0")
    if max(na, nb) > 2 and tracing():
        return _named(one_contraction(a, b), "MmBackward0")
    if na == 1 and nb == 1:
        return _named(tp.dot_general(a, b, contract=((0,), (0,))), "DotBackward0")
    if na == 2 and nb == 1:
        return _named(tp.dot_general(a, b, contract=((1,), (0,))), "MvBackward0")
    if na == 1 and nb == 2:  # (k,) @ (k, n): a row matrix through mm
        row = _named(view_ops.unsqueeze(a, 0), "UnsqueezeBackward0")
        return _named(view_ops.squeeze(matmul(row, b), 0),
                      "SqueezeBackward4")
    if b.ndim <= 2:  # (..., m, k) @ (k, n) or (k,): fold the batch into the rows
        rows = view_ops.reshape(a, (-1, a.shape[-1]))
        out = matmul(rows, b)
        return _named(tp.reshape(out, shape=tuple(a.shape[:-1]) + tuple(b.shape[1:])),
                      "UnsafeViewBackward0")
    return _batched_matmul(a, b)


def tracing():
    """Is a compiled function being traced? Then a few ops record the decomposition the code
    generator plans best (one contraction over the batch dims, no reshapes around it) rather
    than the one PyTorch's eager graph shows (nodes users walk by name: a traced program's
    graph has no grad_fns to walk). Both compute the same products."""
    return current_builder() is not None


def one_contraction(a, b):
    """a @ b as one dot_general: a vector operand contracted directly, a matrix right operand
    contracted against a's last dim whatever a's batch dims, broadcast batch dims as the
    contraction's batch dims."""
    if b.ndim == 1:
        return tp.dot_general(a, b, contract=((a.ndim - 1,), (0,)))
    if a.ndim == 1:
        return tp.dot_general(a, b, contract=((0,), (b.ndim - 2,)))
    if b.ndim == 2:
        return tp.dot_general(a, b, contract=((a.ndim - 1,), (0,)))
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = tp.broadcast_to(a, batch + tuple(a.shape[-2:]))
    b = tp.broadcast_to(b, batch + tuple(b.shape[-2:]))
    nb = len(batch)
    return tp.dot_general(a, b, contract=((nb + 1,), (nb,)),
                          batch=(tuple(range(nb)), tuple(range(nb))))


def _check_matmul(a, b):
    """PyTorch's errors for operands matmul cannot take; (a.ndim, b.ndim) when it can."""
    if a.dtype is not b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                           f"{a.dtype.name} != {b.dtype.name}")
    sa, sb = a._value.shape, b._value.shape
    na, nb = len(sa), len(sb)
    if na == 0 or nb == 0:
        raise RuntimeError("both arguments to matmul need to be at least 1D, but they are "
                           f"{na}D and {nb}D")
    if sa[-1] != sb[-2 if nb > 1 else 0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied "
                           f"({'x'.join(map(str, hints(sa)))} and "
                           f"{'x'.join(map(str, hints(sb)))})")
    return na, nb


def _batched_matmul(a, b):
    """Broadcast batch dims (a vector operand is a one-row or one-column matrix): one
    batched contraction over the broadcast batch."""
    if a.ndim == 1:
        return _named(tp.reshape(_batched_matmul(tp.reshape(a, shape=(1, a.shape[0])), b),
                                 shape=tuple(b.shape[:-2]) + (b.shape[-1],)),
                      "UnsafeViewBackward0")
    # PyTorch's graph: each operand expanded to the broadcast batch and viewed as one batch
    # dim, one bmm, and a view of the result back to the batch dims
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    n = math.prod(batch)
    out = _named(tp.dot_general(_as_batch(a, batch, n), _as_batch(b, batch, n),
                                contract=((2,), (1,)), batch=((0,), (0,))), "BmmBackward0")
    return _named(tp.reshape(out, shape=tuple(batch) + (a.shape[-2], b.shape[-1])),
                  "UnsafeViewBackward0")


def _as_batch(t, batch, n):
    """t expanded to `batch` (an expand node even when the shape stays, as PyTorch records)
    and viewed as (n, rows, cols)."""
    shape = tuple(batch) + tuple(t.shape[-2:])
    e = tp.broadcast_to(t, shape)
    if e is t:
        e = tp.reshape(t, shape=shape)
    e = _named(e, "ExpandBackward0")
    return _named(tp.reshape(e, shape=(n,) + tuple(t.shape[-2:])), "ViewBackward0")


def mm(a, b):
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError(f"mm: expected 2D tensors, got {a.ndim}D and {b.ndim}D")
    return matmul(a, b)


def bmm(a, b):
    if a.ndim != 3 or b.ndim != 3:
        raise RuntimeError(f"bmm: expected 3D tensors, got {a.ndim}D and {b.ndim}D")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"bmm: batch sizes differ: {hint(a.shape[0])} and {hint(b.shape[0])}")
    return matmul(a, b)


def dot(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    return matmul(a, b)


def mv(a, b):
    return matmul(a, b)


def outer(a, b):
    return mul(a.reshape(-1, 1), b.reshape(1, -1))

