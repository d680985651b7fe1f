"""compile(): the one place that joins the tracer, the IR passes and partitioner, codegen and
the runtime's executor.

    @aotgrad.compile
    def loss_fn(x, w):
        return (x @ w).tanh().sum()

    loss = loss_fn(x, w); loss.backward()     # compiled forward, compiled backward
    print(loss_fn.ir(x, w))                    # forward / backward graphs, saved values, source
"""
import dataclasses
import functools
import logging
import math
import os
import sys
import threading
import warnings
import weakref

import numpy as np

from aotgrad.ir import passes
from aotgrad.ir.core import Aval, current_builder
from aotgrad.ir.partition import partition
from aotgrad.ir.printer import HEADER, format_graph
from aotgrad.ir.tags import Tag
from aotgrad import call_path
from aotgrad.runtime import dispatch
from aotgrad.runtime import profiling
from aotgrad.runtime.engine import _checked_hook_result, accumulate_retained, saved_hooks
from aotgrad.runtime.forward_mode import state as _forward
from aotgrad.runtime.executor import CompiledBackward, check_nan, write_back, write_grad
from aotgrad.runtime.factories import default_generator
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor
from aotgrad.tracer.pytree import flatten, unflatten
from aotgrad.tracer.trace import GraphBreakError, trace

log = logging.getLogger(__name__)

BACKENDS = ("numba", "interpret")
cache_size_limit = 8  # programs per compiled function before it warns and runs eagerly


def _runner(graph, backend, name, trusted=0):
    """`run(*arrays) -> list of arrays` for one graph, and its compiled program (or None)."""
    if backend == "interpret":
        from aotgrad.ir.core import evaluate
        # (numpy's reference impls give 0-d results as numpy scalars: a tensor holds arrays)
        return (lambda *args: [o if type(o) is np.ndarray else np.asarray(o)
                               for o in evaluate(graph, list(args))]), None
    from aotgrad.codegen import compile_graph
    prog = compile_graph(graph, name=name)
    return prog.plan.prepared().runner(trusted), prog  # the generated driver


_PREPARE_LOCK = threading.RLock()  # a program's lazy compile steps (rare: only on first use)



def _vmap_running():
    """Is a vmap call running (only ever when aotgrad.func was imported)?"""
    batching = sys.modules.get("aotgrad.ir.batching")
    return batching is not None and batching.is_running()

