"""Differential fuzzing of whole programs over the public API: random well-typed programs
(elementwise math with broadcasting, reductions, matmuls, views, indexing, cat/stack,
softmax and friends, in-place ops, detach, a custom autograd.Function) on awkward inputs
(size 0 and 1, 0-d, non-contiguous, NaN/Inf, values near float32 overflow, -0.0,
denormals), run eagerly, compiled with the interpret and numba backends, and in PyTorch.

    python tests/fuzz_programs.py 0 500                   # seeds 0..499, interpret backend
    python tests/fuzz_programs.py 0 50 --numba            # and the numba backend
    python tests/fuzz_programs.py 17 18 -v                # one seed, with its program
    python tests/fuzz_programs.py 0 500 --aliased-writes  # also write to aliased arguments

`Generator(chooser).program()` -> Program is deterministic given the chooser's choices
(a random.Random here, hypothesis' data in tests/compile/test_fuzz_programs.py). A program is data:
input specs plus steps `(op name, argument indices, params)`, replayed by `run_steps` on any
library with the torch-style API (aotgrad or torch). `check_program(prog, backends)` returns
None or a text describing the first disagreement.

Which programs are generated: every step is drawn by first choosing an op uniformly from
OPS (so every op is drawn with similar frequency), then its operands from the values made so
far. The generator runs each step eagerly while it builds the program; a step aotgrad's
eager mode rejects (a shape that does not fit) is drawn again, so programs are well typed.
"""
import dataclasses
import math
import random
import sys
import traceback
import warnings

import numpy as np

from codegen_fuzz import compare

SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-42, 3.0e38, -3.0e38,
                    88.5, -103.0, 1.0, -1.0], np.float32)
SIZES = (0, 1, 1, 2, 3, 4, 5)
RTOL, ATOL = 1e-4, 1e-4      # float32; ATOL is scaled by the largest finite |value| of a result
# (cancellation: x / x's gradient is a difference of two large terms, exactly 0 eagerly)


# -- choices ------------------------------------------------------------------------------------
class RandomChooser:
    """Choices from a random.Random (the command line, the op-frequency test)."""

    def __init__(self, seed):
        self.r = random.Random(seed)

    def integer(self, lo, hi):          # lo..hi inclusive
        return self.r.randint(lo, hi)

    def seed(self):
        return self.r.getrandbits(32)


class HypothesisChooser:
    """Choices drawn from hypothesis' `data` (they shrink)."""

    def __init__(self, data):
        from hypothesis import strategies as st
        self.data, self.st = data, st

    def integer(self, lo, hi):
        return self.data.draw(self.st.integers(lo, hi))

    def seed(self):
        return self.data.draw(self.st.integers(0, 2 ** 32 - 1))


# -- programs as data -----------------------------------------------------------------------------
class Layout:
    CONTIGUOUS = "contiguous"
    TRANSPOSED = "transposed"      # a contiguous base of the reversed shape, .permute()d back
    STRIDED = "strided"            # every other element of a base twice as long in dim 0
    EXPANDED = "expanded"          # a base with size 1 in dim 0, .expand()ed


@dataclasses.dataclass
class Input:
    shape: tuple
    dtype: str                 # "float32" / "float64"
    layout: str
    requires_grad: bool
    base: np.ndarray           # the leaf's values (the argument is a view of it, see Layout)
    alias_of: int = -1         # >= 0: this argument is that argument itself (same tensor)
    pos: int = 0               # its number among the program's values


@dataclasses.dataclass
class Step:
    op: str
    args: tuple                # indices into the values (arguments first, then step results)
    params: dict


@dataclasses.dataclass
class Program:
    inputs: list
    steps: list
    outputs: list              # indices of the values returned
    cotangents: list           # per output: the gradient fed to backward (None: int output)

    def __str__(self):
        lines = []
        where = {a.pos: (k, a) for k, a in enumerate(self.inputs)}
        steps = iter(self.steps)
        for pos in range(len(self.inputs) + len(self.steps)):
            if pos in where:
                k, a = where[pos]
                how = f"the same tensor as argument {a.alias_of}" if a.alias_of >= 0 else \
                    f"{a.dtype}{list(a.shape)} {a.layout}{' grad' if a.requires_grad else ''}"
                lines.append(f"v{pos} = argument {k}  # {how}" + (
                    "" if a.alias_of >= 0 else f" {np.array2string(a.base.ravel()[:8])}"))
            else:
                s = next(steps)
                args = ", ".join(f"v{i}" for i in s.args)
                lines.append(f"v{pos} = {s.op}({args}{', ' if s.params else ''}"
                             f"{', '.join(f'{a}={b!r}' for a, b in s.params.items())})")
        lines.append("return " + ", ".join(f"v{i}" for i in self.outputs))
        return "\n".join(lines)


