"""trace(fn, args) -> TraceResult: run the function on traced tensors and record its joint
(forward + ahead-of-time backward) graph.

Traced tensors are ordinary runtime Tensors whose `_value` is an IR Var, so every op, the
derivative rules and autograd.Function backwards are recorded by the same code that runs
them eagerly. The backward is derived by running the eager engine (`run_backward`) on the
traced outputs with new tangent inputs: one source of derivative truth.
"""
import gc
import weakref

from aotgrad.ir.core import GraphBuilder, Var, aval_of
from aotgrad.runtime import dispatch
from aotgrad.runtime.engine import run_backward
from aotgrad.runtime.factories import default_generator
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor
from aotgrad.tracer.pytree import flatten, unflatten


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
        self.tangents = []       # the backward's tangent inputs (graph inputs after the primals)
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

    graph.inputs  = [tensor args..., lifted..., seeds..., tangents...] (`roles` name the
                    first n_primals)
    graph.outputs = [tensor outputs..., written-back values (`mutations`)..., grads of
                    `diff_roles` where `grad_present`...]
    """

    def __init__(self, **kw):
        self.__dict__.update(kw)


def _break_handler(what, tensor):
    raise dispatch.GraphBreak(dispatch.describe_break(what))


def trace(fn, args, kwargs, names=None, want_grad=True):
    """Trace fn(*args, **kwargs). Raises dispatch.GraphBreak where it needs concrete values."""
    leaves, in_tree = flatten((tuple(args), dict(kwargs)))
    builder = TraceBuilder(names)
    proxies = [Tensor._make(builder.add_role_input(aval_of(x._value), f"x{i}", ("arg", i)),
                            x.requires_grad and want_grad) if isinstance(x, Tensor) else x
               for i, x in enumerate(leaves)]
    arg_vars = {i: p._value for i, p in enumerate(proxies) if isinstance(p, Tensor)}
    p_args, p_kwargs = unflatten(in_tree, proxies)
    rng = default_generator.gen.bit_generator.state
    prev_handler, dispatch.graph_break = dispatch.graph_break, _break_handler
    prev_grad, _mode.grad_enabled = _mode.grad_enabled, want_grad
    try:
        with builder:
            outs, out_tree = flatten(fn(*p_args, **p_kwargs))
            out_vals = [_value_of(builder, o) for o in outs if isinstance(o, Tensor)]
            mutations = [(("arg", i), p._value) for i, p in enumerate(proxies)
                         if isinstance(p, Tensor) and p._value is not arg_vars[i]]
            mutations += [(("lifted", t), v) for t, v in builder.mutated.values()]
            n_primals = len(builder.graph.inputs)
            if builder.grad_state:  # the function ran backward() itself: no outer backward
                diff_outs, diff_roles, grads = [], [], []
            else:
                diff_outs, diff_roles, grads = derive_backward(builder, outs, proxies, want_grad)
            grad_writes, grad_guards = _grad_state(builder, proxies)
    finally:
        dispatch.graph_break = prev_handler
        _mode.grad_enabled = prev_grad
        default_generator.gen.bit_generator.state = rng
        for t, init in builder.grad_state.values():
            t._grad = init
    out_info = dict(out_leaves=[None if isinstance(o, Tensor) else o for o in outs],
                    out_is_tensor=[isinstance(o, Tensor) for o in outs])
    del outs, proxies, p_args, p_kwargs
    mutations += [(r, v) for r, v in grad_writes if v is not None]
    escapes = _escapes(builder)
    mutations += escapes
    graph = builder.graph
    graph.outputs = out_vals + [v for _, v in mutations] + [g for g in grads if g is not None]
    # a concrete tensor first met by a derivative rule (a constant the function made, saved
    # for the backward as a new tensor object) was lifted after the tangents: it is a primal
    tangents = set(builder.tangents)
    late = [v for v in graph.inputs[n_primals:] if v not in tangents]
    if late:
        graph.inputs = graph.inputs[:n_primals] + late + builder.tangents
        n_primals += len(late)
    return TraceResult(
        graph=graph, roles=builder.roles, n_primals=n_primals, in_tree=in_tree,
        out_tree=out_tree, diff_outs=diff_outs, diff_roles=diff_roles,
        mutations=[r for r, _ in mutations], escaped=bool(escapes),
        grad_clears=[r for r, v in grad_writes if v is None], grad_guards=grad_guards,
        grad_present=[g is not None for g in grads],
        lifted_guards=[(t, v, t.requires_grad) for t, v, _ in builder.lifted], **out_info)


def _value_of(builder, t):
    """The traced value of an output (a closed-over tensor returned as is gets lifted)."""
    return t._value if isinstance(t._value, Var) else builder.lift_object(t)


def derive_backward(builder, outs, proxies, want_grad):
    """The ahead-of-time backward: run the eager engine (`autograd.grad`) on the traced
    outputs with new tangent inputs; every op the derivative rules call is recorded.

    Returns (indices of differentiable outputs, roles of the inputs differentiated, grads)."""
    diff_outs = [k for k, o in enumerate(outs) if isinstance(o, Tensor) and o.requires_grad
                 and o.dtype.is_floating_point]
    diff_inputs = [p for p in proxies if isinstance(p, Tensor) and p.requires_grad]
    diff_roles = [("arg", i) for i, p in enumerate(proxies)
                  if isinstance(p, Tensor) and p.requires_grad]
    for t, _, _ in builder.lifted:
        if t.requires_grad and want_grad:
            diff_inputs.append(t)
            diff_roles.append(("lifted", t))
    if not (want_grad and diff_outs and diff_inputs):
        return [], [], []
    tangents = [Tensor._make(builder.add_input(aval_of(outs[k]._value), f"g{j}"))
                for j, k in enumerate(diff_outs)]
    builder.tangents = [t._value for t in tangents]
    grads = run_backward([outs[k] for k in diff_outs], tangents, retain_graph=True,
                         create_graph=False, inputs=diff_inputs, allow_unused=True,
                         accumulate=False)
    grads = [None if g is None else _value_of(builder, g) for g in grads]
    return diff_outs, diff_roles, grads


def _grad_state(builder, proxies):
    """`.grad` written inside the function (backward() inside compile) is state too:
    -> ([(role, new value Var or None to clear)], [(tensor, grad at trace, grad was read)])."""
    arg_of = {id(p): i for i, p in enumerate(proxies) if isinstance(p, Tensor)}
    writes, guards = [], []
    for t, init in builder.grad_state.values():
        final = t._grad
        role = ("arg_grad", arg_of[id(t)]) if id(t) in arg_of else ("grad", t)
        if role[0] == "grad":
            guards.append((t, init, init is not None and id(init) in builder.current))
        if final is not init:
            writes.append((role, None if final is None else _value_of(builder, final)))
    return writes, guards


def _escapes(builder):
    """Traced tensors still alive once the trace's own references are gone were stored by
    the function somewhere (lazily created optimizer state, caches): they become outputs
    that the runtime makes concrete."""
    gc.collect()
    produced = {v for n in builder.graph.nodes for v in n.outputs}
    escapes, seen = [], set()
    for ref in builder.created:
        t = ref()
        if t is not None and isinstance(t._value, Var) and t._value in produced and \
                id(t) not in seen:
            seen.add(id(t))
            escapes.append((("escape", t), t._value))
    return escapes
