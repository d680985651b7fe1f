"""Dump what the code generator makes of a fixed set of programs, to compare two checkouts.

    python benchmarks/codegen_sources.py OUT_DIR [--quick]

For each program (the workloads W1-W6 of bench_programs.py and a few models: a small GPT
and LeNet training step, an unrolled LSTM, views/pad/gather/scatter, argmax, column sums,
integer and float64 kernels), each of its graphs (forward, backward, inference) is
scheduled and emitted exactly as `codegen.compile_graph` does, without compiling it: the
file `<program>.<graph>.txt` holds the schedule (each step: kind, loop structure, nodes,
reads, writes; the refused fusions) and the Numba module source of every kernel. A
restructuring of the scheduler or the emitters that must not change the generated code is
checked with `diff -r` of the dumps made before and after it.

The programs are traced with the interpret backend (the graphs are the same as the numba
backend's: the backend only chooses how a graph runs), so nothing here waits for Numba.
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import aotgrad as ag  # noqa: E402
import aotgrad.nn.functional as F  # noqa: E402
from aotgrad.codegen import low_precision  # noqa: E402
from aotgrad.codegen.emitter import emit_kernel, module_source  # noqa: E402
from aotgrad.codegen.scheduler import Kernel, Scheduler  # noqa: E402
from aotgrad.ir.passes import cse  # noqa: E402


def _names(vs):
    return ", ".join(v.name for v in vs)


def describe_step(st):
    head = f"{st.kind.value}"
    if isinstance(st, Kernel):
        head += (f" {st.ktype.value} domain={list(st.domain)} k={st.k}"
                 f" reds=[{', '.join(r.outputs[0].name for r in st.reds)}]"
                 f" col_reds=[{', '.join(r.outputs[0].name for r in st.col_reds)}]"
                 f" row_outputs=[{_names(st.row_outputs)}]")
    if st.out_view is not None:
        head += f" out_view=({st.out_view[0].name}, {st.out_view[1]})"
    if st.view_expr is not None:
        head += f" view_expr={st.view_expr}"
    nodes = " ".join(f"{n.outputs[0].name}={n.prim.name}" for n in st.nodes)
    return f"{head}\n    nodes: {nodes}\n    in: {_names(st.inputs)}\n    out: {_names(st.outputs)}"


def lower_text(graph):
    """The schedule and kernel sources codegen.compile_graph makes of `graph`, as text."""
    graph, _, _ = low_precision.widen(graph)
    graph = cse(graph, keep_outputs=True)
    scheduler = Scheduler(graph)
    sch = scheduler.run()
    parts = ["# steps"]
    parts += [describe_step(st) for st in sch.steps]
    parts.append("# refused")
    parts += [f"{what}: {why}" for what, why in sch.refused]
    parts.append("# materialised")
    parts.append(" ".join(sorted(v.name for v in sch.materialised)))
    specs, helpers = [], set()
    for st in sch.steps:
        if isinstance(st, Kernel):
            own = set()
            spec = emit_kernel(scheduler, st, own)
            specs.append(spec)
            helpers |= own
            args = " ".join(f"{a.kind}:{a.var.name if a.var is not None else a.value}"
                            f"{list(a.shape) if a.shape is not None else ''}" for a in spec.args)
            parts.append(f"# kernel {st.describe()}\n# parallel={spec.parallel} "
                         f"checks={spec.checks}\n# args {args}\n"
                         + module_source([spec], own))
    parts.append("# module\n" + module_source(specs, helpers))
    return "\n".join(parts) + "\n"


# -- the programs ------------------------------------------------------------------------
def _t(rng, *shape, grad=True, dtype=np.float32):
    return ag.tensor(rng.standard_normal(shape).astype(dtype), requires_grad=grad)


def _workloads(quick):
    import bench_programs
    out = {}
    for key, (fn, make) in bench_programs.WORKLOADS.items():
        if quick and key in ("W1", "W3", "W6"):
            continue     # large inputs evaluated by numpy: skipped in a quick dump
        out[key] = (fn, make, True)
    return out


def _models(quick):
    from models import build
    out = {}
    for name in ("gpt", "lenet"):
        model, _, batches = build(ag, name, quick=True, steps=1)

        def loss(x, y, model=model):
            return model(x, y)
        out[name] = (loss, lambda b=batches[0]: b, True)
    return out


def _small_programs():
    rng = np.random.default_rng(0)

    def lstm(x, h, c, w_ih, w_hh, b):
        for t in range(x.shape[0]):
            g = x[t] @ w_ih.T + h @ w_hh.T + b
            i, f, gg, o = g.chunk(4, dim=1)
            c = ag.sigmoid(f) * c + ag.sigmoid(i) * ag.tanh(gg)
            h = ag.sigmoid(o) * ag.tanh(c)
        return (h * h).sum() + c.sum()

    def views(x, y):
        a = x.transpose(0, 1)[1:5].flip(0) * y[:, 3:7].transpose(0, 1)
        return (F.pad(a, (1, 2, 0, 3)) ** 2).sum() + x[:, ::2].exp().mean()

    def gather(x, idx, src):
        g = x.gather(1, idx)
        s = ag.zeros_like(x).scatter_add(1, idx, src)
        return (g * 2).sum() + (s * x).sum() + x.argmax(dim=1).float().sum()

    def colsum(x, w, b):
        y = ag.relu(x @ w + b)
        return y.sum(0).pow(2).sum() + y.max(dim=0).values.sum() + y.min(dim=1).values.mean()

    def softmax_attention(q, k, v):
        att = F.softmax(q @ k.transpose(-2, -1) * 0.125, dim=-1)
        return ((att @ v).transpose(1, 2) ** 2).sum()

    def integers(a, b):
        return ((a * b + 3) // 2).sum(), (a & b) | (a << 2), (a > b).sum()

    def float64(x):
        return (ag.log1p(x * x) + ag.erf(x) * ag.rsqrt(x * x + 1)).sum()

    def norms(x, g):
        y = F.layer_norm(x, (x.shape[-1],), g) + F.gelu(x)
        return y.norm() + ag.clamp(x, -0.5, 0.5).sum() + F.log_softmax(x, dim=-1).mean()

    idx = ag.tensor(rng.integers(0, 16, (8, 1)))
    return {
        "lstm": (lstm, lambda: (_t(rng, 6, 4, 8, grad=False), _t(rng, 4, 16), _t(rng, 4, 16),
                                _t(rng, 64, 8), _t(rng, 64, 16), _t(rng, 64)), True),
        "views": (views, lambda: (_t(rng, 6, 9), _t(rng, 6, 9)), True),
        "gather": (gather, lambda: (_t(rng, 8, 16), idx, _t(rng, 8, 1)), True),
        "colsum": (colsum, lambda: (_t(rng, 512, 64), _t(rng, 64, 96), _t(rng, 96)), True),
        "attention": (softmax_attention, lambda: (_t(rng, 2, 4, 32, 16), _t(rng, 2, 4, 32, 16),
                                                  _t(rng, 2, 4, 32, 16)), True),
        "integers": (integers, lambda: (ag.tensor(rng.integers(-50, 50, (7, 33))),
                                        ag.tensor(rng.integers(0, 5, (7, 33)))), False),
        "float64": (float64, lambda: (_t(rng, 300, 40, dtype=np.float64),), True),
        "norms": (norms, lambda: (_t(rng, 64, 48), _t(rng, 48)), True),
        "large_rows": (norms, lambda: (_t(rng, 2048, 256), _t(rng, 256)), True),
    }


def programs(quick=False):
    out = dict(_workloads(quick))
    out.update(_models(quick))
    out.update(_small_programs())
    return out


def graphs_of(fn, make, backward):
    """The graphs of the programs `fn` compiles for the inputs `make()` gives."""
    ag.manual_seed(0)
    cf = ag.compile(fn, backend="interpret", dynamic=False)
    args = make()
    out = cf(*args)
    if backward:
        loss = out[0] if isinstance(out, tuple) else out
        loss.backward()
    found = []
    for prog in cf.cache.values():
        for which in ("forward", "backward", "inference"):
            g = getattr(prog, which, None)
            if g is not None:
                found.append((f"{prog.name}.{which}", g))
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--quick", action="store_true", help="skip the workloads with large inputs")
    ap.add_argument("--only", nargs="*", help="program names to dump")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    for name, (fn, make, backward) in programs(a.quick).items():
        if a.only and name not in a.only:
            continue
        for which, graph in graphs_of(fn, make, backward):
            path = os.path.join(a.out, f"{name}.{which}.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write(lower_text(graph))
            print(path, flush=True)


if __name__ == "__main__":
    main()
