"""The argument list of one kernel being emitted: the arrays it reads and writes, runtime
constants (`full` values: a new value needs no new code) and runtime sizes and index
offsets (a new batch size or slice start needs no new machine code). Each argument is
named once, in the order it is first needed."""
import math

from aotgrad.codegen.emit_base import _LITERALS, ArgSpec, const_expr
from aotgrad.ir import dtypes as dt
from aotgrad.ir.symbolic import SymInt


class KernelArgs:
    def __init__(self):
        self.specs = []         # ArgSpec, in signature order
        self._names = []        # the parameter name of each spec
        self._by_key = {}       # what an argument carries -> its name
        self._count = {"in": 0, "out": 0, "const": 0, "size": 0}

    def _add(self, key, spec, name):
        self._by_key[key] = name
        self.specs.append(spec)
        self._names.append(name)
        self._count[spec.kind] += 1
        return name

    def array(self, kind, var, shape):
        """The parameter holding `var` viewed with (collapsed) `shape`; kind "in" or "out"."""
        key = (kind, var, tuple(shape))
        name = self._by_key.get(key)
        if name is None:
            name = self._add(key, ArgSpec(kind, var=var, shape=tuple(shape)),
                             f"{'a' if kind == 'in' else 'o'}{self._count[kind]}")
        return name

    def const(self, value, d):
        """An expression for the constant `value` of dtype d: a literal for the common ones
        (and bool, NaN, infinities), else a runtime parameter (always for a symbolic size:
        the driver computes it per call)."""
        if isinstance(value, SymInt):
            key = ("const", value, d)
            name = self._by_key.get(key)
            if name is None:
                name = self._add(key, ArgSpec("const", value=value, dtype=d),
                                 f"c{self._count['const']}")
            return name
        v = float(value) if d.is_floating_point else int(value)
        if d is dt.bool_ or v in _LITERALS or (d.is_floating_point and
                                                 (v != v or v in (math.inf, -math.inf))):
            return const_expr(value, d)
        key = ("const", v, d)
        name = self._by_key.get(key)
        if name is None:
            name = self._add(key, ArgSpec("const", value=v, dtype=d), f"c{self._count['const']}")
        return name

    def size(self, value):
        """A new runtime size parameter (a loop bound) of traced value `value`."""
        return self._add(("size", len(self.specs)), ArgSpec("size", value=value),
                         f"n{self._count['size']}")

    def index(self, value, site=None):
        """A constant index or index offset (where a slice starts: a time step of an
        unrolled loop), passed at run time like the loop sizes, so that kernels that differ
        only in where they read share one source and one compiled function. `site` (the
        array and dim read, and the term) names the argument where known, so that whether
        two reads share one does not depend on their offsets being equal."""
        key = ("index", value) if site is None else ("index",) + site
        name = self._by_key.get(key)
        if name is None:
            name = self._add(key, ArgSpec("size", value=value), f"n{self._count['size']}")
        return name

    def signature(self):
        """The parameter names, in order."""
        return ", ".join(self._names)
