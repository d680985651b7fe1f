"""The one call path of a compiled program: straight-line Python generated from its trace,
so that a training step costs a few microseconds of Python whatever the program does.

- `make_plan(prog)`: the program's CallPlan. Its `call(leaves, trusted, values)` is emitted
  from the trace's typed facts (Role, Mutation, OutputLayout, copied outputs, the symbol
  binding), one block of lines per feature the program has (`CallBlock`) and none for the
  others: seeds drawn, in-place writes written back, .grad writes and clears, escaped
  tensors made concrete, constants among the outputs, copied outputs, returned written
  arguments, retain_grad on arguments, the node of the outputs. Profiling and anomaly
  mode are lines of the same call (`Program.run_checked` runs the graph there).
- `specialise(key, prog)`: `call(args)`, the guard checks for one key and the call; for a
  single-output loss of leaf arguments or parameters the call inline (static or symbolic
  sizes).
- `fast_backward.make_fast_backward(prog, plan)` (its own module): the `loss.backward()` of
  such an output: the backward
  driver on the saved values, then the leaves' .grad written directly; it hands over to the
  general engine (returns False) where the engine's `fast_path_ok` does not hold (checked by
  Tensor.backward) or a leaf, the saved values or an input need it.
"""
import builtins
import dataclasses
import enum
import math
import weakref

import numpy as np

from aotgrad.compiler import fused_call
from aotgrad.compiler.fast_backward import make_fast_backward, make_fused_backward, \
    symbol_tuple
from aotgrad.compiler.guards import MISS, aliases_lifted, lifted_ok
from aotgrad.ir.core import Aval
from aotgrad.ir.symbolic import evaluate
from aotgrad.runtime import profiling
from aotgrad.runtime.engine import next_sequence_nr
from aotgrad.runtime.compiled_backward import CompiledBackward, _CallBackward, \
    _FusedBackward, _WrittenBackward, write_back, write_grad
from aotgrad.runtime.factories import default_generator
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor
from aotgrad.tracer.pytree import unflatten
from aotgrad.tracer.trace_result import Mutation, Role


# When a call runs its graphs through Program.run_checked (profiler events, anomaly mode's
# NaN check) and gives its outputs a node made by Node.__init__ (anomaly mode records the
# forward stack there). Written once: the generated calls paste it.
CHECKS_NEEDED = "profiling._profilers or _mode.anomaly"

_WRITES = (Mutation.ARG, Mutation.LIFTED)          # a tensor's value written back
_GRAD_WRITES = (Mutation.GRAD, Mutation.ARG_GRAD)  # a tensor's .grad written


class CallBlock(enum.Enum):
    """A feature of a program whose call needs lines of its own (CallPlan.blocks)."""
    SEEDS = "seeds drawn"
    LIFTED = "lifted tensors read"
    SYMBOLS = "symbol values read once"
    LEAF_WRITE_CHECK = "in-place writes to leaves refused"
    SNAPSHOT = "written inputs snapshot for a create_graph backward"
    COPIED_OUTPUTS = "outputs copied"
    UNSHARED_SAVED = "saved values unshared from written tensors"
    WRITE_BACK = "in-place writes written back"
    GRAD_WRITES = ".grad written"
    GRAD_CLEARS = ".grad cleared"
    ESCAPES = "escaped tensors made concrete"
    CONSTANT_OUTPUTS = "non-tensor outputs"
    RETURNED_ARGS = "written arguments returned"
    RETAINED_ARGS = "retain_grad on arguments"
    NODE = "node of the differentiable outputs"
    WRITTEN_NODE = "node giving written tensors their gradients"
    OBSERVED = "observed runners"


def _node_lines(saved, leaves, replay, versions, indent="    "):
    """The one way a _CallBackward is made (pasted into the generated calls): `node`, from
    the expressions of its saved arrays, leaves, replayed inputs and their versions; the
    names new_node, Node, seq, in_avals, out_avals, prog and plan are bound."""
    return [indent + line for line in (
        "node = new_node(Node)",
        "node._seq = seq()",
        "node._in_avals, node._out_avals = in_avals, out_avals",
        "node.program = prog",
        f"node._saved_arrays = {saved}",
        f"node._leaves = {leaves}",
        f"node._replay = {replay}",
        f"node._versions = {versions}",
        "node._fast_backward = plan.fast_backward")]


