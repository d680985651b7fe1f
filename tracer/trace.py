"""trace(fn, args) -> TraceResult: run the function on traced tensors and record its joint
(forward + ahead-of-time backward) graph.

Traced tensors are ordinary runtime Tensors whose `_value` is an IR Var, so every op, the
derivative rules and autograd.Function backwards are recorded by the same code that runs
them eagerly. The backward is derived by running the eager engine (`run_backward`) on the
traced outputs with new tangent inputs: one source of derivative truth.
"""
import contextlib
import dataclasses
import functools
import weakref

from aotgrad.ir.symbolic import ShapeEnv, SymInt, substitute
from aotgrad.ir.core import Aval, GraphBuilder, Var, aval_of, current_builder, no_builder
from aotgrad.runtime import dispatch, layout
from aotgrad.runtime.engine import (Node, SavedTensorModifiedError, VersionCounter,
                                    _node_of, run_backward)
from aotgrad.runtime.factories import default_generator
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor
from aotgrad.tracer import reads, side_effects
from aotgrad.tracer.heap import TraceHeap
from aotgrad.tracer.pytree import flatten, unflatten
from aotgrad.tracer.refusals import (GraphBreakError, check_argument_containers, check_flags,
                                     refuse_aliased_writes, refuse_backward_escapes)
from aotgrad.tracer.trace_result import Mutation, OutputLayout, Role, TraceResult


class _Lifted:
    """A concrete tensor read inside the trace: its input Var, and what the tracer needs to
    decide afterwards whether it is state read at call time (a parameter, a closed-over
    tensor: `tensor` is set) or a constant the function made (it died with the call: a
    private tensor holding the array it had is read instead)."""
    __slots__ = ("ref", "var", "grad", "value", "tensor")

    def __init__(self, t, var, cb):
        self.ref, self.var, self.grad, self.value = weakref.ref(t, cb), var, t._grad, t._value
        if self.grad is not None and isinstance(self.grad._value, Var):
            # a .grad the trace itself wrote before the tensor was first read (DDP's averaged
            # gradient of a parameter this rank's forward does not use): keeping it here
            # would make it look stored by the function (an escape)
            self.grad = None
        self.tensor = None

    def settle(self):
        t = self.ref()
        self.tensor = t if t is not None else Tensor._make(self.value, False)
        return self.tensor


class _Swapped:
    """A concrete tensor written in place inside the trace holds the traced value (and its
    autograd history) until the trace ends; this is its state before. It counts versions on
    a counter of its own meanwhile: a derivative rule that saved the old value reads the old
    value (the input it was lifted as), where eagerly the backward would refuse."""
    __slots__ = ("ref", "value", "grad_fn", "requires_grad", "output_nr", "counter", "extra")

    def __init__(self, t):
        self.ref, self.value, self.grad_fn = weakref.ref(t), t._value, t.grad_fn
        self.requires_grad, self.output_nr, self.counter = t.requires_grad, t._output_nr, \
            t._version_counter
        self.extra = {k: t.__dict__[k] for k in ("_retains_grad",) if k in t.__dict__}
        t._version_counter = VersionCounter()
        t._version_counter.v = self.counter.v

    def restore(self):
        t = self.ref()
        if t is not None:
            t._value, t.grad_fn, t.requires_grad = self.value, self.grad_fn, self.requires_grad
            t._output_nr, t._version_counter = self.output_nr, self.counter
            t.__dict__.pop("_retains_grad", None)
            t.__dict__.update(self.extra)


