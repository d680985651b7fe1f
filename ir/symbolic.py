"""Symbolic sizes: plain integers with names (`s0`, `s1`, ...), for programs that serve
every size of a dimension.

A `SymInt` is an integer polynomial over size symbols and a few opaque atoms (`a // k`,
`a % k`), carrying a *hint*: its value on the call being traced. Shape rules compute with
SymInts as with ints (`+ - * // %`, `math.prod`), so most of them need no change.

Deciding something about a size (`==`, `<`, `bool`, `int()`) while a `ShapeEnv` is active
answers from the hints and records the answer as a guard (`s0 % 4 == 0`, `s1 != s0`): the
program is reused only on calls where every guard holds, so its decisions stay true.
`int(s)`/`operator.index(s)` (a numpy call, `range`, a Python number) *specialise* the
expression: the guard `expr == hint`, and the reason, listed by `explain()`.

Outside a ShapeEnv (codegen, after tracing) comparisons are structural and record nothing:
`a == b` is True only when the two expressions are provably equal, so a decision taken on
it holds for every size; an order (`<`, `>=`, ...) not provable for every size raises, as
`int()` does, and heuristics read `hint(x)`.

Sizes 0 and 1 are never made symbols (PyTorch's 0/1 specialisation: broadcasting and empty
tensors behave differently there), so every symbol is >= 2.
"""
import contextvars
import dataclasses
import math
import operator

_CURRENT = contextvars.ContextVar("aotgrad_shape_env", default=None)
_OP_TEXT = {operator.eq: "==", operator.ne: "!=", operator.lt: "<", operator.le: "<=",
            operator.gt: ">", operator.ge: ">="}
# the relation that holds when `op` does not
_NEGATED = {operator.eq: operator.ne, operator.ne: operator.eq, operator.lt: operator.ge,
            operator.le: operator.gt, operator.gt: operator.le, operator.ge: operator.lt}


def _key_of_atom(a):
    return a if isinstance(a, str) else a.key


@dataclasses.dataclass(frozen=True)
class _Opaque:
    """`num // den` or `num % den` of polynomials that do not divide exactly: an atom."""
    op: str          # "//" or "%"
    num: "SymInt"
    den: object      # int or SymInt

    @property
    def key(self):
        return (self.op, self.num._terms, self.den._terms if isinstance(self.den, SymInt)
                else self.den)

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, o):
        return isinstance(o, _Opaque) and o.key == self.key

    def evaluate(self, values):
        n, d = self.num.evaluate(values), evaluate(self.den, values)
        return n // d if self.op == "//" else n % d

    def source(self):
        den = source(self.den)
        if isinstance(self.den, SymInt) and not den.isidentifier() and den[0] != "(":
            den = f"({den})"   # `n // 2*s0` would read as `(n // 2)*s0`
        return f"({self.num.source()} {self.op} {den})"


def _comparison(op):
    """SymInt's comparison dunder for `op` (see SymInt._decide)."""
    def compare(self, o):
        return self._decide(op, o)
    return compare


