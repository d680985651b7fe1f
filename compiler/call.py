"""The specialised call path of a compiled program: straight-line Python generated per
program and per guard key, so that a training step costs a few microseconds of Python.

- `specialise(key, prog)`: `call(args)`, the guard checks for one key and the call, inline;
  MISS when a check fails (the caller falls back to the full lookup).
- `make_call(prog)`: the program's call on flattened inputs, giving outputs a
  `_CallBackward` whose edges to leaves are made only when something asks for them.
- `make_fast_backward(prog)`: the `loss.backward()` of such an output: the backward driver
  on the saved values, then the leaves' .grad written directly; it hands over to the
  general engine (returns False) whenever hooks, retain_grad, anomaly mode, the profiler,
  tracing or an in-place change need it.
"""
import builtins
import dataclasses
import functools
import math

import numpy as np

from aotgrad.compiler.guards import MISS, aliases_lifted, lifted_ok
from aotgrad.ir.core import Aval, current_builder
from aotgrad.ir.symbolic import is_static_shape
from aotgrad.runtime import profiling
from aotgrad.runtime.engine import accumulate_array, next_sequence_nr, plain_leaves
from aotgrad.runtime.compiled_backward import CompiledBackward
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor
from aotgrad.tracer.pytree import unflatten
from aotgrad.tracer.trace_result import Role


# When the generated code hands a call or a backward over to the general path, whatever
# else it checks (written once: the generators paste it, Program's call evaluates it).
GENERAL_PATH_NEEDED = "profiling._profilers or _mode.anomaly"
general_path_needed = eval(f"lambda: {GENERAL_PATH_NEEDED}",  # noqa: S307 (our own text)
                           {"profiling": profiling, "_mode": _mode})


def _node_lines(saved, leaves, replay, versions):
    """The one way a _CallBackward is made (pasted into the generated calls): `node`, from
    the expressions of its saved arrays, leaves, replayed inputs and their versions; the
    names new_node, Node, seq, in_avals, out_avals, prog and plan are bound."""
    return ["    node = new_node(Node)",
            "    node._seq = seq()",
            "    node._in_avals, node._out_avals = in_avals, out_avals",
            "    node.program = prog",
            f"    node._saved_arrays = {saved}",
            f"    node._leaves = {leaves}",
            f"    node._replay = {replay}",
            f"    node._versions = {versions}",
            "    node._fast_backward = plan.fast_backward"]


@dataclasses.dataclass(eq=False)
class InlineCall:
    """What `specialise` needs to emit a call in full (a single-output loss of leaf
    arguments, every input an argument in order): the forward driver that skips the input
    checks, where the differentiable inputs sit among the arguments, how many forward
    outputs precede the saved values."""
    run: object
    diff_pos: list
    n_fw: int


@dataclasses.dataclass(eq=False)
class CallPlan:
    """How calls of one program run, derived once from its trace (`make_plan`):
    `call(leaves, trusted)` the straight-line call, or None where the general call
    (Program._call) is needed; `inline` for specialise; `avals` (differentiable inputs,
    differentiable outputs) of its _CallBackward nodes; `fast_backward`, their
    `loss.backward()` (made, and the backward program compiled, on first use)."""
    program: object
    call: object = None
    inline: InlineCall = None
    avals: tuple = None
    fast_backward: object = None

    def __post_init__(self):
        self.fast_backward = self._first_fast_backward
        self._implicit = {}  # output_nr -> the grads `out.backward()` feeds the backward

    def implicit_grads(self, nr, out_avals=None):
        """The arrays `out.backward()` feeds the backward program for output nr of the
        differentiable outputs (ones there, zeros for the others), or False when that output
        is not a floating scalar (the general path raises the error). Made once (per shapes,
        `out_avals` of a symbolic program's call), never handed to the user: the backward
        only reads them, and an output that passes one through is not owned, so it is copied
        before it becomes a .grad."""
        key = nr if out_avals is None else (nr,) + tuple(a.shape for a in out_avals)
        grads = self._implicit.get(key)
        if grads is None:
            if len(self._implicit) >= 64:  # (symbolic: one per set of output shapes)
                self._implicit.clear()
            avals = self.avals[1] if out_avals is None else out_avals
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

    def __str__(self):
        kind = "general (Program._call)" if self.call is None else \
            "inline per guard key" if self.inline is not None else "straight-line"
        if self.call is not None and self.program.binding is not None:
            kind += " (symbolic sizes " + ", ".join(
                name for _, _, name in self.program.binding.define) + " read per call)"
        return f"call plan of {self.program.name}: {kind}"