class Program:
    """One compiled specialisation: the joint, forward and backward graphs, the partition,
    and their runners. `str(program)` prints all of it."""

    def __init__(self, tr, backend, memory_budget, name):
        self.trace, self.name, self.backend = tr, name, backend
        self.returned_args = _returned_written_args(tr)
        self.stages = passes.run_pipeline(tr.graph)  # the trace and each pass (a dump writes)
        self.joint = self.stages.final
        self.n_fw_outputs = len(tr.out_is_tensor) - tr.out_is_tensor.count(False) + \
            len(tr.mutations)
        self.has_backward = bool(tr.diff_roles) and any(tr.grad_present)
        n_primals = tr.n_primals
        if self.has_backward:
            self.partition = partition(self.joint, n_primals, self.n_fw_outputs, memory_budget)
            self.forward, self.backward = self.partition.forward, self.partition.backward
        else:
            self.partition = None
            self.forward, self.backward = None, None
        self.inference = passes.dce(_restrict(self.joint, n_primals, self.n_fw_outputs))
        self.inference.name = "inference"
        self._runners = {}
        self._copies = {}
        self._reached, self._grad_deps = {}, None
        self._kernels = {}
        self._owned = {}
        self._accumulators = None
        self._avals = None
        self._fast = None        # the specialised call (call_path.make_call), made on first call
        self._inline = None      # set by make_call where specialise may inline the call
        self._implicit = {}      # output_nr -> the grads `out.backward()` feeds the backward
        self._fast_bw = None     # call_path.make_fast_backward(), made on first use
        self._arg_roles = [x for _, x in tr.roles] if all(k == "arg" for k, _ in tr.roles) \
            else None

    # ---- running ------------------------------------------------------------------------
    def _run(self, which, args):
        r = self._runners.get(which)
        if r is None:
            self._prepare(which)
            r = self._runners[which]
        return r(*args)

    def _prepare(self, which):
        if which not in self._runners:
            with _PREPARE_LOCK:  # threads that reach a new program at once compile it once
                if which in self._runners:
                    return
                # a backward's saved inputs come from its forward program: no checks needed
                trusted = len(self.forward.outputs) - self.n_fw_outputs \
                    if which == "backward" else 0
                r, kern = _runner(getattr(self, which), self.backend, f"{self.name}_{which}",
                                  trusted)
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
        program then takes the general call path, which runs every graph through its runner."""
        self.build()
        self._fast = False
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

    def run_backward(self, args):
        return self._run("backward", args)

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
        pos = {("arg", x) if kind == "arg" else ("lifted", id(x)): i
               for i, (kind, x) in enumerate(tr.roles)}
        dep = {}
        for j, (kind, x) in enumerate(tr.diff_roles):
            v = g.inputs[pos[("arg", x) if kind == "arg" else ("lifted", id(x))]]
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
        for which in ("forward", "backward", "inference"):
            k = self._kernels.get(which)
            if k is not None and getattr(k, "source", None):
                parts.append(f"# ---- {which} ----\n{k.source}")
        return "\n".join(parts)

    def __call__(self, leaves, trusted=False):
        """Run on the call's flattened inputs; `trusted`: they are the arguments themselves,
        all tensors whose arrays passed the guard's checks (see call_path.specialise)."""
        fast = self._fast
        if fast is None:
            with _PREPARE_LOCK:
                fast = self._fast
                if fast is None:
                    fast = self._fast = call_path.make_call(self)
        if fast is not False and not profiling._profilers and not _mode.anomaly:
            return fast(leaves, trusted)
        return self._call(leaves)

    def _call(self, leaves):
        """The general call: any roles, mutations, .grad writes, profiling, anomaly mode."""
        tr = self.trace
        if self._arg_roles is not None:  # every input is an argument (the common case)
            replay = [leaves[i] for i in self._arg_roles]
            inputs = [t._value for t in replay]
        else:
            inputs, replay = [], []
            for kind, x in tr.roles:
                if kind == "arg":
                    t = leaves[x]
                elif kind == "lifted":
                    t = x
                else:
                    t = default_generator.next_seed()
                inputs.append(t._value)
                replay.append(t if kind != "seed" else t._value)
        if _mode.grad_enabled and tr.mutations:
            self._check_leaf_writes(leaves)
            if self.has_backward:
                replay = self._snapshot_written(replay, leaves)
        need_grad = self.has_backward and _mode.grad_enabled
        which = "forward" if need_grad else "inference"
        if profiling._profilers:
            with profiling.record(f"{self.name}.{which}", kind="kernel"):
                outs = self._run(which, inputs)
        else:
            outs = self._run(which, inputs)
        if _mode.anomaly and _mode.anomaly_check_nan:
            check_nan(getattr(self, which), inputs, outs, f"{self.name}.{which}")
        fw, saved = outs[:self.n_fw_outputs], (outs[self.n_fw_outputs:] if need_grad else None)
        n_tensor_outs = self.n_fw_outputs - len(tr.mutations)
        copies = self.copied_outputs(which)
        if copies:
            fw = list(fw)
            for i in copies:
                fw[i] = np.array(fw[i], copy=True)
        if tr.mutations and saved:  # the backward must not read what the write-back changes
            saved = _unshare(saved, [leaves[x]._value if kind == "arg" else x._value
                                     for kind, x in tr.mutations if kind in ("arg", "lifted")])
        for (kind, x), value in zip(tr.mutations, fw[n_tensor_outs:]):
            if kind in ("grad", "arg_grad"):
                write_grad(leaves[x] if kind == "arg_grad" else x, value)
            elif kind == "escape":  # a tensor the function stored away: make it concrete
                x._value, x.grad_fn, x.requires_grad = value, None, False
                x._version_counter.v += 1
            else:
                write_back(leaves[x] if kind == "arg" else x, value)
        for kind, x in tr.grad_clears:
            write_grad(leaves[x] if kind == "arg_grad" else x, None)
        vals = iter(fw[:n_tensor_outs])
        outs = [Tensor._make(next(vals)) if is_t else const
                for is_t, const in zip(tr.out_is_tensor, tr.out_leaves)]
        for k, x in self.returned_args:  # an argument written in place and returned: itself
            outs[k] = leaves[x]
        for i in tr.retained_args:  # retain_grad() on an argument inside: on the caller's tensor
            t = leaves[i]
            if any(kind == "arg" and x == i for kind, x in tr.mutations):
                t._retains_grad = True   # written in place: its new value's (see below)
            elif t.requires_grad and t.grad_fn is not None:
                t.retain_grad()
        if need_grad and tr.diff_outs:
            diff_inputs = [leaves[x] if kind == "arg" else x for kind, x in tr.diff_roles]
            # after the outputs, the tensors written in place whose new value has history:
            # rebased onto the node (made first, so its edges keep their old history)
            targets = outs + [leaves[x] if kind == "arg" else x for kind, x in tr.mutations]
            if self._accumulators is None:
                self._first_call_state(diff_inputs, targets)
            node = (_WrittenBackward if tr.written_grads else CompiledBackward)(
                self, saved, diff_inputs, *self._avals, replay)
            for nr, k in enumerate(tr.diff_outs):
                # (an argument returned as is comes again later, as a tensor written in place:
                # its last slot is the one its gradient flows into)
                t = targets[k]
                t.requires_grad, t.grad_fn, t._output_nr = True, node, nr
            for nr, k in enumerate(tr.diff_outs):
                t = targets[k]
                if t._retains_grad and k >= len(outs) and t._output_nr == nr:
                    # keeps retaining, as eagerly: .grad is the gradient of the new value
                    node._set_retain_grad(nr, weakref.ref(t))
        return outs[0] if tr.out_tree is None else unflatten(tr.out_tree, outs)

    def _snapshot_written(self, replay, leaves):
        """The call's inputs as the backward replays them (create_graph): a tensor the
        program writes back is replaced by a copy of its value now, with its history now."""
        written = {id(leaves[x] if kind == "arg" else x) for kind, x in self.trace.mutations
                   if kind in ("arg", "lifted")}
        out = []
        for t in replay:
            if isinstance(t, Tensor) and id(t) in written:
                s = Tensor._make(np.array(t._value, copy=True), t.requires_grad)
                s.grad_fn, s._output_nr = t.grad_fn, t._output_nr
                t = s
            out.append(t)
        return out

    def _check_leaf_writes(self, leaves):
        """The trace saw a non-leaf (or a tensor that needs no grad) where this call passes a
        leaf that requires grad: writing it in place is the error it is eagerly."""
        for kind, x in self.trace.mutations:
            if kind == "arg" and leaves[x].requires_grad and leaves[x].grad_fn is None:
                raise RuntimeError(
                    f"a leaf Variable that requires grad is being used in an in-place operation "
                    f"(compiled function {self.name} writes argument {x} in place).")

    def _first_fast_backward(self, t, retain_graph):
        if self._fast_bw == self._first_fast_backward:
            self._fast_bw = call_path.make_fast_backward(self)
        return self._fast_bw(t, retain_graph)

    def _first_call_state(self, diff_inputs, outs):
        tr = self.trace
        if self._accumulators is None:  # keep the lifted leaves' AccumulateGrad nodes
            self._accumulators = [t._grad_accumulator() for kind, t in tr.diff_roles
                                  if kind == "lifted" and t.grad_fn is None]
        if self._avals is None:  # shapes and dtypes are fixed per program (guards)
            self._avals = ([Aval(t._value.shape, t.dtype) for t in diff_inputs],
                           [Aval(outs[k]._value.shape, outs[k].dtype) for k in tr.diff_outs])

    def implicit_grads(self, nr):
        """The arrays `out.backward()` feeds the backward program for output nr of the
        differentiable outputs (ones there, zeros for the others), or False when that output
        is not a floating scalar (the general path raises the error). Made once, never handed
        to the user: the backward only reads them, and an output that passes one through is
        not owned, so it is copied before it becomes a .grad."""
        grads = self._implicit.get(nr)
        if grads is None:
            avals = self._avals[1]
            a = avals[nr]
            if math.prod(a.shape) != 1 or not a.dtype.is_floating_point:
                grads = False
            else:
                grads = [np.zeros(b.shape, b.dtype.np) for b in avals]
                grads[nr] = np.ones(a.shape, a.dtype.np)
            self._implicit[nr] = grads
        return grads

    # ---- reading ------------------------------------------------------------------------
    def __str__(self):
        parts = []
        if self.has_backward:
            parts += [format_graph(self.forward), format_graph(self.backward),
                      "# partition\n# " + self.partition.report().replace("\n", "\n# ")]
        else:
            parts.append(format_graph(self.inference))
        if self.source:
            parts.append(self.source)
        return "\n".join(parts)

    def dump(self, directory):
        """Write forward.py, joint.py, backward.py, partition.txt, the traced graph and each
        pass's result (stage00_trace.py, stage01_simplify.py, ...), and with the numba backend
        kernels.py, schedule.txt and each program's driver (forward_driver.py, ...)."""
        os.makedirs(directory, exist_ok=True)
        files = {"joint.py": format_graph(self.joint, "joint"),
                 "inference.py": format_graph(self.inference, "inference"),
                 **self.stages.files()}
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


