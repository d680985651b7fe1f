"""The base of the op layer: the `op` decorator (provenance name, profiler row and grad_fn
name of a user-level op), the (values, indices) `return_types`, and the conversion helpers
every op family uses: scalar promotion, casting, broadcasting, weak scalars, dim
normalisation.

>>> from aotgrad.runtime.op_base import broadcast_shapes, norm_dims
>>> broadcast_shapes((2, 1), (3,)), norm_dims(-1, 3)
((2, 3), (2,))
"""
import builtins
import functools

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir import symbolic
from aotgrad.ir.core import (current_builder, current_op, current_provenance, format_location,
                              names_location)
from aotgrad.runtime import autocast as _autocast
from aotgrad.runtime import out_variant
from aotgrad.runtime import profiling
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.grad_fn_names import named
from aotgrad.runtime.saved_hooks import mark_number_operand
from aotgrad.runtime.tensor import Tensor


def op(name, grad_name=None):
    """Mark a user-level op: provenance name, profiler row, and the grad_fn name of its result."""
    def deco(fn):
        tensor_args = _tensor_parameters(fn)
        last_tensor_arg = max((i for i, _ in tensor_args), default=-1)
        event = profiling.op_event_name(name)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            if current_op.get() is not None:
                return fn(*args, **kwargs)
            if kwargs and "out" in kwargs:   # written into the given tensor(s)
                return out_variant.call(name, wrapper, args, dict(kwargs))
            if _autocast.state.dtype is not None and current_provenance.get() is None:
                args, kwargs = _autocast.cast_args(name, args, kwargs, cast)
            token = current_op.set(name)
            try:
                if kwargs or len(args) <= last_tensor_arg:
                    for i, pname in tensor_args:
                        a = args[i] if i < len(args) else kwargs.get(pname)
                        if type(a) in _NOT_TENSORS:
                            _not_a_tensor(name, pname, i, a)
                else:  # (the common call: every tensor argument given by position)
                    for i, pname in tensor_args:
                        if type(args[i]) in _NOT_TENSORS:
                            _not_a_tensor(name, pname, i, args[i])
                if profiling._profilers:
                    with profiling.record(event, kind="op",
                                          shapes=_input_shapes(args, kwargs)):
                        out = fn(*args, **kwargs)
                else:
                    out = fn(*args, **kwargs)
            except (RuntimeError, ValueError, TypeError, IndexError) as e:
                _add_user_line(e, name)
                raise
            finally:
                current_op.reset(token)
            if grad_name is not None:
                t = out if type(out) is Tensor else \
                    (out[0] if isinstance(out, ReturnType) else None)
                if t is not None and t.grad_fn is not None:
                    t.grad_fn._name = grad_name  # (grad_fn_names.named, inline)
            return out
        return wrapper
    return deco


def _input_shapes(args, kwargs):
    """An op's argument shapes as PyTorch's profiler records them: a tensor's sizes, [] for
    anything else."""
    return [list(a.shape) if isinstance(a, Tensor) else [] for a in (*args, *kwargs.values())]


def _add_user_line(err, name, prefix=True):
    """Errors raised inside an op name the op and the user's source line (once). Without
    `prefix` only the line is added (the source text names the call; PyTorch's wording stays
    as it is at the start of the message)."""
    msg = str(err.args[0]) if err.args and isinstance(err.args[0], str) else None
    if msg is None or names_location(msg) or \
            type(err).__module__.split(".")[0] not in ("builtins", "aotgrad"):
        return
    prefix = "" if not prefix or msg.startswith((f"{name}(): ", f"{name}:")) else f"{name}: "
    err.args = (f"{prefix}{msg}{format_location()}",) + err.args[1:]


# Arguments that must be tensors when given (a Python number may stand for one in binary
# ops; an array or a list may not, as in PyTorch): parameter name -> PyTorch's name for it.
_TENSOR_PARAMETERS = {"x": "input", "input": "input", "a": "input", "b": "other",
                      "target": "target", "mask": "mask", "cond": "condition",
                      "query": "query", "key": "key", "value": "value", "source": "source",
                      "src": "src", "tensor": "tensor", "weight": "weight", "bias": "bias"}
_NOT_TENSORS = frozenset((list, tuple, np.ndarray))