class TraceBuilder(GraphBuilder):
    """Records the graph and decides what a concrete tensor seen inside the trace is:
    a random seed (fresh per call), or a lifted parameter/closure/constant."""

    def __init__(self, names=None):
        super().__init__("joint")
        self.names = names or {}
        self.roles = []          # per graph input: (Role.ARG, flat_index) | (Role.LIFTED, _Lifted)
        self.current = {}        # id(tensor) -> Var it was lifted as (while the tensor lives)
        self.by_array = {}       # id(numpy array) -> Var (a saved tensor unpacked anew)
        self.lifted = []         # _Lifted records, in input order
        self.swapped = {}        # id(tensor) -> _Swapped: real tensors written in place
        self.n_seeds = 0
        self.tangents = []       # the backward's tangent inputs (graph inputs after the primals)
        self.grad_state = {}     # id(tensor) -> (tensor, .grad before the trace wrote it)
        self.keep_alive = []
        self.created = []        # weakrefs to traced tensors made inside the function
        # checks to run once the function has returned (each may break the graph), e.g.
        # DDP's: every bucket of a traced backward's reduction started
        self.end_checks = []
        self.layout_read = False  # the trace read a traced tensor's memory layout

    def note_layout_read(self):
        """layout.probe read a traced tensor's layout (which may follow an argument's)."""
        self.layout_read = True

    def track(self, t):
        self.created.append(weakref.ref(t))

    def note_grad_write(self, t):
        if id(t) not in self.grad_state:
            self.grad_state[id(t)] = (t, t._grad)

    def add_role_input(self, aval, name, role):
        v = self.add_input(aval, name)
        self.roles.append(role)
        return v

    def _remember(self, t, v):
        key = id(t)
        self.current[key] = v
        # `current` is keyed by id: forget the entry when the object dies (its id may be reused)
        return lambda _ref, cur=self.current, k=key, var=v: \
            cur.pop(k, None) if cur.get(k) is var else None

    def lift_object(self, t):
        v = self.current.get(id(t))
        if v is not None:
            return v
        if t.__dict__.get("_rng_seed"):
            v = self.add_role_input(aval_of(t._value), f"seed{self.n_seeds}", (Role.SEED, None))
            self.n_seeds += 1
            self.current[id(t)] = v
            self.keep_alive.append(t)
            return v
        v = self.by_array.get(id(t._value))
        if v is not None:  # the same array: a saved tensor unpacked as a new object
            return v
        for rec in self.swapped.values():
            if rec.ref() is not None and rec.counter is t._version_counter:
                raise dispatch.GraphBreak(dispatch.describe_break(
                    "a view of a tensor that the function wrote in place (reading it inside "
                    "a compiled function is not supported; read the tensor itself)"))
        name = self.names.get(id(t)) or f"c{len(self.lifted)}"
        name = "p_" + "".join(c if c.isalnum() else "_" for c in name)
        v = self.add_input(aval_of(t._value), name)
        rec = _Lifted(t, v, self._remember(t, v))
        self.roles.append((Role.LIFTED, rec))
        self.lifted.append(rec)
        self.by_array[id(t._value)] = v
        return v

    def record_mutation(self, t, value):
        """A real tensor is about to be written in place (commit_inplace then gives it the
        traced value, history and version bump); remember its state to restore."""
        if t.requires_grad and t.grad_fn is not None:
            # its old value is a differentiated input of the program, yet the real tensor
            # carries the new value's history while tracing: the backward would mix the two
            raise dispatch.GraphBreak(dispatch.describe_break(
                "an in-place write to a closed-over tensor that has autograd history (pass "
                "it as an argument to compile it)"))
        rec = self.swapped.get(id(t))
        if rec is None or rec.ref() is not t:  # (an id can be reused once its tensor died)
            self.swapped[id(t)] = _Swapped(t)

    def restore(self):
        for rec in self.swapped.values():
            rec.restore()

    def live_lifted(self):
        """(tensor, Var) of lifted tensors still alive (before `settle_roles`)."""
        return [(rec.ref(), rec.var) for rec in self.lifted if rec.ref() is not None]

    def settle_roles(self):
        """Lifted records -> (Role.LIFTED, tensor): the live object, or a private constant."""
        self.roles = [(k, r.settle()) if k is Role.LIFTED else (k, r) for k, r in self.roles]
        return [(r.tensor, r.var, r.grad) for r in self.lifted]