def make_plan(prog):
    """prog's CallPlan: the call specialised to its trace, or the general one (call None)
    where it needs that (seeds, in-place writes, .grad writes, retain_grad() on an argument,
    non-tensor outputs, outputs to copy, an observed program). The specialised call runs
    the generated drivers directly and gives the outputs a _CallBackward, whose edges to
    leaf inputs are made only when something asks for them. A symbolic program's call reads
    its symbol values (SymbolBinding), passes them to the drivers and keeps them last among
    the saved values for the backward; its nodes' avals are the call's."""
    tr = prog.trace
    plan = CallPlan(prog)
    if prog.observed or tr.mutations or tr.grad_clears or tr.escaped or \
            not all(tr.out_is_tensor) or tr.retained_args or \
            any(kind is Role.SEED for kind, _ in tr.roles):
        return plan
    if prog.copied_outputs("inference") or (prog.has_backward and prog.copied_outputs("forward")):
        return plan  # an output to copy (it would share an input's memory)
    n_fw, n_out, single = prog.n_fw_outputs, len(tr.out_is_tensor), tr.out_tree is None
    has_backward, diff_outs, out_tree = prog.has_backward, tr.diff_outs, tr.out_tree
    run = prog.runner("forward" if has_backward else "inference")  # (compiled now)
    run_fw = run if has_backward else None
    arg_roles = prog.arg_roles
    identity = arg_roles is not None and arg_roles == list(range(len(arg_roles)))
    # a call through the guard (specialise) checked every argument's array: the forward
    # driver skips its checks on the inputs that are the leading arguments
    n_lead = 0
    while n_lead < len(tr.roles) and tr.roles[n_lead] == (Role.ARG, n_lead):
        n_lead += 1
    run_trusted = run_fw
    binding = prog.binding  # symbolic sizes: values read per call, kept for the backward
    if run_fw is not None and n_lead and prog.backend != "interpret" and binding is None:
        run_trusted = prog.compiled_graph("forward").plan.runner(trusted=n_lead)
    roles = [(kind is Role.ARG, x) for kind, x in tr.roles]
    pos = {(kind, x if kind is Role.ARG else id(x)): i for i, (kind, x) in enumerate(tr.roles)}
    diff_pos = [pos[(kind, x if kind is Role.ARG else id(x))] for kind, x in tr.diff_roles]
    if diff_outs and binding is None:  # shapes and dtypes are fixed per program
        g = tr.graph
        plan.avals = ([Aval(g.inputs[p].shape, g.inputs[p].dtype) for p in diff_pos],
                      [Aval(g.outputs[k].shape, g.outputs[k].dtype) for k in diff_outs])
    # what specialise needs to emit this call inline
    if has_backward and identity and single and diff_outs == [0] and binding is None:
        plan.inline = InlineCall(run_trusted, diff_pos, n_fw)
    # the node of a call whose differentiable inputs are all leaves
    ns = {"new_node": _CallBackward.__new__, "Node": _CallBackward, "seq": next_sequence_nr,
          "prog": prog, "plan": plan}
    if plan.avals is not None:
        ns["in_avals"], ns["out_avals"] = plan.avals
    # (a symbolic program's avals are the call's: passed in)
    header = "def leaf_node(saved, leaves, replay):" if binding is None else \
        "def leaf_node(saved, leaves, replay, in_avals, out_avals):"
    source = "\n".join([header] + _node_lines(
        "saved", "leaves", "replay", "[t._version_counter.v for t in replay]") +
        ["    return node"]) + "\n"
    exec(builtins.compile(source, f"<node of {prog.name}>", "exec"), ns)
    leaf_node = ns["leaf_node"]
    make, mode = Tensor._make, _mode

    def call(leaves, trusted, values=None):
        if identity and len(leaves) == len(arg_roles):
            replay = leaves
        elif arg_roles is not None:
            replay = [leaves[i] for i in arg_roles]
        else:
            replay = [leaves[x] if is_arg else x for is_arg, x in roles]
        vals = [t._value for t in replay]
        if run_fw is None or not mode.grad_enabled:
            if binding is not None:
                vals += prog.symbol_args("inference", values or binding.values(leaves))
            outs = prog.runner("inference")(*vals)
            outs = [make(v) for v in outs[:n_out]]
            return outs[0] if single else unflatten(out_tree, outs)
        if binding is not None:
            if values is None:
                values = binding.values(leaves)
            vals += prog.symbol_args("forward", values)
        outs = (run_trusted if trusted else run_fw)(*vals)
        saved = outs[n_fw:]
        outs = [make(outs[0])] if single else [make(v) for v in outs[:n_out]]
        if diff_outs:
            diff_inputs = [replay[j] for j in diff_pos]
            prog.first_call_state(diff_inputs, outs)
            if binding is None:
                avals = plan.avals
            else:  # shapes vary per call; the backward gets the forward's symbol values
                saved = list(saved) + [values]
                avals = ([Aval(t._value.shape, t.dtype) for t in diff_inputs],
                         [Aval(outs[k]._value.shape, outs[k].dtype) for k in diff_outs])
            for t in diff_inputs:
                if t.grad_fn is not None:  # a non-leaf input: its edge is fixed now
                    node = CompiledBackward(prog, saved, diff_inputs, *avals, replay)
                    break
            else:
                node = leaf_node(saved, diff_inputs, replay, *avals) if binding is not None \
                    else leaf_node(saved, diff_inputs, replay)
            for nr, k in enumerate(diff_outs):
                o = outs[k]
                o._requires_grad, o.grad_fn, o._output_nr = True, node, nr
        return outs[0] if single else unflatten(out_tree, outs)
    plan.call = call
    return plan