def _fused_node_lines(values, leaves, replay, versions, indent="        "):
    """The one way a _FusedBackward is made (the inline call's, where the fused program
    ran): `node`, holding the program's outputs `outs` (the gradients), the symbol `values`,
    the leaves, the replayed inputs and their versions (see _node_lines); the names
    new_node, Fused, seq, in_avals, out_avals, prog and plan are bound."""
    return [indent + line for line in (
        "node = new_node(Fused)",
        "node._seq = seq()",
        "node._in_avals, node._out_avals = in_avals, out_avals",
        "node.program = prog",
        "node._grads, node._needs_forward = outs, True",
        f"node._values = {values}",
        f"node._leaves = {leaves}",
        f"node._replay = {replay}",
        f"node._versions = {versions}",
        "node._fast_backward = plan.fused_backward")]


@dataclasses.dataclass(eq=False)
class InlineCall:
    """What `specialise` needs to emit a call in full (a single-output loss whose inputs
    are arguments and lifted tensors, whose call needs no other block): the forward driver
    that skips the input checks on the leading arguments, the trace's roles and
    differentiated roles, how many forward outputs precede the saved values, the forward's
    symbols (indices into the values)."""
    run: object
    roles: list
    diff_roles: list
    n_fw: int
    symbols: tuple = ()


@dataclasses.dataclass(eq=False)
class CallPlan:
    """How calls of one program run, derived once from its trace (`make_plan`): `call`,
    the generated call (`source`, made of `blocks`); `inline` for specialise; `avals`
    (differentiable inputs, differentiable outputs) of its nodes (a symbolic program's:
    `avals_at(values)`, made once per set of sizes); `fast_backward`, their
    `loss.backward()` (made, and the backward program compiled, on first use);
    `accumulators`, the lifted leaves' AccumulateGrad nodes, kept while the program lives
    (hooks registered on them stay).
    The fused variant (compiler/fused_call.py), where `fused_possible`: `streak`, how many
    calls in a row had their output backpropagated at once (implicit gradient, fast path);
    `pending`, the latest call's output has not been yet; `turn`, the latest call's number
    (its node's `_turn`); `fused_run`, the fused program's runner once its kernels are
    compiled and chosen (`fused_call.trial`, `fused_choice`); `fused_backward`, the
    `loss.backward()` of its outputs."""
    program: object
    call: object = None
    source: str = ""
    blocks: tuple = ()
    inline: InlineCall = None
    avals: tuple = None
    fast_backward: object = None
    accumulators: list = ()
    fused_possible: bool = False
    streak: int = 0
    pending: bool = False
    turn: int = 0
    fused_run: object = None
    fused_backward: object = None
    fused_choice: fused_call.FusedChoice = fused_call.FusedChoice.UNDECIDED
    trial_seconds: tuple = None  # (split, fused): the timing trial's fastest runs
    estimated_gain: float = None  # the fused program's, before it is compiled (fused_call)
    fused_failure: str = None     # why the fused program did not compile (then SPLIT)
    n_lead: int = 0  # the leading inputs that are the leading arguments (trusted runners)

    def __post_init__(self):
        self.fast_backward = self._first_fast_backward
        self.fused_backward = self._first_fused_backward
        self._fused_made = None
        self._implicit = {}  # (output_nr, values) -> the grads `out.backward()` feeds
        self._avals_at = {}  # a symbolic program's symbol values -> its nodes' avals
        self._diff_vars = None  # the graph Vars of the differentiable inputs and outputs

    def avals_at(self, values):
        """(in_avals, out_avals) of the nodes of a symbolic program's call with symbol
        `values` (a tuple in the binding's order), made once per set of values."""
        avals = self._avals_at.get(values)
        if avals is None:
            if len(self._avals_at) >= 64:
                self._avals_at.clear()
            d = self.program.binding.as_dict(values)
            ins, outs = self._diff_vars
            avals = self._avals_at[values] = (
                [Aval(tuple(evaluate(s, d) for s in v.shape), v.dtype) for v in ins],
                [Aval(tuple(evaluate(s, d) for s in v.shape), v.dtype) for v in outs])
        return avals

    def implicit_grads(self, nr, values=None):
        """The arrays `out.backward()` feeds the backward program for output nr of the
        differentiable outputs (ones there, zeros for the others), or False when that output
        is not a floating scalar (the general path raises the error). Made once (per set of
        symbol `values` for a symbolic program), never handed to the user: the backward
        only reads them, and an output that passes one through is not owned, so it is copied
        before it becomes a .grad."""
        key = (nr, values)
        grads = self._implicit.get(key)
        if grads is None:
            if len(self._implicit) >= 64:
                self._implicit.clear()
            avals = self.avals[1] if values is None else self.avals_at(values)[1]
            a = avals[nr]
            if math.prod(a.shape) != 1 or not a.dtype.is_floating_point:
                grads = False
            else:
                grads = [np.zeros(b.shape, b.dtype.np) for b in avals]
                grads[nr] = np.ones(a.shape, a.dtype.np)
            self._implicit[key] = grads
        return grads

    def _first_fast_backward(self, t, retain_graph):
        if self.fast_backward == self._first_fast_backward:
            self.fast_backward = make_fast_backward(self.program, self)
        return self.fast_backward(t, retain_graph)

    def _first_fused_backward(self, t, retain_graph):
        run = self._fused_made
        if run is None:
            run = self._fused_made = make_fused_backward(self.program, self)
        if self.fused_backward == self._first_fused_backward:
            self.fused_backward = run
        return run(t, retain_graph)

    def __str__(self):
        kind = "straight-line call"
        blocks = [b.value for b in self.blocks if b is not CallBlock.SYMBOLS]
        if blocks:
            kind += " with " + ", ".join(blocks)
        if self.program.binding is not None:
            kind += " (symbolic sizes " + ", ".join(
                name for _, _, name in self.program.binding.define) + " read once per call)"
        if self.inline is not None:
            kind += "; inline per guard key"
        if self.fused_possible:
            kind += (f"; the fused forward+backward program after {fused_call.FUSED_AFTER} "
                     f"calls backpropagated at once ({fused_call.report(self)})")
        return f"call plan of {self.program.name}: {kind}\n{self.source}"