class SymInt:
    """An integer-valued polynomial over size symbols, with its hint (value on the traced
    call). `_terms`: a sorted tuple of (monomial, coefficient), a monomial a sorted tuple of
    (atom, power); the constant term has the empty monomial."""
    __slots__ = ("_terms", "hint", "_atoms")

    def __init__(self, terms, hint, atoms):
        self._terms, self.hint, self._atoms = terms, hint, atoms

    # -- construction -----------------------------------------------------------------
    @staticmethod
    def symbol(name, hint):
        return SymInt(((((name, 1),), 1),), int(hint), {name: int(hint)})

    @staticmethod
    def _from(terms, atoms):
        """A polynomial from a {monomial: coeff} dict (an int when constant)."""
        terms = tuple(sorted(((m, c) for m, c in terms.items() if c),
                             key=lambda mc: repr(tuple((_key_of_atom(a), p) for a, p in mc[0]))))
        if not terms:
            return 0
        if len(terms) == 1 and terms[0][0] == ():
            return terms[0][1]
        used = {a for m, _ in terms for a, _ in m}
        atoms = {a: h for a, h in atoms.items() if a in used}
        out = SymInt(terms, 0, atoms)
        out.hint = out.evaluate(None)
        return out

    def _dict(self):
        return dict(self._terms)

    # -- arithmetic (exact, never guards) ---------------------------------------------
    def __add__(self, o):
        if not isinstance(o, (int, SymInt)) or isinstance(o, bool):
            return NotImplemented
        d = self._dict()
        for m, c in _terms_of(o):
            d[m] = d.get(m, 0) + c
        return SymInt._from(d, {**self._atoms, **_atoms_of(o)})

    __radd__ = __add__

    def __neg__(self):
        return SymInt._from({m: -c for m, c in self._terms}, self._atoms)

    def __sub__(self, o):
        if not isinstance(o, (int, SymInt)) or isinstance(o, bool):
            return NotImplemented
        return self + (-o)

    def __rsub__(self, o):
        if not isinstance(o, (int, SymInt)) or isinstance(o, bool):
            return NotImplemented
        return (-self) + o

    def __mul__(self, o):
        if not isinstance(o, (int, SymInt)) or isinstance(o, bool):
            return NotImplemented
        d = {}
        for m1, c1 in self._terms:
            for m2, c2 in _terms_of(o):
                m = _mono_mul(m1, m2)
                d[m] = d.get(m, 0) + c1 * c2
        return SymInt._from(d, {**self._atoms, **_atoms_of(o)})

    __rmul__ = __mul__

    def __floordiv__(self, o):
        if isinstance(o, bool) or not isinstance(o, (int, SymInt)):
            return NotImplemented
        q = _exact_quotient(self, o)
        return q if q is not None else _opaque("//", self, o)

    def __rfloordiv__(self, o):
        if isinstance(o, bool) or not isinstance(o, int):
            return NotImplemented
        return _opaque("//", _as_sym(o), self) if o else 0

    def __mod__(self, o):
        if isinstance(o, bool) or not isinstance(o, (int, SymInt)):
            return NotImplemented
        q = _exact_quotient(self, o)
        if q is not None:
            return self - q * o
        return _opaque("%", self, o)

    def __rmod__(self, o):
        if isinstance(o, bool) or not isinstance(o, int):
            return NotImplemented
        return _opaque("%", _as_sym(o), self) if o else 0

    def __truediv__(self, o):
        # a float of a size is a number the program computes with: specialise (guarded)
        return int(self) / o

    def __rtruediv__(self, o):
        return o / int(self)

    def __pos__(self):
        return self

    def __pow__(self, o):
        if type(o) is int and o >= 0:
            out = 1
            for _ in range(o):
                out = out * self
            return out
        return int(self) ** o  # (a float power of a size: a number; specialise, guarded)

    def __rpow__(self, o):
        return o ** int(self)

    # -- decisions: guarded under a ShapeEnv, structural outside one -------------------
    def _decide(self, op, o):
        if isinstance(o, bool) or not isinstance(o, (int, SymInt)):
            return NotImplemented
        diff = self - o
        if isinstance(diff, int):           # provably one way: no guard
            return op(diff, 0)
        known = _known_sign(diff)
        if known is not None:               # the sign holds for every size (symbols >= 2)
            return op(known, 0)
        env = _CURRENT.get()
        if env is None:                     # structural: only provable facts are True
            if op is operator.eq or op is operator.ne:
                return op is operator.ne
            raise TypeError(
                f"{source(self)} {_OP_TEXT[op]} {source(o)} depends on the sizes and no trace "
                f"is active to guard it; decide on hint() for a heuristic, or on a provable fact")
        result = op(diff.hint, 0)
        held = op if result else _NEGATED[op]   # the text says what held: s0 != s1, not s0 == s1
        env.add_guard(diff, op, result, f"{source(self)} {_OP_TEXT[held]} {source(o)}")
        return result

    __eq__ = _comparison(operator.eq)
    __ne__ = _comparison(operator.ne)
    __lt__ = _comparison(operator.lt)
    __le__ = _comparison(operator.le)
    __gt__ = _comparison(operator.gt)
    __ge__ = _comparison(operator.ge)

    def __bool__(self):
        return self != 0

    def __hash__(self):
        return hash(self._terms)

    def same(self, o):
        """Structural equality, never a guard (dict keys, codegen)."""
        return isinstance(o, SymInt) and o._terms == self._terms

    def __index__(self):
        env = _CURRENT.get()
        if env is None:
            raise TypeError(f"the size {self.source()} has no single value outside a trace; "
                            f"read its hint with aotgrad.ir.symbolic.hint() for a heuristic")
        env.specialise(self, "used as a Python integer")
        return self.hint

    __int__ = __index__

    def __float__(self):
        return float(int(self))

    def __repr__(self):
        return self.source()

    # -- evaluation and source --------------------------------------------------------
    @property
    def free_symbols(self):
        out = set()
        for a in self._atoms:
            if isinstance(a, str):
                out.add(a)
            else:
                out |= free_symbols(a.num) | free_symbols(a.den)
        return out

    def evaluate(self, values):
        """The value with `values` (symbol name -> int); None: the hints."""
        total = 0
        for m, c in self._terms:
            v = c
            for a, p in m:
                v *= _atom_value(a, values, self._atoms) ** p
            total += v
        return total

    def substitute(self, values):
        """The expression with some symbols replaced by ints or SymInts."""
        total = 0
        for m, c in self._terms:
            v = c
            for a, p in m:
                if isinstance(a, str):
                    x = values.get(a)
                    x = SymInt.symbol(a, self._atoms[a]) if x is None else x
                else:
                    num, den = a.num.substitute(values), substitute(a.den, values)
                    x = num // den if a.op == "//" else num % den
                v = v * x ** p if p > 1 else v * x
            total = total + v
        return total

    def source(self):
        """Python source computing the value from variables named as the symbols."""
        parts = []
        for m, c in self._terms:
            factors = [(_atom_src(a) + (f"**{p}" if p > 1 else "")) for a, p in m]
            if not factors:
                parts.append(str(c))
            elif c == 1:
                parts.append("*".join(factors))
            elif c == -1:
                parts.append("-" + "*".join(factors))
            else:
                parts.append(f"{c}*" + "*".join(factors))
        text = " + ".join(parts).replace("+ -", "- ")
        return text if len(parts) == 1 else f"({text})"