def make_fast_backward(prog, plan):
    """`fast_backward(t, retain_graph) -> bool`, a _CallBackward's `loss.backward()` for
    this program as straight-line code: False, having done nothing, where the general
    engine is needed (hooks on the output, its node or a leaf, retain_grad, profiling,
    anomaly mode, tracing, a freed graph, an input modified in place, a leaf passed twice,
    an output that is not a floating scalar); else it runs the backward program on the
    saved values and the implicit gradient and writes the leaves' .grad."""
    tr = prog.trace
    run, owned = prog.runner("backward"), None
    symbolic = prog.binding is not None  # saved values end with the forward's symbol values
    if prog.backend != "interpret":
        owned = prog.owned_outputs("backward")
        # its inputs: saved values made by the forward program, and implicit_grads'
        # arrays (C-contiguous, writeable, of the program's avals): no input checks
        if not symbolic:
            driver = prog.compiled_graph("backward").plan
            run = driver.runner(trusted=len(driver.in_slots))
    slots, k = [], 0  # (diff input, backward output, owned) per gradient it makes
    for j, present in enumerate(tr.grad_present):
        if present:
            slots.append((j, k, bool(owned and owned[k])))
            k += 1
    n_saved = len(prog.forward.outputs) - prog.n_fw_outputs
    n_replay, n_leaves = len(tr.roles), len(tr.diff_roles)
    g = {"profiling": profiling, "_mode": _mode, "current_builder": current_builder,
         "plain_leaves": plain_leaves, "run": run, "make": Tensor._make,
         "accumulate_array": accumulate_array, "prog": prog, "plan": plan}
    saved = [f"s{i}" for i in range(n_saved)]
    g_out = prog.trace.graph.outputs
    out_static = all(is_static_shape(g_out[k].shape) for k in tr.diff_outs)
    # a symbolic program's backward takes the forward's symbol values, as one tuple
    bw_symbols = "(" + "".join(f"values[{s!r}], " for s in prog.symbols("backward")) + ")" \
        if symbolic and prog.symbols("backward") else None
    if symbolic and not (out_static and len(tr.diff_outs) == 1):
        # the output shapes are the call's: the implicit grads per shapes
        get_grads = ["    grads = plan.implicit_grads(t._output_nr, node._out_avals)",
                     "    if grads is False:", "        return False"]
        if len(tr.diff_outs) > 1:
            get_grads.append(f"    reach = prog.grads_reached([i == t._output_nr for i in "
                             f"range({len(tr.diff_outs)})])")
        grad_args = ["*grads"] + ([bw_symbols] if bw_symbols else [])
    elif len(tr.diff_outs) == 1:
        # (a symbolic program's one output of a static shape: its grads made once)
        grads = plan.implicit_grads(0, [Aval(g_out[k].shape, g_out[k].dtype)
                                        for k in tr.diff_outs] if symbolic else None)
        if grads is False:
            return _no_fast_backward
        g.update({f"g{i}": a for i, a in enumerate(grads)})
        get_grads, grad_args = [], [f"g{i}" for i in range(len(grads))]
        if bw_symbols:
            grad_args.append(bw_symbols)
    else:
        # the other outputs get no gradient: a leaf only they reach gets no .grad
        get_grads = ["    grads = plan.implicit_grads(t._output_nr)",
                     "    if grads is False:", "        return False",
                     f"    reach = prog.grads_reached([i == t._output_nr for i in "
                     f"range({len(tr.diff_outs)})])"]
        grad_args = ["*grads"]
    lines = [
        "def fast_backward(t, retain_graph):",
        "    node = t.grad_fn",
        "    if node._saved_arrays is None or not plain_leaves(node._leaves):",
        "        return False"] + get_grads
    if n_replay:
        lines += [f"    {''.join(f'r{i}, ' for i in range(n_replay))}= node._replay",
                  "    v = node._versions",
                  "    if " + " or ".join(f"r{i}._version_counter.v != v[{i}]"
                                        for i in range(n_replay)) + ":",
                  "        return False  # modified in place: the general path raises"]
    if n_saved or symbolic:
        lines.append(f"    {''.join(f'{s}, ' for s in saved)}"
                     f"{'values, ' if symbolic else ''}= node._saved_arrays")
    lines += [f"    outs = run({', '.join(saved + grad_args)})",
              "    if not retain_graph:",
              "        node._release()",
              f"    {''.join(f'l{i}, ' for i in range(n_leaves))}= node._leaves"]
    for j, k, own in slots:
        if own:
            body = [f"    if l{j}._grad is None:",
                    f"        l{j}._grad = make(outs[{k}])",
                    "    else:",
                    f"        accumulate_array(l{j}, outs[{k}], True)"]
        else:
            body = [f"    accumulate_array(l{j}, outs[{k}], False)"]
        if len(tr.diff_outs) > 1:
            body = [f"    if reach[{j}]:"] + ["    " + b for b in body]
        lines += body
    lines.append("    return True")
    source = "\n".join(lines) + "\n"
    exec(builtins.compile(source, f"<backward of {prog.name}>", "exec"), g)
    fast_backward = g["fast_backward"]
    fast_backward.source = source
    return fast_backward


