"""The matmul family: matmul (1-d vectors, matrices, broadcast batch dims), mm, bmm, dot, mv,
outer.

>>> import aotgrad
>>> from aotgrad.runtime import linalg_ops
>>> linalg_ops.matmul(aotgrad.ones(2, 3), aotgrad.ones(3)).tolist()
[3.0, 3.0]
"""
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.elementwise_ops import mul
from aotgrad.runtime.op_base import _named, broadcast_shapes, op


# ---- matmul --------------------------------------------------------------------------------
@op("matmul")
def matmul(a, b):
    """numpy/PyTorch matmul: 1-d vectors, 2-d matrices, broadcast batch dims."""
    out = _matmul(a, b)
    return _named(out, "DotBackward0" if a.ndim == b.ndim == 1 else
                  "MvBackward0" if (a.ndim, b.ndim) == (2, 1) else "MmBackward0")


def _matmul(a, b):
    if a.dtype is not b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                           f"{a.dtype.name} != {b.dtype.name}")
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError("both arguments to matmul need to be at least 1D, but they are "
                           f"{a.ndim}D and {b.ndim}D")
    if a.shape[-1] != b.shape[-2 if b.ndim > 1 else 0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied "
                           f"({'x'.join(map(str, a.shape))} and {'x'.join(map(str, b.shape))})")
    if a.ndim == 1 and b.ndim == 1:
        return tp.dot_general(a, b, contract=((0,), (0,)))
    if b.ndim == 1:
        return tp.dot_general(a, b, contract=((a.ndim - 1,), (0,)))
    if a.ndim == 1:
        return tp.dot_general(a, b, contract=((0,), (b.ndim - 2,)))
    if b.ndim == 2:  # (..., m, k) @ (k, n): one contraction, no batch dims
        return tp.dot_general(a, b, contract=((a.ndim - 1,), (0,)))
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = tp.broadcast_to(a, batch + tuple(a.shape[-2:]))
    b = tp.broadcast_to(b, batch + tuple(b.shape[-2:]))
    nb = len(batch)
    return tp.dot_general(a, b, contract=((nb + 1,), (nb,)),
                          batch=(tuple(range(nb)), tuple(range(nb))))


def mm(a, b):
    if a.ndim != 2 or b.ndim != 2:
        raise RuntimeError(f"mm: expected 2D tensors, got {a.ndim}D and {b.ndim}D")
    return matmul(a, b)


def bmm(a, b):
    if a.ndim != 3 or b.ndim != 3:
        raise RuntimeError(f"bmm: expected 3D tensors, got {a.ndim}D and {b.ndim}D")
    if a.shape[0] != b.shape[0]:
        raise RuntimeError(f"bmm: batch sizes differ: {a.shape[0]} and {b.shape[0]}")
    return matmul(a, b)


def dot(a, b):
    if a.ndim != 1 or b.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors")
    return matmul(a, b)


def mv(a, b):
    return matmul(a, b)


def outer(a, b):
    return mul(a.reshape(-1, 1), b.reshape(1, -1))