class _WrittenBackward(CompiledBackward):
    """The grad_fn of a call that wrote tensors in place whose new values have history.
    Eagerly such a tensor's retain_grad() and hooks registered after the write see the
    gradient of its new value: what reaches it from outside and from its uses inside the
    function after the write. The compiled backward returns that gradient; this node gives it
    to them (a hook's replacement flows on to the inputs, as eagerly), in place of the
    engine, which would see only the part from outside."""

    def __init__(self, program, *args):
        super().__init__(program, *args)
        self._written = {nr: j for j, nr in enumerate(program.trace.written_grads)}
        self._written_hooks, self._written_retain = {}, {}

    def _set_retain_grad(self, output_nr, ref):
        if output_nr in self._written:
            self._written_retain[output_nr] = ref
        else:
            super()._set_retain_grad(output_nr, ref)

    def _tensor_hooks(self, output_nr):
        if output_nr in self._written:
            return self._written_hooks.setdefault(output_nr, [])
        return super()._tensor_hooks(output_nr)

    def _backward(self, grads):
        given = [g is not None for g in grads]
        out = super()._backward(grads)
        if not (self._written_hooks or self._written_retain):
            return list(out)
        totals, grads = list(out.written), list(out)
        slots = [nr for nr, reached in zip(self._written, self.program.written_reached(given))
                 if reached]
        for i, nr in enumerate(reversed(slots)):  # later writes first, as a backward goes
            j = self._written[nr]
            g = totals[j]
            for h in list(self._written_hooks.get(nr, ())):
                r = h(g)
                if r is not None:
                    r = _checked_hook_result(h, g, r)
                    if r is not g:  # the replacement flows on (the backward is linear in
                        tangents = [None] * len(self._out_avals)  # its output grads)
                        tangents[nr] = r - g
                        delta = CompiledBackward._backward(self, tangents)
                        grads = [d if a is None else a if d is None else a + d
                                 for a, d in zip(grads, delta)]
                        for nr2 in reversed(slots[:len(slots) - 1 - i]):  # not yet given
                            j2 = self._written[nr2]
                            totals[j2] = totals[j2] + delta.written[j2]
                        g = r
            ref = self._written_retain.get(nr)
            t = ref() if ref is not None else None
            if t is not None and t.grad_fn is self and t._output_nr == nr:
                accumulate_retained(t, g)
        return grads


