"""aotgrad.explain(fn, *args): graphs, graph breaks, guards and op counts, in words."""
import warnings

from aotgrad.compiler import fused_call
from aotgrad.compiler.api import RUN_EAGERLY, CompiledFunction
from aotgrad.compiler.guards import _guard_key
from aotgrad.ir import symbolic
from aotgrad.runtime import dispatch
from aotgrad.tracer.pytree import flatten



def _guard_text(k):
    """One argument's part of the guard key, in words."""
    if k[0] == "S":
        return f"{k[1]} == {k[2]!r}"
    _, shape, dtype, requires_grad, inference = k
    return f"shape={shape} dtype={dtype} requires_grad={requires_grad}" + \
        (" (an inference tensor)" if inference else "")

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
            if prog is RUN_EAGERLY:  # run eagerly to find every break, not only the first
                cf.fn(*args, **kwargs)
    finally:
        dispatch.break_recorder = prev
    key = _guard_key(leaves, cf.module)
    lines.append(f"guards: grad_mode={key[0]}; " + "; ".join(
        f"arg{i}: {_guard_text(k)}" for i, k in enumerate(key[2:])
        if isinstance(k, tuple) and k and k[0] in ("T", "S")))
    if len(key) > 2 and isinstance(key[-1], tuple) and key[-1] and key[-1][0] == "A" and \
            key[-1][1]:
        lines.append("aliasing arguments (a program for this pattern only): " + ", ".join(
            f"arg{i} {'is' if same else 'shares memory with'} arg{j}"
            for i, j, same in key[-1][1]))
    if prog is not RUN_EAGERLY and (prog.trace.identity_guards or prog.trace.lifted_guards):
        lines.append("guards on state the trace read (a change traces again):")
        lines += [f"  {path} == {expected!r}" if is_value else
                  f"  {path} is the same {type(expected).__name__} (id {id(expected):#x})"
                  for _, _, expected, is_value, path in prog.trace.identity_guards]
        at = {id(e): path for _, _, e, is_value, path in prog.trace.identity_guards
              if not is_value}
        lines += [f"  {at.get(id(t), 'a tensor found by no path (rebinding it is not seen)')}"
                  f": shape={tuple(v.shape)} dtype={t.dtype} requires_grad={rg}"
                  for t, v, rg in prog.trace.lifted_guards]
    lines += _dynamic_lines(cf, prog)
    all_breaks = list(dict.fromkeys(cf.graph_breaks + breaks))
    lines.append(f"graph breaks: {len(all_breaks)}")
    lines += [f"  {b}" for b in all_breaks]
    if prog is not RUN_EAGERLY:
        counts = {}
        for n in prog.joint.nodes:
            counts[n.prim.name] = counts.get(n.prim.name, 0) + 1
        g = prog.forward if prog.has_backward else prog.inference
        lines.append(f"graphs: 1; forward ops: {len(g.nodes)}; backward ops: "
                     f"{len(prog.backward.nodes) if prog.backward else 0}")
        if prog.call_plan().fused_possible:
            lines.append(f"fused forward+backward ops: {len(prog.fused.nodes)} (a call runs "
                         f"it once {fused_call.FUSED_AFTER} calls in a row were "
                         f"backpropagated at once)")
        lines.append("op counts (joint): " + ", ".join(f"{k}={v}" for k, v in
                                                      sorted(counts.items())))
        lines.append(str(prog))
    return Explanation("\n".join(lines), all_breaks, prog)


def _dynamic_lines(cf, prog):
    """The counters, the dynamic-shape decisions, and a symbolic program's symbols, guards
    and specialisations."""
    lines = [f"stats: {cf.stats}", f"dynamic: {cf.dynamic}"]
    lines += [f"  {note}" for note in cf.policy.notes]
    binding = getattr(prog, "binding", None) if prog is not RUN_EAGERLY else None
    if binding is not None:
        env = binding.env
        lines.append("symbolic sizes: " + (", ".join(
            f"{name} = {env.sources[name]}" for name in env.hints) or "none"))
        if env.guards:
            lines.append("shape guards (a call that breaks one traces again):")
            lines += [f"  {g.text}" for g in env.guards]
        for sp in env.specialised:
            lines.append(f"specialised: {sp.expr.source()} == {sp.value} ({sp.why}; "
                         + ", ".join(f"{n} = {env.sources[n]}" for n in
                                     sorted(sp.expr.free_symbols)) + ")")
        # a symbol an equality guard pins: a size matched against a static one (a weight's)
        # or against another argument's
        told = {sp.expr.source() for sp in env.specialised}
        for name, value in env.replacements().items():
            if name not in told:
                what = "specialised" if isinstance(value, int) else "unified"
                lines.append(f"{what}: {name} == {symbolic.source(value)} (a shape decision of "
                             f"the trace relied on it; {name} = {env.sources[name]})")
    return lines


class Explanation(str):
    def __new__(cls, text, breaks, program):
        s = super().__new__(cls, text)
        s.graph_breaks, s.program = breaks, (None if program is RUN_EAGERLY else program)
        return s

