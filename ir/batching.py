"""vmap's batched values and the batching rule of each prim.

A `BatchedVar` stands for a value of one vmap call (a `BatchLevel`): user code sees its
logical shape (without the batch dim), while `value` holds the physical array (a numpy
array, a traced Var, or a batched value of an enclosing vmap) with the batch at `bdim`.
A prim bound on batched values runs the prim's batching rule on the physical values of the
innermost level among them (JAX's batching interpreter): the rule rewrites the prim's
params so that one bind computes the whole batch, and says where the batch dim of the
result is. Nothing loops over the batch; a prim without a rule falls back to a loop with a
warning naming it.

Batching is dispatched on values, not on a context: a batched value reached by a backward
that runs after its vmap returned (grad of vmap) is still batched correctly.

Rules are `rule(size, values, bdims, **params) -> (value, dim)`, where `bdims[i]` is the batch
dim of `values[i]` (None: not batched) and `size` the batch size.
"""
import contextlib
import contextvars
import enum
import itertools
import math
import warnings

from aotgrad.ir import prims as P
from aotgrad.ir.core import INTERPRETED, WATCHED_PRIMS, Var, aval_of

_level_ids = itertools.count(1)


class Randomness(enum.Enum):
    """What a random draw inside vmap does (torch.func's `randomness` argument)."""
    ERROR = "error"          # raise
    DIFFERENT = "different"  # one draw per sample
    SAME = "same"            # one draw shared by every sample


class BatchLevel:
    """One vmap call: the batch size, what random draws do, and an id (a later, inner level
    has a larger id)."""
    __slots__ = ("id", "size", "randomness")

    def __init__(self, size, randomness=Randomness.ERROR):
        self.id, self.size, self.randomness = next(_level_ids), int(size), randomness

    def __repr__(self):
        return f"BatchLevel(id={self.id}, size={self.size})"


class VmapError(RuntimeError):
    """Something vmap cannot batch: a concrete value of a batched tensor, and the like."""


class BatchedVar(Var):
    """A batched value of one vmap level: logical shape and dtype, physical `value`."""
    __slots__ = ("value", "bdim", "level")
    base = None  # not a numpy view of anything (the op layer asks eager values for .base)

    def __init__(self, value, bdim, level):
        a = aval_of(value)
        shape = a.shape[:bdim] + a.shape[bdim + 1:]
        super().__init__(f"b{level.id}", shape, a.dtype)
        self.value, self.bdim, self.level = value, bdim, level

    def refuse_concrete(self, what):
        """A Python value of a batched tensor (`.item()`, `bool()`, `.numpy()`): an error."""
        if what.startswith("bool("):
            raise VmapError("vmap: data-dependent control flow on a batched tensor (Python "
                            "`if`/`while` on its value) cannot be batched; use "
                            "aotgrad.where to select values instead")
        raise VmapError(f"vmap: {what} on a batched tensor needs one value per sample, "
                        f"which vmap does not compute; write it with tensor ops instead")


    def refuse_inplace(self, target, opname):
        """An in-place op writing this value into `target`: target must be batched at this
        level too (a tensor captured from outside vmap holds one value for all samples)."""
        if type(target) is not BatchedVar or target.level is not self.level:
            raise VmapError(f"vmap: in-place {opname} writes a batched value into a tensor "
                            f"that is not batched (one captured from outside vmap, or made "
                            f"without the mapped inputs): it would need a different value "
                            f"per sample; use the out-of-place op")


def wrap(value, bdim, level):
    """The batched value (a plain value when bdim is None)."""
    return value if bdim is None else BatchedVar(value, bdim, level)


# ---- helpers on physical values ------------------------------------------------------------
def moveaxis(x, src, dst):
    if src == dst:
        return x
    nd = len(x.shape)
    perm = [d for d in range(nd) if d != src]
    perm.insert(dst, src)
    return P.transpose.bind(x, perm=tuple(perm))


def to_front(x, d):
    return moveaxis(x, d, 0)


def materialize(x, d, size):
    """x with its batch dim at 0; an unbatched x is broadcast along a new leading dim."""
    if d is not None:
        return to_front(x, d)
    nd = len(x.shape)
    return P.broadcast_in_dim.bind(x, shape=(size,) + tuple(x.shape),
                                   dims=tuple(range(1, nd + 1)))


def _shift(dims, by=1):
    return tuple(d + by for d in dims)


# ---- rules ---------------------------------------------------------------------------------
def _pointwise(prim):
    def rule(size, vals, bdims, **params):
        if len(vals) == 1:  # a unary op keeps the batch dim where it is
            return prim.bind(vals[0], **params), bdims[0]
        batched = {d for d in bdims if d is not None}
        if len(batched) == 1 and all(d is not None for d in bdims):
            return prim.bind(*vals, **params), batched.pop()
        return prim.bind(*[materialize(v, d, size) for v, d in zip(vals, bdims)], **params), 0
    return rule


