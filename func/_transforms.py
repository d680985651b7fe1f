"""grad, grad_and_value, vjp, jvp, linearize, jacrev, jacfwd, hessian: torch.func's
transforms on the eager engine.

Reverse mode runs `autograd.grad` on the function's own graph. The inputs are tracked by
fresh tensors (a differentiable alias where the input requires grad already, so an outer
transform sees through: `grad(grad(f))`); the backward builds a graph itself (create_graph)
only when something outside the call needs it (an outer transform, a captured tensor that
requires grad), and the results are plain tensors otherwise. jvp runs on forward-mode AD
(autograd.forward_ad); inside another jvp or while tracing (where forward-mode AD does not
nest), it is the transpose of the vjp (the double-vjp construction; dead code elimination
reduces it to forward cost in compiled code). jacrev is vmap over vjp, jacfwd vmap over
jvp, hessian jacfwd of jacrev.
"""
import functools
import math

from aotgrad.autograd import forward_ad
from aotgrad.ir.core import current_builder
from aotgrad.runtime import engine, forward_mode
from aotgrad.runtime.autograd_api import grad as _autograd_grad
from aotgrad.runtime.grad_mode import enable_grad
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor
from aotgrad.tracer import pytree
from aotgrad.func._vmap import vmap

__all__ = ["grad", "grad_and_value", "vjp", "jvp", "linearize", "jacrev", "jacfwd", "hessian"]


# ---- tracking inputs -----------------------------------------------------------------------
class _Tracked:
    """The fresh tensors standing for the differentiated inputs of one transform call."""

    def __init__(self, leaves, what):
        self.start = engine.next_sequence_nr()
        self.tensors = []
        for x in leaves:
            if not isinstance(x, Tensor):
                raise TypeError(f"{what}: expected the differentiated arguments to be tensors "
                                f"(or nested tuples/lists/dicts of tensors), got "
                                f"{type(x).__name__}")
            if not x.dtype.is_floating_point:
                raise RuntimeError(f"{what}: only tensors of floating point dtype can be "
                                   f"differentiated (got dtype {x.dtype.name})")
            if x.requires_grad:  # an alias: the outer graph goes on through it
                t = x.view_as(x)
            else:
                tangent = forward_mode.tangent_of(x)
                t = _fresh_leaf(x.detach())
                if tangent is not None:
                    forward_mode.set_tangent(t, tangent)
            self.tensors.append(t)

    def reaches_outside(self, outputs):
        return reaches_outside(self.start, outputs)


_MADE_AT = "_func_made_at"  # key in a fresh tensor's __dict__: the sequence number then


def _fresh_leaf(t):
    """t (a detached tensor) made a leaf that requires grad for one transform call, marked
    with the call's place in the sequence (an enclosing call sees it as its own)."""
    t = t.requires_grad_()
    t.__dict__[_MADE_AT] = engine.next_sequence_nr()
    return t


def reaches_outside(start, outputs):
    """Does the graph of `outputs` reach a tensor from before the transform call that began
    at sequence number `start` (an outer transform's input, a captured tensor that requires
    grad)? Leaves that transforms made during the call do not count."""
    seen = set()
    stack = [o.grad_fn for o in outputs if isinstance(o, Tensor) and o.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, engine.AccumulateGrad):
            if node.variable.__dict__.get(_MADE_AT, -1) < start:
                return True
            continue
        if getattr(node, "_seq", start) < start:
            return True
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return any(isinstance(o, Tensor) and o.requires_grad and o.grad_fn is None and
               o.__dict__.get(_MADE_AT, -1) < start for o in outputs)


def _dual_active():
    """Forward-mode AD is on: a backward must be recorded for tangents to flow through it."""
    return forward_mode.state.level is not None


def _zeros_like(t):
    from aotgrad.runtime.factories import zeros_like
    return zeros_like(t)


def _grads(outputs, tracked, grad_outputs, create_graph, retain_graph):
    diff = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    if not diff:
        return [_zeros_like(t) for t in tracked.tensors]
    gs = _autograd_grad([o for o, _ in diff], tracked.tensors, [g for _, g in diff],
                        retain_graph=retain_graph, create_graph=create_graph,
                        allow_unused=True)
    return [_zeros_like(t) if g is None else g for g, t in zip(gs, tracked.tensors)]