def _break_handler(what, tensor):
    raise dispatch.GraphBreak(dispatch.describe_break(what))


class _InputBackward(Node):
    """Inside the trace, an argument that has autograd history outside is a non-leaf (as it
    is eagerly, so in-place ops on it are allowed): its gradient passes to the graph input."""
    _name = "CompiledInputBackward"

    def __init__(self, base):
        a = [Aval(base._value.shape, base.dtype)]
        super().__init__([_node_of(base)], a, a)

    def _backward(self, grads):
        return grads


def _arg_proxy(builder, x, i, want_grad, aval=None):
    """-> (proxy the function sees, leaf the backward differentiates or None)."""
    v = builder.add_role_input(aval or aval_of(x._value), f"x{i}", (Role.ARG, i))
    if not (x.requires_grad and want_grad):
        p = Tensor._make(v, False)
        # (the eager checks of an inference tensor, e.g. that no backward saves it, run on it)
        p._inference = x._inference
        return _with_layout(p, x), None
    leaf = Tensor._make(v, True)
    if x.grad_fn is None:
        # its .grad as eagerly: read, or accumulated into by a backward() inside (the
        # tensor is lifted where the trace reads it; a guard on it: see _grad_state)
        leaf._grad = x._grad
        return _with_layout(leaf, x), leaf
    p = Tensor._make(v, True)
    p.grad_fn = _InputBackward(leaf)
    return _with_layout(p, x), leaf


def _with_layout(p, x):
    """Proxy p of argument x with x's memory layout, as eagerly (a strided argument's
    probe; a C-contiguous one needs none)."""
    v = x._value
    if not v.flags.c_contiguous:
        p._layout_probe = layout.argument_probe(v, v.shape)
    return p


def _symbolic_aval(env, x, i, dims, arg_name, symbol_dims):
    """The Aval of argument i with a new symbol (made by `env`) for each of `dims`."""
    a = aval_of(x._value)
    shape = list(a.shape)
    for d in dims:
        s = env.create_symbol(shape[d], f"{arg_name(i)}.size({d})")
        symbol_dims.append((i, d, s.free_symbols.pop()))
        shape[d] = s
    return Aval(tuple(shape), a.dtype)


def _pin_sizes(graph, repl):
    """Rewrite the graph's sizes with the symbols equality guards pinned (ShapeEnv
    .replacements): `s1` matched against a weight's 8 is 8 in every shape and param."""
    if not repl:
        return
    seen = set()
    for v in graph.inputs + [o for n in graph.nodes for o in n.outputs]:
        if id(v) not in seen:
            seen.add(id(v))
            v.shape = tuple(substitute(d, repl) for d in v.shape)
    for n in graph.nodes:
        n.params = {k: _substitute_param(p, repl) for k, p in n.params.items()}


def _substitute_param(p, repl):
    if isinstance(p, SymInt):
        return substitute(p, repl)
    if type(p) in (tuple, list):
        return type(p)(_substitute_param(x, repl) for x in p)
    if isinstance(p, slice):
        return slice(*(_substitute_param(x, repl) for x in (p.start, p.stop, p.step)))
    if dataclasses.is_dataclass(p) and not isinstance(p, type):   # a ValueCheck's sizes
        return dataclasses.replace(p, **{f.name: _substitute_param(getattr(p, f.name), repl)
                                         for f in dataclasses.fields(p) if f.init})
    return p


def trace(fn, args, kwargs, names=None, want_grad=True, symbolic_dims=None):
    """Trace fn(*args, **kwargs). Raises dispatch.GraphBreak where it needs concrete values.
    `symbolic_dims`: {flat argument index: dims} whose sizes the trace keeps symbolic (a
    ShapeEnv records the decisions taken on them as guards)."""
    with TraceHeap() as heap:  # the trace's collections walk only what it made
        return _trace(heap, fn, args, kwargs, names, want_grad, symbolic_dims)