# -- the library a program runs on --------------------------------------------------------------
class Lib:
    """aotgrad or torch, with the pieces the ops need under one name."""

    def __init__(self, mod):
        self.mod = mod
        self.F = mod.nn.functional
        self.name = mod.__name__
        Function = mod.autograd.Function

        class ScaledTanh(Function):
            """y = 2 tanh(x), its backward written by hand (saves its output)."""

            @staticmethod
            def forward(ctx, x):
                y = x.tanh()
                ctx.save_for_backward(y)
                return y * 2

            @staticmethod
            def backward(ctx, g):
                y, = ctx.saved_tensors
                return g * 2 * (1 - y * y)

        self.ScaledTanh = ScaledTanh

    def tensor(self, a, requires_grad=False):
        t = self.mod.from_numpy(np.array(a, copy=True))
        return t.requires_grad_() if requires_grad else t


_libs = {}


def lib(name):
    if name not in _libs:
        _libs[name] = Lib(__import__(name))
    return _libs[name]


def make_arg(L, spec, args):
    """(leaf or None, argument) for one input spec; `args`: the arguments made before it."""
    if spec.alias_of >= 0:
        return None, args[spec.alias_of]
    base = L.tensor(spec.base, spec.requires_grad)
    if spec.layout == Layout.TRANSPOSED:
        return base, base.permute(*reversed(range(base.dim())))
    if spec.layout == Layout.STRIDED:
        return base, base[::2]
    if spec.layout == Layout.EXPANDED:
        return base, base.expand(*spec.shape)
    return base, base


def make_args(L, prog):
    """(leaves, arguments) for prog's inputs, fresh tensors of library L."""
    leaves, args = [], []
    for spec in prog.inputs:
        leaf, arg = make_arg(L, spec, args)
        leaves.append(leaf)
        args.append(arg)
    return leaves, args


def run_steps(L, prog, args):
    """Replay prog's steps on `args`. Values are numbered in the order they were made: an
    argument added while a step was drawn sits before that step's result."""
    where = {spec.pos: k for k, spec in enumerate(prog.inputs)}
    vals, steps = [], iter(prog.steps)
    for pos in range(len(prog.inputs) + len(prog.steps)):
        if pos in where:
            vals.append(args[where[pos]])
        else:
            s = next(steps)
            vals.append(OPS[s.op].apply(L, [vals[i] for i in s.args], **s.params))
    return tuple(vals[i] for i in prog.outputs)


# -- the ops ------------------------------------------------------------------------------------
@dataclasses.dataclass
class Op:
    name: str
    apply: object            # apply(L, args, **params) -> tensor
    draw: object             # draw(gen) -> (args, params) or None (no operands fit)


OPS = {}


def op(name, draw):
    def reg(fn):
        OPS[name] = Op(name, fn, draw)
        return fn
    return reg


def _float(v):
    return v.dtype.is_floating_point


def one(g, pred=lambda v: True):
    i = g.pick(lambda v: _float(v) and pred(v))
    return None if i is None else ((i,), {})


def with_dim(pred=lambda v, d: True, keepdim=False, nonempty=False):
    """One float operand of rank >= 1 and a dim of it (negative half the time)."""
    def draw(g):
        i = g.pick(lambda v: _float(v) and v.dim() >= 1 and
                   (not nonempty or any(s > 0 for s in v.shape)))
        if i is None:
            return None
        v = g.vals[i]
        dims = [d for d in range(v.dim()) if pred(v, d) and (not nonempty or v.shape[d] > 0)]
        if not dims:
            return None
        d = g.choice(dims)
        if g.integer(0, 1):
            d -= v.dim()
        params = {"dim": d}
        if keepdim:
            params["keepdim"] = bool(g.integer(0, 1))
        return (i,), params
    return draw


def _nonempty_dim(v, d):
    return v.shape[d] > 0