def _returned_written_args(tr):
    """[(output index, argument index)]: outputs that are an argument the function wrote in
    place, returned as is. Eagerly such an output is the caller's tensor itself (its memory,
    its new history), so the call returns that tensor rather than a new one."""
    written = {x for kind, x in tr.mutations if kind == "arg"}
    return [(k, x) for k, x in enumerate(tr.out_args) if x is not None and x in written]


def _unshare(saved, written):
    """Saved arrays that share memory with a tensor about to be written back, copied."""
    return [np.array(s, copy=True) if isinstance(s, np.ndarray) and
            any(np.may_share_memory(s, w) for w in written) else s for s in saved]


def _restrict(joint, n_primals, n_fw_outputs):
    from aotgrad.ir.core import Graph
    return Graph(joint.inputs[:n_primals], joint.nodes, joint.outputs[:n_fw_outputs], "inference")


def _guard_key(leaves, module, treedef=None):
    key = [_mode.grad_enabled, treedef]
    counters, n_tensors = set(), 0
    for x in leaves:
        if isinstance(x, Tensor):
            key.append(_tensor_key(x))
            counters.add(id(x._version_counter))
            n_tensors += 1
        elif isinstance(x, (int, float, bool, str, type(None))):
            key.append(("S", type(x).__name__, x))
        else:
            key.append(("O", type(x).__name__, id(x)))
    if len(counters) != n_tensors:
        key.append(alias_pattern(leaves))
    return _with_module(key, module)


def alias_pattern(leaves):
    """("A", ((i, j, same), ...)): tensor leaf i shares memory with the earlier leaf j (views
    share their base's version counter): the same tensor (`same`), or a view / the base / a
    sibling view. Part of the guard key only where arguments alias, so the common call pays
    one set; a program traced for one pattern never runs on another."""
    first, pairs = {}, []
    for i, x in enumerate(leaves):
        if isinstance(x, Tensor):
            j = first.setdefault(id(x._version_counter), i)
            if j != i:
                pairs.append((i, j, x is leaves[j]))
    return ("A", tuple(pairs))


