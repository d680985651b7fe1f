"""Prims as tensor functions: `tprims.add(a, b)` is `dispatch.apply(prims.add, a, b)`.

Derivative rules and ops are written with these, so each call is both computed (eager)
and recorded (tracing), and is itself differentiable.
"""
import functools

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import size_list
from aotgrad.ir.prims import PRIMS
from aotgrad.ir.core import current_builder
from aotgrad.ir.symbolic import SymInt
from aotgrad.runtime import forward_mode
from aotgrad.runtime.forward_mode import state as _forward
from aotgrad.runtime.dispatch import apply
from aotgrad.runtime.tensor import Tensor


def _make(prim):
    f = functools.partial(apply, prim)  # (no Python frame of its own between op and apply)
    f.__name__ = prim.name
    f.__doc__ = f"Tensor-level `prims.{prim.name}`."
    return f


for _name, _prim in PRIMS.items():
    globals()[_name] = _make(_prim)


def constant(value, dtype, shape=()):
    """A constant tensor of `dtype` (a `full` prim, so it is traced too; eagerly it is the
    prim's reference result made directly, since a constant needs no validation or grad)."""
    if current_builder() is None:
        return Tensor._make(np.full(shape, _py(value, dtype), dtype=dtype.np))
    if isinstance(value, SymInt) and dtype is not dt.bool_:  # a size (mean's divisor): the
        return full(shape=tuple(shape), value=value, dtype=dtype)  # noqa: F821  program's value
    return full(shape=tuple(shape), value=_py(value, dtype), dtype=dtype)  # noqa: F821


def zeros(shape, dtype):
    return constant(0, dtype, shape)


def sign_nan0(x):
    """sign(x), and 0 where x is NaN (PyTorch's sign and sgn; abs'(NaN) is 0, not NaN)."""
    s = sign(x)  # noqa: F821
    if not x.dtype.is_floating_point:
        return s
    return where(ne(x, x), zeros(tuple(x.shape), x.dtype), s)  # noqa: F821


def _py(value, dtype):
    if dtype is dt.bool_:
        return bool(value)
    if dtype.is_floating_point:
        return float(value)
    v = int(value)
    if dtype.itemsize < 8:  # a Python int outside a narrow type's range wraps, as PyTorch's
        bits = dtype.itemsize * 8  # C cast does (uint8 tensor + -5 adds 251)
        v %= 1 << bits
        if dtype.np.kind == "i" and v >= 1 << (bits - 1):
            v -= 1 << bits
    return v


def broadcast_to(t, shape):
    """Numpy-style broadcast of t to `shape` (right-aligned) with one broadcast_in_dim."""
    shape = tuple(shape)
    if t.ndim == len(shape) and tuple(t.shape) == shape:  # (lengths first: no size compared
        return t                                           # across ranks, no guard)
    nd = len(shape)
    if t.ndim > nd:
        raise ValueError(f"cannot broadcast {size_list(t.shape)} to {list(shape)}")
    if not t.requires_grad and current_builder() is None and type(t._value) is np.ndarray and \
            (_forward.level is None or forward_mode.tangent_of(t) is None):  # nothing to record
        try:
            return Tensor._make(np.broadcast_to(t._value, shape))
        except ValueError:
            pass  # fall through to the prim for its error message
    return broadcast_in_dim(t, shape=shape, dims=tuple(range(nd - t.ndim, nd)))  # noqa: F821


__all__ = list(PRIMS) + ["constant", "zeros", "broadcast_to"]