def partner(g, i, pred=lambda v: True):
    """A second operand that broadcasts with value i: a value made so far, a new argument of a
    broadcast-compatible shape, or a Python number."""
    shape = tuple(g.vals[i].shape)
    roll = g.integer(0, 5)
    if roll == 0:
        return g.number()
    if roll <= 2:
        j = g.pick(lambda v: _float(v) and pred(v) and _broadcasts(tuple(v.shape), shape))
        if j is not None:
            return j
    # a new argument: drop some leading dims, set some dims to 1
    k = g.integer(0, len(shape))
    s = [1 if g.integer(0, 2) == 0 else n for n in shape[k:]]
    return g.new_input(tuple(s))


def _broadcasts(a, b):
    for x, y in zip(reversed(a), reversed(b)):
        if x != y and x != 1 and y != 1:
            return False
    return True


def unary(name, fn, pred=lambda v: True):
    op(name, lambda g: one(g, pred))(lambda L, a: fn(L, a[0]))


for _n in ("neg", "abs", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "sin", "reciprocal",
           "square", "expm1", "log1p", "rsqrt", "erf", "floor"):
    unary(_n, (lambda n: lambda L, x: getattr(x, n)())(_n))
unary("gelu", lambda L, x: L.F.gelu(x))
unary("softplus", lambda L, x: L.F.softplus(x))
unary("silu", lambda L, x: L.F.silu(x))
unary("clamp", lambda L, x: x.clamp(-2.0, 3.0))
unary("pow_scalar", lambda L, x: x ** 3)
unary("detach", lambda L, x: x.detach())
unary("clone", lambda L, x: x.clone())
unary("scaled_tanh_function", lambda L, x: L.ScaledTanh.apply(x))


def binary_draw(g):
    i = g.pick(_float)
    if i is None:
        return None
    j = partner(g, i)
    if isinstance(j, float):
        return (i,), {"number": j, "swap": bool(g.integer(0, 1))}
    return (i, j), {"swap": bool(g.integer(0, 1))}


def binary(name, fn):
    def apply(L, a, swap, number=None):
        x, y = (a[0], number) if number is not None else a
        if number is not None and name in ("maximum", "minimum", "atan2"):
            y = L.mod.full_like(x, number)
        return fn(L, y, x) if swap else fn(L, x, y)
    op(name, binary_draw)(apply)


binary("add", lambda L, x, y: x + y)
binary("sub", lambda L, x, y: x - y)
binary("mul", lambda L, x, y: x * y)
binary("div", lambda L, x, y: x / y)
binary("pow", lambda L, x, y: x ** y)
binary("maximum", lambda L, x, y: L.mod.maximum(x, y))
binary("minimum", lambda L, x, y: L.mod.minimum(x, y))
binary("atan2", lambda L, x, y: L.mod.atan2(x, y))
binary("where_gt", lambda L, x, y: L.mod.where(x > y, x, y))


def reduction(name, fn, nonempty=False):
    op(name, with_dim(keepdim=True, nonempty=nonempty))(
        lambda L, a, dim, keepdim: fn(L, a[0], dim, keepdim))


reduction("sum", lambda L, x, d, k: x.sum(d, keepdim=k))
reduction("mean", lambda L, x, d, k: x.mean(d, keepdim=k))
reduction("amax", lambda L, x, d, k: x.amax(d, keepdim=k), nonempty=True)
reduction("amin", lambda L, x, d, k: x.amin(d, keepdim=k), nonempty=True)
reduction("max_values", lambda L, x, d, k: x.max(d, keepdim=k)[0], nonempty=True)
reduction("prod", lambda L, x, d, k: x.prod(d, keepdim=k))
reduction("logsumexp", lambda L, x, d, k: x.logsumexp(d, keepdim=k))
reduction("var", lambda L, x, d, k: x.var(d, keepdim=k))
reduction("norm", lambda L, x, d, k: x.norm(dim=d, keepdim=k))
reduction("argmax", lambda L, x, d, k: x.argmax(d, keepdim=k), nonempty=True)
op("sum_all", lambda g: one(g))(lambda L, a: a[0].sum())
op("cumsum", with_dim())(lambda L, a, dim: a[0].cumsum(dim))
op("softmax", with_dim())(lambda L, a, dim: a[0].softmax(dim))
op("log_softmax", with_dim())(lambda L, a, dim: a[0].log_softmax(dim))
op("normalize", with_dim())(lambda L, a, dim: L.F.normalize(a[0], dim=dim))


