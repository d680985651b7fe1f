"""`out=`: an op given an output tensor computes its result and writes it into that tensor (or
those tensors, for a multi-output op), as PyTorch's out= variants do.

Like PyTorch's, out= functions are not differentiable: with grad mode on and an argument (or
`out`) that requires grad, the op raises; with a dual tensor among them in forward-mode AD it
raises too. An `out` of another shape is resized (with PyTorch's deprecation warning where it
held elements); the result is cast to out's dtype (a floating result is not written into an
integer tensor). The write is an in-place op on `out`: its version is bumped.

>>> import aotgrad
>>> o = aotgrad.zeros(2)
>>> aotgrad.add(aotgrad.ones(2), 1, out=o) is o, o.tolist()
(True, [2.0, 2.0])
"""
import warnings

import numpy as np

from aotgrad.ir.core import format_location
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime.dual_state import state as _forward
from aotgrad.runtime.dual_state import tangent_of
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor


def _tensors(objs):
    """The tensors among objs (and in the lists and tuples among them)."""
    for o in objs:
        if isinstance(o, Tensor):
            yield o
        elif isinstance(o, (list, tuple)):
            yield from (t for t in o if isinstance(t, Tensor))


def call(name, fn, args, kwargs):
    """Run op `name` (`fn`, the op itself) with `kwargs["out"]` as its output."""
    out = kwargs.pop("out")
    if out is None:
        return fn(*args, **kwargs)
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if not all(isinstance(o, Tensor) for o in outs):
        raise TypeError(f"{name}(): argument 'out' must be a Tensor or a tuple of Tensors, not "
                        f"{type(out).__name__}")
    involved = list(_tensors(args)) + list(_tensors(kwargs.values())) + list(outs)
    if _mode.grad_enabled and any(t.requires_grad for t in involved):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic "
                           f"differentiation, but one of the arguments requires grad."
                           f"{format_location()}")
    if _forward.level is not None and any(tangent_of(t) is not None for t in involved):
        raise RuntimeError(f"Trying to use forward AD with {name}_out that does not support it "
                           f"because it is an out= function{format_location()}")
    result = fn(*args, **kwargs)
    results = tuple(result) if isinstance(result, tuple) else (result,)
    if len(results) != len(outs):
        raise RuntimeError(f"{name}(): expected {len(results)} output tensor(s) in out=, got "
                           f"{len(outs)}")
    for o, r in zip(outs, results):
        _write(name, o, r)
    if isinstance(out, (tuple, list)):   # (a (values, indices) result keeps its type)
        return type(result)(*outs) if hasattr(type(result), "_fields") else tuple(outs)
    return out


def _write(name, out, result):
    if not isinstance(result, Tensor):
        raise TypeError(f"{name}(): out= is only supported for ops returning tensors")
    if result.dtype.is_floating_point and not out.dtype.is_floating_point:
        raise RuntimeError(f"{name}(): result type {result.dtype.name} can't be cast to the "
                           f"desired output type {out.dtype.name}{format_location()}")
    if tuple(out.shape) != tuple(result.shape):
        if out.numel() != 0:
            warnings.warn(f"An output with one or more elements was resized since it had shape "
                          f"{size_list(out.shape)}, which does not match the required output shape "
                          f"{size_list(result.shape)}. This behavior is deprecated, and in a "
                          f"future "
                          f"PyTorch release outputs will not be resized unless they have zero "
                          f"elements. You can explicitly reuse an out tensor t by resizing it, "
                          f"inplace, to zero elements with t.resize_(0).", UserWarning,
                          stacklevel=4)
        if out.requires_grad:
            raise RuntimeError("cannot resize variables that require grad")
        # new memory of the result's shape (all of it is written next; resized and written
        # count as one modification, as in PyTorch)
        out._value = np.zeros(tuple(result.shape),
                              out._concrete(f"{name}(out=...) of another shape").dtype)
    out.copy_(result.detach())
