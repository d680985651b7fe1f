"""trace(fn, args) -> TraceResult: run the function on traced tensors and record its joint
(forward + ahead-of-time backward) graph.

Traced tensors are ordinary runtime Tensors whose `_value` is an IR Var, so every op, the
derivative rules and autograd.Function backwards are recorded by the same code that runs
them eagerly. The backward is derived by running the eager engine (`run_backward`) on the
traced outputs with new tangent inputs: one source of derivative truth.
"""
import gc
import os
import weakref

from aotgrad.ir.core import GraphBuilder, Var, aval_of, user_location
from aotgrad.runtime import dispatch
from aotgrad.runtime.engine import run_backward
from aotgrad.runtime.factories import default_generator
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor
from aotgrad.tracer.pytree import flatten


class GraphBreakError(RuntimeError):
    """Raised with fullgraph=True when the function cannot be captured as one graph."""


class TraceBuilder(GraphBuilder):
    """Records the graph and decides what a concrete tensor seen inside the trace is:
    a random seed (fresh per call), or a lifted parameter/closure (read at call time)."""

    def __init__(self, names=None):
        super().__init__("joint")
        self.names = names or {}
        self.roles = []          # per graph input: ("arg", flat_index) | ("lifted", tensor)
        self.current = {}        # id(tensor) -> current Var (after in-place updates)
        self.lifted = []         # (tensor, Var, grad at lift time)
        self.mutated = {}        # id(tensor) -> (tensor, Var): real tensors written in place
        self.n_seeds = 0
        self.grad_state = {}     # id(tensor) -> (tensor, .grad before the trace wrote it)
        self.keep_alive = []
        self.created = []        # weakrefs to traced tensors made inside the function

    def track(self, t):
        self.created.append(weakref.ref(t))

    def note_grad_write(self, t):
        if id(t) not in self.grad_state:
            self.grad_state[id(t)] = (t, t._grad)

    def add_role_input(self, aval, name, role):
        v = self.add_input(aval, name)
        self.roles.append(role)
        return v

    def lift_object(self, t):
        v = self.current.get(id(t))
        if v is not None:
            return v
        if t.__dict__.get("_rng_seed"):
            v = self.add_role_input(aval_of(t._value), f"seed{self.n_seeds}", ("seed", None))
            self.n_seeds += 1
        else:
            name = self.names.get(id(t)) or f"c{len(self.lifted)}"
            name = "p_" + "".join(c if c.isalnum() else "_" for c in name)
            v = self.add_role_input(aval_of(t._value), name, ("lifted", t))
            self.lifted.append((t, v, t._grad))
        self.current[id(t)] = v
        self.keep_alive.append(t)  # `current` is keyed by id: the object must outlive the trace
        return v

    def record_mutation(self, t, value):
        self.keep_alive.append(t)
        self.current[id(t)] = value
        self.mutated[id(t)] = (t, value)


class TraceResult:
    """The joint graph and what the runtime needs to call it.

    joint.inputs  = [tensor args..., lifted..., seeds..., tangents...] (roles say which)
    joint.outputs = [forward outputs..., mutated-input values..., grads of diff inputs...]
    """

    def __init__(self, **kw):
        self.__dict__.update(kw)


def _break_handler(what, tensor):
    file, line, src = user_location()
    where = f"{os.path.basename(file)}:{line}" if file else "<unknown>"
    raise dispatch.GraphBreak(f"{where}: {what}" + (f"  [`{src}`]" if src else ""))