def _trace(heap, fn, args, kwargs, names, want_grad, symbolic_dims):
    leaves, in_tree = flatten((tuple(args), dict(kwargs)))
    builder = TraceBuilder(names)
    names = []

    def arg_name(i):  # (read only when an object is passed: signature() is not free)
        if not names:
            from aotgrad.tracer.arg_names import leaf_names
            names[:] = leaf_names(fn, args, kwargs)
        return names[i]
    env, symbol_dims = (ShapeEnv() if symbolic_dims else None), []
    proxies, diff_leaves = [], {}
    first = {}  # id(tensor) -> its first position: the same tensor passed twice is one input
    for i, x in enumerate(leaves):
        if isinstance(x, Tensor):
            j = first.setdefault(id(x), i)
            if j != i:  # one proxy for both: a write through one is seen through the other
                proxies.append(proxies[j])
                continue
            aval = None
            if symbolic_dims and i in symbolic_dims:
                aval = _symbolic_aval(env, x, i, symbolic_dims[i], arg_name, symbol_dims)
            p, leaf = _arg_proxy(builder, x, i, want_grad, aval)
            proxies.append(p)
            if leaf is not None:
                diff_leaves[i] = leaf
        else:
            proxies.append(x)
    arg_vars = {i: p._value for i, p in enumerate(proxies) if isinstance(p, Tensor)}
    p_args, p_kwargs = unflatten(in_tree, proxies)
    rng = default_generator.gen.bit_generator.state
    state = reads.walk(fn, leaves, arg_name)  # what the function can reach: guards, rollback
    py_rng = side_effects.rng_states()
    on_break = dispatch.on_graph_break(_break_handler)
    prev_grad, _mode.grad_enabled = _mode.grad_enabled, want_grad
    committed = False
    try:
        with builder, (env if env is not None else contextlib.nullcontext()):
            with side_effects.watch(side_effects.may_draw(state.names)):
                outs, out_tree = flatten(fn(*p_args, **p_kwargs))
            checks, builder.end_checks = builder.end_checks, []
            for check in checks:   # (then dropped: what they hold must not look stored)
                check()
            del checks
            check_flags(proxies, leaves, want_grad)
            check_argument_containers(args, kwargs, p_args, p_kwargs, proxies)
            # retain_grad() on an argument inside the function: each call repeats it on the
            # caller's tensor (as eagerly); on a leaf it does nothing
            retained_args = [i for i, p in enumerate(proxies) if isinstance(p, Tensor) and
                             p.grad_fn is not None and p._retains_grad and
                             first.get(id(leaves[i])) == i]
            out_vals = [_value_of(builder, o) for o in outs if isinstance(o, Tensor)]
            # an output that is an argument or a real tensor itself may share its memory, as
            # eagerly; any other output that would alias an input is copied at run time
            shares = [_shares(o, proxies, arg_vars) for o in outs if isinstance(o, Tensor)]
            # what the function wrote in place: its arguments, and real tensors that outlive
            # the call (one it made and dropped needs no write-back)
            written = [((Mutation.ARG, i), p) for i, p in enumerate(proxies)
                       if isinstance(p, Tensor) and p._value is not arg_vars[i] and
                       first.get(id(leaves[i])) == i]
            if builder.swapped:
                # a tensor from before the trace that died in a cycle is not freed here: its
                # write-back then goes to a tensor nobody can read
                heap.collect()
                written += [((Mutation.LIFTED, r.ref()), r.ref()) for r in builder.swapped.values()
                            if r.ref() is not None]
            mutations = [(role, t._value) for role, t in written]
            if written:
                refuse_aliased_writes(fn, args, kwargs, leaves, written, builder)
            n_primals = len(builder.graph.inputs)
            if builder.grad_state:  # the function ran backward() itself: no outer backward
                diff_outs, diff_roles, grads, written_grads = [], [], [], []
            else:
                grads_before = {i: proxies[i]._grad for i in retained_args}
                diff_outs, diff_roles, grads, written_grads = derive_backward(
                    builder, outs, [t for _, t in written], proxies, diff_leaves, want_grad)
                # the traced backward filled the .grad of the arguments that retain_grad()
                # (a value of the backward, which would look stored outside the function):
                # each call repeats retain_grad() on the caller's tensor instead, whose
                # backward fills its .grad
                for i, g in grads_before.items():
                    proxies[i]._grad = g
            grad_writes, grad_guards, arg_grad_guards = _grad_state(
                builder, proxies, {i: x._grad for i, x in enumerate(leaves)
                                   if i in diff_leaves and x.grad_fn is None})
            drawn = side_effects.rng_changed(py_rng) or ", ".join(
                f"the generator `{p}`" for p in state.drawn_rngs())
            if drawn:
                raise GraphBreakError(
                    f"the function draws random numbers from {drawn} while tracing; the "
                    f"compiled program would repeat the first draw on every call")
            changed = state.changed_values()
            if changed:
                raise GraphBreakError(
                    f"the function changes Python state it can reach ({', '.join(changed)}), "
                    f"which the compiled program would not repeat on each call (keep such "
                    f"counters outside the compiled function, or in a tensor)")
            committed = True
    except (dispatch.GraphBreak, GraphBreakError) as e:
        # what the break may have depended on: the values and objects the function reads
        # (a changed one is worth a new trace)
        e.read_guards = state.guards([]) + state.hook_guards()
        raise
    finally:
        on_break.remove()
        _mode.grad_enabled = prev_grad
        default_generator.gen.bit_generator.state = rng
        for t, init in builder.grad_state.values():
            t._grad = init
        builder.restore()
        if not committed:  # an abandoned trace leaves nothing behind (the call reruns eagerly)
            _abandon(state, py_rng)
    out_info = dict(out_leaves=[None if isinstance(o, Tensor) else o for o in outs],
                    out_args=[next((i for i, p in enumerate(proxies) if o is p), None)
                              for o in outs],
                    out_is_tensor=[isinstance(o, Tensor) for o in outs],
                    retained_args=retained_args)
    del outs, proxies, p_args, p_kwargs, written, diff_leaves
    mutations += [(r, v) for r, v in grad_writes if v is not None]
    escapes = _escapes(builder, heap.collect)
    if escapes:  # confirmed by a full collection (tracer/heap.py), the list let go first
        del escapes
        escapes = _escapes(builder, heap.collect_all)
    try:
        refuse_backward_escapes(builder, [v for _, v in escapes])
    except GraphBreakError:
        _abandon(state, py_rng)
        raise
    mutations += escapes
    lifted = builder.settle_roles()  # after _escapes' gc: a constant made inside is dead
    out_may_alias = [sh is True or (sh is not False and sh() is not None) for sh in shares]
    graph = builder.graph
    graph.outputs = out_vals + [v for _, v in mutations] + [g for g in grads if g is not None] \
        + [g for _, g in written_grads]
    # a concrete tensor first met by a derivative rule (a constant the function made, saved
    # for the backward as a new tensor object) was lifted after the tangents: it is a primal
    tangents = set(builder.tangents)
    late = [v for v in graph.inputs[n_primals:] if v not in tangents]
    if late:
        graph.inputs = graph.inputs[:n_primals] + late + builder.tangents
        n_primals += len(late)
    if env is not None:
        _pin_sizes(graph, env.replacements())
    layout = OutputLayout(len(out_vals), len(mutations), sum(g is not None for g in grads),
                          len(written_grads))
    return TraceResult(
        layout=layout, graph=graph, roles=builder.roles, n_primals=n_primals, in_tree=in_tree,
        out_tree=out_tree, diff_outs=diff_outs, diff_roles=diff_roles,
        mutations=[r for r, _ in mutations], escaped=bool(escapes),
        grad_clears=[r for r, v in grad_writes if v is None], grad_guards=grad_guards,
        arg_grad_guards=arg_grad_guards,
        grad_present=[g is not None for g in grads],
        written_grads=[nr for nr, _ in written_grads], out_may_alias=out_may_alias,
        lifted_guards=[(t, v, t.requires_grad) for t, v, _ in lifted],
        identity_guards=reads.walk(fn, leaves, arg_name).guards([t for t, _, _ in lifted]),
        guard_roots=state.roots, shape_env=env, symbol_dims=tuple(symbol_dims),
        layout_read=builder.layout_read, **out_info)


