"""The generated `loss.backward()` of a compiled call's output (a _CallBackward whose
inputs are leaves): the backward program on the saved values and the implicit gradient,
then the leaves' .grad written directly, as straight-line code per program
(`make_fast_backward`, made on first use by the program's CallPlan); and that of an output
of the fused forward+backward program (`make_fused_backward`: the gradients the call made,
handed to the leaves' .grad the same way)."""
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
    # (a seed is an array: no version)
    lines += _versions_unchanged(tr, [i for i, (kind, _) in enumerate(tr.roles)
                                      if kind is not Role.SEED])
    lines += [f"    outs = run({', '.join(saved + grad_args)})",
              "    if not retain_graph:",
              "        node._release()",
              f"    {''.join(f'l{i}, ' for i in range(n_leaves))}= node._leaves"]
    for j, k, own in slots:
        body = _grad_lines(j, k, "True" if own else None)
        if len(tr.diff_outs) > 1:
            body = [f"    if reach[{j}]:"] + ["    " + b for b in body]
        lines += body
    if plan.fused_possible:  # (a backward at once of the latest call: toward the fused call)
        lines += counted_lines()
    return _made("fast_backward", lines, f"<backward of {prog.name}>", g)


def make_fused_backward(prog, plan):
    """`fused_backward(t, retain_graph) -> bool`: the `loss.backward()` of an output made by
    the fused program (compiler/fused_call.py; Tensor.backward calls it where the engine's
    `fast_path_ok` holds). It hands the gradients the call stored on the node to the leaves'
    .grad, as the split fast backward writes them (an array owned by nobody becomes .grad
    without a copy, unless the graph is retained: a second backward hands the same gradients
    out again). It returns False, having done nothing, where the general path must run: the
    node freed or its gradients dropped, hooks on a leaf, a leaf passed twice, an input
    modified in place."""
    tr = prog.trace
    owned = prog.owned_outputs("fused") if prog.backend != "interpret" and \
        not prog.observed else None
    g = {"plain_leaves": plain_leaves, "make": Tensor._make,
         "accumulate_array": accumulate_array, "plan": plan}
    lines = [
        "def fused_backward(t, retain_graph):",
        "    node = t.grad_fn",
        "    outs = node._grads",
        "    if outs is None or not plain_leaves(node._leaves):",
        "        return False",
        *_versions_unchanged(tr, range(len(tr.roles))),
        *counted_lines(),
        "    own = not retain_graph",
        "    if own:",
        "        node._release()",
        f"    {''.join(f'l{i}, ' for i in range(len(tr.diff_roles)))}= node._leaves"]
    k = prog.n_fw_outputs
    for j, present in enumerate(tr.grad_present):
        if present:
            lines += _grad_lines(j, k, "own" if owned and owned[k] else None)
            k += 1
    return _made("fused_backward", lines, f"<fused backward of {prog.name}>", g)


def _versions_unchanged(tr, checked):
    """Lines returning False where an input among `checked` (role indices) was modified in
    place since the call (its version differs from the node's record)."""
    checked = list(checked)
    if not checked:
        return []
    return [f"    {''.join(f'r{i}, ' for i in range(len(tr.roles)))}= node._replay",
            "    v = node._versions",
            "    if " + " or ".join(f"r{i}._version_counter.v != v[{i}]" for i in checked)
            + ":",
            "        return False  # modified in place: the general path raises"]


def _grad_lines(j, k, own):
    """Lines writing output k (array `outs[k]`) into leaf j's .grad: `own` is None where the
    array is not the backward's to give away (it is accumulated into a copy), else the
    source of the condition under which it is ("True", or a flag of the function)."""
    if own is None:
        return [f"    accumulate_array(l{j}, outs[{k}], False)"]
    first = f"l{j}._grad is None" if own == "True" else f"{own} and l{j}._grad is None"
    return [f"    if {first}:",
            f"        l{j}._grad = make(outs[{k}])",
            "    else:",
            f"        accumulate_array(l{j}, outs[{k}], {own})"]


def _made(name, lines, filename, g):
    """The function `name` defined by `lines` (then `return True`), compiled in globals
    `g`, with its source text as `.source`."""
    source = "\n".join(lines + ["    return True"]) + "\n"
    exec(builtins.compile(source, filename, "exec"), g)
    fn = g[name]
    fn.source = source
    return fn


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