def _plain(t, keep):
    return t if keep or not isinstance(t, Tensor) else t.detach()


def _argnums_tuple(argnums, n, what):
    single = isinstance(argnums, int)
    nums = (argnums,) if single else tuple(argnums)
    if not nums:
        raise RuntimeError(f"{what}: argnums must be non-empty")
    out = []
    for a in nums:
        if not isinstance(a, int):
            raise RuntimeError(f"{what}: argnums must be int or Tuple[int, ...], got {a!r}")
        if not -n <= a < n:
            raise RuntimeError(f"{what}: Got argnums={a}, but only {n} positional inputs")
        out.append(a % n)
    if len(set(out)) != len(out):
        raise RuntimeError(f"{what}: argnums must be unique, got {argnums}")
    return single, tuple(out)


def _split_args(args, nums):
    """args with the differentiated ones replaced; returns (new args, [(tree, n leaves)])."""
    args = list(args)
    trees, leaves = [], []
    for a in nums:
        ls, tree = pytree.flatten(args[a])
        trees.append((tree, len(ls)))
        leaves.extend(ls)
    return args, trees, leaves


def _unsplit(args, nums, trees, new_leaves):
    args = list(args)
    it = iter(new_leaves)
    for a, (tree, n) in zip(nums, trees):
        args[a] = pytree.unflatten(tree, [next(it) for _ in range(n)])
    return args


def _regroup(single, trees, flat):
    it = iter(flat)
    groups = [pytree.unflatten(tree, [next(it) for _ in range(n)]) for tree, n in trees]
    return groups[0] if single else tuple(groups)


def _split_aux(out, has_aux, what):
    if not has_aux:
        return out, None
    if not (isinstance(out, tuple) and len(out) == 2):
        raise RuntimeError(f"{what}(f, ...)(*args): output of function f should be a tuple: "
                           f"(output, aux) if has_aux is True")
    return out


def _detach_tree(tree, keep):
    leaves, td = pytree.flatten(tree)
    return pytree.unflatten(td, [_plain(x, keep) for x in leaves])


# ---- grad --------------------------------------------------------------------------------
def grad_and_value(func, argnums=0, has_aux=False):
    """(gradient, value) of a function returning a scalar tensor, as torch.func:
    `argnums` picks the argument(s) differentiated (an int or a tuple of ints); with
    `has_aux` the function returns (output, aux) and the result is (gradient, (output, aux)).
    """
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        single, nums = _argnums_tuple(argnums, len(args), "grad_and_value")
        outer = _mode.grad_enabled
        with enable_grad():
            args, trees, leaves = _split_args(args, nums)
            tracked = _Tracked(leaves, "grad_and_value")
            out = func(*_unsplit(args, nums, trees, tracked.tensors), **kwargs)
            out, aux = _split_aux(out, has_aux, "grad_and_value")
            if not isinstance(out, Tensor):
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a "
                                   f"Tensor, got {type(out).__name__}")
            if out.ndim != 0:
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a "
                                   f"scalar Tensor, got tensor with {out.ndim} dims. Maybe you "
                                   f"wanted to use the vjp or jacrev APIs instead?")
            keep = outer and (_dual_active() or tracked.reaches_outside([out]))
            gs = _grads([out], tracked, [None], create_graph=keep, retain_graph=keep)
        gs = [_plain(g, keep) for g in gs]
        value = _plain(out, keep)
        g = _regroup(single, trees, gs)
        if has_aux:
            return g, (value, _detach_tree(aux, keep))
        return g, value
    return wrapper


def grad(func, argnums=0, has_aux=False):
    """The gradient of a function returning a scalar tensor, as torch.func.grad (with
    `has_aux`: (gradient, aux)). Nests: `grad(grad(f))`.

    >>> import aotgrad
    >>> from aotgrad.func import grad
    >>> grad(grad(lambda x: x.sin()))(aotgrad.tensor(0.5))   # -sin(0.5)
    tensor(-0.4794)
    """
    gv = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = gv(*args, **kwargs)
        if has_aux:
            return g, value[1]
        return g
    return wrapper