def _abandon(state, py_rng):
    """Put back what the function reached (containers, generators, Python random states)."""
    state.rollback()
    state.restore_rngs()
    side_effects.set_rng_states(py_rng)


def _shares(o, proxies, arg_vars):
    """True: o is an argument as passed in; a weakref: o is a real tensor (it may share memory
    if it outlives the call); False: o is a value the function made."""
    if not isinstance(o._value, Var):
        return weakref.ref(o)
    return any((o is p or o._version_counter is p._version_counter)
               and p._value is arg_vars[i]
               for i, p in enumerate(proxies) if isinstance(p, Tensor))  # (detach() shares)


def _value_of(builder, t):
    """The traced value of an output (a closed-over tensor returned as is gets lifted)."""
    return t._value if isinstance(t._value, Var) else builder.lift_object(t)


def derive_backward(builder, outs, written, proxies, diff_leaves, want_grad):
    """The ahead-of-time backward: run the eager engine (`autograd.grad`) on the traced
    outputs with new tangent inputs; every op the derivative rules call is recorded.

    Differentiable outputs are the float outputs that require grad, then the tensors written
    in place whose new value has history (index len(outs) + j for written[j]): the runtime
    rebases those onto the compiled node, as an eager in-place op would.
    The gradients of those written tensors' new values are returned too (what their
    retain_grad and hooks see eagerly: their own tangent and the uses inside the function).
    Returns (indices of differentiable outputs, roles of the inputs differentiated, grads,
    [(slot in diff_outs, grad of that written tensor's new value)])."""
    diff_outs = [k for k, o in enumerate(outs) if isinstance(o, Tensor) and o.requires_grad
                 and o.dtype.is_floating_point]
    diff_outs += [len(outs) + j for j, t in enumerate(written)
                  if t.requires_grad and t.grad_fn is not None and t.dtype.is_floating_point]
    targets = list(outs) + list(written)
    diff_inputs = list(diff_leaves.values())
    diff_roles = [(Role.ARG, i) for i in diff_leaves]
    for t, _ in builder.live_lifted():
        if t.requires_grad and want_grad:
            diff_inputs.append(t)
            diff_roles.append((Role.LIFTED, t))
    if not (want_grad and diff_outs and diff_inputs):
        return [], [], [], []
    written_slots = [nr for nr, k in enumerate(diff_outs) if k >= len(outs)]
    tangents = [Tensor._make(builder.add_input(aval_of(targets[k]._value), f"g{j}"))
                for j, k in enumerate(diff_outs)]
    builder.tangents = [t._value for t in tangents]
    try:
        grads = run_backward([targets[k] for k in diff_outs], tangents, retain_graph=True,
                             create_graph=False, inputs=diff_inputs + [
                                 targets[diff_outs[nr]] for nr in written_slots],
                             allow_unused=True, accumulate=False)
    except SavedTensorModifiedError as e:
        # eagerly the forward succeeds and only a backward raises: run it eagerly
        raise dispatch.GraphBreak(dispatch.describe_break(
            f"the backward needs a tensor modified in place after it was saved ({e})")) from None
    grads = [None if g is None else _value_of(builder, g) for g in grads]
    n = len(diff_inputs)
    written_grads = [(nr, g) for nr, g in zip(written_slots, grads[n:]) if g is not None]
    return diff_outs, diff_roles, grads[:n], written_grads