def _atom_src(a):
    return a if isinstance(a, str) else a.source()


def _atom_value(a, values, atoms):
    """An atom's value: its hint (values None), else from the symbols' values."""
    if values is None:
        return atoms[a]
    return values[a] if isinstance(a, str) else a.evaluate(values)


def _mono_mul(m1, m2):
    d = dict(m1)
    for a, p in m2:
        d[a] = d.get(a, 0) + p
    return tuple(sorted(d.items(), key=lambda ap: repr(_key_of_atom(ap[0]))))


def _terms_of(o):
    return o._terms if isinstance(o, SymInt) else (((), o),)


def _atoms_of(o):
    return o._atoms if isinstance(o, SymInt) else {}


def _exact_quotient(p, d):
    """p // d as a polynomial when it is one for every size, else None: d a positive int
    that divides every non-constant coefficient ((k*A + c) // k == A + c // k), or a
    monomial (k * s0 * ...) that divides every term."""
    if isinstance(d, int):
        if d <= 0:
            return None
        if all(c % d == 0 for m, c in p._terms if m != ()):
            return SymInt._from({m: (c // d if m != () else c // d) for m, c in p._terms},
                                p._atoms)
        return None
    if len(d._terms) != 1:
        return p.same(d) and 1 or None
    (dm, dc), = d._terms
    if dc <= 0:
        return None
    out = {}
    for m, c in p._terms:
        md = dict(m)
        for a, q in dm:
            if md.get(a, 0) < q:
                return None
            md[a] -= q
        if c % dc:
            return None
        mono = tuple(sorted(((a, q) for a, q in md.items() if q),
                            key=lambda aq: repr(_key_of_atom(aq[0]))))
        out[mono] = out.get(mono, 0) + c // dc
    return SymInt._from(out, p._atoms)


def _as_sym(v):
    return SymInt((((), v),), v, {}) if isinstance(v, int) else v


def _opaque(op, num, den):
    a = _Opaque(op, num, den)
    n, d = hint(num), hint(den)
    h = n // d if op == "//" else n % d
    return SymInt((((((a, 1),), 1),)), h, {a: h})


def _known_sign(p):
    """-1/0/1 when the polynomial's sign holds for every size (every symbol >= 2, every
    coefficient of a non-constant monomial of one sign), else None."""
    const = dict(p._terms).get((), 0)
    coeffs = [c for m, c in p._terms if m != ()]
    if any(not isinstance(a, str) for a in p._atoms):
        return None  # // and % atoms can be 0
    if all(c > 0 for c in coeffs):
        low = const + sum(c * 2 ** sum(q for _, q in m) for m, c in p._terms if m != ())
        return 1 if low > 0 else None
    if all(c < 0 for c in coeffs):
        high = const + sum(c * 2 ** sum(q for _, q in m) for m, c in p._terms if m != ())
        return -1 if high < 0 else None
    return None


@dataclasses.dataclass(frozen=True)
class Guard:
    """A relation the program relies on: `expr op 0` evaluated to `holds` on the traced
    call; `text` the relation that held, in the user's terms."""
    expr: object
    op: object
    holds: bool
    text: str

    def check(self, values):
        return self.op(evaluate(self.expr, values), 0) == self.holds

    def source(self):
        """Python source that is True when the guard holds (symbols as variables)."""
        rel = f"{source(self.expr)} {_OP_TEXT[self.op]} 0"
        return rel if self.holds else f"not ({rel})"


@dataclasses.dataclass
class Specialisation:
    expr: object
    value: int
    why: str


class ShapeEnv:
    """The symbols of one trace, their hints, and the guards and specialisations its shape
    decisions recorded. `with env:` makes it the active one."""

    def __init__(self):
        self.hints = {}           # name -> hint
        self.sources = {}         # name -> where it came from ("x.size(0)")
        self.guards = []          # [Guard], in the order recorded
        self.specialised = []     # [Specialisation]
        self._seen = set()
        self._token = None

    def create_symbol(self, hint, source):
        """A new symbol for a size `hint` (>= 2) read from `source` ("x.size(0)")."""
        if hint < 2:
            raise ValueError(f"size {hint} of {source} is specialised, never a symbol")
        name = f"s{len(self.hints)}"
        self.hints[name] = int(hint)
        self.sources[name] = source
        return SymInt.symbol(name, hint)

    def add_guard(self, expr, op, holds, text):
        # `s1 != 4` found False and `s1 == 4` found True are one relation: one guard
        key = (expr._terms if isinstance(expr, SymInt) else expr,
               op if holds else _NEGATED[op])
        if key not in self._seen:
            self._seen.add(key)
            self.guards.append(Guard(expr, op, holds, text))

    def specialise(self, expr, why):
        key = (expr._terms, operator.eq)
        if key not in self._seen:
            self._seen.add(key)
            diff = expr - expr.hint
            self.guards.append(Guard(diff, operator.eq, True, f"{expr.source()} == {expr.hint}"))
            self.specialised.append(Specialisation(expr, expr.hint, why))

    def replacements(self):
        """{symbol: int or SymInt} the equality guards pin: `s1 == 8` (a size matched
        against a parameter's, or specialised), `s2 == s0` (two arguments' sizes matched);
        the trace's graph is rewritten with them, so that its shape rules hold structurally
        (the guards keep them true on every call the program serves)."""
        out = {}
        for g in self.guards:
            equal = (g.op is operator.eq and g.holds) or (g.op is operator.ne and not g.holds)
            if not equal or not isinstance(g.expr, SymInt):
                continue
            expr = g.expr.substitute(out) if out else g.expr
            if not isinstance(expr, SymInt):
                continue
            terms = dict(expr._terms)
            terms.pop((), 0)
            bare = [(m[0][0], c) for m, c in terms.items()
                    if len(m) == 1 and isinstance(m[0][0], str) and m[0][1] == 1 and c in (1, -1)]
            if not bare:
                continue
            # the newest symbol, written in terms of the rest: expr = c*s + rest == 0
            name, c = max(bare, key=lambda nc: int(nc[0][1:]))
            rest = expr - c * SymInt.symbol(name, self.hints[name])
            value = -rest if c == 1 else rest
            if name in free_symbols(value):
                continue
            out = {k: substitute(v, {name: value}) for k, v in out.items()}
            out[name] = value
        return out

    def check(self, values):
        """Do all guards hold for these symbol values?"""
        return all(g.check(values) for g in self.guards)

    def __enter__(self):
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc):
        _CURRENT.reset(self._token)
        self._token = None


def current_shape_env():
    return _CURRENT.get()


# -- helpers that take ints and SymInts alike --------------------------------------------
def is_symbolic(x):
    return isinstance(x, SymInt)


def hint(x):
    """The value on the traced call (an int as is): for heuristics, never for decisions."""
    return x.hint if isinstance(x, SymInt) else x


def hints(shape):
    return tuple(hint(d) for d in shape)


def evaluate(x, values):
    return x.evaluate(values) if isinstance(x, SymInt) else x


def substitute(x, values):
    return x.substitute(values) if isinstance(x, SymInt) else x


def source(x):
    return x.source() if isinstance(x, SymInt) else repr(x)


def free_symbols(x):
    return x.free_symbols if isinstance(x, SymInt) else set()


def same(a, b):
    """Provably equal for every size (structural for SymInts; never records a guard)."""
    if isinstance(a, SymInt):
        return a.same(b)
    if isinstance(b, SymInt):
        return False
    return a == b


def prod(shape):
    return math.prod(shape) if shape else 1


def is_static_shape(shape):
    return not any(isinstance(d, SymInt) for d in shape)


def broadcast_shapes(*shapes):
    """numpy's broadcast of shapes that may hold SymInts (a symbol is never 1, so only a
    static 1 stretches); sizes that must agree are compared (a guard under a ShapeEnv).
    Raises ValueError where they cannot broadcast."""
    nd = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(nd):
        sizes = [s[len(s) - nd + k] for s in shapes if len(s) - nd + k >= 0]
        sizes = [d for d in sizes if not (type(d) is int and d == 1)]
        if not sizes:
            out.append(1)
            continue
        # prefer a static size: the result is as concrete as the inputs allow
        first = next((d for d in sizes if not isinstance(d, SymInt)), sizes[0])
        for d in sizes:
            if d is not first and not same(d, first) and d != first:
                raise ValueError(f"shapes {[list(s) for s in shapes]} are not broadcastable")
        out.append(first)
    return tuple(out)


def nonnegative(x):
    """Is size `x` >= 0? An int: its value; a SymInt under a ShapeEnv: decided (a guard);
    outside one (a shape rule checked again after the trace): True, the guard recorded
    while tracing keeps it so on every call the program serves."""
    if isinstance(x, SymInt) and _CURRENT.get() is None:
        return True
    return x >= 0


def agree(a, b):
    """May sizes `a` and `b` be equal? Ints and provable facts: their answer; under a
    ShapeEnv: decided (a guard); outside one, expressions that differ only by facts the
    trace's guards hold (`(s0 // 4) * 4` and `s0` where `s0 % 4 == 0` was guarded): True."""
    if _CURRENT.get() is not None or not (isinstance(a, SymInt) or isinstance(b, SymInt)):
        return a == b
    diff = a - b
    return isinstance(diff, SymInt) and _known_sign(diff) is None or diff == 0


def slice_indices(sl, n):
    """`slice.indices(n)` where the length or the bounds may be SymInts (a positive step):
    (start, stop, step), the clamps decided under the ShapeEnv (guards)."""
    step = 1 if sl.step is None else sl.step
    if not isinstance(step, int) or isinstance(step, SymInt) or step <= 0:
        return sl.indices(int(n)) if not isinstance(step, SymInt) else \
            slice(sl.start, sl.stop, int(step)).indices(int(n))

    def clamp(v, default):
        if v is None:
            return default
        if v < 0:
            v = v + n
            return 0 if v < 0 else v
        return n if v > n else v
    return clamp(sl.start, 0), clamp(sl.stop, n), step


def size_le(a, b):
    """`a <= b` for sizes: ints and provable facts as they are; under a ShapeEnv decided (a
    guard); outside one, True unless provably false (the trace guarded it)."""
    if _CURRENT.get() is not None or not (isinstance(a, SymInt) or isinstance(b, SymInt)):
        return a <= b
    diff = b - a
    if not isinstance(diff, SymInt):
        return diff >= 0
    return _known_sign(diff) != -1


def same_shape(a, b):
    """Two shapes provably equal for every size (never records a guard): for a check that
    only picks a faster path to the same result."""
    return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