# ---- vjp ---------------------------------------------------------------------------------
def vjp(func, *primals, has_aux=False):
    """(func(*primals), vjp_fn[, aux]) as torch.func.vjp: vjp_fn(cotangents) gives the
    vector-Jacobian product for each primal (same structure as the primals)."""
    outer = _mode.grad_enabled
    with enable_grad():
        leaves, tree = pytree.flatten(list(primals))
        tracked = _Tracked(leaves, "vjp")
        out = func(*pytree.unflatten(tree, tracked.tensors))
        out, aux = _split_aux(out, has_aux, "vjp")
        flat_out, out_tree = pytree.flatten(out)
        for o in flat_out:
            if not isinstance(o, Tensor):
                raise RuntimeError(f"vjp(f, *primals): Expected f to be a function that has "
                                   f"only Tensors or Python numbers as outputs, got "
                                   f"{type(o).__name__}")
        keep_out = outer and (_dual_active() or tracked.reaches_outside(flat_out))

    def vjp_fn(*cotangents):
        if len(cotangents) == 1 and not isinstance(out, (tuple, list, dict)):
            cts = list(cotangents)
        else:
            cts, _ = pytree.flatten(cotangents[0] if len(cotangents) == 1 else cotangents)
        if len(cts) != len(flat_out):
            raise RuntimeError(f"Expected pytree structure of cotangents to be the same as "
                               f"pytree structure of outputs to the function (got "
                               f"{len(cts)} cotangents for {len(flat_out)} outputs)")
        for o, c in zip(flat_out, cts):
            if tuple(c.shape) != tuple(o.shape):
                raise RuntimeError(f"Mismatch in shape: grad_output has a shape of "
                                   f"{list(c.shape)} and output has a shape of "
                                   f"{list(o.shape)}.")
        keep = _mode.grad_enabled and (keep_out or any(
            c.requires_grad or forward_mode.tangent_of(c) is not None for c in cts))
        with enable_grad():
            gs = _grads(flat_out, tracked, cts, create_graph=keep, retain_graph=True)
        gs = [_plain(g, keep) for g in gs]
        return tuple(pytree.unflatten(tree, gs))

    result = pytree.unflatten(out_tree, [_plain(o, keep_out) for o in flat_out])
    if has_aux:
        return result, vjp_fn, _detach_tree(aux, keep_out)
    return result, vjp_fn


# ---- jvp ---------------------------------------------------------------------------------
def _check_jvp_args(primals, tangents, what):
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise RuntimeError(f"{what}(f, primals, tangents): Expected primals and tangents to be "
                           f"tuples")
    p_leaves, p_tree = pytree.flatten(list(primals))
    t_leaves, t_tree = pytree.flatten(list(tangents))
    if p_tree != t_tree:
        raise RuntimeError(f"{what}(f, primals, tangents): Expected primals and tangents to "
                           f"have the same python structure")
    for p, t in zip(p_leaves, t_leaves):
        if not isinstance(p, Tensor) or not isinstance(t, Tensor):
            raise RuntimeError(f"{what}(f, primals, tangents): Expected primals and tangents "
                               f"to be tensors")
        if tuple(p.shape) != tuple(t.shape):
            raise RuntimeError(f"{what}(f, primals, tangents): Expected primals and tangents "
                               f"to have the same shape, got {list(p.shape)} and "
                               f"{list(t.shape)}")
    return p_leaves, t_leaves, p_tree


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """(func(*primals), J·tangents[, aux]) as torch.func.jvp: forward-mode AD."""
    p_leaves, t_leaves, tree = _check_jvp_args(primals, tangents, "jvp")
    if forward_mode.state.level is None and current_builder() is None:
        return _jvp_forward_mode(func, p_leaves, t_leaves, tree, has_aux)
    return _jvp_by_transpose(func, p_leaves, t_leaves, tree, has_aux)


