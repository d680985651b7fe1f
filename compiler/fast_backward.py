"""The generated `loss.backward()` of a compiled call's output (a _CallBackward whose
inputs are leaves): the backward program on the saved values and the implicit gradient,
then the leaves' .grad written directly, as straight-line code per program
(`make_fast_backward`, made on first use by the program's CallPlan)."""
import builtins
import math

import numpy as np

from aotgrad.compiler.fused_call import counted_lines
from aotgrad.ir.symbolic import is_static_shape
from aotgrad.runtime.engine import accumulate_array, plain_leaves
from aotgrad.runtime.tensor import Tensor
from aotgrad.tracer.trace_result import Role


def make_fast_backward(prog, plan):
    """`fast_backward(t, retain_graph) -> bool`, a _CallBackward's `loss.backward()` for
    this program as straight-line code. Tensor.backward calls it only where the engine's
    `fast_path_ok(node)` holds (no hooks or retain_grad on the node, no profiler, anomaly
    mode off, not tracing); it returns False, having done nothing, where its own conditions
    fail (a freed graph, hooks or retain_grad on a leaf, a leaf passed twice, an input
    modified in place, an output that is not a floating scalar); else it runs the backward
    program on the saved values and the implicit gradient and writes the leaves' .grad."""
    tr = prog.trace
    run, owned = prog.runner("backward"), None
    symbolic = prog.binding is not None  # saved values end with the forward's symbol values
    if prog.backend != "interpret" and not prog.observed:
        owned = prog.owned_outputs("backward")
        # its inputs: saved values made by the forward program, and implicit_grads'
        # arrays (C-contiguous, writeable, of the program's avals): no input checks
        driver = prog.compiled_graph("backward").plan
        run = driver.runner(trusted=len(driver.in_slots))
    slots, k = [], 0  # (diff input, backward output, owned) per gradient it makes
    for j, present in enumerate(tr.grad_present):
        if present:
            slots.append((j, k, bool(owned and owned[k])))
            k += 1
    n_saved = len(prog.forward.outputs) - prog.n_fw_outputs
    n_leaves = len(tr.diff_roles)
    g = {"plain_leaves": plain_leaves, "run": run, "make": Tensor._make,
         "accumulate_array": accumulate_array, "prog": prog, "plan": plan}
    saved = [f"s{i}" for i in range(n_saved)]
    diff_out_vars = plan._diff_vars[1]
    out_static = all(is_static_shape(v.shape) for v in diff_out_vars)
    # a symbolic program's backward takes the forward's symbol values, as one tuple
    names = prog.binding.names if symbolic else ()
    bw_symbols = symbol_tuple(names, prog.symbols("backward")) \
        if symbolic and prog.symbols("backward") else None
    lines = [
        "def fast_backward(t, retain_graph):",
        "    node = t.grad_fn",
        "    saved = node._saved_arrays",
        "    if saved is None or not plain_leaves(node._leaves):",
        "        return False"]
    if n_saved or symbolic:
        lines.append(f"    {''.join(f'{a}, ' for a in saved)}"
                     f"{'values, ' if symbolic else ''}= saved")
    if len(tr.diff_outs) == 1 and (not symbolic or out_static):
        # one differentiable output of a static shape: its implicit grads made once
        grads = plan.implicit_grads(0, None) if not symbolic else _static_grads(diff_out_vars)
        if grads is False:
            return _no_fast_backward
        g.update({f"g{i}": a for i, a in enumerate(grads)})
        grad_args = [f"g{i}" for i in range(len(grads))]
    else:
        lines += [f"    grads = plan.implicit_grads(t._output_nr{', values' if symbolic else ''})",
                  "    if grads is False:", "        return False"]
        if len(tr.diff_outs) > 1:
            # the other outputs get no gradient: a leaf only they reach gets no .grad
            lines.append(f"    reach = prog.grads_reached([i == t._output_nr for i in "
                         f"range({len(tr.diff_outs)})])")
        grad_args = ["*grads"]
    if bw_symbols:
        grad_args.append(bw_symbols)
    checked = [i for i, (kind, _) in enumerate(tr.roles) if kind is not Role.SEED]
    if checked:  # (a seed is an array: no version)
        lines += [f"    {''.join(f'r{i}, ' for i in range(len(tr.roles)))}= node._replay",
                  "    v = node._versions",
                  "    if " + " or ".join(f"r{i}._version_counter.v != v[{i}]"
                                        for i in checked) + ":",
                  "        return False  # modified in place: the general path raises"]
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
    if plan.fused_possible:  # (a backward at once of the latest call: toward the fused call)
        lines += counted_lines()
    lines.append("    return True")
    source = "\n".join(lines) + "\n"
    exec(builtins.compile(source, f"<backward of {prog.name}>", "exec"), g)
    fast_backward = g["fast_backward"]
    fast_backward.source = source
    return fast_backward


def symbol_tuple(names, syms):
    """The expression of a graph's trailing symbol values (`syms`, in its order) from a
    call's `values` (a tuple in `names` order): `values` itself where they are the same."""
    if tuple(syms) == tuple(names):
        return "values"
    return "(" + "".join(f"values[{names.index(n)}], " for n in syms) + ")"


def _static_grads(out_vars):
    """The implicit grads of a symbolic program's one differentiable output when its shape
    is static (a loss): made once."""
    a = out_vars[0]
    if math.prod(a.shape) != 1 or not a.dtype.is_floating_point:
        return False
    return [np.ones(a.shape, a.dtype.np)]


def _no_fast_backward(t, retain_graph):
    return False