def _front_unary(prim, shift_params):
    """A one-input prim whose dim params move by one once the batch dim is in front."""
    def rule(size, vals, bdims, **params):
        x = to_front(vals[0], bdims[0])
        for k in shift_params:
            if k in params:
                v = params[k]
                params[k] = v + 1 if isinstance(v, int) else _shift(v)
        return prim.bind(x, **params), 0
    return rule


def _broadcast_rule(size, vals, bdims, **params):
    x = to_front(vals[0], bdims[0])
    return P.broadcast_in_dim.bind(x, shape=(size,) + tuple(params["shape"]),
                                   dims=(0,) + _shift(params["dims"])), 0


def _reshape_rule(size, vals, bdims, *, shape):
    return P.reshape.bind(to_front(vals[0], bdims[0]), shape=(size,) + tuple(shape)), 0


def _transpose_rule(size, vals, bdims, *, perm):
    return P.transpose.bind(to_front(vals[0], bdims[0]), perm=(0,) + _shift(perm)), 0


def _slice_rule(size, vals, bdims, *, start, limit, strides=None):
    x = to_front(vals[0], bdims[0])
    strides = None if strides is None else (1,) + tuple(strides)
    return P.slice.bind(x, start=(0,) + tuple(start), limit=(size,) + tuple(limit),
                        strides=strides), 0


def _pad_rule(size, vals, bdims, *, config, **params):
    x = to_front(vals[0], bdims[0])
    return P.pad.bind(x, config=((0, 0, 0),) + tuple(tuple(c) for c in config), **params), 0


def _concatenate_rule(size, vals, bdims, *, dim):
    return P.concatenate.bind(*[materialize(v, d, size) for v, d in zip(vals, bdims)],
                              dim=dim + 1), 0


def _dot_general_rule(size, vals, bdims, *, contract, batch=((), ())):
    (lc, rc), (lb, rb) = contract, batch
    (a, b), (da, db) = vals, bdims
    if da is not None and db is not None:  # a batch dim of the contraction
        a, b = to_front(a, da), to_front(b, db)
        return P.dot_general.bind(a, b, contract=(_shift(lc), _shift(rc)),
                                  batch=((0,) + _shift(lb), (0,) + _shift(rb))), 0
    if da is not None:  # a free dim of the lhs: its first one, after the batch dims
        a = to_front(a, da)
        return P.dot_general.bind(a, b, contract=(_shift(lc), tuple(rc)),
                                  batch=(_shift(lb), tuple(rb))), len(lb)
    b = to_front(b, db)  # a free dim of the rhs: after the batch dims and the lhs free dims
    lhs_free = len(a.shape) - len(lc) - len(lb)
    return P.dot_general.bind(a, b, contract=(tuple(lc), _shift(rc)),
                              batch=(tuple(lb), _shift(rb))), len(lb) + lhs_free


def _all_front(prim, shift=("dim",)):
    """Every input given the batch dim in front (broadcast when unbatched); dim params +1."""
    def rule(size, vals, bdims, **params):
        for k in shift:
            if k in params:
                params[k] = params[k] + 1
        return prim.bind(*[materialize(v, d, size) for v, d in zip(vals, bdims)], **params), 0
    return rule


def _searchsorted_rule(size, vals, bdims, *, right):
    (seq, values), (ds, dv) = vals, bdims
    if ds is None and len(seq.shape) == 1:  # one sorted sequence for every sample
        return P.searchsorted.bind(seq, values, right=right), dv
    seq, values = materialize(seq, ds, size), materialize(values, dv, size)
    if len(seq.shape) == 2 and len(values.shape) != 2:  # 1-d sequences: values as rows
        vshape = tuple(values.shape)
        flat = P.reshape.bind(values, shape=(size, math.prod(vshape[1:])))
        out = P.searchsorted.bind(seq, flat, right=right)
        return P.reshape.bind(out, shape=vshape), 0
    return P.searchsorted.bind(seq, values, right=right), 0


def _linalg(prim):
    """Linear algebra prims work on stacks of matrices: the batch is one more stack dim."""
    def rule(size, vals, bdims, **params):
        return prim.bind(*[materialize(v, d, size) for v, d in zip(vals, bdims)], **params), 0
    return rule


BATCHING_RULES = {}  # Prim -> rule


def _register_rules():
    for name, prim in P.PRIMS.items():
        if "pointwise" in prim.tags:
            BATCHING_RULES[prim] = _pointwise(prim)
        elif "linalg" in prim.tags:
            BATCHING_RULES[prim] = _linalg(prim)
    for prim in (P.reduce_sum, P.reduce_max, P.reduce_min, P.reduce_prod):
        BATCHING_RULES[prim] = _front_unary(prim, ("dims",))
    for prim in (P.argmax, P.argmin, P.cumsum, P.cumprod, P.cumargmax, P.cumargmin,
                 P.logcumsumexp, P.argsort):
        BATCHING_RULES[prim] = _front_unary(prim, ("dim",))
    BATCHING_RULES[P.rev] = _front_unary(P.rev, ("dims",))
    BATCHING_RULES[P.check_values] = _pointwise(P.check_values)
    BATCHING_RULES[P.broadcast_in_dim] = _broadcast_rule
    BATCHING_RULES[P.reshape] = _reshape_rule
    BATCHING_RULES[P.transpose] = _transpose_rule
    BATCHING_RULES[P.slice] = _slice_rule
    BATCHING_RULES[P.pad] = _pad_rule
    BATCHING_RULES[P.concatenate] = _concatenate_rule
    BATCHING_RULES[P.dot_general] = _dot_general_rule
    BATCHING_RULES[P.gather] = _all_front(P.gather)
    BATCHING_RULES[P.scatter_add] = _all_front(P.scatter_add)
    BATCHING_RULES[P.searchsorted] = _searchsorted_rule


