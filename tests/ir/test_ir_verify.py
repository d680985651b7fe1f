"""ir.verify (a graph's invariants: defined before use, shapes and dtypes by the prims' shape
rules, outputs defined), the verified passes, and the stage history a dump writes."""
import os
import subprocess
import sys

import numpy as np
import pytest

import aotgrad as ag
from aotgrad import ir
from aotgrad.ir import dtypes as dt
from aotgrad.ir import passes, prims, verifier
from aotgrad.ir.core import Aval, Graph, GraphBuilder, Node, Var, evaluate
from aotgrad.ir.printer import format_graph, load_graph_source
from aotgrad.runtime.tensor import Tensor
from aotgrad.testing import assert_close

F32 = dt.float32


def _graph():
    """x: f32[2,3] -> (sum(exp(x), dims=(1,)),)"""
    with GraphBuilder("g") as b:
        x = b.add_input(Aval((2, 3), F32), "x")
        y = prims.exp.bind(x)
        b.graph.outputs.append(prims.reduce_sum.bind(y, dims=(1,)))
    return b.graph


def test_a_traced_graph_verifies():
    g = _graph()
    assert ir.verify(g) is g


def test_a_wrong_shaped_node_is_caught():
    g = _graph()
    exp = g.nodes[0]
    bad = Var(exp.outputs[0].name, (3, 2), F32)   # exp keeps its input's shape
    g.nodes[0] = Node(exp.prim, exp.inputs, [bad], exp.params)
    g.nodes[1] = Node(g.nodes[1].prim, [bad], g.nodes[1].outputs, g.nodes[1].params)
    with pytest.raises(ir.VerifyError, match=r"node 0 .*prims\.exp.*f32\[3,2\].*f32\[2,3\]"):
        ir.verify(g)


def test_a_wrong_dtype_is_caught():
    g = _graph()
    s = g.nodes[1]
    g.nodes[1] = Node(s.prim, s.inputs, [Var(s.outputs[0].name, (2,), dt.float64)], s.params)
    g.outputs = g.nodes[1].outputs
    with pytest.raises(ir.VerifyError, match=r"node 1 .*f64\[2\].*shape rule gives f32\[2\]"):
        ir.verify(g)


def test_a_use_before_definition_is_caught():
    g = _graph()
    g.nodes.reverse()
    with pytest.raises(ir.VerifyError, match=r"node 0 .*uses t0 before its definition"):
        ir.verify(g, "a_pass")
    with pytest.raises(ir.VerifyError, match=r"invalid graph g after a_pass"):
        ir.verify(g, "a_pass")


def test_undefined_values_and_redefinitions_are_caught():
    g = _graph()
    stray = Var("stray", (2, 3), F32)
    g.nodes[1] = Node(g.nodes[1].prim, [stray], g.nodes[1].outputs, g.nodes[1].params)
    with pytest.raises(ir.VerifyError, match="uses stray, which nothing defines"):
        ir.verify(g)
    g = _graph()
    g.outputs = [stray]
    with pytest.raises(ir.VerifyError, match="output 'stray' is not defined"):
        ir.verify(g)
    g = _graph()
    g.nodes.append(g.nodes[0])
    with pytest.raises(ir.VerifyError, match="t0 is defined twice"):
        ir.verify(g)
    g = _graph()
    g.inputs.append(Var(g.nodes[0].outputs[0].name, (1,), F32))
    with pytest.raises(ir.VerifyError, match="two values are named t0"):
        ir.verify(g)


def test_a_node_its_shape_rule_rejects_is_caught():
    g = _graph()
    s = g.nodes[1]
    g.nodes[1] = Node(s.prim, s.inputs, s.outputs, {"dims": (5,)})
    with pytest.raises(ir.VerifyError, match=r"shape rule of prims\.reduce_sum rejects it"):
        ir.verify(g)
    g.nodes[1] = Node(s.prim, s.inputs, s.outputs, {"axis": 1})
    with pytest.raises(ir.VerifyError, match="cannot take these params"):
        ir.verify(g)


def test_the_suite_verifies_every_pass():
    """tests/conftest.py turns checking on; a pass that breaks the graph fails at once."""
    assert verifier.enabled()

    @verifier.verified
    def drop_first_node(graph):
        return Graph(graph.inputs, graph.nodes[1:], graph.outputs, graph.name)
    with pytest.raises(ir.VerifyError, match="after drop_first_node.*nothing defines"):
        drop_first_node(_graph())