def _tensor_key(x):
    v = x._value
    return ("T", v.shape, v.dtype, x.requires_grad)  # (dtype.name would be slow)


def _with_module(key, module):
    if module is not None and hasattr(module, "modules"):
        key.append(tuple(m.training for m in module.modules()))
    return tuple(key)


def _tensor_args_key(args, module):
    """_guard_key(args, module, len(args)) when every argument is a tensor, else None."""
    key = [_mode.grad_enabled, len(args)]
    counters = set()
    for x in args:
        if not isinstance(x, Tensor):
            return None
        key.append(_tensor_key(x))
        counters.add(id(x._version_counter))
    if len(counters) != len(args):
        key.append(alias_pattern(args))
    return _with_module(key, module)


def _user_stacklevel():
    """warnings.warn's stacklevel that points at the caller of the compiled function."""
    import sys
    f, level = sys._getframe(2), 2  # (the caller of _warn_once)
    while f is not None and f.f_code.co_filename in (__file__, call_path.__file__):
        f, level = f.f_back, level + 1
    return level


_REMEDY = ("If this size changes from call to call (a sequence growing by one token per call, "
           "a last batch of another size), pad it to a fixed length, or raise "
           "cache_size_limit (now {limit}: aotgrad.compiler.cache_size_limit, or the compiled "
           "function's cache_size_limit attribute); programs generic in their sizes do not "
           "exist yet.")


@dataclasses.dataclass(frozen=True)
class _Change:
    """Why a call missed every cached program, in words: `text` names the argument (by
    parameter name) and what changed (old -> new); `cause` is what it warns once for (the
    argument and the dimension, not the sizes); `what` changed, for the advice; `warn`: a
    recompile for this reason is worth a warning (a size, dtype or Python value; not grad
    mode, requires_grad or train/eval, which take a bounded number of programs)."""
    text: str
    cause: tuple
    what: str
    warn: bool = True


def recompile_cause(cache, key, fn, args, kwargs):
    """The difference between `key` and the cached key it is closest to, as a _Change (None
    when no cached key has the same structure)."""
    best = None
    for old in reversed(list(cache)):  # the latest of equally close keys
        if len(old) != len(key) or old[1] != key[1]:
            continue
        diffs = [i for i, (a, b) in enumerate(zip(old, key)) if a != b]
        if best is None or len(diffs) < len(best[1]):
            best = (old, diffs)
    if best is None or not best[1]:
        return None
    from aotgrad.tracer.arg_names import leaf_names
    old, diffs = best
    n_leaves = len(key) - 2
    names = None
    for i in diffs:
        a, b = old[i], key[i]
        if i == 0:
            return _Change(f"grad mode changed ({a} -> {b})", ("grad_mode",), "grad mode",
                           warn=False)
        if not (isinstance(a, tuple) and isinstance(b, tuple) and a and b and a[0] == b[0]
                and a[0] in ("T", "S") and i - 2 < n_leaves):
            continue
        if names is None:
            names = leaf_names(fn, args, kwargs)
        j = i - 2
        name = f"argument '{names[j]}'" if j < len(names) else f"argument {j}"
        if a[0] == "S":
            return _Change(f"{name} changed value ({a[2]!r} -> {b[2]!r}); the trace "
                           f"specialises to each Python value", (names[j], "value"), "value")
        if len(a[1]) != len(b[1]):
            return _Change(f"{name} changed its number of dimensions ({len(a[1])} -> "
                           f"{len(b[1])}: shape {tuple(a[1])} -> {tuple(b[1])})",
                           (names[j], "ndim"), "shape")
        dims = [d for d, (p, q) in enumerate(zip(a[1], b[1])) if p != q]
        if dims:
            said = ", ".join(f"dim {d} ({a[1][d]} -> {b[1][d]})" for d in dims)
            return _Change(f"{name} changed size in {said}", (names[j], tuple(dims)), "size")
        if a[2] != b[2]:
            return _Change(f"{name} changed dtype ({a[2]} -> {b[2]})", (names[j], "dtype"),
                           "dtype")
        if a[3] != b[3]:
            return _Change(f"{name} changed requires_grad ({a[3]} -> {b[3]})",
                           (names[j], "requires_grad"), "requires_grad", warn=False)
    return _Change("the module's train/eval mode or the arguments' aliasing changed",
                   ("other",), "mode", warn=False)


