"""Shared pieces of the kernel emitter: tuning constants, dtype names, constant
literals and the small records (argument, kernel spec, scope) the emitter builds."""
import enum
import math
from dataclasses import dataclass

from aotgrad.ir import dtypes as dt
from aotgrad.ir import prims as P

PAR_MIN = 1 << 17        # elements of work before a kernel uses prange
BLOCK = 4096             # elements per prange block and per float32 partial sum
COL_CHUNK = 512          # kept-dim chunk of a column reduction run in parallel
ROW_BLOCK = 64           # rows per partial of a column sum fused into a row kernel

_NP = {dt.float32: "np.float32", dt.float64: "np.float64", dt.int32: "np.int32",
       dt.int64: "np.int64", dt.bool_: "np.bool_", dt.int8: "np.int8", dt.int16: "np.int16",
       dt.uint8: "np.uint8"}
# integer dtypes narrower than Numba's arithmetic: a pointwise result is narrowed to its dtype
# right away, so that it wraps where eager numpy wraps
_NARROW_INTS = frozenset((dt.int8, dt.int16, dt.uint8))
_LITERALS = (0.0, 1.0, -1.0, 2.0, 0.5)
# relative cost of a prim in a loop (default 1), keyed by the Prim as TEMPLATES is: it decides
# what a row kernel keeps in scratch and where the partitioner cuts
_EXPENSIVE = {P.exp: 20, P.log: 20, P.tanh: 24, P.logistic: 22, P.erf: 24, P.div: 4,
              P.sqrt: 4, P.rsqrt: 5, P.pow: 20, P.log1p: 30, P.expm1: 30, P.sin: 30,
              P.cos: 30, P.atan2: 40, P.sinh: 30, P.cosh: 30, P.asinh: 40, P.acosh: 40,
              P.atanh: 40, P.asin: 40, P.acos: 40, P.erfc: 30, P.erfinv: 200, P.lgamma: 60,
              P.polygamma: 200, P.ndtri: 300, P.erfcx: 60, P.i0e: 200, P.i1e: 200}


def np_name(d):
    return _NP[d]


def const_expr(value, d):
    if d is dt.bool_:
        return "True" if value else "False"
    if d.is_floating_point:
        v = float(value)
        s = "32" if d is dt.float32 else "64"
        if v != v:
            return f"NAN{s}"
        if v in (math.inf, -math.inf):
            return f"INF{s}" if v > 0 else f"(-INF{s})"
        return f"np.float{s}({v!r})"
    return f"{np_name(d)}({int(value)})"


class ArgSpec:
    """One kernel argument: kind in (in, out, const, size)."""
    __slots__ = ("kind", "var", "shape", "value", "dtype")

    def __init__(self, kind, var=None, shape=None, value=None, dtype=None):
        self.kind, self.var, self.shape, self.value, self.dtype = kind, var, shape, value, dtype


class ParallelForm(enum.Enum):
    """How a kernel's parallel loops run on several threads."""
    PARTS = "parts"     # one serial function, its parallel loops split into parts that
                        # threads run (codegen.parts): compiled once, as cheaply as serial
    PRANGE = "prange"   # numba's parallel backend (exported packages, which run without
                        # aotgrad's runtime)


@dataclass(frozen=True)
class PartsLayout:
    """The phases of a kernel emitted in ParallelForm.PARTS. The kernel is called as
    `k(phase, part, nparts, ws, *args)`: phase 0 returns the bytes of workspace its shared
    partials need (only when `shared`); phase 1..loops runs that parallel loop's share
    `part` of `nparts` (every part of a phase may run at once, on other threads); phase
    loops + 1 (only when `final`) runs the code after the last loop, once. Each phase call
    first recomputes the serial code before its loop (scalars and combines of the partials
    earlier loops wrote: cheap and the same in every part)."""
    loops: int
    shared: bool
    final: bool


class KernelSpec:
    def __init__(self, kernel, body, args, parallel, parts=None):
        self.kernel, self.body, self.args, self.parallel = kernel, body, args, parallel
        self.parts = parts   # its PartsLayout, in ParallelForm.PARTS; None otherwise
        self.name = None
        self.checks = []   # the kernel returns nonzero when one of these index checks failed


class _Scope:
    def __init__(self, lines, indent):
        self.lines, self.indent, self.memo = lines, indent, {}

    def add(self, line):
        self.lines.append(self.indent + line)

    def bind(self, key, name, expr):
        """The variable holding `key` in this scope: the one bound before, else `name()`
        bound to `expr()` now (both called only then)."""
        if key not in self.memo:
            nm = name()
            self.add(f"{nm} = {expr()}")
            self.memo[key] = nm
        return self.memo[key]