def _jvp_forward_mode(func, p_leaves, t_leaves, tree, has_aux):
    start = engine.next_sequence_nr()
    outer = _mode.grad_enabled
    with forward_ad.dual_level():
        duals = [forward_ad.make_dual(p, t.to(p.dtype)) for p, t in zip(p_leaves, t_leaves)]
        out = func(*pytree.unflatten(tree, duals))
        out, aux = _split_aux(out, has_aux, "jvp")
        flat_out, out_tree = pytree.flatten(out)
        primals_out, tangents_out = [], []
        for o in flat_out:
            if not isinstance(o, Tensor):
                raise RuntimeError(f"jvp(f, primals, tangents): Expected f(*primals) to return "
                                   f"only tensors, got unsupported type {type(o).__name__}")
            p, t = forward_ad.unpack_dual(o)
            primals_out.append(p)
            tangents_out.append(_zeros_like(p) if t is None else t)
    keep = outer and reaches_outside(start, primals_out + tangents_out)
    res = (pytree.unflatten(out_tree, [_plain(p, keep) for p in primals_out]),
           pytree.unflatten(out_tree, [_plain(t, keep) for t in tangents_out]))
    return res + (_detach_tree(aux, keep),) if has_aux else res


class _Transposed:
    """The vjp of func at the primals, recorded once with fresh cotangents u: u -> J^T u is
    linear in u, so d/du <J^T u, t> = J t gives a jvp per tangent (linearize, and jvp
    where forward-mode AD cannot run: nested in another jvp, or traced)."""

    def __init__(self, func, primals, has_aux=False):
        self.start = engine.next_sequence_nr()
        with enable_grad():
            res = vjp(func, *primals, has_aux=has_aux)
            self.out, vjp_fn = res[0], res[1]
            self.aux = res[2] if has_aux else None
            self.flat_out, self.out_tree = pytree.flatten(self.out)
            self.us = [_fresh_leaf(_zeros_like(o)) for o in self.flat_out]
            cts = vjp_fn(*self.us) if len(self.us) == 1 and isinstance(self.out, Tensor) \
                else vjp_fn(pytree.unflatten(self.out_tree, self.us))
            self.cts, _ = pytree.flatten(list(cts))

    def jvp(self, t_leaves, what):
        if len(t_leaves) != len(self.cts):
            raise RuntimeError(f"{what}: expected {len(self.cts)} tangents, got "
                               f"{len(t_leaves)}")
        outer = _mode.grad_enabled
        with enable_grad():
            total = None
            for c, t in zip(self.cts, t_leaves):
                if c.requires_grad:
                    term = (c * t.to(c.dtype)).sum()
                    total = term if total is None else total + term
            if total is None:
                return pytree.unflatten(self.out_tree, [_zeros_like(o) for o in self.flat_out])
            jts = _autograd_grad(total, self.us, retain_graph=True, create_graph=True,
                                 allow_unused=True)
        jts = [_zeros_like(o) if j is None else j for j, o in zip(jts, self.flat_out)]
        keep = outer and (_dual_active() or reaches_outside(self.start, jts))
        return pytree.unflatten(self.out_tree, [_plain(j, keep) for j in jts])


def _jvp_by_transpose(func, p_leaves, t_leaves, tree, has_aux):
    tr = _Transposed(func, pytree.unflatten(tree, p_leaves), has_aux)
    result = (tr.out, tr.jvp(t_leaves, "jvp"))
    return result + (tr.aux,) if has_aux else result


def linearize(func, *primals):
    """(func(*primals), jvp_fn) as torch.func.linearize: jvp_fn(*tangents) is J·tangents at
    the primals, reusing one recorded graph (the transpose of the vjp)."""
    tr = _Transposed(func, primals)

    def jvp_fn(*tangents):
        return tr.jvp(pytree.flatten(list(tangents))[0], "linearize")
    return tr.out, jvp_fn


