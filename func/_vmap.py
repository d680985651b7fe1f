"""`vmap`: run a function on a batch of inputs as if on one, with one bind per prim.

Each call makes a BatchLevel; the batched inputs become tensors whose values are
`BatchedVar`s of that level (ir/batching.py), so every prim they reach runs its batching
rule on the whole batch. Autograd and forward-mode AD record on these logical tensors, so
`vmap(grad(f))` gives per-sample gradients; entering and leaving the level are themselves
differentiable (`_IntoBatch`/`_OutOfBatch`), so `grad(vmap(f))` and `jvp(vmap(f))` work
too. A tensor from outside the call that requires grad and is used by batched ops gets a
gradient summed over the batch (`_close_level`).
"""
import functools

from aotgrad.autograd.function import Function
from aotgrad.ir import batching
from aotgrad.ir.batching import BatchedVar, BatchLevel, Randomness
from aotgrad.runtime import engine
from aotgrad.runtime import forward_mode
from aotgrad.runtime.tensor import Tensor
from aotgrad.tracer import pytree

__all__ = ["vmap"]



class _IntoBatch(Function):
    """x (physical, batch at `bdim`) -> the logical tensor of `level`."""

    @staticmethod
    def forward(ctx, x, level, bdim):
        ctx.level, ctx.bdim = level, bdim
        return Tensor._make(BatchedVar(x._value, bdim, level))

    @staticmethod
    def backward(ctx, g):
        return _OutOfBatch.apply(g, ctx.level, ctx.bdim), None, None

    @staticmethod
    def jvp(ctx, t, *_):
        return _IntoBatch.apply(t, ctx.level, ctx.bdim)


class _OutOfBatch(Function):
    """A logical tensor of `level` -> its physical value with the batch at `out_dim`."""

    @staticmethod
    def forward(ctx, y, level, out_dim):
        ctx.level, ctx.out_dim = level, out_dim
        return Tensor._make(batching.move_out(y._value, level, out_dim))

    @staticmethod
    def backward(ctx, g):
        return _IntoBatch.apply(g, ctx.level, ctx.out_dim), None, None

    @staticmethod
    def jvp(ctx, t, *_):
        return _OutOfBatch.apply(t, ctx.level, ctx.out_dim)


class _SumBatch(engine.Node):
    """Put on an autograd edge from a node made inside a vmap call to a tensor from outside
    it: the gradient the outside tensor gets is the sum over the batch of the per-sample
    ones (it was used by every sample)."""
    _name = "SumOverBatchBackward"

    def __init__(self, edge, aval, level):
        super().__init__([edge], [aval], [aval])
        self.level = level

    def _backward(self, grads):
        g = grads[0]
        if g is None or type(g._value) is not BatchedVar or g._value.level is not self.level:
            return [g]
        from aotgrad.runtime import tprims
        return [_sum_over(g, self.level, tprims)]


def _sum_over(g, level, tprims):
    """sum over `level`'s batch of g, as a differentiable op on the logical tensors."""
    phys = _OutOfBatch.apply(g, level, 0)
    return tprims.reduce_sum(phys, dims=(0,))


def _inner(node, first_seq):
    return node is not None and getattr(node, "_seq", -1) > first_seq and \
        not isinstance(node, engine.AccumulateGrad)