_register_rules()

# Prims with no batching rule, and why none is needed.
NO_RULE = {
    P.full: "takes no tensor inputs (never batched)",
    P.collective_start: "communicates with other processes (never inside vmap)",
    P.collective_wait: "communicates with other processes (never inside vmap)",
    P.iota: "takes no tensor inputs (never batched)",
    P.uniform: "random draws are batched by vmap's `randomness` argument, not per prim",
    P.normal: "random draws are batched by vmap's `randomness` argument, not per prim",
    P.poisson: "random draws are batched by vmap's `randomness` argument, not per prim",
}


# ---- the bind of a prim on batched values ----------------------------------------------
def _loop_fallback(prim, size, vals, bdims, params):
    """One bind per sample, stacked: for a prim without a batching rule (warns, naming it)."""
    warnings.warn(f"vmap: prims.{prim.name} has no batching rule; it runs once per sample "
                  f"in a Python loop (slow)", RuntimeWarning, stacklevel=4)
    outs = []
    for i in range(size):
        args = []
        for v, d in zip(vals, bdims):
            if d is None:
                args.append(v)
                continue
            v = to_front(v, d)
            shp = tuple(v.shape)
            s = P.slice.bind(v, start=(i,) + (0,) * (len(shp) - 1), limit=(i + 1,) + shp[1:])
            args.append(P.reshape.bind(s, shape=shp[1:]))
        o = prim.bind(*args, **params)
        outs.append(P.reshape.bind(o, shape=(1,) + tuple(o.shape)))
    return P.concatenate.bind(*outs, dim=0), 0


def bind_batched(prim, args, params):
    """prim.bind on arguments of which some are BatchedVars: the innermost level's rule."""
    level = max((a.level for a in args if type(a) is BatchedVar), key=lambda lv: lv.id)
    vals, dims = [], []
    for a in args:
        if type(a) is BatchedVar and a.level is level:
            vals.append(a.value)
            dims.append(a.bdim)
        else:
            vals.append(a)
            dims.append(None)
    # the logical shapes are checked first, so that errors name what the user wrote
    prim.abstract_eval(*[aval_of(a) for a in args], **params)
    rule = BATCHING_RULES.get(prim)
    if rule is None:
        out, out_dim = _loop_fallback(prim, level.size, vals, dims, params)
    else:
        out, out_dim = rule(level.size, vals, dims, **dict(params))
    return wrap(out, out_dim, level)


INTERPRETED[BatchedVar] = bind_batched


# the vmap calls running now, innermost last (random draws ask them what to do)
_running = contextvars.ContextVar("aotgrad_vmap_levels", default=())


@contextlib.contextmanager
def running(level):
    """While a vmap call runs its function: random draws follow its `randomness`."""
    token = _running.set(_running.get() + (level,))
    try:
        yield
    finally:
        _running.reset(token)


def is_running():
    return bool(_running.get())


def _random_draw(prim, args, params):
    """A random prim bound inside vmap: an error, one draw per sample, or one for all."""
    levels = _running.get()
    if not levels:
        return None
    level = levels[-1]
    if level.randomness is Randomness.SAME:
        return None
    if level.randomness is Randomness.ERROR:
        raise VmapError("vmap: a random op ran inside vmap with randomness='error' (the "
                        "default); pass randomness='different' (one draw per sample) or "
                        "'same' (one draw for all) to vmap, or draw outside it")
    token = _running.set(levels[:-1])   # the enclosing levels batch the draw further
    try:
        out = prim.bind(*args, **{**params, "shape": (level.size,) + tuple(params["shape"])})
    finally:
        _running.reset(token)
    return wrap(out, 0, level)


for _p in P.PRIMS.values():
    if "random" in _p.tags:
        WATCHED_PRIMS[_p] = _random_draw


def move_out(value, level, out_dim):
    """The physical value of a vmap result at `level`, its batch at `out_dim` (an unbatched
    value is broadcast along it)."""
    if type(value) is BatchedVar and value.level is level:
        return moveaxis(value.value, value.bdim, out_dim)
    x = materialize(value, None, level.size)
    return moveaxis(x, 0, out_dim)


__all__ = ["BatchLevel", "BatchedVar", "Randomness", "running", "is_running", "VmapError", "BATCHING_RULES",
           "NO_RULE", "bind_batched", "move_out", "wrap", "moveaxis", "materialize"]