def _tensor_parameters(fn):
    """(position, name) of fn's parameters that take tensors (see _TENSOR_PARAMETERS)."""
    import inspect
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return ()
    return tuple((i, p.name) for i, p in enumerate(params)
                 if p.name in _TENSOR_PARAMETERS and
                 p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def type_name(value):
    """`list`, `numpy.ndarray`: a value's type as PyTorch's argument errors name it."""
    t = type(value)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _not_a_tensor(opname, pname, i, value):
    what = type_name(value)
    raise TypeError(f"{opname}(): argument '{_TENSOR_PARAMETERS[pname]}' (position {i + 1}) "
                    f"must be Tensor, not {what}")


_named = named  # (the op modules' name for grad_fn_names.named)


class ReturnType(tuple):
    """(values, indices) returned by max/min/sort/topk with a dim, like torch.return_types.

    >>> aotgrad.tensor([[1., 3.]]).max(1)
    aotgrad.return_types.max(
    values=tensor([3.]),
    indices=tensor([1]))
    """
    __slots__ = ()
    _fields = ("values", "indices")

    def __new__(cls, values, indices):
        return tuple.__new__(cls, (values, indices))

    values = property(lambda self: self[0])
    indices = property(lambda self: self[1])

    def __repr__(self):
        return (f"aotgrad.return_types.{type(self).__name__}(\nvalues={self[0]!r},\n"
                f"indices={self[1]!r})")

    def __reduce__(self):
        return (type(self), tuple(self))


def _return_type(name):
    return type(name, (ReturnType,), {"__slots__": (), "__module__": "aotgrad.return_types",
                                      "__qualname__": name})


return_types = {n: _return_type(n) for n in ("max", "min", "sort", "topk", "kthvalue", "mode",
                                                   "cummax", "cummin")}


# ---- conversion helpers --------------------------------------------------------------------
def python_number(s):
    """A symbolic size used as an operand (`x * x.shape[0]`) is the number it is on this
    call: specialised, so the program is guarded on it (ir/symbolic.py); anything else as is."""
    return int(s) if isinstance(s, symbolic.SymInt) else s


def scalar_dtype(s, other=None):
    """PyTorch promotion of a Python scalar against a tensor dtype."""
    if isinstance(s, (bool, np.bool_)):
        return other or dt.bool_
    if isinstance(s, (int, np.integer, symbolic.SymInt)):
        return other if other is not None and other is not dt.bool_ else dt.int64
    if isinstance(s, (float, np.floating)):
        return other if other is not None and other.is_floating_point else dt.float32
    raise TypeError(f"expected a Tensor or a Python number, got {type(s).__name__}")


def to_array(data, dtype=None):
    """Python data / numpy array / Tensor -> numpy array of the right dtype (a new copy)."""
    if isinstance(data, Tensor):
        arr = np.array(data._concrete("tensor(Tensor)"), copy=True)
        return arr if dtype is None else arr.astype(dt.as_dtype(dtype).np)
    if isinstance(data, (list, tuple)) and \
            any(isinstance(d, (Tensor, symbolic.SymInt)) for d in _flat(data)):
        data = _nested(data)
    data = python_number(data)
    if isinstance(data, np.generic):  # a numpy scalar keeps its dtype, like an array
        data = np.asarray(data)
    if isinstance(data, np.ndarray):
        target = dt.as_dtype(dtype) if dtype is not None else dt.from_numpy(data.dtype)
        return np.array(data, dtype=target.np, copy=True)
    arr = np.array(data)
    if dtype is not None:
        return arr.astype(dt.as_dtype(dtype).np)
    if arr.dtype.kind == "f":
        return arr.astype(np.float32)  # Python floats default to float32, like PyTorch
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    if arr.dtype.kind == "b":
        return arr
    raise TypeError(f"Could not infer dtype of {type(data).__name__}")


def _flat(data):
    for d in data:
        if isinstance(d, (list, tuple)):
            yield from _flat(d)
        else:
            yield d


def _nested(data):
    return [(_nested(d) if isinstance(d, (list, tuple)) else
             (d.item() if isinstance(d, Tensor) else python_number(d))) for d in data]


def as_tensor_like(x, dtype=None):
    """x if it is a Tensor; a Python scalar becomes a 0-d constant of the promoted dtype."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        return Tensor._make(to_array(x), False)  # a copy, as tensor(x)
    x = python_number(x)
    return tp.constant(x, scalar_dtype(x, dtype))


def cast(t, dtype):
    return t if t.dtype is dtype else tp.convert_element_type(t, dtype=dtype)


def broadcast_shapes(*shapes):
    try:
        if any(not symbolic.is_static_shape(s) for s in shapes):
            return symbolic.broadcast_shapes(*[tuple(s) for s in shapes])
        return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        shown = [symbolic.hints(s) for s in shapes]   # a trace's sizes as the call's values
        a, b, dim = _mismatch(shown[0], shown[1] if len(shown) > 1 else ())
        raise RuntimeError(
            f"The size of tensor a ({a}) must match the size of tensor b ({b}) at non-singleton "
            f"dimension {dim}: shapes {[list(s) for s in shown]} are not broadcastable") from None


def _mismatch(sa, sb):
    """The first pair of sizes, from the right, that neither broadcasts, and its dim in the
    broadcast result (the last sizes when these two shapes broadcast and a third one does
    not)."""
    ndim = max(len(sa), len(sb))
    for k, (x, y) in enumerate(zip(reversed(sa), reversed(sb))):
        if x != y and 1 not in (x, y):
            return x, y, ndim - 1 - k
    return (sa[-1] if sa else 1), (sb[-1] if sb else 1), ndim - 1


def _binary_args(a, b, float_result=False):
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        # the common case first: two tensors of one shape and dtype, both weakly typed or
        # neither, need no promotion, cast or broadcast
        va, vb = a._value, b._value
        # (traced values compare structurally: a guard here would only pick the fast path)
        if (va.shape == vb.shape if type(va) is np.ndarray and type(vb) is np.ndarray else
                symbolic.same_shape(va.shape, vb.shape)) and va.dtype == vb.dtype and \
                a._weak_scalar == b._weak_scalar and \
                (not float_result or a.dtype.is_floating_point):
            return a, b
    ta, tb = isinstance(a, Tensor), isinstance(b, Tensor)
    if ta != tb:
        # eagerly, a floating tensor and a Python number of its dtype's kind: the number as a
        # constant already of the tensor's shape (one stride-0 view), without the promotion,
        # the 0-d constant and the broadcast of the general path (same values, same dtype)
        t, s = (a, b) if ta else (b, a)
        if type(s) in (float, int) and type(t._value) is np.ndarray and \
                t._value.dtype.char in "fd" and current_builder() is None:
            v = t._value
            c = np.ndarray(v.shape, v.dtype, np.array(s, v.dtype), 0, (0,) * v.ndim)
            c.flags.writeable = False
            c = mark_number_operand(Tensor._make(c))
            return (t, c) if ta else (c, t)
    if not ta and not tb:
        raise TypeError("at least one argument must be a Tensor")
    if ta and tb:
        wa, wb = is_weak(a), is_weak(b)
        if wa != wb:  # a weakly typed scalar tensor promotes like the Python number it holds
            s, t = (a, b) if wa else (b, a)
            dtype = scalar_dtype(0.0 if s.dtype.is_floating_point else 0, t.dtype)
        elif (a.ndim == 0) != (b.ndim == 0):  # PyTorch: a 0-d tensor does not widen a
            z, t = (a, b) if a.ndim == 0 else (b, a)  # dimensioned one of its category
            dtype = t.dtype if _category(z.dtype) <= _category(t.dtype) else z.dtype
        else:
            dtype = dt.promote(a.dtype, b.dtype)
    elif ta:
        dtype, b = scalar_dtype(b, a.dtype), b
    else:
        dtype = scalar_dtype(a, b.dtype)
    if float_result and not dtype.is_floating_point:
        dtype = dt.float32
    a, b = as_tensor_like(a, dtype), as_tensor_like(b, dtype)
    a, b = cast(a, dtype), cast(b, dtype)
    if a.ndim != b.ndim or tuple(a.shape) != tuple(b.shape):
        shape = broadcast_shapes(a.shape, b.shape)
        a, b = tp.broadcast_to(a, shape), tp.broadcast_to(b, shape)
    return (a if ta else mark_number_operand(a)), (b if tb else mark_number_operand(b))


def _category(d):
    return 2 if d.is_floating_point else (0 if d is dt.bool_ else 1)


def _binary(prim, float_result=False):
    def f(a, b):
        weak = (not isinstance(a, Tensor) or a._weak_scalar) and \
            (not isinstance(b, Tensor) or b._weak_scalar)   # (_weak_or_scalar, inline)
        a, b = _binary_args(a, b, float_result)
        out = prim(a, b)
        return mark_weak(out) if weak else out
    return f


def is_weak(t):
    """A weakly typed 0-d tensor stands for a Python number that may change between calls of
    a compiled function (an optimizer's learning rate): in type promotion it acts like that
    number, so `p * lr` stays float32 exactly as with a Python float (JAX's weak types)."""
    return t._weak_scalar   # (the class default False unless mark_weak set it)


def mark_weak(t):
    t.__dict__["_weak_scalar"] = True
    return t


def _weak_or_scalar(x):
    return not isinstance(x, Tensor) or is_weak(x)


# ---- dim normalisation ---------------------------------------------------------------------
def norm_dims(dim, ndim, allow_none=True):
    """Normalise `dim` (None, int or tuple, negatives allowed) to a sorted tuple."""
    if dim is None:
        return tuple(range(ndim))
    if type(dim) is int and -ndim <= dim < ndim:  # (one dim in range: the loop's answer)
        return (dim % ndim,)
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    out = []
    for d in dims:
        d = int(d)
        if not -builtins.max(ndim, 1) <= d < builtins.max(ndim, 1):
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-builtins.max(ndim, 1)}, {builtins.max(ndim, 1) - 1}], but got {d})")
        out.append(d % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise RuntimeError(f"dim {tuple(dims)} appears multiple times in the list of dims")
    return tuple(sorted(out)) if ndim else ()