def _flat_to_graph_output(tr):
    """Per index of diff_outs' numbering (flattened outputs, then mutations): the index of
    the graph output it is (constants among the outputs have none)."""
    out, k = [], 0
    for is_t in tr.out_is_tensor:
        out.append(k if is_t else None)
        k += is_t
    return out + [tr.layout.n_tensor_outputs + j for j in range(len(tr.mutations))]


class _Source:
    """Lines of a generated function and the globals they name."""

    def __init__(self, ns):
        self.lines, self.ns = [], ns
        self._names = {}  # id(obj) -> its global's name (one name per object)

    def bind(self, obj, prefix):
        name = self._names.get(id(obj))
        if name is None:
            name = self._names[id(obj)] = f"{prefix}{len(self.ns)}"
            self.ns[name] = obj
        return name

    def bind_lazy(self, make, prefix):
        """A global that is `make()`, made on the first call through it (a graph compiled
        only when a call needs it)."""
        name = f"{prefix}{len(self.ns)}"

        def first(*args):
            run = self.ns[name] = make()
            return run(*args)
        self.ns[name] = first
        return name

    def add(self, *lines, indent=1):
        self.lines += ["    " * indent + line for line in lines]


def make_plan(prog):
    """prog's CallPlan: its call emitted from the trace (see the module's docstring). A
    symbolic program's call reads its symbol values (SymbolBinding) once, passes each
    graph its own as one trailing tuple and keeps them last among the saved values for the
    backward; its nodes' avals are made once per set of values."""
    tr = prog.trace
    plan = CallPlan(prog)
    g = tr.graph
    n_fw, n_flat, single = prog.n_fw_outputs, len(tr.out_is_tensor), tr.out_tree is None
    n_tensor = tr.layout.n_tensor_outputs
    has_backward, diff_outs = prog.has_backward, tr.diff_outs
    binding = prog.binding
    blocks = []

    def block(b):
        if b not in blocks:
            blocks.append(b)

    if prog.observed:
        block(CallBlock.OBSERVED)
    pos = {(kind, x if kind is Role.ARG else id(x)): i for i, (kind, x) in enumerate(tr.roles)}
    diff_pos = [pos[(kind, x if kind is Role.ARG else id(x))] for kind, x in tr.diff_roles]
    to_graph = _flat_to_graph_output(tr)
    diff_out_vars = [g.outputs[to_graph[k]] for k in diff_outs]
    plan._diff_vars = ([g.inputs[p] for p in diff_pos], diff_out_vars)
    if diff_outs and binding is None:  # shapes and dtypes are fixed per program
        plan.avals = ([Aval(v.shape, v.dtype) for v in plan._diff_vars[0]],
                      [Aval(v.shape, v.dtype) for v in diff_out_vars])
    # the lifted leaves' AccumulateGrad nodes, kept while the program lives (hooks on them)
    plan.accumulators = [t._grad_accumulator() for kind, t in tr.diff_roles
                         if kind is Role.LIFTED and t.grad_fn is None]

    s = _Source({"prog": prog, "plan": plan, "profiling": profiling, "_mode": _mode,
                 "make": Tensor._make, "np": np})
    s.add("def call(leaves, trusted=False, values=None):", indent=0)
    s.add("checked = " + CHECKS_NEEDED)
    # ---- the inputs, as the graphs take them, and as the backward replays them
    replay, args = [], []
    for i, (kind, x) in enumerate(tr.roles):
        if kind is Role.ARG:
            s.add(f"r{i} = leaves[{x}]")
        elif kind is Role.LIFTED:
            block(CallBlock.LIFTED)
            s.add(f"r{i} = {s.bind(x, 'lifted')}")
        else:
            block(CallBlock.SEEDS)
            s.ns["generator"] = default_generator
            s.add(f"r{i} = generator.next_seed()._value  # a fresh seed")
        replay.append(f"r{i}")
        args.append(f"r{i}" if kind is Role.SEED else f"r{i}._value")
    if args:
        s.add(f"{', '.join(f'v{i}' for i in range(len(args)))}, = {', '.join(args)},")
    if binding is not None:
        block(CallBlock.SYMBOLS)
        s.ns["read"] = binding.values
        s.add("if values is None:  # (the caller checked the shape guards for these sizes)",
              "    values = read(leaves)")
    names = binding.names if binding is not None else ()

    def sym_arg(which):
        return [symbol_tuple(names, prog.symbols(which))] if prog.symbols(which) else []

    def target(kind, x):  # the tensor a mutation writes (or whose .grad it writes)
        return f"leaves[{x}]" if kind in (Mutation.ARG, Mutation.ARG_GRAD) else s.bind(x, "t")

    if has_backward:
        s.add("need_grad = _mode.grad_enabled")
    if any(kind is Mutation.ARG for kind, _ in tr.mutations):
        block(CallBlock.LEAF_WRITE_CHECK)
        s.add("if _mode.grad_enabled:", "    prog.check_leaf_writes(leaves)")
    writes = [(kind, x) for kind, x in tr.mutations if kind in _WRITES]

    # ---- the run, per graph: forward (saves for the backward) or inference
    n_lead = 0  # the leading inputs that are the leading arguments (trusted by specialise)
    while n_lead < len(tr.roles) and tr.roles[n_lead] == (Role.ARG, n_lead):
        n_lead += 1
    copied = set()

    primary = "forward" if has_backward else "inference"  # compiled now; the other on use

    def run_lines(which, indent):
        def trusted():
            return prog.compiled_graph(which).plan.runner(trusted=n_lead)
        if which == primary:
            run = s.bind(prog.runner(which), f"run_{which}_")
        else:
            run = s.bind_lazy(lambda: prog.runner(which), f"run_{which}_")
        trusted_run = None
        if n_lead and prog.backend != "interpret" and not prog.observed:
            trusted_run = s.bind(trusted(), f"run_{which}_trusted") if which == primary \
                else s.bind_lazy(trusted, f"run_{which}_trusted")
        arrays = [f"v{i}" for i in range(len(args))]
        vals = ", ".join(arrays + sym_arg(which))
        s.add("if checked:",
              f"    outs = prog.run_checked({which!r}, [{', '.join(arrays)}], "
              f"{'values' if binding is not None else 'None'})",
              "else:", indent=indent)
        call_of = f"({trusted_run} if trusted else {run})" if trusted_run else run
        s.add(f"    outs = {call_of}({vals})", indent=indent)
        for k in prog.copied_outputs(which):
            copied.add(k)
            s.add(f"outs[{k}] = np.array(outs[{k}], copy=True)  # it could share an input's "
                  f"memory", indent=indent)

    if has_backward:
        s.add("if need_grad:")
        if writes:
            block(CallBlock.SNAPSHOT)
            s.add(f"    replay = prog.snapshot_written([{', '.join(replay)}], leaves)")
        run_lines("forward", 2)
        s.add(f"    saved = outs[{n_fw}:]")
        if writes:
            block(CallBlock.UNSHARED_SAVED)
            s.ns["unshare"] = _unshare
            written = ", ".join(target(k, x) + "._value" for k, x in writes)
            s.add(f"    saved = unshare(saved, [{written}])")
        if binding is not None:
            s.add("    saved = [*saved, values]  # the backward gets the forward's sizes")
        s.add("else:")
        run_lines("inference", 2)
    else:
        run_lines("inference", 1)
    if copied:
        block(CallBlock.COPIED_OUTPUTS)
    if not writes:
        replay_expr = f"[{', '.join(replay)}]"
    else:
        replay_expr = "replay"

    # ---- what the program wrote, in the order it did
    if args and writes:
        # the arrays are the tensors' again: a written tensor whose old array nothing else
        # holds then takes its new one instead of a copy (write_back)
        s.add(f"del {', '.join(f'v{i}' for i in range(len(args)))}")
    for j, (kind, x) in enumerate(tr.mutations):
        value = f"outs[{n_tensor + j}]"
        if kind in _GRAD_WRITES:
            block(CallBlock.GRAD_WRITES)
            s.ns["write_grad"] = write_grad
            s.add(f"write_grad({target(kind, x)}, {value})")
        elif kind is Mutation.ESCAPE:  # a tensor the function stored away: made concrete
            block(CallBlock.ESCAPES)
            t = target(kind, x)
            s.add(f"{t}._value, {t}.grad_fn, {t}._requires_grad = {value}, None, False",
                  f"{t}._version_counter.v += 1")
        else:
            block(CallBlock.WRITE_BACK)
            s.ns["write_back"] = write_back
            s.add(f"write_back({target(kind, x)}, {value})")
    for kind, x in tr.grad_clears:
        block(CallBlock.GRAD_CLEARS)
        s.ns["write_grad"] = write_grad
        s.add(f"write_grad({target(kind, x)}, None)")

    # ---- the outputs
    outs, k_t = [], 0
    returned = dict(prog.returned_args)
    for k, (is_t, const) in enumerate(zip(tr.out_is_tensor, tr.out_leaves)):
        if k in returned:  # an argument written in place and returned: itself
            block(CallBlock.RETURNED_ARGS)
            s.add(f"out{k} = leaves[{returned[k]}]")
        elif is_t:
            s.add(f"out{k} = make(outs[{k_t}])")
        else:
            block(CallBlock.CONSTANT_OUTPUTS)
            s.add(f"out{k} = {s.bind(const, 'const')}")
        k_t += is_t
        outs.append(f"out{k}")
    written_args = {x for kind, x in tr.mutations if kind is Mutation.ARG}
    for i in tr.retained_args:  # retain_grad() on an argument inside: on the caller's tensor
        block(CallBlock.RETAINED_ARGS)
        if i in written_args:  # written in place: its new value's (the node's slot, below)
            s.add(f"leaves[{i}]._retains_grad = True")
        else:
            s.add(f"if leaves[{i}].requires_grad and leaves[{i}].grad_fn is not None:",
                  f"    leaves[{i}].retain_grad()")

    # ---- the node of the differentiable outputs (and of written tensors with history)
    if has_backward and diff_outs:
        s.add("if need_grad:")
        diff = []
        for j, (kind, x) in enumerate(tr.diff_roles):
            diff.append(f"d{j}")
            s.add(f"    d{j} = {f'leaves[{x}]' if kind is Role.ARG else s.bind(x, 'lifted')}")
        diff_list = f"[{', '.join(diff)}]"
        if binding is None:
            s.ns["in_avals"], s.ns["out_avals"] = plan.avals
        else:
            s.ns["avals_cache"], s.ns["avals_at"] = plan._avals_at, plan.avals_at
            s.add("    in_avals, out_avals = avals_cache.get(values) or avals_at(values)")
        if tr.written_grads:
            block(CallBlock.WRITTEN_NODE)
            s.ns["Written"] = _WrittenBackward
            s.add(f"    node = Written(prog, saved, {diff_list}, in_avals, out_avals, "
                  f"{replay_expr})")
        else:
            block(CallBlock.NODE)
            s.ns.update(Full=CompiledBackward, new_node=_CallBackward.__new__,
                        Node=_CallBackward, seq=next_sequence_nr)
            non_leaf = " or ".join(f"{d}.grad_fn is not None" for d in diff)
            s.add(f"    if checked or {non_leaf}:  # edges fixed now (a non-leaf input)",
                  f"        node = Full(prog, saved, {diff_list}, in_avals, out_avals, "
                  f"{replay_expr})",
                  "    else:  # edges to the leaves made when something asks for them")
            if writes:
                versions = [f"replay[{i}]._version_counter.v" if kind is not Role.SEED
                            else "None" for i, (kind, _) in enumerate(tr.roles)]
            else:
                versions = [f"r{i}._version_counter.v" if kind is not Role.SEED else "None"
                            for i, (kind, _) in enumerate(tr.roles)]
            s.lines += _node_lines("saved", diff_list, replay_expr,
                                   f"[{', '.join(versions)}]", indent="            ")
        targets = outs + [target(kind, x) for kind, x in tr.mutations]
        for nr, k in enumerate(diff_outs):
            # (an argument returned as is comes again later, as a tensor written in place:
            # its last slot is the one its gradient flows into)
            t = targets[k]
            s.add(f"    {t}._requires_grad, {t}.grad_fn, {t}._output_nr = True, node, {nr}")
        for nr, k in enumerate(diff_outs):
            if k >= n_flat:
                # a tensor written in place that retains its grad keeps retaining, as
                # eagerly: .grad is the gradient of the new value
                t = targets[k]
                s.ns["weakref_to"] = weakref.ref
                s.add(f"    if {t}._retains_grad and {t}._output_nr == {nr}:",
                      f"        node._set_retain_grad({nr}, weakref_to({t}))")
    if single:
        s.add(f"return {outs[0]}")
    else:
        s.ns.update(unflatten=unflatten, out_tree=tr.out_tree)
        s.add(f"return unflatten(out_tree, [{', '.join(outs)}])")
    plan.source = "\n".join(s.lines) + "\n"
    plan.blocks = tuple(blocks)
    exec(builtins.compile(plan.source, f"<call of {prog.name}>", "exec"), s.ns)
    plan.call = s.ns["call"]

    # what specialise needs to emit this call inline: nothing but the run and the node
    if has_backward and single and diff_outs == [0] and \
            set(blocks) <= {CallBlock.SYMBOLS, CallBlock.LIFTED, CallBlock.NODE}:
        run = prog.runner("forward")
        if n_lead and prog.backend != "interpret":
            run = prog.compiled_graph("forward").plan.runner(trusted=n_lead)
        plan.inline = InlineCall(run, list(tr.roles), list(tr.diff_roles), n_fw,
                                 tuple(names.index(n) for n in prog.symbols("forward")))
        # (the fused variant runs in the inline call only: the others are checked calls,
        # calls with non-leaf inputs or of modules, which keep the split programs)
        plan.n_lead = n_lead
        plan.fused_possible = fused_call.fused_possible(
            prog, blocks, {CallBlock.SYMBOLS, CallBlock.LIFTED, CallBlock.NODE})
    return plan