class _CallBackward(CompiledBackward):
    """The grad_fn the specialised call path gives a compiled function's outputs when every
    differentiable input is a leaf. It is made without Node.__init__, and its edges (an
    AccumulateGrad per leaf) only when something reads `next_functions` (the general engine,
    a user walking the graph). A plain `loss.backward()` runs the backward program and
    accumulates into the leaves' .grad directly: `_fast_backward`, set per node to its
    program's make_fast_backward()."""

    @functools.cached_property
    def next_functions(self):
        return tuple((t._grad_accumulator(), 0) for t in self._leaves)


def _no_fast_backward(t, retain_graph):
    return False



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
    `_tensor_args_key(args, None) == key` (and the lifted guards hold), and every argument's
    array is C-contiguous, aligned and writeable, so the forward driver skips its input
    checks. For a single-output loss of leaf parameters (the common training step) it also
    makes the output and its _CallBackward inline. MISS sends the call to the full lookup,
    which decides (and warns, recompiles) as before."""
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
    if prog.trace.grad_guards or prog.trace.lifted_guards or prog.trace.identity_guards:
        lines += ["    if not lifted_ok(prog):", "        return MISS"]
    if prog.trace.mutations and n:
        # the program writes in place: arguments that share memory with one another or with
        # a lifted tensor need their own trace (or eager), which the full lookup decides
        g["aliases_lifted"] = aliases_lifted
        lines += [f"    if len({{{', '.join(f'id(a{i}._version_counter)' for i in range(n))}, }})"
                  f" != {n} or aliases_lifted(prog, args) is not None:",
                  "        return MISS"]
    plan = prog.call_plan()
    inline = plan.inline if plan.call is not None and grad_enabled else None
    if prog.binding is not None:
        # symbolic sizes (None in the key): read once here, with the shape guards
        g["read"] = prog.binding.values
        lines += ["    values = read(args)", "    if values is None:", "        return MISS",
                  "    return prog(args, True, values)"]
    elif inline is None:
        lines.append("    return prog(args, True)")
    else:
        leaves = [f"a{j}" for j in inline.diff_pos]
        g.update(run=inline.run, make=Tensor._make, new_node=_CallBackward.__new__,
                 Node=_CallBackward, seq=next_sequence_nr, in_avals=plan.avals[0],
                 out_avals=plan.avals[1], plan=plan)
        lines += [
            "    if " + GENERAL_PATH_NEEDED + " or "
            + " or ".join(f"{a}.grad_fn is not None" for a in leaves) + ":",
            "        return prog(args, True)  # the general path",
            f"    outs = run({', '.join(f'v{i}' for i in range(n))})",
            "    out = make(outs[0])"] + _node_lines(
                f"outs[{inline.n_fw}:]", f"[{', '.join(leaves)}]", "args",
                f"[{', '.join(f'a{i}._version_counter.v' for i in range(n))}]") + [
            "    out._requires_grad = True",
            "    out.grad_fn = node",
            "    return out"]
    source = "\n".join(lines) + "\n"
    exec(builtins.compile(source, f"<call of {prog.name}>", "exec"), g)
    call = g["call"]
    call.program, call.source = prog, source
    return call