# ---- Jacobians -----------------------------------------------------------------------------
def _eye_rows(total, offset, shape, like):
    """Rows offset..offset+numel(shape) of the identity of size total, shaped (total, *shape)."""
    from aotgrad.runtime.factories import eye
    n = math.prod(shape)
    e = eye(total, dtype=like.dtype)
    return e[:, offset:offset + n].reshape((total,) + tuple(shape))


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
    """The Jacobian by reverse mode (vmap over vjp), as torch.func.jacrev: for an output of
    shape O and an input of shape I, a tensor of shape O + I."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        single, nums = _argnums_tuple(argnums, len(args), "jacrev")
        args = list(args)

        def f(*diff):
            a = list(args)
            for i, d in zip(nums, diff):
                a[i] = d
            return func(*a, **kwargs)
        res = vjp(f, *[args[i] for i in nums], has_aux=has_aux)
        out, vjp_fn = res[0], res[1]
        flat_out, out_tree = pytree.flatten(out)
        in_leaves, in_tree = pytree.flatten([args[i] for i in nums])
        total = sum(o.numel() for o in flat_out)
        basis, off = [], 0
        for o in flat_out:
            basis.append(_eye_rows(total, off, tuple(o.shape), o))
            off += o.numel()
        if isinstance(out, Tensor):
            rows = vmap(vjp_fn, chunk_size=chunk_size)(basis[0])
        else:
            rows = vmap(vjp_fn, chunk_size=chunk_size)(pytree.unflatten(out_tree, basis))
        flat_rows, _ = pytree.flatten(list(rows))   # per input: (total, *input shape)
        per_out, off = [], 0
        for o in flat_out:
            n = o.numel()
            per_in = [r[off:off + n].reshape(tuple(o.shape) + tuple(x.shape))
                      for r, x in zip(flat_rows, in_leaves)]
            per_out.append(_regroup(single, _trees_of(args, nums), per_in))
            off += n
        jac = pytree.unflatten(out_tree, per_out)
        return (jac, res[2]) if has_aux else jac
    return wrapper


def _trees_of(args, nums):
    out = []
    for a in nums:
        ls, tree = pytree.flatten(args[a])
        out.append((tree, len(ls)))
    return out


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """The Jacobian by forward mode (vmap over jvp), as torch.func.jacfwd."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        single, nums = _argnums_tuple(argnums, len(args), "jacfwd")
        args = list(args)
        trees = _trees_of(args, nums)
        in_leaves, _ = pytree.flatten([args[i] for i in nums])
        for x in in_leaves:
            if not isinstance(x, Tensor):
                raise RuntimeError(f"jacfwd: expected tensors to differentiate, got "
                                   f"{type(x).__name__}")
        total = sum(x.numel() for x in in_leaves)
        basis, off = [], 0
        for x in in_leaves:
            basis.append(_eye_rows(total, off, tuple(x.shape), x))
            off += x.numel()

        def f(*diff_leaves):
            a = _unsplit(args, nums, trees, diff_leaves)
            return func(*a, **kwargs)

        aux_box = []

        def push(*ts):
            res = jvp(f, tuple(in_leaves), ts, has_aux=has_aux)
            if has_aux:
                aux_box.append(res[2])
            return res[1]
        cols = vmap(push, randomness=randomness)(*basis)   # each output: (total, *out shape)
        flat_cols, out_tree = pytree.flatten(cols)
        per_out = []
        for c in flat_cols:
            oshape = tuple(c.shape[1:])
            per_in, off = [], 0
            for x in in_leaves:
                n = x.numel()
                part = c[off:off + n].reshape((n,) + oshape)
                part = part.permute(tuple(range(1, len(oshape) + 1)) + (0,))
                per_in.append(part.reshape(oshape + tuple(x.shape)))
                off += n
            per_out.append(_regroup(single, trees, per_in))
        jac = pytree.unflatten(out_tree, per_out)
        if has_aux:
            _, aux = jvp(f, tuple(in_leaves), tuple(_zeros_like(x) for x in in_leaves),
                         has_aux=True)[::2]
            return jac, aux
        return jac
    return wrapper


def hessian(func, argnums=0):
    """The Hessian, jacfwd(jacrev(func)), as torch.func.hessian."""
    return jacfwd(jacrev(func, argnums), argnums)