class CompiledFunction:
    """The callable `compile` returns. Caches one Program per guard key."""

    def __init__(self, fn, fullgraph, backend, memory_budget, dump, cache_size_limit=None):
        if backend not in BACKENDS:
            raise ValueError(f"compile: unknown backend {backend!r}; choose one of {BACKENDS}")
        self.fn, self.fullgraph, self.backend = fn, fullgraph, backend
        self.memory_budget, self.dump_dir = memory_budget, dump or os.environ.get("AOTGRAD_DUMP")
        self.cache_size_limit = cache_size_limit if cache_size_limit is not None else \
            globals()["cache_size_limit"]
        self.module = fn if hasattr(fn, "named_parameters") else None
        self.cache, self._warned, self.graph_breaks = {}, set(), []
        self._calls, self._specialised = {}, None  # key -> call_path.specialise(key, program); last hit
        self.n_traces = 0  # how many times the function was traced (recompiles included)
        self.eager_calls = 0  # calls that ran the Python function eagerly (breaks, limits, hooks)
        self._guard_retraces = 0  # traces again because state the trace read changed
        self._lock = threading.RLock()  # around lookup and build; the specialised call takes none
        self.name = getattr(fn, "__name__", type(fn).__name__)
        functools.update_wrapper(self, fn if callable(fn) and hasattr(fn, "__name__") else
                                 self.__call__, updated=())

    def _names(self):
        if self.module is None:
            return {}
        names = {id(p): n for n, p in self.module.named_parameters()}
        if hasattr(self.module, "named_buffers"):
            names.update({id(b): n for n, b in self.module.named_buffers()})
        return names

    def _warn_once(self, msg, cause=None, extra=""):
        """Warn `msg + extra` the first time for its cause (`msg` itself by default): a size
        that changes on every call warns once, not once per size."""
        cause = msg if cause is None else cause
        if cause not in self._warned:
            self._warned.add(cause)
            warnings.warn(msg + extra, stacklevel=_user_stacklevel())

    def _build(self, args, kwargs, leaves):
        self.n_traces += 1
        try:
            tr = trace(self.fn, args, kwargs, self._names(), want_grad=_mode.grad_enabled)
        except dispatch.GraphBreak as e:
            msg = f"aotgrad.compile({self.name}): graph break at {e}"
            self.graph_breaks.append(str(e))
            log.info("%s", msg)
            if self.fullgraph:
                raise GraphBreakError(msg) from None
            self._warn_once(msg + "; running this call eagerly")
            return "eager"
        except GraphBreakError as e:
            log.info("aotgrad.compile(%s): %s", self.name, e)
            if self.fullgraph:
                raise
            self._warn_once(f"aotgrad.compile({self.name}): {e}; running this call eagerly")
            return "eager"
        prog = Program(tr, self.backend, self.memory_budget, f"{self.name}_{len(self.cache)}")
        if self.dump_dir:
            prog.build()
            prog.dump(os.path.join(self.dump_dir, prog.name))
        return prog

    def _lookup(self, args, kwargs):
        with self._lock:  # one trace per new key, however many threads call at once
            return self._lookup_locked(args, kwargs)

    def _lookup_locked(self, args, kwargs):
        key = None if kwargs else _tensor_args_key(args, self.module)
        if key is not None:
            leaves = args  # the common case, without a tree walk
        else:
            leaves, treedef = flatten((tuple(args), dict(kwargs)))
            key = _guard_key(leaves, self.module, treedef)
        prog = self.cache.get(key)
        if prog is not None and prog != "eager" and not call_path.lifted_ok(prog):
            where = call_path.failed_guard(prog)
            prog = None
            self._guard_retraces += 1
            if self._guard_retraces > self.cache_size_limit:
                self._warn_once(f"aotgrad.compile({self.name}): state the trace read changed "
                                f"on more than cache_size_limit ({self.cache_size_limit}) "
                                f"calls" + (f" (last: {where})" if where else "") +
                                "; running eagerly from now on",
                                cause=("guard_retraces",))
                return "eager", leaves
            self._warn_once(f"aotgrad.compile({self.name}): recompiling: " + (
                where if where else
                "a parameter or closed-over tensor changed shape, dtype, requires_grad or "
                "whether its .grad is set since the trace"),
                cause=("guard", where))
        if prog is not None and prog != "eager" and prog.trace.mutations:
            i = call_path.aliases_lifted(prog, leaves)
            if i is not None:
                from aotgrad.tracer.arg_names import leaf_names
                self._warn_once(
                    f"aotgrad.compile({self.name}): argument "
                    f"'{leaf_names(self.fn, args, kwargs)[i]}' shares memory with a parameter "
                    f"or closed-over tensor the function reads, and the function writes in "
                    f"place; the compiled program cannot show a write through one in the "
                    f"other: running this call eagerly")
                return "eager", leaves
        if prog is None:
            log.info("compile(%s): %s (guard key %s)", self.name,
                     "recompiling" if self.cache else "tracing", key)
            if len(self.cache) >= self.cache_size_limit:
                change = recompile_cause(self.cache, key, self.fn, args, kwargs)
                self._warn_once(f"aotgrad.compile({self.name}): cache_size_limit "
                                f"({self.cache_size_limit}) reached" +
                                (f" ({change.text})" if change else "") +
                                "; running eagerly from now on. " + _REMEDY.format(
                                    limit=self.cache_size_limit),
                                cause=("cache_size_limit",))
                return "eager", leaves
            if self.cache:
                change = recompile_cause(self.cache, key, self.fn, args, kwargs)
                if change is not None and change.warn:
                    self._warn_once(
                        f"aotgrad.compile({self.name}): recompiling because {change.text}",
                        cause=("recompile",) + change.cause,
                        extra=f". Every new {change.what} traces and compiles again, up to "
                              f"cache_size_limit ({self.cache_size_limit}) programs; then "
                              f"calls run eagerly. " + _REMEDY.format(
                                  limit=self.cache_size_limit))
            prog = self._build(args, kwargs, leaves)
            if prog != "eager" and prog.trace.escaped:
                # state created inside the function (e.g. optimizer moments on the first
                # step) is concrete after this call; trace again next time to read it
                return prog, leaves
            self.cache[key] = prog
        if leaves is args and self.module is None and prog != "eager":
            call = self._calls.get(key, call_path.MISS)
            if call is call_path.MISS or (call is not None and call.program is not prog):
                call = self._calls[key] = call_path.specialise(key, prog)
            self._specialised = call
        return prog, leaves

    def __call__(self, *args, **kwargs):
        if current_builder() is not None:  # called inside another compiled function: inline
            return self.fn(*args, **kwargs)
        if saved_hooks.stack and _mode.grad_enabled:
            # a compiled program keeps what its backward needs inside it, where pack/unpack
            # hooks cannot see it: run eagerly, so that they see every saved tensor
            self._warn_once(f"aotgrad.compile({self.name}): called inside "
                            f"autograd.graph.saved_tensors_hooks, whose hooks must see the "
                            f"tensors saved for backward; running this call eagerly")
            self.eager_calls += 1
            return self.fn(*args, **kwargs)
        if _vmap_running():
            # vmap's batched values are not arrays a compiled program can take: its ops run
            # (and batch) eagerly; under an enclosing compile they are traced
            self._warn_once(f"aotgrad.compile({self.name}): called inside aotgrad.func.vmap; "
                            f"running this call eagerly (compile the vmapped function "
                            f"instead)")
            return self.fn(*args, **kwargs)
        if _forward.level is not None:
            # tangents of forward-mode AD are not part of the compiled program
            self._warn_once(f"aotgrad.compile({self.name}): called inside a forward-mode AD "
                            f"dual level; running this call eagerly")
            return self.fn(*args, **kwargs)
        call = self._specialised
        if call is not None and not kwargs:
            out = call(args)  # the last program, specialised to its guard key
            if out is not call_path.MISS:
                return out
        prog, leaves = self._lookup(args, kwargs)
        if prog == "eager":
            self.eager_calls += 1
            return self.fn(*args, **kwargs)
        return prog(leaves)

    def ir(self, *args, **kwargs):
        """The Program for these inputs, compiled but not run."""
        prog, _ = self._lookup(args, kwargs)
        if prog == "eager":
            raise GraphBreakError(f"aotgrad.compile({self.name}) does not capture a graph for "
                                  f"these inputs: {self.graph_breaks[-1]}")
        return prog

    def observe(self, callback, *args, **kwargs):
        """The Program for these inputs (compiled, not run), with `callback(which, inputs,
        outputs)` called after each run of its compiled graphs (Program.observe); the calls
        made so far for it are dropped, so the next call goes through the observed runners."""
        prog = self.ir(*args, **kwargs).observe(callback)
        self._calls = {k: c for k, c in self._calls.items()
                       if c is None or c.program is not prog}
        if self._specialised is not None and self._specialised.program is prog:
            self._specialised = None
        return prog

    def __getattr__(self, name):  # compile(module): the module's attributes stay reachable
        fn = self.__dict__.get("fn")
        if fn is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(fn, name)

    def __get__(self, obj, objtype=None):  # decorating a method
        return self if obj is None else functools.partial(self.__call__, obj)