def _layer_norm_draw(g):
    i = g.pick(lambda v: _float(v) and v.dim() >= 1)
    return None if i is None else ((i,), {"k": g.integer(1, g.vals[i].dim())})


op("layer_norm", _layer_norm_draw)(
    lambda L, a, k: L.F.layer_norm(a[0], tuple(a[0].shape[-k:])))


def _matmul_draw(g):
    i = g.pick(lambda v: _float(v) and 1 <= v.dim() <= 3)
    if i is None:
        return None
    x = tuple(g.vals[i].shape)
    n = g.size()
    if len(x) == 1:
        other = g.choice([(x[0],), (x[0], n), (g.choice([1, 2]), x[0], n)])
    else:
        k = x[-1]
        other = g.choice([(k,), (k, n), (x[:-2] or (1,)) + (k, n)])
    j = g.pick(lambda v: _float(v) and tuple(v.shape) == other) if g.integer(0, 1) else None
    return (i, j if j is not None else g.new_input(other)), {"swap": False}


op("matmul", _matmul_draw)(lambda L, a, swap: a[0] @ a[1])


def _view_draw(g):
    i = g.pick(_float)
    if i is None:
        return None
    shape = list(g.vals[i].shape)
    n = math.prod(shape)
    kind = g.integer(0, 3)
    if kind == 0:
        new = [n]
    elif kind == 1 and len(shape) >= 2:      # merge two neighbours
        k = g.integer(0, len(shape) - 2)
        new = shape[:k] + [shape[k] * shape[k + 1]] + shape[k + 2:]
    elif kind == 2 and n > 0:                # split off a factor
        k = g.integer(0, len(shape) - 1) if shape else 0
        d = shape[k] if shape else 1
        f = g.choice([f for f in range(1, d + 1) if d % f == 0])
        new = shape[:k] + [f, d // f] + shape[k + 1:]
    else:
        new = shape + [1]
    if new and g.integer(0, 2) == 0 and n > 0:
        new[g.integer(0, len(new) - 1)] = -1
    return (i,), {"shape": tuple(new)}


op("reshape", _view_draw)(lambda L, a, shape: a[0].reshape(shape))
op("view", _view_draw)(lambda L, a, shape: a[0].view(shape))
op("flatten", lambda g: one(g))(lambda L, a: a[0].flatten())


def _permute_draw(g):
    i = g.pick(lambda v: _float(v) and v.dim() >= 2)
    if i is None:
        return None
    perm = list(range(g.vals[i].dim()))
    for k in range(len(perm) - 1, 0, -1):
        j = g.integer(0, k)
        perm[k], perm[j] = perm[j], perm[k]
    return (i,), {"perm": tuple(perm)}


op("permute", _permute_draw)(lambda L, a, perm: a[0].permute(*perm))


def _two_dims(g):
    i = g.pick(lambda v: _float(v) and v.dim() >= 2)
    if i is None:
        return None
    r = g.vals[i].dim()
    return (i,), {"d0": g.integer(0, r - 1), "d1": g.integer(-r, r - 1)}


op("transpose", _two_dims)(lambda L, a, d0, d1: a[0].transpose(d0, d1))
op("t", lambda g: one(g, lambda v: v.dim() <= 2))(lambda L, a: a[0].t())


def _unsqueeze_draw(g):
    i = g.pick(lambda v: _float(v) and v.dim() <= 3)
    return None if i is None else ((i,), {"dim": g.integer(-g.vals[i].dim() - 1,
                                                           g.vals[i].dim())})


op("unsqueeze", _unsqueeze_draw)(lambda L, a, dim: a[0].unsqueeze(dim))
op("squeeze", with_dim(lambda v, d: v.shape[d] == 1))(lambda L, a, dim: a[0].squeeze(dim))


def _expand_draw(g):
    i = g.pick(lambda v: _float(v) and v.dim() <= 3)
    if i is None:
        return None
    shape = [g.size() if s == 1 else s for s in g.vals[i].shape]
    if g.integer(0, 1):
        shape = [g.choice([1, 2, 3])] + shape
    return (i,), {"shape": tuple(shape)}


op("expand", _expand_draw)(lambda L, a, shape: a[0].expand(shape))


def _slice_draw(g):
    args = with_dim()(g)
    if args is None:
        return None
    (i,), p = args
    n = g.vals[i].shape[p["dim"]]
    start = g.integer(-n - 1, n)
    stop = g.integer(-n - 1, n + 1)
    return (i,), {"dim": p["dim"] % g.vals[i].dim(), "start": start, "stop": stop,
                  "step": g.choice([1, 1, 2, 3])}


op("slice", _slice_draw)(lambda L, a, dim, start, stop, step:
                         a[0][(slice(None),) * dim + (slice(start, stop, step),)])
op("select", with_dim(_nonempty_dim))(lambda L, a, dim: a[0].select(dim, -1))
op("narrow", with_dim(_nonempty_dim))(lambda L, a, dim: a[0].narrow(dim, 0, 1))
op("flip", with_dim())(lambda L, a, dim: a[0].flip(dim))
op("roll", with_dim())(lambda L, a, dim: a[0].roll(1, dim))


def _index_draw(g):
    args = with_dim(_nonempty_dim)(g)
    if args is None:
        return None
    (i,), p = args
    n = g.vals[i].shape[p["dim"]]
    idx = [g.integer(-n, n - 1) for _ in range(g.integer(0, 4))]
    return (i,), {"dim": p["dim"], "index": tuple(idx)}


def _index(L, a, dim, index):
    idx = L.mod.tensor(list(index), dtype=L.mod.int64)
    return a[0][(slice(None),) * (dim % a[0].dim()) + (idx,)]


op("index_tensor", _index_draw)(_index)
op("index_select", _index_draw)(
    lambda L, a, dim, index: a[0].index_select(
        dim, L.mod.tensor([k % a[0].shape[dim] for k in index], dtype=L.mod.int64)))


def _gather_draw(g):
    args = with_dim(_nonempty_dim)(g)
    if args is None:
        return None
    (i,), p = args
    shape = tuple(g.vals[i].shape)
    n = shape[p["dim"]]
    idx = np.array([g.integer(0, n - 1) for _ in range(math.prod(shape))]).reshape(shape)
    return (i,), {"dim": p["dim"], "index": idx.tolist()}


op("gather", _gather_draw)(
    lambda L, a, dim, index: a[0].gather(dim, L.mod.tensor(index, dtype=L.mod.int64)))


def _cat_draw(g):
    args = with_dim()(g)
    if args is None:
        return None
    (i,), p = args
    shape = list(g.vals[i].shape)
    d = p["dim"] % len(shape)
    shape[d] = g.size()
    j = g.pick(lambda v: _float(v) and list(v.shape[:d]) + list(v.shape[d + 1:]) ==
               shape[:d] + shape[d + 1:] and v.dim() == len(shape)) if g.integer(0, 1) else None
    return (i, j if j is not None else g.new_input(tuple(shape))), p


op("cat", _cat_draw)(lambda L, a, dim: L.mod.cat(list(a), dim))


def _stack_draw(g):
    i = g.pick(lambda v: _float(v) and v.dim() <= 3)
    if i is None:
        return None
    shape = tuple(g.vals[i].shape)
    j = g.pick(lambda v: _float(v) and tuple(v.shape) == shape and v is not g.vals[i])
    j = j if j is not None else g.new_input(shape)
    return (i, j), {"dim": g.integer(-len(shape) - 1, len(shape))}


op("stack", _stack_draw)(lambda L, a, dim: L.mod.stack(list(a), dim))
op("chunk", with_dim(_nonempty_dim))(lambda L, a, dim: a[0].chunk(2, dim)[-1])


# in-place ops: on intermediates, on arguments, on views of either
def _inplace_draw(g):
    i = g.pick(_float)
    if i is None:
        return None
    j = partner(g, i, lambda v: True)
    if isinstance(j, float):
        return (i,), {"number": j}
    if not _broadcasts_to(tuple(g.vals[j].shape), tuple(g.vals[i].shape)):
        return (i,), {"number": g.number()}
    return (i, j), {}


def _broadcasts_to(a, b):
    return len(a) <= len(b) and all(x in (1, y) for x, y in zip(reversed(a), reversed(b)))


def inplace(name, method):
    def apply(L, a, number=None):
        x = a[0]
        getattr(x, method)(number if number is not None else a[1])
        return x
    op(name, _inplace_draw)(apply)


inplace("add_", "add_")
inplace("mul_", "mul_")
inplace("sub_", "sub_")
inplace("copy_", "copy_")
op("clamp_", lambda g: one(g))(lambda L, a: a[0].clamp_(-1.0, 1.0))
op("exp_", lambda g: one(g))(lambda L, a: a[0].exp_())


def _setitem_draw(g):
    args = _slice_draw(g)
    if args is None:
        return None
    (i,), p = args
    return (i,), dict(p, value=g.number())


def _setitem(L, a, dim, start, stop, step, value):
    a[0][(slice(None),) * dim + (slice(start, stop, step),)] = value
    return a[0]


op("setitem_slice", _setitem_draw)(_setitem)


def _masked_fill_draw(g):
    i = g.pick(_float)
    return None if i is None else ((i,), {"value": g.number()})


op("masked_fill_", _masked_fill_draw)(lambda L, a, value: a[0].masked_fill_(a[0] > 0, value))


# -- the generator ------------------------------------------------------------------------------
class Generator:
    """Draws a Program; `counts` records how often each op was drawn."""

    def __init__(self, chooser, max_steps=8, aliased_writes=True):
        self.c = chooser
        self.max_steps = max_steps
        # in-place writes to an argument passed twice: on, the first argument is often made
        # without grad so that the write is allowed; off, they are not drawn
        self.aliased_writes = aliased_writes
        self.np_rng = np.random.default_rng(chooser.seed())
        self.L = lib("aotgrad")
        self.inputs, self.args, self.vals, self.steps = [], [], [], []
        self.counts = dict.fromkeys(OPS, 0)

    # choices
    def integer(self, lo, hi):
        return self.c.integer(lo, hi)

    def choice(self, seq):
        return seq[self.integer(0, len(seq) - 1)]

    def size(self):
        return self.choice(SIZES)

    def number(self):
        return self.choice([0.5, -1.5, 2.0, 0.0, -0.0, 3.0, float("inf"), 1e-30])

    def pick(self, pred):
        """Index of a value (recent ones more often) meeting pred, or None."""
        cands = [k for k, v in enumerate(self.vals) if pred(v)]
        if not cands:
            return None
        if self.integer(0, 2):
            cands = cands[len(cands) // 2:]
        return self.choice(cands)

    # inputs
    def values(self, shape, dtype):
        n = math.prod(shape)
        r = self.np_rng
        kind = self.integer(0, 5)
        if kind == 0:                                  # specials among normal values
            v = np.where(r.random(n) < 0.3, r.choice(SPECIAL, n), r.standard_normal(n))
        elif kind == 1:                                # near float32 overflow
            v = r.choice([-1, 1], n) * r.uniform(1e37, 3.4e38, n)
        elif kind == 2:                                # tiny: denormals and signed zeros
            v = r.choice(np.array([1e-40, -1e-40, 1e-45, -0.0, 0.0, 1e-38, -3e-39]), n)
        else:
            v = r.standard_normal(n) * self.choice([1.0, 1.0, 10.0, 0.1])
        return v.astype(dtype).reshape(shape)

    def new_input(self, shape, alias=False):
        """Add an argument of this shape (with alias: the same tensor as an earlier one of
        this shape, where there is one); returns its value index."""
        if alias:
            cand = [k for k, a in enumerate(self.inputs)
                    if tuple(self.args[k].shape) == tuple(shape) and a.alias_of < 0]
            if cand:
                return self._add_input(Input(tuple(shape), "", "", False, None,
                                             alias_of=self.choice(cand)))
        dtype = "float64" if self.integer(0, 9) == 0 else "float32"
        layout = self.choice([Layout.CONTIGUOUS, Layout.CONTIGUOUS, Layout.TRANSPOSED,
                              Layout.STRIDED, Layout.EXPANDED])
        if layout == Layout.TRANSPOSED and len(shape) < 2:
            layout = Layout.CONTIGUOUS
        if layout in (Layout.STRIDED, Layout.EXPANDED) and len(shape) < 1:
            layout = Layout.CONTIGUOUS
        if layout == Layout.TRANSPOSED:
            base = self.values(tuple(reversed(shape)), dtype)
        elif layout == Layout.STRIDED:
            base = self.values((2 * shape[0],) + tuple(shape[1:]), dtype)
        elif layout == Layout.EXPANDED:
            base = self.values((1,) + tuple(shape[1:]), dtype)
        else:
            base = self.values(shape, dtype)
        return self._add_input(Input(tuple(shape), dtype, layout, self.integer(0, 3) > 0, base))

    def _add_input(self, spec):
        spec.pos = len(self.vals)
        _, arg = make_arg(self.L, spec, self.args)
        self.inputs.append(spec)
        self.args.append(arg)
        self.vals.append(arg)
        return spec.pos

    # the program
    def program(self):
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self._program()

    def _program(self):
        names = sorted(OPS)
        for _ in range(self.integer(1, 2)):
            nd = self.integer(0, 3)
            self.new_input(tuple(self.size() for _ in range(nd)))
        if self.integer(0, 3) == 0:       # the same tensor passed twice
            if self.aliased_writes and self.integer(0, 1):
                self.inputs[0].requires_grad = False
                _, self.args[0] = make_arg(self.L, self.inputs[0], [])
                self.vals[self.inputs[0].pos] = self.args[0]
            self.new_input(tuple(self.vals[0].shape), alias=True)
        aliased = {a.pos for a in self.inputs if a.alias_of >= 0} | \
            {self.inputs[a.alias_of].pos for a in self.inputs if a.alias_of >= 0}
        n_steps = self.integer(1, self.max_steps)
        tries = 0
        while len(self.steps) < n_steps and tries < 20 * n_steps:
            tries += 1
            name = self.choice(names)
            saved = len(self.inputs), len(self.vals)
            drawn = OPS[name].draw(self)
            if drawn is None:
                self._restore(saved)
                continue
            args, params = drawn
            if not self.aliased_writes and args[0] in aliased and \
                    (name.endswith("_") or name == "setitem_slice"):
                self._restore(saved)
                continue
            step = Step(name, tuple(args), params)
            try:
                out = OPS[name].apply(self.L, [self.vals[i] for i in step.args], **params)
            except Exception:
                self._restore(saved)
                continue
            if math.prod(out.shape) > 4096:
                self._restore(saved)
                continue
            self.vals.append(out)
            self.steps.append(step)
            self.counts[name] += 1
        n, first = len(self.vals), len(self.inputs)
        if n == first:                    # no step fitted: return the first argument
            outs = [0]
        else:
            outs = sorted({n - 1} | {self.integer(0, n - 1) for _ in range(self.integer(0, 2))})
        cot = [self.np_rng.standard_normal(tuple(self.vals[i].shape)).astype(
            _np(self.vals[i]).dtype) if _float(self.vals[i]) else None for i in outs]
        return Program(self.inputs, self.steps, outs, cot)

    def _restore(self, saved):
        """Forget the arguments a failed draw added (a failed step leaves no result)."""
        ni, nv = saved
        del self.inputs[ni:], self.args[ni:], self.vals[nv:]


def random_program(seed, max_steps=8, aliased_writes=False):
    return Generator(RandomChooser(seed), max_steps, aliased_writes).program()


# -- running and comparing ----------------------------------------------------------------------
@dataclasses.dataclass
class Result:
    outputs: list = None       # numpy arrays
    args: list = None          # the arguments' values after the call (in-place ops)
    grads: list = None         # per leaf input: its .grad as numpy, or None
    error: str = None          # the exception (class and message) if the program raised
    backward_error: str = None


def _np(t):
    return None if t is None else np.array(t.detach().numpy(), copy=True)


def run(prog, libname, backend=None, calls=1, breaks=None):
    """Run prog with library `libname` eagerly (backend None) or compiled with `backend`;
    with calls=2 the compiled function runs twice (fresh inputs), both results returned.
    The compiled function's graph breaks (it then runs eagerly) are appended to `breaks`."""
    L = lib(libname)
    fn = (lambda *a: run_steps(L, prog, a))
    if backend is not None:
        fn = L.mod.compile(fn, backend=backend)
    results = []
    for _ in range(calls):
        res = Result()
        leaves, args = make_args(L, prog)
        try:
            outs = fn(*args)
        except Exception as e:
            res.error = f"{type(e).__name__}: {e}"
            results.append(res)
            continue
        res.outputs = [_np(o) for o in outs]
        res.args = [_np(a) for a in args]
        pairs = [(o, L.tensor(c)) for o, c in zip(outs, prog.cotangents)
                 if c is not None and o.requires_grad]
        if pairs:
            try:
                L.mod.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])
            except Exception as e:
                res.backward_error = f"{type(e).__name__}: {e}"
        res.grads = [_np(x.grad) if x is not None and x.requires_grad else None
                     for x in leaves]
        results.append(res)
    if backend is not None and breaks is not None:
        breaks.extend(fn.graph_breaks)
    return results if calls > 1 else results[0]