def trace(fn, args, kwargs, names=None, want_grad=True):
    """Trace fn(*args, **kwargs). Raises dispatch.GraphBreak where it needs concrete values."""
    leaves, in_tree = flatten((tuple(args), dict(kwargs)))
    builder = TraceBuilder(names)
    proxies, arg_grad = [], []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, Tensor):
            v = builder.add_role_input(aval_of(leaf._value), f"x{i}", ("arg", i))
            p = Tensor._make(v, leaf.requires_grad and want_grad)
            proxies.append(p)
            arg_grad.append(p.requires_grad)
        else:
            proxies.append(leaf)
    from aotgrad.tracer.pytree import unflatten
    p_args, p_kwargs = unflatten(in_tree, proxies)
    rng = default_generator.gen.bit_generator.state
    prev_handler, dispatch.graph_break = dispatch.graph_break, _break_handler
    prev_grad = _mode.grad_enabled
    _mode.grad_enabled = want_grad
    try:
        with builder:
            out = fn(*p_args, **p_kwargs)
            outs, out_tree = flatten(out)
            for o in outs:
                if isinstance(o, Tensor) and not isinstance(o._value, Var):
                    builder.lift_object(o)  # a closed-over tensor returned as is
            out_vals = [builder.current.get(id(o), o._value) if isinstance(o, Tensor) else None
                        for o in outs]
            # functionalization: args and real tensors written in place become outputs
            mutations = []
            for i, (leaf, p) in enumerate(zip(leaves, proxies)):
                if isinstance(leaf, Tensor) and p._value is not builder.graph.inputs[
                        _arg_pos(builder, i)]:
                    mutations.append((("arg", i), p._value))
            for t, v in builder.mutated.values():
                mutations.append((("lifted", t), v))
            diff_outs = [k for k, o in enumerate(outs) if isinstance(o, Tensor) and
                         o.requires_grad and o.dtype.is_floating_point]
            diff_inputs = [p for p in proxies if isinstance(p, Tensor) and p.requires_grad]
            diff_roles = [("arg", i) for i, p in enumerate(proxies)
                          if isinstance(p, Tensor) and p.requires_grad]
            for t, v, _ in builder.lifted:
                if t.requires_grad and want_grad:
                    diff_inputs.append(t)
                    diff_roles.append(("lifted", t))
            n_primals = len(builder.graph.inputs)
            grads = []
            if builder.grad_state:  # the function ran backward() itself: no outer backward
                diff_outs, diff_inputs, diff_roles = [], [], []
            if want_grad and diff_outs and diff_inputs:
                tangents = []
                for j, k in enumerate(diff_outs):
                    v = builder.add_input(aval_of(outs[k]._value), f"g{j}")
                    tangents.append(Tensor._make(v, False))
                grads = run_backward([outs[k] for k in diff_outs], tangents, retain_graph=True,
                                     create_graph=False, inputs=diff_inputs, allow_unused=True,
                                     accumulate=False)
                grads = [g._value if g is not None else None for g in grads]
                grads = [builder.lift_object(Tensor._make(g)) if g is not None and
                         not isinstance(g, Var) else g for g in grads]
            # .grad written inside the function (backward() inside compile) is state too
            arg_of = {id(p): i for i, p in enumerate(proxies) if isinstance(p, Tensor)}
            grad_writes, grad_guards = [], []
            for t, init in builder.grad_state.values():
                final = t._grad
                role = ("arg_grad", arg_of[id(t)]) if id(t) in arg_of else ("grad", t)
                if role[0] == "grad":
                    grad_guards.append((t, init, init is not None and id(init) in builder.current))
                if final is init:
                    continue
                if final is None:
                    grad_writes.append((role, None))
                else:
                    v = final._value if isinstance(final._value, Var) else \
                        builder.lift_object(final)
                    grad_writes.append((role, v))
    finally:
        dispatch.graph_break = prev_handler
        _mode.grad_enabled = prev_grad
        default_generator.gen.bit_generator.state = rng
        for t, init in builder.grad_state.values():
            t._grad = init
    mutations += [(r, v) for r, v in grad_writes if v is not None]
    grad_clears = [r for r, v in grad_writes if v is None]
    out_info = dict(out_leaves=[None if isinstance(o, Tensor) else o for o in outs],
                    out_is_tensor=[isinstance(o, Tensor) for o in outs],
                    out_requires_grad=[isinstance(o, Tensor) and o.requires_grad for o in outs])
    # Traced tensors still alive once the trace's own references are gone were stored by the
    # function somewhere (lazily created optimizer state, caches): they escape the graph.
    del out, outs, proxies, p_args, p_kwargs, diff_inputs
    tangents = o = p = leaf = final = t = None  # noqa: F841  (loop variables hold tensors too)
    gc.collect()
    produced = {v for n in builder.graph.nodes for v in n.outputs}
    escapes, seen = [], set()
    for ref in builder.created:
        t = ref()
        if t is not None and isinstance(t._value, Var) and t._value in produced and \
                id(t) not in seen:
            seen.add(id(t))
            escapes.append((("escape", t), t._value))
    mutations += escapes
    graph = builder.graph
    graph.outputs = [v for v in out_vals if v is not None] + [v for _, v in mutations] + \
        [g for g in grads if g is not None]
    return TraceResult(
        graph=graph, roles=builder.roles, n_primals=n_primals,
        n_tangents=len(graph.inputs) - n_primals, in_tree=in_tree, out_tree=out_tree,
        diff_outs=diff_outs, mutations=[r for r, _ in mutations], diff_roles=diff_roles,
        grad_clears=grad_clears, grad_guards=grad_guards, escaped=bool(escapes),
        grad_present=[g is not None for g in grads], lifted=[t for t, _, _ in builder.lifted],
        n_seeds=builder.n_seeds, arg_requires_grad=arg_grad,
        lifted_guards=[(t, v, t.requires_grad) for t, v, _ in builder.lifted], **out_info)


def _arg_pos(builder, flat_index):
    for pos, r in enumerate(builder.roles):
        if r == ("arg", flat_index):
            return pos
    raise KeyError(flat_index)