def compile(fn=None, *, fullgraph=False, backend="numba", memory_budget=None, dump=None):
    """Trace `fn` into prims, derive its backward ahead of time, run both compiled.

    >>> @aotgrad.compile
    ... def f(x): return (x * x).sum()
    >>> f(aotgrad.ones(3, requires_grad=True))
    tensor(3., grad_fn=<CompiledFunctionBackward>)
    """
    def wrap(f):
        return CompiledFunction(f, fullgraph, backend, memory_budget, dump)
    return wrap if fn is None else wrap(fn)


def explain(fn, *args, **kwargs):
    """Report graphs, graph breaks (file:line and why), guards and op counts for fn(*args)."""
    cf = fn if isinstance(fn, CompiledFunction) else CompiledFunction(fn, False, "interpret",
                                                                      None, None)
    leaves, _ = flatten((tuple(args), dict(kwargs)))
    lines = [f"explain({cf.name})"]
    breaks = []
    prev, dispatch.break_recorder = dispatch.break_recorder, breaks
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog, _ = cf._lookup(args, kwargs)
            if prog == "eager":  # run eagerly to find every break, not only the first
                cf.fn(*args, **kwargs)
    finally:
        dispatch.break_recorder = prev
    key = _guard_key(leaves, cf.module)
    lines.append(f"guards: grad_mode={key[0]}; " + "; ".join(
        f"arg{i}: " + (f"shape={k[1]} dtype={k[2]} requires_grad={k[3]}" if k[0] == "T" else
                       f"{k[1]} == {k[2]!r}") for i, k in enumerate(key[2:]) if isinstance(k, tuple) and k and k[0] in ("T", "S")))
    if len(key) > 2 and isinstance(key[-1], tuple) and key[-1] and key[-1][0] == "A":
        lines.append("aliasing arguments (a program for this pattern only): " + ", ".join(
            f"arg{i} {'is' if same else 'shares memory with'} arg{j}"
            for i, j, same in key[-1][1]))
    if prog != "eager" and (prog.trace.identity_guards or prog.trace.lifted_guards):
        lines.append("guards on state the trace read (a change traces again):")
        lines += [f"  {path} == {expected!r}" if is_value else
                  f"  {path} is the same {type(expected).__name__} (id {id(expected):#x})"
                  for _, _, expected, is_value, path in prog.trace.identity_guards]
        at = {id(e): path for _, _, e, is_value, path in prog.trace.identity_guards
              if not is_value}
        lines += [f"  {at.get(id(t), 'a tensor found by no path (rebinding it is not seen)')}"
                  f": shape={tuple(v.shape)} dtype={t.dtype} requires_grad={rg}"
                  for t, v, rg in prog.trace.lifted_guards]
    all_breaks = list(dict.fromkeys(cf.graph_breaks + breaks))
    lines.append(f"graph breaks: {len(all_breaks)}")
    lines += [f"  {b}" for b in all_breaks]
    if prog != "eager":
        counts = {}
        for n in prog.joint.nodes:
            counts[n.prim.name] = counts.get(n.prim.name, 0) + 1
        g = prog.forward if prog.has_backward else prog.inference
        lines.append(f"graphs: 1; forward ops: {len(g.nodes)}; backward ops: "
                     f"{len(prog.backward.nodes) if prog.backward else 0}")
        lines.append("op counts (joint): " + ", ".join(f"{k}={v}" for k, v in
                                                      sorted(counts.items())))
        lines.append(str(prog))
    return Explanation("\n".join(lines), all_breaks, prog)


class Explanation(str):
    def __new__(cls, text, breaks, program):
        s = super().__new__(cls, text)
        s.graph_breaks, s.program = breaks, (None if program == "eager" else program)
        return s


def is_compiling():
    """True while `aotgrad.compile` traces the function (PyTorch's
    `torch.compiler.is_compiling`): code may take another path when it is being captured."""
    return current_builder() is not None