def _tolerance(dtype):
    # float32 for float64 results too: they are mostly computed from float32 values
    return RTOL, ATOL


def compare_results(ref, got, what, exact=False):
    """None when `got` agrees with `ref`, else a description of the first difference."""
    if (ref.error is None) != (got.error is None):
        return f"{what}: {'only the reference' if ref.error else 'only this run'} raised: " \
               f"{ref.error or got.error}"
    if ref.error:
        return None
    if (ref.backward_error is None) != (got.backward_error is None):
        return f"{what}: backward {'raised only in the reference' if ref.backward_error else 'raised'}:" \
               f" {ref.backward_error or got.backward_error}"
    for kind in ("outputs", "args", "grads"):
        if kind == "grads" and ref.backward_error:
            continue
        for k, (r, g) in enumerate(zip(getattr(ref, kind), getattr(got, kind))):
            if (r is None) != (g is None):
                return f"{what}: {kind}[{k}] is {'None' if g is None else 'set'} in this run " \
                       f"and {'None' if r is None else 'set'} in the reference"
            if r is None:
                continue
            if exact:
                same = r.shape == g.shape and r.dtype == g.dtype and \
                    np.array_equal(r, g, equal_nan=r.dtype.kind == "f")
                msg = None if same else "not bit for bit equal"
            else:
                msg = compare(r, g, tol=_tolerance(r.dtype))
            if msg:
                return f"{what}: {kind}[{k}]: {msg}"
    return None