def test_verification_is_off_by_default():
    env = {k: v for k, v in os.environ.items() if k != "AOTGRAD_VERIFY"}
    code = "from aotgrad.ir import verifier; print(verifier.enabled())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "False"


def _trace(fn, *shapes):
    with GraphBuilder("trace") as b:
        ins = [Tensor._make(b.add_input(Aval(s, F32), f"a{i}")) for i, s in enumerate(shapes)]
        out = fn(*ins)
        b.graph.outputs.append(out._value)
    return b.graph


def test_reduce_before_reshape_builds_its_node_through_the_shape_rule():
    g = _trace(lambda x: x.reshape(4, 3, 8).sum((0, 1)), (4, 3, 2, 4))
    out = passes.reduce_before_reshape(g)
    reduced = [n for n in out.nodes if n.prim is prims.reduce_sum]
    assert len(reduced) == 1 and reduced[0].inputs[0] is g.inputs[0]
    assert reduced[0].outputs[0].shape == (2, 4)   # x's own trailing dims
    ir.verify(out)
    x = np.random.default_rng(0).standard_normal((4, 3, 2, 4)).astype(np.float32)
    assert_close(evaluate(out, [x])[0], evaluate(g, [x])[0], rtol=1e-6, atol=0, equal_nan=True)


def test_the_pipeline_records_each_stage():
    g = _trace(lambda x, w: (x @ w.t()).reshape(2, 2, 5).sum((0, 1)).exp(), (4, 3), (5, 3))
    hist = passes.run_pipeline(g)
    assert hist.names() == ["trace", "simplify", "fold_transposes", "reduce_before_reshape",
                            "cse", "dce"]
    assert hist.stages[0].graph is g
    assert format_graph(hist.final) == format_graph(passes.optimize(g))
    rng = np.random.default_rng(1)
    args = [rng.standard_normal((4, 3)).astype(np.float32),
            rng.standard_normal((5, 3)).astype(np.float32)]
    want = evaluate(g, args)[0]
    for stage in hist.stages:
        ir.verify(stage.graph, stage.name)
        assert_close(evaluate(stage.graph, args)[0], want, rtol=1e-5, atol=0, equal_nan=True)
    # fold_transposes moved the transpose into the contraction, dce dropped it
    dot, = [n for n in hist.stages[2].graph.nodes if n.prim is prims.dot_general]
    assert dot.inputs == g.inputs
    assert any(n.prim is prims.transpose for n in hist.stages[4].graph.nodes)
    assert not any(n.prim is prims.transpose for n in hist.final.nodes)
    assert "# ---- stage 2: fold_transposes ----" in str(hist)


def _layernorm_gelu(x, g, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return ag.nn.functional.gelu((x - mu) / (var + 1e-5).sqrt() * g + b)


def test_the_dump_writes_the_trace_and_each_pass(tmp_path):
    cf = ag.compile(_layernorm_gelu, backend="interpret", dump=str(tmp_path))
    rng = np.random.default_rng(2)
    x, g, b = (ag.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
               for s in ((4, 8), (8,), (8,)))
    prog = cf.ir(x, g, b)
    d = tmp_path / prog.name
    stage_files = sorted(p.name for p in d.glob("stage*.py"))
    assert stage_files == ["stage00_trace.py", "stage01_simplify.py",
                           "stage02_fold_transposes.py", "stage03_reduce_before_reshape.py",
                           "stage04_cse.py", "stage05_dce.py"]
    assert prog.graphs.stages.final is prog.joint
    # the raw trace and every pass's result run, and agree with the joint graph
    args = [t.detach().numpy() for t in (x, g, b)] + [np.ones((4, 8), np.float32)]
    want = evaluate(prog.joint, args)
    for name in stage_files:
        fn = load_graph_source((d / name).read_text(encoding="utf-8"))
        got = fn(*args)
        assert len(got) == len(want), name
        for a, e in zip(got, want):
            assert_close(a, e, rtol=1e-5, atol=1e-6, equal_nan=True, msg=name)
    last = (d / "stage05_dce.py").read_text(encoding="utf-8")
    joint = (d / "joint.py").read_text(encoding="utf-8")
    assert last.replace("def dce(", "def joint(") == joint
