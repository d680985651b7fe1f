"""Dynamic shapes in the compiler: which argument dimensions a trace makes symbolic (the
`dynamic=` policy, mark_dynamic / mark_static, automatic dynamic), the guard key of a call
with symbolic dimensions (their sizes left out), the per-function counters (`cf.stats`),
and how a symbolic program's symbol values are read off a call's arguments and checked
against the guards its trace recorded.
"""
import dataclasses

from aotgrad.ir import symbolic
from aotgrad.runtime.tensor import Tensor

_MARKS = "_dynamic_marks"  # a tensor's {dim: True (dynamic) | False (static)}


@dataclasses.dataclass
class CompileStats:
    """What a compiled function did so far (PyTorch users read the same from
    torch._dynamo.utils.counters): traces of the Python function, programs compiled, calls
    served by a cached program, cached programs refused because a guard failed (a shape
    relation, state the trace read), and calls that ran the Python function eagerly."""
    traces: int = 0
    compiles: int = 0
    cache_hits: int = 0
    guard_failures: int = 0
    eager_fallbacks: int = 0

    def __str__(self):
        return ", ".join(f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self))


def _dims(t, dim, what):
    if not isinstance(t, Tensor):
        raise TypeError(f"{what}: expected a tensor, got {type(t).__name__}")
    dims = [dim] if isinstance(dim, int) else list(dim)
    out = []
    for d in dims:
        if not isinstance(d, int) or isinstance(d, bool) or not -t.ndim <= d < max(t.ndim, 1):
            raise IndexError(f"{what}: dimension {d!r} out of range for a tensor of shape "
                             f"{tuple(t.shape)}")
        out.append(d % t.ndim)
    return out


def mark_dynamic(t, dim):
    """Make dimension `dim` (an int or a list of ints) of tensor `t` a symbol from the first
    trace of any compiled function it is passed to (torch._dynamo.mark_dynamic)."""
    marks = t.__dict__.setdefault(_MARKS, {})
    for d in _dims(t, dim, "mark_dynamic"):
        marks[d] = True


def mark_static(t, dim):
    """Keep dimension `dim` of tensor `t` static even under dynamic=True
    (torch._dynamo.mark_static)."""
    marks = t.__dict__.setdefault(_MARKS, {})
    for d in _dims(t, dim, "mark_static"):
        marks[d] = False


class DynamicPolicy:
    """Which dims of a call's tensor arguments a trace makes symbolic.

    dynamic=True: every dim of size >= 2, except mark_static ones; None: the dims marked
    with mark_dynamic, and those automatic dynamic found changing (`note_miss`); False:
    none. Parameters and closed-over tensors are never arguments here: they stay static."""

    def __init__(self, dynamic):
        if dynamic not in (None, True, False):
            raise ValueError(f"compile: dynamic must be None, True or False, got {dynamic!r}")
        self.dynamic = dynamic
        self.auto = {}       # leaf index -> set of dims automatic dynamic made symbolic
        self.notes = []      # one line per automatic decision, for explain()

    def symbolic_dims(self, leaves):
        """{leaf index: tuple of dims} for this call (empty: a static trace)."""
        if self.dynamic is False:
            return {}
        out = {}
        for i, x in enumerate(leaves):
            if not isinstance(x, Tensor):
                continue
            marks = x.__dict__.get(_MARKS)
            if self.dynamic:
                dims = set(range(x.ndim))
            else:
                dims = set(self.auto.get(i, ()))
                if marks:
                    dims |= {d for d, dyn in marks.items() if dyn}
            if not dims:
                continue
            if marks:
                dims -= {d for d, dyn in marks.items() if not dyn}
            shape = x._value.shape
            dims = tuple(sorted(d for d in dims if d < len(shape) and shape[d] >= 2))
            if dims:
                out[i] = dims
        return out

    def note_miss(self, cache, key, names):
        """dynamic=None: `key` missed the cache; where a cached key differs from it only in
        sizes of tensor arguments, those dims become symbolic from now on. Returns the
        words said (logged, and kept for explain()), or None."""
        if self.dynamic is not None:
            return None
        for old in reversed(list(cache)):
            changed = _size_changes(old, key)
            if changed:
                new = {i: dims for i, dims in changed.items()
                       if not set(dims) <= self.auto.get(i, set())}
                if not new:
                    return None
                for i, dims in new.items():
                    self.auto.setdefault(i, set()).update(dims)
                said = "; ".join(
                    f"{names[i] if i < len(names) else f'argument {i}'}: dim "
                    + ", ".join(str(d) for d in dims) for i, dims in new.items())
                line = f"automatic dynamic: sizes changed, traced again with symbolic {said}"
                self.notes.append(line)
                return line
        return None