def check_program(prog, backends=("interpret",), torch=None, breaks=None):
    """None, or the first disagreement between eager, each compiled backend (and its second
    call), and torch (a module, or None to skip). A graph break is not a disagreement (the
    call runs eagerly, as it should): its reason is appended to `breaks`."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _check_program(prog, backends, torch, breaks)


def _check_program(prog, backends, torch, breaks):
    eager = run(prog, "aotgrad")
    for backend in backends:
        first, second = run(prog, "aotgrad", backend, calls=2, breaks=breaks)
        msg = compare_results(eager, first, f"compiled ({backend}) vs eager") or \
            compare_results(first, second, f"second compiled ({backend}) call vs first",
                            exact=True)
        if msg:
            return msg
    if torch is not None:
        ref = run(prog, "torch")
        if ref.error and eager.error:
            return None
        if ref.backward_error and not eager.backward_error and \
                "modified by an inplace operation" in ref.backward_error:
            # PyTorch saves the outputs of some ops (softmax, log_softmax, norm) whose
            # backward here needs only their inputs: writing to such an output in place
            # makes only PyTorch's backward raise. The outputs must still agree.
            ref.backward_error, ref.grads = None, eager.grads
        msg = compare_results(ref, eager, "eager vs torch")
        if msg:
            return msg
    return None


def main(argv):
    lo, hi = int(argv[0]), int(argv[1])
    verbose = "-v" in argv
    backends = ("interpret", "numba") if "--numba" in argv else ("interpret",)
    try:
        import torch
    except ImportError:
        torch = None
    nbad, nbreak = 0, 0
    for seed in range(lo, hi):
        prog = random_program(seed, aliased_writes="--aliased-writes" in argv)
        breaks = []
        try:
            msg = check_program(prog, backends, torch, breaks)
        except Exception:
            msg = "the harness raised:\n" + traceback.format_exc(limit=8)
        if msg or verbose:
            print(f"=== seed {seed}: {msg or 'ok'}\n{prog}\n", flush=True)
        if breaks and verbose:
            print(f"--- seed {seed}: graph break: {breaks[0]}", flush=True)
        nbad += bool(msg)
        nbreak += bool(breaks)
    print(f"done {lo}..{hi}: {nbad} failing, {nbreak} with a graph break")


if __name__ == "__main__":
    main(sys.argv[1:])
