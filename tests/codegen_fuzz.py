"""Differential fuzzing of the code generator: random small IR graphs over the prims, run
compiled (codegen.compile_graph) and with the numpy reference prims (ir.evaluate).

    python tests/codegen_fuzz.py 0 200        # seeds 0..199; prints each mismatch
    python tests/codegen_fuzz.py 17 18 -v     # one seed, with the graph and schedule

`random_case(seed)` -> (graph, arrays) is deterministic; `check_case(graph, arrays)`
returns None or a text describing the first mismatch (used by the fixed-seed test).
"""
import math
import random
import sys
import traceback

import numpy as np

from aotgrad.ir import GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import Aval, PrimError

FLOATS = (dt.float32, dt.float64)
INTS = (dt.int32, dt.int64)
ALL = FLOATS + INTS + (dt.bool_,)

UN_FLOAT = ("exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh", "logistic",
            "erf", "floor", "ceil", "reciprocal")
UN_NUM = ("neg", "abs", "sign")
BIN_ANY = ("add", "mul", "maximum", "minimum")
BIN_NUM = ("sub",)
BIN_FLOAT = ("div", "pow", "atan2")
CMP = ("eq", "ne", "lt", "le", "gt", "ge")
BIN_BOOL = ("logical_and", "logical_or")
REDS = ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.big = self.r.random() < 0.15      # sizes crossing the prange thresholds
        self.specials = self.r.random() < 0.2  # NaN/inf/-0 in float inputs
        self.pool = []
        self.bounds = {}
        self.b = None

    # -- shapes -------------------------------------------------------------------------------
    def size(self):
        r = self.r
        if self.big and r.random() < 0.3:
            return r.choice((129, 257, 1025, 4097))
        if r.random() < 0.03:
            return 0
        return r.choice((1, 1, 2, 3, 4, 5, 7, 8, 16, 33))

    def shape(self, nd=None):
        nd = self.r.choice((0, 1, 1, 2, 2, 2, 3, 3, 4)) if nd is None else nd
        s = [self.size() for _ in range(nd)]
        while math.prod(s) > 600_000:
            s[s.index(max(s))] //= 4
        return tuple(s)

    def new_input(self, shape, dtype):
        v = self.b.add_input(Aval(shape, dtype))
        self.pool.append(v)
        return v

    def pick(self, pred=lambda v: True):
        cands = [v for v in self.pool if pred(v)]
        if not cands:
            return None
        # prefer recent values (longer chains)
        w = [1 + i for i in range(len(cands))]
        return self.r.choices(cands, weights=w)[0]

    def same_as(self, x, dtype=None):
        """A value with x's shape (and dtype): from the pool, a broadcast, a full, or new."""
        dtype = dtype or x.dtype
        r = self.r
        c = self.pick(lambda v: v.shape == x.shape and v.dtype is dtype and v is not x)
        roll = r.random()
        if c is not None and roll < 0.5:
            return c
        if roll < 0.65:
            return prims.full(shape=x.shape, value=self.scalar(dtype), dtype=dtype)
        if roll < 0.85 and x.ndim:
            # broadcast from a lower-rank value
            keep = sorted(r.sample(range(x.ndim), r.randint(0, x.ndim)))
            src = tuple(x.shape[d] if r.random() < 0.8 else 1 for d in keep)
            c = self.pick(lambda v: v.shape == src and v.dtype is dtype)
            if c is None:
                c = self.new_input(src, dtype)
            return prims.broadcast_in_dim(c, shape=x.shape, dims=tuple(keep))
        return self.new_input(x.shape, dtype)

    def scalar(self, d):
        r = self.r
        if d is dt.bool_:
            return r.random() < 0.5
        if d in INTS:
            return r.randint(-3, 3)
        if self.specials and r.random() < 0.2:
            return r.choice((math.inf, -math.inf, math.nan, -0.0))
        return r.choice((0.0, 1.0, -1.0, 2.0, 0.5, 0.3, -2.5))

    def cast(self, x, d):
        if x.dtype is d:
            return x
        if x.dtype.is_floating_point and d in INTS:   # bounded first: no UB on NaN/huge
            x = prims.mul(prims.tanh(x), prims.full(shape=x.shape, value=10.0, dtype=x.dtype))
            x = prims.where(prims.ne(x, x), prims.full(shape=x.shape, value=0.0,
                                                       dtype=x.dtype), x)
        return prims.convert_element_type(x, dtype=d)

    # -- ops ----------------------------------------------------------------------------------
    def step(self):
        r = self.r
        x = self.pick()
        kind = r.choices(
            ["un", "bin", "cmp", "where", "bcast", "reshape", "transpose", "slice", "pad",
             "red", "arg", "dot", "cast", "gather", "scatter", "iota", "concat", "rev",
             "cumsum", "chain"],
            weights=[8, 12, 3, 3, 4, 3, 3, 3, 2, 10, 2, 3, 2, 2, 1, 1, 1, 1, 1, 6])[0]
        d = x.dtype
        if kind == "un":
            if d.is_floating_point:
                return getattr(prims, r.choice(UN_FLOAT + UN_NUM))(x)
            if d is dt.bool_:
                return prims.logical_not(x)
            return getattr(prims, r.choice(UN_NUM))(x)
        if kind == "chain":   # a short pointwise chain on one value
            y = x if x.dtype.is_floating_point else self.cast(x, r.choice(FLOATS))
            for _ in range(r.randint(1, 4)):
                op = r.choice(("exp", "tanh", "mul", "add", "neg", "logistic", "div", "sub"))
                if op in ("mul", "add", "div", "sub"):
                    y = getattr(prims, op)(y, self.same_as(y))
                else:
                    y = getattr(prims, op)(y)
            return y
        if kind == "bin":
            if d is dt.bool_:
                op = r.choice(BIN_BOOL + ("add", "mul", "maximum", "minimum"))
            elif d.is_floating_point:
                op = r.choice(BIN_ANY + BIN_NUM + BIN_FLOAT)
            else:
                op = r.choice(BIN_ANY + BIN_NUM)
            y = self.same_as(x)
            return getattr(prims, op)(*((x, y) if r.random() < 0.7 else (y, x)))
        if kind == "cmp":
            return getattr(prims, r.choice(CMP))(x, self.same_as(x))
        if kind == "where":
            p = self.pick(lambda v: v.dtype is dt.bool_ and v.shape == x.shape)
            if p is None:
                p = prims.gt(*(x, self.same_as(x))) if d is not dt.bool_ else x
            return prims.where(p, x, self.same_as(x))
        if kind == "bcast":
            nd = x.ndim + r.randint(0, 2)
            dims = tuple(sorted(r.sample(range(nd), x.ndim)))
            shape = [self.size() for _ in range(nd)]
            for i, dd in enumerate(dims):
                shape[dd] = x.shape[i] if x.shape[i] != 1 or r.random() < 0.5 else shape[dd]
            if math.prod(shape) > 600_000:
                return None
            return prims.broadcast_in_dim(x, shape=tuple(shape), dims=dims)
        if kind == "reshape":
            n = math.prod(x.shape)
            if r.random() < 0.5:   # unit dims in/out
                s = [k for k in x.shape if k != 1]
                for _ in range(r.randint(0, 2)):
                    s.insert(r.randint(0, len(s)), 1)
                return prims.reshape(x, shape=tuple(s))
            if n == 0:
                return None
            divs = [k for k in range(1, n + 1) if n % k == 0]
            a = r.choice(divs)
            s = [a, n // a]
            r.shuffle(s)
            return prims.reshape(x, shape=tuple(s))
        if kind == "transpose":
            perm = list(range(x.ndim))
            r.shuffle(perm)
            return prims.transpose(x, perm=tuple(perm))
        if kind == "slice":
            st, li, sd = [], [], []
            for n in x.shape:
                a = r.randint(0, n)
                b = r.randint(a, n)
                st.append(a), li.append(b), sd.append(r.choice((1, 1, 1, 2, 3)))
            return prims.slice(x, start=tuple(st), limit=tuple(li), strides=tuple(sd))
        if kind == "pad":
            cfg = tuple((r.randint(0, 2), r.randint(0, 2), r.choice((0, 0, 0, 1)))
                        for _ in x.shape)
            return prims.pad(x, config=cfg, value=self.scalar(d))
        if kind == "red":
            if x.ndim == 0:
                return None
            how = r.random()
            nd = x.ndim
            if how < 0.35:
                k = r.randint(1, nd)
                dims = tuple(range(nd - k, nd))          # trailing: row reduction
            elif how < 0.6:
                k = r.randint(1, nd)
                dims = tuple(range(k))                   # leading: column reduction
            else:
                dims = tuple(sorted(r.sample(range(nd), r.randint(0, nd))))
            op = r.choice(REDS)
            if d is dt.bool_ and op in ("reduce_prod",):
                return None
            y = getattr(prims, op)(x, dims=dims)
            if r.random() < 0.5:   # keepdim + a consumer in the row domain
                kshape = tuple(1 if i in dims else n for i, n in enumerate(x.shape))
                y = prims.reshape(y, shape=kshape)
                if r.random() < 0.7:
                    y2 = prims.broadcast_in_dim(y, shape=x.shape, dims=tuple(range(nd)))
                    op2 = "sub" if d is not dt.bool_ else "logical_and"
                    if d.is_floating_point and r.random() < 0.5:
                        op2 = "div"
                    y = getattr(prims, op2)(x, y2)
            return y
        if kind == "arg":
            if x.ndim == 0 or d is dt.bool_:
                return None
            return getattr(prims, r.choice(("argmax", "argmin")))(x, dim=r.randrange(x.ndim))
        if kind == "dot":
            if d is dt.bool_:
                return None
            nd = x.ndim
            if nd == 0:
                return None
            dims = list(range(nd))
            r.shuffle(dims)
            nb = r.randint(0, min(1, nd - 1))
            nc = r.randint(0 if nd - nb > 1 else 1, nd - nb)
            lb, lc = dims[:nb], dims[nb:nb + nc]
            # rhs: batch dims, contract dims, 0-1 free dims, in a random order
            free = [self.size()] if r.random() < 0.8 else []
            parts = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + \
                [("f", i) for i in range(len(free))]
            r.shuffle(parts)
            rshape, rb, rc = [], [None] * nb, [None] * nc
            for j, (t, i) in enumerate(parts):
                if t == "b":
                    rb[i] = j
                    rshape.append(x.shape[lb[i]])
                elif t == "c":
                    rc[i] = j
                    rshape.append(x.shape[lc[i]])
                else:
                    rshape.append(free[i])
            y = self.pick(lambda v: v.shape == tuple(rshape) and v.dtype is d)
            if y is None or r.random() < 0.5:
                y = self.new_input(tuple(rshape), d)
            args = (x, y)
            params = dict(contract=(tuple(lc), tuple(rc)), batch=(tuple(lb), tuple(rb)))
            if r.random() < 0.5:
                args = (y, x)
                params = dict(contract=(tuple(rc), tuple(lc)), batch=(tuple(rb), tuple(lb)))
            out = prims.dot_general(*args, **params)
            return out
        if kind == "cast":
            return self.cast(x, r.choice(ALL))
        if kind in ("gather", "scatter"):
            if x.ndim == 0 or 0 in x.shape:
                return None
            row = r.random() < 0.6
            dim = x.ndim - 1 if row else r.randrange(x.ndim)
            if row and x.ndim >= 2:
                ishape = x.shape[:-1] + (1,)
            else:
                ishape = tuple(n if i != dim else r.randint(1, 4)
                               for i, n in enumerate(x.shape))
            idx = self.b.add_input(Aval(ishape, r.choice(INTS)))
            self.bounds[idx] = x.shape[dim]
            if kind == "gather":
                return prims.gather(x, idx, dim=dim)
            if d is dt.bool_:
                return None
            if x.ndim >= 1 and row and x.ndim >= 2:
                src = self.pick(lambda v: v.shape == ishape and v.dtype is d) or \
                    self.new_input(ishape, d)
            else:
                src = self.new_input(ishape, d)
            if not row:   # scatter_add with idx over full ranges only where shapes allow
                pass
            return prims.scatter_add(x, idx, src, dim=dim)
        if kind == "iota":
            s = self.shape(r.randint(1, 3))
            return prims.iota(shape=s, dim=r.randrange(len(s)), dtype=r.choice(ALL[:4]))
        if kind == "concat":
            if x.ndim == 0:
                return None
            dim = r.randrange(x.ndim)
            s2 = list(x.shape)
            s2[dim] = self.size()
            y = self.pick(lambda v: v.shape == tuple(s2) and v.dtype is d) or \
                self.new_input(tuple(s2), d)
            return prims.concatenate(x, y, dim=dim)
        if kind == "rev":
            if x.ndim == 0:
                return None
            return prims.rev(x, dims=tuple(sorted(r.sample(range(x.ndim),
                                                           r.randint(1, x.ndim)))))
        if kind == "cumsum":
            if x.ndim == 0 or d is dt.bool_:
                return None
            return prims.cumsum(x, dim=r.randrange(x.ndim))
        return None

    def build(self):
        r = self.r
        self.b = GraphBuilder("fuzz")
        with self.b:
            for _ in range(r.randint(1, 3)):
                self.new_input(self.shape(), r.choice(ALL[:4] if r.random() < 0.9 else ALL))
            n_ops = r.randint(2, 10)
            made = 0
            tries = 0
            while made < n_ops and tries < 60:
                tries += 1
                try:
                    v = self.step()
                except PrimError:
                    continue
                if v is None:
                    continue
                if math.prod(v.shape) > 2_000_000:
                    continue
                self.pool.append(v)
                made += 1
            g = self.b.graph
            made_vals = [v for v in self.pool if v not in g.inputs]
            outs = []
            if made_vals:
                outs.append(made_vals[-1])
            for _ in range(r.randint(0, 2)):
                outs.append(r.choice(self.pool))   # maybe an input, maybe twice
            g.outputs = outs
        return g

    def arrays(self, g):
        r = np.random.default_rng(self.r.randrange(1 << 30))
        out = []
        for v in g.inputs:
            bound = self.bounds.get(v)
            if bound is not None:
                a = r.integers(0, bound, size=v.shape)
            elif v.dtype is dt.bool_:
                a = r.random(v.shape) < 0.5
            elif v.dtype in INTS:
                a = r.integers(-4, 5, size=v.shape)
            else:
                a = r.standard_normal(v.shape)
                if self.specials and a.size:
                    m = r.random(v.shape) < 0.1
                    a[m] = r.choice([np.nan, np.inf, -np.inf, -0.0, 0.0], size=int(m.sum()))
                if r.random() < 0.2:    # ties for max/argmax
                    a = np.round(a)
            out.append(np.array(a, dtype=v.dtype.np))
        return out


MAX_ELEMENTS = 1 << 22   # per value: a product of sizes can outgrow shape()'s cap


def random_case(seed):
    """(graph, input arrays) for `seed`; a graph with a value over MAX_ELEMENTS is drawn again
    from a derived seed (deterministic), so no case needs gigabytes."""
    for k in range(100):
        g = Gen(seed + 7_919_000 * k)
        graph = g.build()
        values = list(graph.inputs) + [v for n in graph.nodes for v in n.outputs]
        if all(math.prod(v.shape) <= MAX_ELEMENTS for v in values):
            # nodes nothing reads stay in (the scheduler may see them: keep it realistic)
            return graph, g.arrays(graph)
    raise RuntimeError(f"fuzz seed {seed}: no case under {MAX_ELEMENTS} elements per value")


# Tolerances. A compiled float32 program may round differently from the float32 reference
# (approximations of exp/tanh/..., sums in another order): each output element may differ
# from the reference by TOL[dtype] = (rtol, atol), plus SLACK times as much as the reference
# itself differs there from the same graph evaluated in float64 (`shadow_values`), or from
# itself with its sums taken in the reverse order (`reordered_values`), whichever is more:
# where the reference loses digits (cancellation, a value at a rounding edge before a cast
# to an integer or a comparison), so may the compiled program, and nowhere else. The bound is per
# element: one large output element does not loosen the others.
TOL = {np.dtype(np.float32): (1e-5, 1e-6), np.dtype(np.float64): (1e-9, 1e-12)}
SLACK = 4.0


def shadow_values(graph, arrays):
    """The graph's outputs with every float32 value computed in float64 instead (inputs,
    constants, casts and iotas included): how far the float32 reference is from exact."""
    def wide(a):
        a = np.asarray(a)
        return a.astype(np.float64) if a.dtype == np.float32 else a
    env = {v: wide(a) for v, a in zip(graph.inputs, arrays)}
    for n in graph.nodes:
        params = {k: (dt.float64 if p is dt.float32 else p) for k, p in n.params.items()}
        outs = n.prim.impl(*[env[v] for v in n.inputs], **params)
        if not n.prim.multiple_results:
            outs = (outs,)
        env.update(zip(n.outputs, (wide(o) for o in outs)))
    return [env[v] for v in graph.outputs]


def reordered_values(graph, arrays):
    """The graph's outputs in its own dtypes with every sum taken in the reverse order
    (products and sum reductions read their summed axes reversed): how far the float32
    reference's value depends on the order of its sums. A dot product that cancels (thousands
    of terms whose sum is much smaller than their magnitudes) can be close to exact in the
    reference's order and not in another one equally valid (a BLAS's other blocking)."""
    env = {v: np.asarray(a) for v, a in zip(graph.inputs, arrays)}
    for n in graph.nodes:
        ins = [env[v] for v in n.inputs]
        if n.prim is prims.dot_general:
            (ca, cb) = n.params["contract"]
            ins = [np.flip(ins[0], tuple(ca)), np.flip(ins[1], tuple(cb))]
        elif n.prim is prims.reduce_sum:
            ins = [np.flip(ins[0], tuple(n.params["dims"]))]
        outs = n.prim.impl(*ins, **n.params)
        if not n.prim.multiple_results:
            outs = (outs,)
        env.update(zip(n.outputs, (np.asarray(o) for o in outs)))
    return [env[v] for v in graph.outputs]


def compare(ref, got, shadow=None, tol=None):
    """None when `got` matches the reference `ref` (NaN positions and infinities equal,
    finite values within the per-element bound above; `tol` = (rtol, atol) replaces TOL),
    else a description."""
    got = np.asarray(got)
    if got.shape != ref.shape:
        return f"shape {got.shape} != {ref.shape}"
    if got.dtype != ref.dtype:
        return f"dtype {got.dtype} != {ref.dtype}"
    if shadow is None:
        shadow = ref
    with np.errstate(invalid="ignore", over="ignore"):
        ref_err = np.abs(ref.astype(np.float64) - np.asarray(shadow, np.float64))
    ref_err = np.where(np.isfinite(ref_err), ref_err, np.inf)
    ref_exact = ref_err == 0
    if ref.dtype.kind != "f":
        bad = (ref != got) & ref_exact   # where the reference is at a rounding edge, either
        if bad.any():
            i = tuple(np.argwhere(bad)[0])
            return f"{bad.sum()} of {ref.size} differ; at {i}: ref {ref[i]} got {got[i]}"
        return None
    rn, gn = np.isnan(ref), np.isnan(got)
    bad = (rn != gn) & ref_exact
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        return f"NaN positions differ ({bad.sum()}); at {i}: ref {ref[i]} got {got[i]}"
    inf = (np.isinf(ref) | np.isinf(got)) & ~rn & ~gn
    bad = inf & (ref != got) & ref_exact
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        return f"inf differ; at {i}: ref {ref[i]} got {got[i]}"
    m = np.isfinite(ref) & np.isfinite(got)
    rtol, atol = tol or TOL[ref.dtype]
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(ref[m].astype(np.float64) - got[m])
        lim = atol + rtol * np.abs(ref[m].astype(np.float64)) + SLACK * ref_err[m]
    if (err > lim).any():
        k = int(np.argmax(err - lim))
        i = tuple(np.argwhere(m)[k])
        return f"max err {err[k]:.3g} at {i} (ref {ref[i]!r} got {got[i]!r}, allowed " \
               f"{lim[k]:.3g}); {(err > lim).sum()} of {m.sum()} beyond tolerance"
    return None


def check_case(graph, arrays, compile_graph=None):
    """None when the compiled graph matches the reference prims on `arrays`, else a text.
    Where the reference raises, the compiled program must raise too (an error, not a
    third answer)."""
    if compile_graph is None:
        from aotgrad.codegen import compile_graph
    try:
        ref = evaluate(graph, [a.copy() for a in arrays])
    except Exception as e:  # noqa: BLE001
        ins = [a.copy() for a in arrays]
        try:
            compile_graph(graph, name="fuzz")(*ins)
        except Exception:  # noqa: BLE001
            return None
        return f"the reference raised {type(e).__name__}: {e}; the compiled program returned"
    shadow = shadow_values(graph, [a.copy() for a in arrays])
    # where the reference moves more when its sums are reordered than from the exact
    # value, that move is its rounding's measure
    reordered = reordered_values(graph, [a.copy() for a in arrays])
    with np.errstate(invalid="ignore"):     # inf - inf: NaN, compared False (shadow kept)
        shadow = [np.where(np.abs(np.asarray(r, np.float64) - np.asarray(o, np.float64)) >
                           np.abs(np.asarray(r, np.float64) - np.asarray(s_, np.float64)), o, s_)
                  if np.asarray(r).dtype.kind == "f" else s_
                  for r, o, s_ in zip(ref, reordered, shadow)]
    ins = [a.copy() for a in arrays]
    try:
        prog = compile_graph(graph, name="fuzz")
        got = prog(*ins)
    except Exception:
        return "codegen raised:\n" + traceback.format_exc(limit=6)
    for a, b in zip(arrays, ins):
        if not np.array_equal(a, b, equal_nan=True):
            return "an input array was modified"
    if len(got) != len(ref):
        return f"{len(got)} outputs, expected {len(ref)}"
    for i, (r_, g_, s_) in enumerate(zip(ref, got, shadow)):
        msg = compare(np.asarray(r_), g_, s_)
        if msg:
            return f"output {i} ({graph.outputs[i].name}): {msg}"
    return None


def main(argv):
    lo, hi = int(argv[0]), int(argv[1])
    verbose = "-v" in argv
    from aotgrad.codegen import compile_graph
    nbad = 0
    for seed in range(lo, hi):
        graph, arrays = random_case(seed)
        msg = check_case(graph, arrays, compile_graph)
        if msg or verbose:
            print(f"=== seed {seed}: {msg or 'ok'}")
            print(graph)
            if verbose:
                try:
                    print(compile_graph(graph, name="fuzz").report())
                except Exception:
                    pass
            sys.stdout.flush()
        nbad += bool(msg)
    print(f"done {lo}..{hi}: {nbad} failing")


if __name__ == "__main__":
    main(sys.argv[1:])
