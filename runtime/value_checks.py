"""`checked(t, ...)`: t, once its values passed a check that eager mode makes on concrete
values and a compiled program makes at run time (the prim `check_values`, see
ir/value_checks.py). The op layer and nn use this to validate data: indices, class labels,
integer divisors.

>>> import aotgrad
>>> checked(aotgrad.tensor([0, 2]), IndexError, "index {value} out of range", low=0, high=3)
tensor([0, 2])
"""
from aotgrad.ir.value_checks import ValueCheck
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.sizes import hint, hints, type_str

__all__ = ["checked", "hint", "hints", "type_str"]


def checked(t, error, message, *, low=None, high=None, nonzero=False, exempt=None,
            high_inclusive=False, shown=()):
    """t itself (a new tensor with the same value when traced); raises `error(message)`, with
    `{value}` in message replaced by the first element that fails (and `{low}`, `{high}` by
    the bounds: a size's value in this call where the bound is symbolic; `{type0}`,
    `{type1}`, ... by the types of the tensors `shown`, `f32[5,3]`, with this call's sizes),
    when an element is outside [low, high) ([low, high] with high_inclusive; NaN is
    outside), or is 0 with `nonzero`, unless it equals `exempt`. The result has no
    gradient: check what no gradient flows through (indices, labels, a detached value)."""
    types = tuple((s.dtype.short, tuple(s.shape)) for s in shown)
    return tp.check_values(t, check=ValueCheck(error, message, low=low, high=high,
                                               nonzero=nonzero, exempt=exempt,
                                               high_inclusive=high_inclusive, types=types))
