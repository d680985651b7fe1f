"""Run-time checks of values: what eager mode checks on concrete values (an index in range, a
class label in range, an integer divisor that is not zero), kept in compiled programs.

A check is the prim `check_values(x, check=ValueCheck(...))`: it returns x unchanged, or
raises `check.error` when an element of x breaks the rule. Ops thread the index through it
(`gather(x, check_values(idx, ...))`), so the check stays alive through dead-code elimination
and runs before the value is used; eagerly the same prim raises the same error.

>>> import numpy as np
>>> c = ValueCheck(low=0, high=3, error=IndexError, message="index {value} is out of range")
>>> c.first_violation(np.array([0, 2, 5]))
5
"""
import dataclasses

import numpy as np


@dataclasses.dataclass(frozen=True)
class ValueCheck:
    """Every element v of the checked value must satisfy `low <= v < high` (`low <= v <=
    high` with `high_inclusive`; a bound that is None is not checked; NaN fails a bound) and,
    with `nonzero`, `v != 0`; the element equal to `exempt` (a loss's ignore_index) passes
    anyway. `message` is formatted with `value`: the first element that fails, the bounds
    `low` and `high` (as checked: a symbolic size's value in this call), and `type0`,
    `type1`, ...: the types of `types` (pairs of a dtype's short name and a shape, which
    may be symbolic), `f32[5,3]`, with this call's sizes."""
    error: type
    message: str
    low: float = None
    high: float = None
    nonzero: bool = False
    exempt: int = None
    high_inclusive: bool = False
    types: tuple = ()

    def first_violation(self, a):
        """The first element of array `a` that fails the check, or None."""
        a = np.asarray(a)
        if a.size == 0 or self._all_pass(a):
            return None
        bad = np.zeros(a.shape, dtype=bool)
        if self.low is not None:
            bad |= a < self.low
        if self.high is not None:
            bad |= a > self.high if self.high_inclusive else a >= self.high
        if a.dtype.kind == "f" and (self.low is not None or self.high is not None):
            bad |= np.isnan(a)
        if self.nonzero:
            bad |= a == 0
        if self.exempt is not None:
            bad &= a != self.exempt
        if not bad.any():
            return None
        return a[bad].flat[0].item()

    def _all_pass(self, a):
        """The common case in two reductions (min, max; NaN fails them): every element is
        inside the bounds, and nonzero where that is asked."""
        if self.low is not None or self.high is not None:
            lo, hi = a.min(), a.max()
            if self.low is not None and not lo >= self.low:
                return False
            if self.high is not None and not (hi <= self.high if self.high_inclusive
                                              else hi < self.high):
                return False
        return not self.nonzero or np.count_nonzero(a) == a.size

    def raise_if_violated(self, a):
        v = self.first_violation(a)
        if v is not None:
            shown = {f"type{i}": f"{short}[{','.join(map(str, shape))}]"
                     for i, (short, shape) in enumerate(self.types)}
            raise self.error(self.message.format(value=v, low=self.low, high=self.high,
                                                 **shown))

    def __repr__(self):   # valid Python in a printed graph (the header imports aotgrad)
        fields = [f"error={self.error.__name__}", f"message={self.message!r}"]
        fields += [f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self)[2:]
                   if getattr(self, f.name) != f.default]
        return f"aotgrad.ir.value_checks.ValueCheck({', '.join(fields)})"
