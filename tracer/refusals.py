"""What a trace refuses: the things a function does that the compiled program could not
repeat on each call (writes through aliased inputs, a changed requires_grad flag, a changed
list or dict argument, a value of the backward stored outside). Each raises GraphBreakError:
the call runs eagerly, or fullgraph=True raises the reason."""
from aotgrad.runtime.tensor import Tensor
from aotgrad.tracer.pytree import flatten
from aotgrad.tracer.trace_result import Mutation, Role


class GraphBreakError(RuntimeError):
    """Raised with fullgraph=True when the function cannot be captured as one graph."""


def refuse_aliased_writes(fn, args, kwargs, leaves, written, builder):
    """A write through one of two inputs that share memory without being the same tensor (a
    view and its base, two views of one tensor, an argument and a closed-over tensor or
    parameter) must be seen through the other, which the functional program cannot do:
    refuse (eager fallback, or the error with fullgraph)."""
    by_counter = {}  # id(version counter) -> {(Role.ARG, id) or (Role.LIFTED, id): tensor, name}
    for i, x in enumerate(leaves):
        if isinstance(x, Tensor):
            by_counter.setdefault(id(x._version_counter), {}).setdefault(
                (Role.ARG, id(x)), (x, i))
    for rec in builder.lifted:
        t = rec.ref()
        if t is not None:  # (a tensor written meanwhile counts versions on a private counter)
            sw = builder.swapped.get(id(t))
            c = sw.counter if sw is not None and sw.ref() is t else t._version_counter
            by_counter.setdefault(id(c), {})[(Role.LIFTED, id(t))] = (t, None)
    written_args = {role[1] for role, _ in written if role[0] is Mutation.ARG}
    written_lifted = {id(role[1]) for role, _ in written if role[0] is Mutation.LIFTED}
    names = None
    for g in by_counter.values():
        if len(g) < 2 or not any(
                (k is Role.ARG and i in written_args) or (k is Role.LIFTED and tid in written_lifted)
                for (k, tid), (_, i) in g.items()):
            continue
        if names is None:
            from aotgrad.tracer.arg_names import leaf_names
            names = leaf_names(fn, args, kwargs)
        said = list(dict.fromkeys(f"argument '{names[i]}'" if i is not None else
                                  "a parameter or closed-over tensor" for t, i in g.values()))
        raise GraphBreakError(
            f"{' and '.join(said)} share memory "
            f"({_alias_kind([t for t, _ in g.values()])}) and the function writes one of "
            f"them in place; the compiled program cannot show that write through the other "
            f"(pass tensors that do not overlap, or one tensor once)")


def _alias_kind(members):
    if len({id(m) for m in members}) == 1:
        return "the same tensor"
    if any(m._base is not None and any(m._base is o for o in members) for m in members):
        return "a view and its base"
    return "views of one tensor"


def check_flags(proxies, leaves, want_grad):
    """requires_grad_() on an argument inside the function changes the caller's tensor
    eagerly; the compiled program cannot: refuse (eager fallback, or the error)."""
    for i, p in enumerate(proxies):
        if isinstance(p, Tensor) and p.grad_fn is None and \
                p.requires_grad != (leaves[i].requires_grad and want_grad):
            raise GraphBreakError(
                f"argument {i} had its requires_grad flag changed inside the function "
                f"(requires_grad_()); set it before calling the compiled function")


def check_argument_containers(args, kwargs, p_args, p_kwargs, proxies):
    """The function got its list and dict arguments rebuilt around the traced tensors: an item
    it stores in one, replaces or removes would reach the caller's container eagerly, and
    never in the compiled call (refuse: eager fallback, or the error)."""
    start = 0   # (the leaves' order is flatten's: the positional arguments, then the keywords)
    named = [(f"argument {i}", a, p) for i, (a, p) in enumerate(zip(args, p_args))] + \
        [(f"argument {k!r}", kwargs[k], p_kwargs[k]) for k in kwargs]
    for name, arg, p_arg in named:
        leaves, tree = flatten(arg)
        p_leaves, p_tree = flatten(p_arg)
        if p_tree != tree or not all(a is b or _same_constant(a, b) for a, b in
                                     zip(p_leaves, proxies[start:start + len(leaves)])):
            raise GraphBreakError(
                f"{name} (a {type(arg).__name__}) had an item stored, replaced or removed "
                f"inside the function; the compiled program would not repeat that on the "
                f"caller's container: return the new values instead")
        start += len(leaves)


def _same_constant(a, b):
    """Two equal plain Python constants (an item written back with the value it had)."""
    return type(a) is type(b) and isinstance(a, (int, float, complex, str, bytes)) and a == b


def refuse_backward_escapes(builder, values):
    """A value of the backward (one that reads a tangent) stored outside the function, e.g. a
    hook registered inside that keeps the gradient it sees, cannot be made concrete by the
    forward program: refuse it clearly (eager fallback, or the error with fullgraph)."""
    if not (values and builder.tangents):
        return
    dep, where = set(builder.tangents), {}
    for n in builder.graph.nodes:
        if any(v in dep for v in n.inputs):
            dep.update(n.outputs)
            for v in n.outputs:
                where[v] = n
    for v in values:
        if v in dep:
            n = where.get(v)
            prov = n.provenance if n is not None else None
            at = f" (made by {prov.op or n.prim.name} at {prov.where()})" \
                if prov is not None and prov.file else ""
            raise GraphBreakError(
                f"a value of the backward{at} is stored outside the function (a hook "
                f"registered inside keeps the gradient it sees?); register such hooks outside "
                f"the compiled function")
