"""The `_foreach_*` functions (PyTorch's multi-tensor ops): one op applied to every tensor of a
list. `_foreach_exp(xs)` is `tuple(x.exp() for x in xs)`; `_foreach_add_(xs, 1)` is
`for x in xs: x.add_(1)` and returns the list it was given, as PyTorch's. The second operand
of a binary op is a number (the same for every tensor), a 0-d tensor, or a list as long as
the first (numbers or tensors; `alpha` of add/sub goes with tensors only); the `value` of
addcmul/addcdiv is a number, a list of numbers or a 1-d tensor of one value per tensor, and
lerp's `weight` a number or a list.

Each tensor goes through the op layer, so autograd, forward mode, saved-tensor hooks and
compiled tracing see the per-tensor ops (the optimizers' numpy multi-tensor path is
runtime/multi_tensor.py, a different thing).

>>> import aotgrad
>>> [t.tolist() for t in aotgrad._foreach_mul([aotgrad.ones(2), aotgrad.ones(1)], [2.0, 3.0])]
[[2.0, 2.0], [3.0]]
"""
from numbers import Number

from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.sizes import size_list

UNARY = ("abs acos asin atan ceil cos cosh erf erfc exp expm1 floor frac lgamma log log10 "
         "log1p log2 neg reciprocal round rsqrt sigmoid sign sin sinh sqrt tan tanh "
         "trunc").split()
BINARY = "add sub mul div clamp_min clamp_max maximum minimum pow".split()
TERNARY = "addcmul addcdiv".split()


def _tensors(name, tensors):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError(f"{name}: Tensor list must have at least one tensor.")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: expected a list of Tensors, got an element of type "
                            f"{type(t).__name__}")
    return tensors


def _per_tensor(name, other, n, *, tensor_is_per_item=False):
    """`other` spread over n tensors: a list of one operand per tensor."""
    if isinstance(other, (list, tuple)):
        if len(other) != n:
            raise RuntimeError(f"{name}: Tensor lists must have the same number of tensors, "
                               f"got {n} and {len(other)}.")
        return list(other)
    if isinstance(other, Tensor) and tensor_is_per_item:  # one value per tensor, in a 1-d tensor
        if other.ndim != 1 or other.shape[0] != n:
            raise RuntimeError(f"{name}: expected a 1-d tensor of {n} scalars, got shape "
                               f"{size_list(other.shape)}")
        return [other[i] for i in range(n)]
    if not isinstance(other, (Number, Tensor)):
        raise TypeError(f"{name}: expected a number, a Tensor or a list, got "
                        f"{type(other).__name__}")
    return [other] * n


def _unary(op):
    def out_of_place(self):
        return tuple(getattr(t, op)() for t in _tensors(f"_foreach_{op}", self))

    def in_place(self):
        for t in _tensors(f"_foreach_{op}_", self):
            getattr(t, op + "_")()
        return self
    return out_of_place, in_place


def _binary(op):
    takes_alpha = op in ("add", "sub")

    def call(t, o, alpha, method):
        if alpha is not None:
            if not takes_alpha or not isinstance(o, Tensor):  # (PyTorch's signatures)
                raise TypeError(f"_foreach_{op}(): alpha is taken with a Tensor or a list of "
                                f"Tensors as the second operand only")
            return getattr(t, method)(o, alpha=alpha)
        return getattr(t, method)(o)

    def out_of_place(self, other, *, alpha=None):
        self = _tensors(f"_foreach_{op}", self)
        others = _per_tensor(f"_foreach_{op}", other, len(self))
        return tuple(call(t, o, alpha, op) for t, o in zip(self, others))

    def in_place(self, other, *, alpha=None):
        tensors = _tensors(f"_foreach_{op}_", self)
        for t, o in zip(tensors, _per_tensor(f"_foreach_{op}_", other, len(tensors))):
            call(t, o, alpha, op + "_")
        return self
    return out_of_place, in_place


def _ternary(op):
    def out_of_place(self, tensor1, tensor2, value=1):
        self = _tensors(f"_foreach_{op}", self)
        n = len(self)
        t1 = _per_tensor(f"_foreach_{op}", tensor1, n)
        t2 = _per_tensor(f"_foreach_{op}", tensor2, n)
        vs = _per_tensor(f"_foreach_{op}", value, n, tensor_is_per_item=True)
        return tuple(getattr(t, op)(a, b, value=_number(v))
                     for t, a, b, v in zip(self, t1, t2, vs))

    def in_place(self, tensor1, tensor2, value=1):
        tensors = _tensors(f"_foreach_{op}_", self)
        n = len(tensors)
        for t, a, b, v in zip(tensors, _per_tensor(f"_foreach_{op}_", tensor1, n),
                              _per_tensor(f"_foreach_{op}_", tensor2, n),
                              _per_tensor(f"_foreach_{op}_", value, n, tensor_is_per_item=True)):
            getattr(t, op + "_")(a, b, value=_number(v))
        return self
    return out_of_place, in_place


def _number(v):
    return v.item() if isinstance(v, Tensor) else v


def _foreach_lerp(self, tensors1, weight):
    self = _tensors("_foreach_lerp", self)
    ends = _per_tensor("_foreach_lerp", tensors1, len(self))
    weights = _per_tensor("_foreach_lerp", weight, len(self))
    return tuple(t.lerp(e, w) for t, e, w in zip(self, ends, weights))


def _foreach_lerp_(self, tensors1, weight):
    tensors = _tensors("_foreach_lerp_", self)
    for t, e, w in zip(tensors, _per_tensor("_foreach_lerp_", tensors1, len(tensors)),
                       _per_tensor("_foreach_lerp_", weight, len(tensors))):
        t.lerp_(e, w)
    return self


def _foreach_zero_(self):
    for t in _tensors("_foreach_zero_", self):
        t.zero_()
    return self


def _foreach_copy_(self, src, non_blocking=False):
    tensors = _tensors("_foreach_copy_", self)
    for t, s in zip(tensors, _per_tensor("_foreach_copy_", src, len(tensors))):
        t.copy_(s)
    return self


def _foreach_clone(self):
    return tuple(t.clone() for t in _tensors("_foreach_clone", self))


def _foreach_norm(self, ord=2, dtype=None):
    """The vector norm of each tensor (all its elements)."""
    return tuple((t if dtype is None else t.to(dtype)).norm(ord)
                 for t in _tensors("_foreach_norm", self))


def _functions():
    out = {}
    for names, make in ((UNARY, _unary), (BINARY, _binary), (TERNARY, _ternary)):
        for op in names:
            fn, fn_ = make(op)
            fn.__name__, fn_.__name__ = f"_foreach_{op}", f"_foreach_{op}_"
            fn.__doc__ = fn_.__doc__ = f"`{op}` of every tensor of a list (module docstring)."
            out[fn.__name__], out[fn_.__name__] = fn, fn_
    for fn in (_foreach_lerp, _foreach_lerp_, _foreach_zero_, _foreach_copy_, _foreach_clone,
               _foreach_norm):
        out[fn.__name__] = fn
    return out


FUNCTIONS = _functions()