def _close_level(outputs, level, first_seq):
    """Edges from nodes made during the call to nodes from before it get a _SumBatch."""
    seen = set()
    stack = [o.grad_fn for o in outputs if o.requires_grad and o.grad_fn is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen or not _inner(node, first_seq):
            continue
        seen.add(id(node))
        if isinstance(node, (_IntoBatch._backward_cls,)):
            continue  # entering the level: its backward takes the batch out itself
        nexts = list(node.next_functions)
        changed = False
        for i, (nxt, nr) in enumerate(nexts):
            if nxt is None or isinstance(nxt, _SumBatch):
                continue
            if _inner(nxt, first_seq):
                stack.append(nxt)
                continue
            aval = node._in_avals[i] if i < len(node._in_avals) else None
            nexts[i] = (_SumBatch((nxt, nr), aval, level), 0)
            changed = True
        if changed:
            node.next_functions = tuple(nexts)


def _normalise_dim(d, ndim, what):
    if not isinstance(d, int):
        raise ValueError(f"vmap: {what} must be an int or None, got {d!r}")
    if not -ndim <= d < ndim:
        raise ValueError(f"vmap: {what} is {d}, out of range for a tensor with {ndim} dims")
    return d % ndim


def _expand_in_dims(in_dims, args):
    """in_dims for each positional argument, then flattened with the argument's leaves."""
    if isinstance(in_dims, int) or in_dims is None:
        per_arg = [in_dims] * len(args)
    elif isinstance(in_dims, (tuple, list)):
        if len(in_dims) != len(args):
            raise ValueError(f"vmap: in_dims has {len(in_dims)} entries but the function got "
                             f"{len(args)} positional arguments")
        per_arg = list(in_dims)
    else:
        raise ValueError(f"vmap: in_dims must be an int, None or a tuple, got {in_dims!r}")
    out = []
    for a, d in zip(args, per_arg):
        _dims_along(a, d, out, "in_dims")
    return out


def _dims_along(a, d, out, what):
    """Append to `out` one dim per leaf of `a` (an argument or the function's output), where
    `d` is an int/None for all of a's leaves or a container of a's structure (dicts matched
    by key); returns out."""
    if d is None or isinstance(d, int):
        out.extend([d] * len(pytree.flatten(a)[0]))
    elif isinstance(d, dict) and isinstance(a, dict):
        if set(d) != set(a):
            raise ValueError(f"vmap: {what} {d!r} has keys {sorted(d)} but the value has keys "
                             f"{sorted(a)}")
        for k in a:
            _dims_along(a[k], d[k], out, what)
    elif isinstance(d, (tuple, list)) and isinstance(a, (tuple, list)) and len(d) == len(a):
        for x, dx in zip(a, d):
            _dims_along(x, dx, out, what)
    else:
        raise ValueError(f"vmap: {what} {d!r} does not match the structure of the value "
                         f"({type(a).__name__})")
    return out


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """func mapped over a dim of its inputs, as torch.func.vmap: `in_dims` says which dim of
    each argument is mapped (None: the argument is the same for every sample), `out_dims`
    where the mapped dim goes in each output. `chunk_size` computes that many samples at a
    time. Nested vmap maps over more dims.

    >>> import aotgrad
    >>> from aotgrad.func import vmap
    >>> x, y = aotgrad.ones(4, 3), aotgrad.ones(3)
    >>> vmap(aotgrad.dot, in_dims=(0, None))(x, y)
    tensor([3., 3., 3., 3.])
    """
    if randomness not in [r.value for r in Randomness]:
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or "
                           f"'same'. Got {randomness}")
    randomness = Randomness(randomness)
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size <= 0):
        raise ValueError(f"vmap: chunk_size should be None or greater than 0. (got "
                         f"{chunk_size})")

    @functools.wraps(func)
    def wrapped(*args, **kwargs):
        leaves, tree = pytree.flatten(list(args))
        dims = _expand_in_dims(in_dims, args)
        size = None
        norm = []
        for x, d in zip(leaves, dims):
            if d is None:
                norm.append(None)
                continue
            if not isinstance(x, Tensor):
                raise ValueError(f"vmap: in_dim {d} given for an argument of type "
                                 f"{type(x).__name__}; only tensors can be mapped over")
            d = _normalise_dim(d, x.ndim, "in_dim")
            if size is None:
                size = x.shape[d]
            elif x.shape[d] != size:
                raise ValueError(f"vmap: Expected all tensors to have the same size in the "
                                 f"mapped dimension, got sizes {size} and {x.shape[d]} for "
                                 f"the mapped dimension")
            norm.append(d)
        if size is None:
            raise ValueError("vmap: at least one input must be a tensor mapped over (in_dims "
                             "are all None)")
        if chunk_size is None or chunk_size >= size:
            return _call(func, leaves, tree, norm, size, kwargs, out_dims, randomness)
        return _chunked(func, leaves, tree, norm, size, kwargs, out_dims, chunk_size,
                        randomness)
    return wrapped


def _chunked(func, leaves, tree, dims, size, kwargs, out_dims, chunk, randomness):
    from aotgrad.runtime.join_ops import cat
    parts = []
    for lo in range(0, size, chunk):
        hi = min(size, lo + chunk)
        sub = [x if d is None else x.narrow(d, lo, hi - lo) for x, d in zip(leaves, dims)]
        parts.append(_call(func, sub, tree, dims, hi - lo, kwargs, out_dims, randomness))
    flat = [pytree.flatten(p)[0] for p in parts]
    out_tree = pytree.flatten(parts[0])[1]
    odims = _dims_along(parts[0], out_dims, [], "out_dims")
    joined = [cat([f[i] for f in flat], dim=odims[i] % (flat[0][i].ndim))
              for i in range(len(flat[0]))]
    return pytree.unflatten(out_tree, joined)


def _into(x, d, level):
    if x.requires_grad or forward_mode.tangent_of(x) is not None:
        return _IntoBatch.apply(x, level, d)
    return Tensor._make(BatchedVar(x._value, d, level))


def _call(func, leaves, tree, dims, size, kwargs, out_dims, randomness):
    level = BatchLevel(size, randomness)
    first_seq = engine.next_sequence_nr()
    inner = [x if d is None else _into(x, d, level) for x, d in zip(leaves, dims)]
    with batching.running(level):
        out = func(*pytree.unflatten(tree, inner), **kwargs)
    flat, out_tree = pytree.flatten(out)
    odims = _dims_along(out, out_dims, [], "out_dims")
    results = []
    for o, d in zip(flat, odims):
        if not isinstance(o, Tensor):
            raise ValueError(f"vmap: the function must return tensors, got "
                             f"{type(o).__name__}")
        if d is None:
            if type(o._value) is BatchedVar and o._value.level is level:
                raise ValueError("vmap: out_dims is None for an output that depends on the "
                                 "mapped inputs (it differs per sample)")
            results.append(o)
            continue
        d = _normalise_dim(d, o.ndim + 1, "out_dim")
        results.append(_out_of(o, level, d))
    _close_level([r for r in results], level, first_seq)
    return pytree.unflatten(out_tree, results)


def _out_of(o, level, d):
    if o.requires_grad or forward_mode.tangent_of(o) is not None:
        return _OutOfBatch.apply(o, level, d)
    return Tensor._make(batching.move_out(o._value, level, d))