def _grad_state(builder, proxies, arg_grads):
    """`.grad` written inside the function (backward() inside compile) is state too:
    -> ([(role, new value Var or None to clear)], [(tensor, grad at trace, grad was read)],
    [(argument index, grad at trace, grad was read)]). Whether a .grad was set decides
    whether backward() accumulates into it or sets it: a guard, for arguments as for
    lifted tensors. `arg_grads`: leaf argument index -> its .grad at the trace; guarded
    where a backward ran inside or the trace read that .grad."""
    arg_of = {id(p): i for i, p in enumerate(proxies) if isinstance(p, Tensor)}
    writes, guards, arg_guards = [], [], []
    for t, init in builder.grad_state.values():
        final = t._grad
        role = (Mutation.ARG_GRAD, arg_of[id(t)]) if id(t) in arg_of else (Mutation.GRAD, t)
        read = init is not None and id(init) in builder.current
        if role[0] is Mutation.GRAD:
            guards.append((t, init, read))
        else:
            arg_guards.append((role[1], init, read))
        if final is not init:
            writes.append((role, None if final is None else _value_of(builder, final)))
    guarded = {k for k, _, _ in arg_guards}
    for k, init in arg_grads.items():
        read = init is not None and id(init) in builder.current
        if k not in guarded and (builder.grad_state or read):
            arg_guards.append((k, init, read))
    return writes, guards, arg_guards


