"""Program: one compiled specialisation of a function (its joint, forward, backward and
inference graphs, the partition, their compiled runners). Its calls take the one call path
generated from its trace (compiler/call.py: the CallPlan), whatever the program does."""
import dataclasses
import os
import threading

import numpy as np

from aotgrad.compiler import call, fused_call, guards
from aotgrad.compiler.dynamic import SymbolBinding
from aotgrad.ir.core import evaluate, evaluate_params, graph_symbols as symbols_of
from aotgrad.ir import passes
from aotgrad.ir.partition import partition
from aotgrad.ir.printer import HEADER, format_graph
from aotgrad.ir.tags import Tag
from aotgrad.runtime import profiling
from aotgrad.runtime.compiled_backward import check_nan
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor
from aotgrad.tracer.trace_result import Mutation, Role


def _runner(graph, backend, name, trusted=0, symbols=()):
    """`run(*arrays) -> list of arrays` for one graph, and its compiled program (or None).
    A graph with `symbols` takes their values as one more argument, a tuple in that order."""
    if backend == "interpret":
        # (numpy's reference impls give 0-d results as numpy scalars: a tensor holds arrays)
        if symbols:
            memo = {}  # the symbol values of recent calls -> each node's evaluated params

            def run(*args):
                vals = args[-1]
                params = memo.get(vals)
                if params is None:
                    if len(memo) >= 16:
                        memo.clear()
                    d = dict(zip(symbols, vals))
                    params = memo[vals] = [evaluate_params(n.params, d) for n in graph.nodes]
                return [o if type(o) is np.ndarray else np.asarray(o)
                        for o in evaluate(graph, list(args[:-1]), node_params=params)]
            return run, None
        return (lambda *args: [o if type(o) is np.ndarray else np.asarray(o)
                               for o in evaluate(graph, list(args))]), None
    from aotgrad.codegen import compile_graph
    prog = compile_graph(graph, name=name)
    return prog.plan.prepared().runner(trusted), prog  # the generated driver


_PREPARE_LOCK = threading.RLock()  # a program's lazy compile steps (rare: only on first use)