def _size_changes(old, key):
    """{leaf index: dims} where `key` differs from the cached `old` only in the sizes of
    tensor arguments (same structure, ndim, dtype, requires_grad), else None."""
    if len(old) != len(key) or old[:2] != key[:2]:
        return None
    changed = {}
    for j, (a, b) in enumerate(zip(old[2:], key[2:])):
        if a == b:
            continue
        if not (type(a) is tuple and type(b) is tuple and len(a) == 5 == len(b) and
                a[0] == "T" == b[0] and a[2:] == b[2:] and len(a[1]) == len(b[1])):
            return None
        dims = tuple(d for d, (p, q) in enumerate(zip(a[1], b[1])) if p != q)
        if any(p is not None and q is None for p, q in zip(a[1], b[1])):
            continue  # a symbolic key against a static one: not a size change
        changed[j] = dims
    return changed or None


def mask_key(key, sym):
    """The guard key with the sizes of symbolic dims left out (None in their place)."""
    key = list(key)
    for i, dims in sym.items():
        tag, shape, dtype, rg, inference = key[2 + i]
        shape = list(shape)
        for d in dims:
            shape[d] = None
        key[2 + i] = (tag, tuple(shape), dtype, rg, inference)
    return tuple(key)


def is_symbolic_key(key):
    return any(type(k) is tuple and len(k) == 5 and k[0] == "T" and None in k[1]
               for k in key[2:])


class SymbolicPrograms(list):
    """The programs cached for one guard key with symbolic dims, tried in order: each has
    its ShapeEnv's guards, and serves a call only where they hold."""


@dataclasses.dataclass(eq=False)
class SymbolBinding:
    """How a symbolic program reads its symbol values off a call: `define`, per symbol, the
    (leaf index, dim) of the argument it was made for (each input dim its own symbol); the
    trace's ShapeEnv, whose guards (relations between symbols, specialisations) must hold.
    A call's values are a tuple in `names` order (hashable: what is made once per set of
    sizes is kept under it)."""
    env: object
    define: list
    _read: object = None

    @property
    def names(self):
        """The symbols' names, in the order of a call's values."""
        return tuple(name for _, _, name in self.define)

    def as_dict(self, values):
        """{symbol: value} of a call's values tuple."""
        return dict(zip(self.names, values))

    def values(self, leaves):
        """The symbol values (a tuple) of a call's flattened arguments, or None where a
        guard fails."""
        read = self._read
        if read is None:
            read = self._read = self._make_read()
        return read(leaves)

    def _make_read(self):
        """The reading and the guards as one straight-line function (symbols as locals)."""
        lines = ["def read(leaves):"]
        for i, d, name in self.define:
            lines += [f"    {name} = leaves[{i}]._value.shape[{d}]",
                      f"    if {name} < 2:",  # 0 and 1 are specialised (a static trace)
                      "        return None"]
        for g in self.env.guards:
            lines += [f"    if not ({g.source()}):", "        return None"]
        lines.append("    return (" + "".join(f"{name}, " for _, _, name in self.define) + ")")
        ns = {}
        exec(compile("\n".join(lines) + "\n", "<symbol values and shape guards>", "exec"),
             ns)
        return ns["read"]


def _bare_symbol(s):
    syms = s.free_symbols
    if len(syms) == 1:
        name = next(iter(syms))
        if s.same(symbolic.SymInt.symbol(name, s.hint)):
            return name
    return None