def _escapes(builder, collect):
    """Traced tensors still alive once the trace's own references are gone (and `collect`
    has freed the garbage cycles) were stored by the function somewhere (lazily created
    optimizer state, caches): they become outputs that the runtime makes concrete."""
    collect()
    produced = {v for n in builder.graph.nodes for v in n.outputs}
    escapes, seen = [], set()
    for ref in builder.created:
        t = ref()
        if t is not None and isinstance(t._value, Var) and t._value in produced and \
                id(t) not in seen:
            seen.add(id(t))
            escapes.append(((Mutation.ESCAPE, t), t._value))
    return escapes



def constant_result(fn):
    """`fn` marked as returning the same value on every call: eagerly a plain call; while
    tracing, run once outside the trace (`run_outside_trace`), its result a constant of the
    program. What it reads is neither guarded nor checked for changes."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if current_builder() is None:
            return fn(*args, **kwargs)
        return run_outside_trace(fn, args, kwargs)
    setattr(wrapper, reads.CONSTANT_RESULT, True)
    return wrapper


def run_outside_trace(fn, args, kwargs):
    """fn(*args, **kwargs) run once while tracing as if no trace were active (concrete
    values, no graph, no gradient, clock reads allowed), its tensors returned as private
    copies: a value the trace keeps as a constant (`assume_constant_result`)."""
    leaves, _ = flatten((tuple(args), dict(kwargs)))
    if any(isinstance(x, Tensor) and isinstance(x._value, Var) for x in leaves):
        raise dispatch.GraphBreak(dispatch.describe_break(
            f"{getattr(fn, '__qualname__', fn)!s} is marked assume_constant_result but got a "
            f"traced tensor (a value that changes from call to call); pass it concrete values "
            f"only"))
    prev = _mode.grad_enabled
    _mode.grad_enabled = False
    try:
        with no_builder(), side_effects.unwatched():
            out = fn(*args, **kwargs)
    finally:
        _mode.grad_enabled = prev
    leaves, tree = flatten(out)
    if not any(isinstance(x, Tensor) for x in leaves):
        return out
    return unflatten(tree, [Tensor._make(x._value.copy(), False) if isinstance(x, Tensor) else x
                            for x in leaves])