def _evaluate_reporting(graph, args, ready, unread, values=None):
    """ir.core.evaluate of `graph` (fixed sizes), calling `ready(k, array)` with output k
    right after the node that makes it (an input returned as it is: before the first), and
    `unread(i)` once no later node reads argument i, through itself or a value that shares
    its memory (numpy's results are checked: a reference impl may return a view).
    `values`: a symbolic graph's symbol values (its nodes' params are evaluated at them)."""
    nodes = graph.nodes
    at, last_use = {}, {}
    for k, v in enumerate(graph.outputs):
        at.setdefault(v, []).append(k)
        last_use[v] = len(nodes)      # (an output is read after the program)
    for t, n in enumerate(nodes):
        for v in n.inputs:
            last_use[v] = max(last_use.get(v, -1), t)
    arrays = [(i, a) for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    sharing = {i: {v} for i, v in enumerate(graph.inputs)}   # argument -> values sharing it
    still_read = set(range(len(args)))

    def report(t, made, env):
        for v in made:
            o = env[v]
            if isinstance(o, np.ndarray):
                for i, a in arrays:
                    if i in still_read and np.may_share_memory(o, a):
                        sharing[i].add(v)
        for i in sorted(still_read):
            if all(last_use.get(v, -1) <= t for v in sharing[i]):
                still_read.discard(i)
                unread(i)
        for v in made:
            for k in at.get(v, ()):
                o = env[v]
                ready(k, o if type(o) is np.ndarray else np.asarray(o))
    report(-1, graph.inputs, dict(zip(graph.inputs, args)))
    outs = evaluate(graph, args, values,
                    after_node=lambda t, n, env: report(t, n.outputs, env))
    return [o if type(o) is np.ndarray else np.asarray(o) for o in outs]


@dataclasses.dataclass(frozen=True, eq=False)
class PartitionedGraphs:
    """The stage after the trace (`partition_trace`): the IR passes' StageHistory (the
    trace and each pass's result), the optimised joint graph, the forward and backward
    graphs the partitioner cut it into (None without a backward), the inference graph (the
    joint's forward outputs, dead code removed)."""
    stages: object
    joint: object
    forward: object
    backward: object
    inference: object
    partition: object
    has_backward: bool

    def __str__(self):
        if not self.has_backward:
            return format_graph(self.inference)
        return "\n".join([format_graph(self.forward), format_graph(self.backward),
                          "# partition\n# " + self.partition.report().replace("\n", "\n# ")])


def partition_trace(tr, memory_budget):
    """TraceResult -> PartitionedGraphs: the IR passes, the min-cut partition, DCE."""
    stages = passes.run_pipeline(tr.graph)
    joint = stages.final
    n_fw, n_primals = tr.layout.n_forward, tr.n_primals
    has_backward = bool(tr.diff_roles) and any(tr.grad_present)
    part = partition(joint, n_primals, n_fw, memory_budget) if has_backward else None
    inference = passes.dce(_restrict(joint, n_primals, n_fw))
    inference.name = "inference"
    return PartitionedGraphs(stages, joint, part.forward if part else None,
                             part.backward if part else None, inference, part, has_backward)


class Program:
    """One compiled specialisation: the trace, its PartitionedGraphs, their runners, and
    its CallPlan (made on first call). `str(program)` prints all of it."""

    def __init__(self, tr, graphs, backend, name):
        self.trace, self.name, self.backend = tr, name, backend
        self.graphs = graphs
        self.returned_args = _returned_written_args(tr)
        self.joint, self.inference = graphs.joint, graphs.inference
        self.forward, self.backward = graphs.forward, graphs.backward
        self.partition, self.has_backward = graphs.partition, graphs.has_backward
        self.n_fw_outputs = tr.layout.n_forward
        self._runners = {}
        self._copies = {}
        self._reached, self._grad_deps = {}, None
        self._kernels = {}
        self._owned = {}
        self._plan = None        # the CallPlan (call.make_plan), made on first call
        self._state_check = None  # guards.make_state_check(trace), made on first use
        self.observed = False    # observe(): the runners report to a callback
        # per input, the index of the argument it is, when every input is one (the common case)
        self.arg_roles = [x for _, x in tr.roles] if all(k is Role.ARG for k, _ in tr.roles) \
            else None
        # a program with symbolic sizes: how a call's symbol values are read and checked;
        # per graph, the symbols its compiled callable takes (symbols_of order)
        self.binding = SymbolBinding(tr.shape_env, list(tr.symbol_dims)) \
            if tr.shape_env is not None else None
        self._symbols = {}

    @property
    def fused(self):
        """The fused forward+backward graph (compiler/fused_call.py), made on first use."""
        g = self.__dict__.get("_fused")
        if g is None:
            with _PREPARE_LOCK:
                g = self.__dict__.get("_fused")
                if g is None:
                    g = self._fused = fused_call.fused_graph(self)
        return g

    def count_fused_backward(self, node):
        """A backward at the implicit gradient of the output of `node` (a _FusedBackward),
        through the general path: it keeps the program's fused streak as the fast
        backward does (fused_call.counted_lines)."""
        plan = self.call_plan()
        if plan.pending and node._turn == plan.turn:
            plan.pending = False
            plan.streak += 1

    def saved_after_fused(self, replay, values):
        """The split forward's saved values for a call that ran the fused program instead,
        from the call's inputs `replay` (checked unmodified) and symbol `values`: its
        forward runs again. The program goes back to the split path for its next calls."""
        plan = self.call_plan()
        plan.streak, plan.pending = 0, False
        args = [t._value for t in replay]
        if values is not None:
            args += self.symbol_args("forward", values)
        saved = list(self.runner("forward")(*args)[self.n_fw_outputs:])
        return saved + [values] if self.binding is not None else saved

    def symbols(self, which):
        """The symbols graph `which` takes values of (its callable's trailing tuple)."""
        syms = self._symbols.get(which)
        if syms is None:
            syms = self._symbols[which] = symbols_of(getattr(self, which)) \
                if self.binding is not None else ()
        return syms

    def symbol_args(self, which, values):
        """The trailing arguments of graph `which`'s callable for symbol `values` (a tuple
        in the binding's order, as SymbolBinding.values reads them)."""
        syms = self.symbols(which)
        if not syms:
            return ()
        names = self.binding.names
        return (tuple(values[names.index(s)] for s in syms),)
    # ---- running ------------------------------------------------------------------------
    def runner(self, which):
        """`run(*arrays) -> arrays` of graph `which` (compiled on first use)."""
        r = self._runners.get(which)
        if r is None:
            self._prepare(which)
            r = self._runners[which]
        return r

    def state_check(self, leaves):
        """Whether the state guards of the trace hold now for the call's flattened inputs
        (guards.lifted_ok)."""
        check = self._state_check
        if check is None:
            check = self._state_check = guards.make_state_check(self.trace)
        return check(leaves)

    def call_plan(self):
        """How calls of this program run (call.CallPlan), derived once."""
        plan = self._plan
        if plan is None:
            with _PREPARE_LOCK:
                plan = self._plan
                if plan is None:
                    plan = self._plan = call.make_plan(self)
        return plan

    def _prepare(self, which):
        if which not in self._runners:
            with _PREPARE_LOCK:  # threads that reach a new program at once compile it once
                if which in self._runners:
                    return
                # a backward's saved inputs come from its forward program: no checks needed
                trusted = len(self.forward.outputs) - self.n_fw_outputs \
                    if which == "backward" else 0
                r, kern = _runner(getattr(self, which), self.backend, f"{self.name}_{which}",
                                  trusted, self.symbols(which))
                self._owned[which] = kern.plan.owned_outputs if kern is not None else None
                self._kernels[which] = kern
                self._runners[which] = r  # last: another thread reads it without the lock

    def build(self):
        """Compile the graphs a call will need (forward+backward, or inference)."""
        for which in (("forward", "backward") if self.has_backward else ("inference",)):
            self._prepare(which)
        return self

    def observe(self, callback):
        """Call `callback(which, inputs, outputs)` after each run of the compiled graphs
        ("forward", "backward", "inference"; arrays as the program got and made them).
        For testing (aotgrad.testing's kernel bisection): install before the first call. The
        program's call is then made again, through the observed runners only."""
        self.build()
        self.observed = True
        self._plan = None  # (made again: every graph run through its observed runner)
        for which, run in list(self._runners.items()):
            def observed(*args, _run=run, _which=which):
                outs = _run(*args)
                callback(_which, args, outs)
                return outs
            self._runners[which] = observed
        return self

    def compiled_graph(self, which):
        """The codegen CompiledGraph of graph `which` (None with the interpret backend)."""
        self._prepare(which)
        return self._kernels[which]

    def copied_outputs(self, which):
        """Tensor outputs of graph `which` copied after each run: they could share memory
        with an input (a graph input returned as is, or a view of one: `x.clone()` folded
        away, a constant made inside the function) where eagerly they are new tensors; with
        the interpret backend, also outputs numpy made read-only (broadcasts)."""
        c = self._copies.get(which)
        if c is None:
            g = getattr(self, which)
            n = len(self.trace.out_may_alias)
            alias = _aliases_of_inputs(g)
            c = self._copies[which] = [i for i, v in enumerate(g.outputs[:n])
                                       if (v in alias and not self.trace.out_may_alias[i])
                                       or (self.backend == "interpret" and
                                           v not in alias and _may_be_readonly(g, v))]
        return c

    def concrete_graph(self, which, values):
        """Graph `which` ("joint", "forward", ...) for a reference run with numpy's prims: a
        symbolic program's with its params evaluated at symbol `values`."""
        g = getattr(self, which)
        if values is None or self.binding is None:
            return g
        values = self.binding.as_dict(values)
        from aotgrad.ir.core import Eqn, Graph, evaluate_params
        return Graph(g.inputs, [Eqn(n.prim, n.inputs, n.outputs, evaluate_params(n.params, values),
                                    n.provenance) for n in g.nodes], g.outputs, g.name)

    def replay_graph(self, saved):
        """The joint graph a create_graph backward replays with tensor ops (a symbolic
        program's symbol values are kept last among the saved values)."""
        return self.concrete_graph("joint", saved[-1] if self.binding is not None else None)

    def check_backward_nan(self, args, outs, what):
        """Anomaly mode's NaN check of a backward run on `args` (saved values, gradients)."""
        values = None
        if self.binding is not None:
            n = len(self.forward.outputs) - self.n_fw_outputs
            values, args = args[n], list(args[:n]) + list(args[n + 1:])
        check_nan(self.concrete_graph("backward", values), args, outs, what)

    def _backward_args(self, args):
        """The backward callable's arguments from the saved values and the gradients: a
        symbolic program's symbol values (kept after the saved arrays) moved to the end."""
        if self.binding is None:
            return args
        n = len(self.forward.outputs) - self.n_fw_outputs
        values = args[n]
        return list(args[:n]) + list(args[n + 1:]) + list(self.symbol_args("backward", values))

    def run_backward(self, args):
        return self.runner("backward")(*self._backward_args(args))

    def run_checked(self, which, inputs, values):
        """Run graph `which` ("forward" or "inference") on `inputs` (the call's arrays) with
        what the call checks where CHECKS_NEEDED holds: each kernel an event of the active
        profilers, anomaly mode's NaN check (naming the node that made the first NaN)."""
        inputs = list(inputs) + list(self.symbol_args(which, values)) \
            if values is not None else list(inputs)
        if profiling._profilers:
            with profiling.record(f"{self.name}.{which}", kind="kernel"):
                outs = self.run_profiled(which, inputs)
        else:
            outs = self.runner(which)(*inputs)
        if _mode.anomaly and _mode.anomaly_check_nan:
            n = len(inputs) - (1 if values is not None and self.symbols(which) else 0)
            check_nan(self.concrete_graph(which, values), inputs[:n], outs,
                      f"{self.name}.{which}")
        return outs

    def reports_backward(self):
        """Whether run_backward_reporting can hand out each gradient as soon as it is
        computed: interpreted, or compiled into one driver (not per size), not observed."""
        if self.observed:
            return False
        kern = self.compiled_graph("backward")
        return kern is None or hasattr(kern.plan, "reporting_runner")

    def backward_inputs(self, args):
        """The backward graph's input arrays, in its order, from the saved values and the
        gradients (a symbolic program's symbol values left out)."""
        return self._backward_args(args)[:len(self.backward.inputs)]

    def run_backward_reporting(self, args, ready, unread):
        """run_backward, also calling `ready(k, array)` with each gradient k as soon as the
        program has computed it, and `unread(i)` once it reads backward input i no more
        (the backward's compiled driver with its reports, codegen's Plan.reporting_runner;
        interpreted, _evaluate_reporting)."""
        args = self._backward_args(args)
        kern = self.compiled_graph("backward")
        if kern is None:
            values = None
            if self.binding is not None:   # (the symbol values: the last argument)
                values = dict(zip(self.symbols("backward"), args[-1]))
                args = args[:-1]
            return _evaluate_reporting(self.backward, args, ready, unread, values)
        trusted = len(self.forward.outputs) - self.n_fw_outputs
        return kern.plan.reporting_runner(trusted)(*args, ready, unread)

    def run_profiled(self, which, inputs):
        """Run graph `which` through its instrumented driver, reporting each kernel, matrix
        product and reference step to the active profilers as an event of its own (name,
        shapes, fused nodes, bytes, flops). Profiling only: the ordinary driver pays no
        clock reads. An observed program or the interpret backend runs as usual."""
        run = self.runner(which)
        if which == "backward":
            inputs = self._backward_args(inputs)
        kern = self._kernels.get(which)
        if kern is None or self.observed:
            return run(*inputs)
        outs, events = kern.plan.profiled(*inputs)
        for ev, start, end in events:
            profiling.add_event(ev.name, "kernel", start, end, **ev.details())
        return outs

    def owned_outputs(self, which):
        """Per output of a compiled graph: a new array nothing else shares (None: unknown)."""
        return self._owned.get(which)

    def scatter_grads(self, present, given=None):
        """Grads of the backward graph -> one entry per differentiable input (None if unused).
        `given`: per differentiable output, whether it got a gradient; an input none of whose
        gradient's outputs got one gets None, as eagerly (not a zero .grad)."""
        it = iter(present)
        grads = [next(it) if p else None for p in self.trace.grad_present]
        if given is not None and not all(given):
            mask = self.grads_reached(given)
            grads = [g if m else None for g, m in zip(grads, mask)]
        if self.trace.written_grads:  # then the gradients of the written tensors' new values
            grads = _Grads(grads)
            grads.written = list(present[len(present) - len(self.trace.written_grads):])
        return grads

    def grads_reached(self, given):
        """Per differentiable input: does its gradient depend on an output in `given`?"""
        key = tuple(given)
        r = self._reached.get(key)
        if r is None:
            deps = self.grad_dependencies()
            bits = sum(1 << j for j, g in enumerate(given) if g)
            it, r = iter(deps), []
            for j, p in enumerate(self.trace.grad_present):
                d = next(it) if p else 0
                if p and not d:
                    # a constant gradient (through floor, sign, round: zero) reads no
                    # tangent; eagerly it flows wherever the input reaches an output that
                    # got a gradient, so it goes by the forward graph
                    d = self._outputs_reached()[j]
                r.append(bool(d & bits))
            self._reached[key] = r
        return r

    def _outputs_reached(self):
        """Per differentiable input: a bit mask of the differentiable outputs whose value
        depends on it (in the forward graph)."""
        tr = self.trace
        g = tr.graph
        pos = {_input_key(kind, x): i
               for i, (kind, x) in enumerate(tr.roles)}
        dep = {}
        for j, (kind, x) in enumerate(tr.diff_roles):
            v = g.inputs[pos[_input_key(kind, x)]]
            dep[v] = dep.get(v, 0) | 1 << j
        for n in g.nodes:
            m = 0
            for v in n.inputs:
                m |= dep.get(v, 0)
            if m:
                for v in n.outputs:
                    dep[v] = dep.get(v, 0) | m
        out = [dep.get(g.outputs[k], 0) for k in tr.diff_outs]
        return [sum(1 << nr for nr, m in enumerate(out) if m >> j & 1)
                for j in range(len(tr.diff_roles))]

    def written_reached(self, given):
        """Per tensor written in place whose gradient the backward returns (`written_grads`):
        does that gradient depend on an output in `given`? (Eagerly, one that none reaches
        gets no gradient: its hooks do not run, its retained .grad stays as it was.)"""
        deps = self.grad_dependencies()
        deps = deps[len(deps) - len(self.trace.written_grads):]
        bits = sum(1 << j for j, g in enumerate(given) if g)
        return [bool(d & bits) for d in deps]

    def grad_dependencies(self):
        """Per gradient the joint graph returns: a bit mask of the tangents it reads."""
        if self._grad_deps is None:
            g, n_tan = self.joint, len(self.trace.diff_outs)
            dep = {v: 1 << j for j, v in enumerate(g.inputs[len(g.inputs) - n_tan:])}
            for n in g.nodes:
                m = 0
                for v in n.inputs:
                    m |= dep.get(v, 0)
                if m:
                    for v in n.outputs:
                        dep[v] = m
            self._grad_deps = [dep.get(v, 0) for v in g.outputs[self.n_fw_outputs:]]
        return self._grad_deps

    @property
    def saved(self):
        return self.partition.saved if self.partition else []

    @property
    def source(self):
        """The generated kernel source (compiles the graphs if that has not happened yet)."""
        if self.backend != "interpret":
            self.build()
        parts = []
        for which in ("forward", "backward", "inference", "fused"):
            k = self._kernels.get(which)
            if k is not None and getattr(k, "source", None):
                parts.append(f"# ---- {which} ----\n{k.source}")
        return "\n".join(parts)

    def __call__(self, leaves, trusted=False, values=None):
        """Run on the call's flattened inputs; `trusted`: they are the arguments themselves,
        all tensors whose arrays passed the guard's checks (see call.specialise); `values`:
        a symbolic program's symbol values, where the caller read them already."""
        return (self._plan or self.call_plan()).call(leaves, trusted, values)

    def snapshot_written(self, replay, leaves):
        """The call's inputs as the backward replays them (create_graph): a tensor the
        program writes back is replaced by a copy of its value now, with its history now."""
        written = {id(leaves[x] if kind is Mutation.ARG else x) for kind, x in self.trace.mutations
                   if kind in (Mutation.ARG, Mutation.LIFTED)}
        out = []
        for t in replay:
            if isinstance(t, Tensor) and id(t) in written:
                s = Tensor._make(np.array(t._value, copy=True), t.requires_grad)
                s.grad_fn, s._output_nr = t.grad_fn, t._output_nr
                t = s
            out.append(t)
        return out

    def check_leaf_writes(self, leaves):
        """The trace saw a non-leaf (or a tensor that needs no grad) where this call passes a
        leaf that requires grad: writing it in place is the error it is eagerly."""
        for kind, x in self.trace.mutations:
            if kind is Mutation.ARG and leaves[x].requires_grad and leaves[x].grad_fn is None:
                raise RuntimeError(
                    f"a leaf Variable that requires grad is being used in an in-place operation "
                    f"(compiled function {self.name} writes argument {x} in place).")

    # ---- reading ------------------------------------------------------------------------
    def __str__(self):
        plan = self.call_plan()
        parts = [str(self.graphs)]
        if plan.fused_possible:  # (the graph only: its kernels compile on first use)
            parts.append(f"# fused forward+backward at the implicit gradient 1 (runs once "
                         f"{fused_call.FUSED_AFTER} calls in a row were backpropagated at "
                         f"once)\n" + format_graph(self.fused))
        parts.append("\n".join("# " + line for line in str(plan).rstrip("\n").splitlines()))
        if self.source:
            parts.append(self.source)
        return "\n".join(parts)

    def dump(self, directory):
        """Write forward.py, joint.py, backward.py, partition.txt, the traced graph and each
        pass's result (stage00_trace.py, stage01_simplify.py, ...), call.py (the generated
        call), and with the numba backend kernels.py, schedule.txt and each program's driver
        (forward_driver.py, ...)."""
        os.makedirs(directory, exist_ok=True)
        files = {"joint.py": format_graph(self.joint, "joint"),
                 "inference.py": format_graph(self.inference, "inference"),
                 **self.graphs.stages.files()}
        if self.call_plan().fused_possible:
            files["fused.py"] = format_graph(self.fused, "fused")
        if self.has_backward:
            files["forward.py"] = format_graph(self.forward, "forward")
            files["backward.py"] = format_graph(self.backward, "backward")
            files["partition.txt"] = self.partition.report() + "\n"
        else:
            files["forward.py"] = format_graph(self.inference, "forward")
        for name, text in files.items():
            if name.endswith(".py"):
                text = HEADER + text
            with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
                f.write(text)
        plan = self.call_plan()
        with open(os.path.join(directory, "call.py"), "w", encoding="utf-8") as f:
            f.write(f"# {str(plan).splitlines()[0]}\n{plan.source}")
        if self.source:
            with open(os.path.join(directory, "kernels.py"), "w", encoding="utf-8") as f:
                f.write(self.source)
            with open(os.path.join(directory, "schedule.txt"), "w", encoding="utf-8") as f:
                f.write(self.schedule_report())
            for which, k in self._kernels.items():  # the straight-line step drivers
                if k is not None:
                    with open(os.path.join(directory, f"{which}_driver.py"), "w", encoding="utf-8") as f:
                        f.write(k.plan.source)
        return directory

    def schedule_report(self):
        """The code generator's plan per graph: kernels, refused fusions and why, buffers."""
        return "\n".join(f"# ---- {which} ----\n{k.report()}" for which, k in
                         self._kernels.items() if k is not None and hasattr(k, "report"))


def _input_key(kind, x):
    """A differentiated input's identity among the roles (an argument index or a tensor)."""
    return (kind, x) if kind is Role.ARG else (kind, id(x))


def _aliases_of_inputs(graph):
    """Vars that may share memory with a graph input (an input, or a view chain of one)."""
    alias = set(graph.inputs)
    for n in graph.nodes:
        if Tag.MAY_ALIAS_INPUT in n.prim.tags and n.inputs and n.inputs[0] in alias:
            alias.update(n.outputs)
    return alias


def _may_be_readonly(graph, v):
    return any(v in n.outputs and n.prim.name == "broadcast_in_dim" for n in graph.nodes)


class _Grads(list):
    """The input gradients a compiled backward returns, and `written`: the gradients of the
    new values of the tensors it wrote in place (the trace's `written_grads`)."""
    written = ()


def _returned_written_args(tr):
    """[(output index, argument index)]: outputs that are an argument the function wrote in
    place, returned as is. Eagerly such an output is the caller's tensor itself (its memory,
    its new history), so the call returns that tensor rather than a new one."""
    written = {x for kind, x in tr.mutations if kind is Mutation.ARG}
    return [(k, x) for k, x in enumerate(tr.out_args) if x is not None and x in written]


def _restrict(joint, n_primals, n_fw_outputs):
    from aotgrad.ir.core import Graph
    return Graph(joint.inputs[:n_primals], joint.nodes, joint.outputs[:n_fw_outputs], "inference")