def _unshare(saved, written):
    """Saved arrays that share memory with a tensor about to be written back, copied (the
    backward must not read what the write-back changes)."""
    return [np.array(a, copy=True) if isinstance(a, np.ndarray) and
            any(np.may_share_memory(a, w) for w in written) else a for a in saved]


def _shape_check(name, shape):
    """The test that array `name`'s shape differs from a guard key's (None: a symbolic dim,
    any size; the binding checks those)."""
    if None not in shape:
        return f"{name}.shape != {tuple(shape)!r}"
    return " or ".join([f"{name}.ndim != {len(shape)}"] + [
        f"{name}.shape[{d}] != {n}" for d, n in enumerate(shape) if n is not None])


def specialise(key, prog):
    """`call(args) -> output, or MISS`: the program's call specialised to one guard key, as
    straight-line code over the arguments. It runs the program only where
    `_tensor_args_key(args, None) == key` (and the lifted guards hold, and a symbolic
    program's shape guards), and every argument's array is C-contiguous, aligned and
    writeable, so the forward driver skips its input checks. For a single-output loss of
    leaf parameters (the common training step) it also makes the output and its
    _CallBackward inline, with static or symbolic sizes. MISS sends the call to the full
    lookup, which decides (and warns, recompiles) as before."""
    grad_enabled, n, specs = key[0], key[1], key[2:]
    if specs and specs[-1][0] == "A":  # arguments that alias: the full lookup each call
        return None
    if type(grad_enabled) is not bool or any(type(rg) is not bool for *_, rg, _ in specs):
        return None
    g = {"Tensor": Tensor, "ndarray": np.ndarray, "_mode": _mode, "prog": prog,
         "lifted_ok": lifted_ok, "MISS": MISS, "profiling": profiling}
    lines = ["def call(args):",
             f"    if len(args) != {n} or _mode.grad_enabled is not {grad_enabled}:",
             "        return MISS"]
    if n:
        lines.append(f"    {''.join(f'a{i}, ' for i in range(n))}= args")
    for i, (_, shape, dtype, rg, inference) in enumerate(specs):
        g[f"d{i}"] = dtype
        lines += [f"    if not isinstance(a{i}, Tensor) or a{i}._requires_grad is not {rg} or "
                  f"a{i}._inference is not {inference}:",
                  "        return MISS",
                  f"    v{i} = a{i}._value",
                  f"    if type(v{i}) is not ndarray or {_shape_check(f'v{i}', shape)} or "
                  f"v{i}.dtype is not d{i} or not v{i}.flags.carray:",
                  "        return MISS"]
    if prog.trace.grad_guards or prog.trace.arg_grad_guards or prog.trace.lifted_guards or \
            prog.trace.identity_guards:
        lines += ["    if not lifted_ok(prog, args):", "        return MISS"]
    if prog.trace.mutations and n:
        # the program writes in place: arguments that share memory with one another or with
        # a lifted tensor need their own trace (or eager), which the full lookup decides
        g["aliases_lifted"] = aliases_lifted
        lines += [f"    if len({{{', '.join(f'id(a{i}._version_counter)' for i in range(n))}, }})"
                  f" != {n} or aliases_lifted(prog, args) is not None:",
                  "        return MISS"]
    plan = prog.call_plan()
    inline = plan.inline if grad_enabled else None
    values = ""
    if prog.binding is not None:
        # symbolic sizes (None in the key): read once here off the arrays, with the guards
        lines += ["    " + line for line in prog.binding.read_lines(
            lambda i: f"v{i}" if i < n else f"args[{i}]._value", "return MISS")]
        values = ", values"
    if inline is None:
        if CallBlock.WRITE_BACK in plan.blocks and n:   # (see the call's write-back block)
            lines.append(f"    del {', '.join(f'v{i}' for i in range(n))}")
        lines.append(f"    return prog(args, True{values})")
    else:
        lifted = {}  # id -> the global naming a lifted tensor

        def tensor(kind, x):
            if kind is Role.ARG:
                return f"a{x}"
            name = lifted.get(id(x))
            if name is None:
                name = lifted[id(x)] = f"lifted{len(lifted)}"
                g[name] = x
            return name
        inputs = [tensor(kind, x) for kind, x in inline.roles]
        leaves = [tensor(kind, x) for kind, x in inline.diff_roles]
        g.update(run=inline.run, make=Tensor._make, new_node=_CallBackward.__new__,
                 Node=_CallBackward, seq=next_sequence_nr, plan=plan)
        run_args = [f"v{x}" if kind is Role.ARG else f"{t}._value"
                    for (kind, x), t in zip(inline.roles, inputs)]
        names = prog.binding.names if prog.binding is not None else ()
        if inline.symbols:  # (the symbols are locals here)
            syms = [names[i] for i in inline.symbols]
            run_args.append("values" if tuple(syms) == names else
                            "(" + "".join(f"{name}, " for name in syms) + ")")
        non_leaf = " or ".join(f"{a}.grad_fn is not None" for a in leaves)
        if plan.fused_possible:
            # under a profiler, a program that runs its fused variant still does, as one
            # event of the profiler with its kernels (Program.run_checked)
            lines += [
                f"    profiled = {CHECKS_NEEDED}",
                f"    if profiled and (_mode.anomaly or plan.fused_run is None or "
                f"plan.streak < FUSED_AFTER) or {non_leaf}:",
                f"        return prog(args, True{values})  # the checked run, or edges fixed now"]
        else:
            lines += [
                f"    if {CHECKS_NEEDED} or {non_leaf}:",
                f"        return prog(args, True{values})  # the checked run, or edges fixed now"]
        if prog.binding is None:
            g["in_avals"], g["out_avals"] = plan.avals
            saved = f"outs[{inline.n_fw}:]"
        else:  # per set of sizes, made once; the backward gets the forward's sizes
            g["avals_cache"], g["avals_at"] = plan._avals_at, plan.avals_at
            lines.append("    in_avals, out_avals = avals_cache.get(values) or avals_at(values)")
            saved = f"[*outs[{inline.n_fw}:], values]"
        identity = inputs == [f"a{i}" for i in range(n)]
        replay = "args" if identity else f"[{', '.join(inputs)}]"
        versions = f"[{', '.join(f'{t}._version_counter.v' for t in inputs)}]"
        split = [f"    outs = run({', '.join(run_args)})",
                 "    out = make(outs[0])"] + _node_lines(
            saved, f"[{', '.join(leaves)}]", replay, versions)
        if plan.fused_possible:  # the fused program where the recent calls ask for it
            g.update(Fused=_FusedBackward, FUSED_AFTER=fused_call.FUSED_AFTER)
            fused_args = [f"v{x}" if kind is Role.ARG else f"{t}._value"
                          for (kind, x), t in zip(inline.roles, inputs)]
            if prog.binding is not None:
                fused_args.append("values")
            g["SPLIT"] = fused_call.FusedChoice.SPLIT
            g["fused_trial"] = fused_call.trial
            arrays = [a for a in fused_args if a != "values"]
            lines += fused_call.turn_lines()
            symbol_values = "values" if prog.binding is not None else "None"
            lines += [
                "    outs = None",
                "    if plan.streak >= FUSED_AFTER and plan.fused_choice is not SPLIT:",
                "        if profiled:",
                f"            outs = prog.run_checked('fused', [{', '.join(arrays)}], "
                f"{symbol_values})",
                "        elif plan.fused_run is not None:",
                f"            outs = plan.fused_run({', '.join(fused_args)})",
                "        else:  # (compiled now; a trial decides which variant is faster)",
                f"            outs = fused_trial(plan, [{', '.join(arrays)}], {symbol_values})",
                "    if outs is not None:",
                "        out = make(outs[0])"]
            lines += _fused_node_lines(symbol_values, f"[{', '.join(leaves)}]", replay,
                                       versions)
            lines.append("    else:")
            lines += ["    " + line for line in split]
            lines.append("    node._turn = turn")
        else:
            lines += split
        lines += [
            "    out._requires_grad = True",
            "    out.grad_fn = node",
            "    return out"]
    source = "\n".join(lines) + "\n"
    exec(builtins.compile(source, f"<call of {prog.name}>", "exec"), g)
    call = g["call"]
    call.program, call.source = prog, source
    return call
