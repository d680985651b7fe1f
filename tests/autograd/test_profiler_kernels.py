"""The profiler shows a compiled program's steps: each fused kernel, matrix product and
numpy step is an event of its own, with shapes, fused node count, bytes and flops, in the
table and in the Chrome trace; without a profiler the program's driver reads no clock."""
import json
import threading

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.autograd import profiler
from aotgrad.codegen.scheduler import Kernel, StepKind
from aotgrad.testing import assert_close

B, T, K, N = 4, 20, 64, 96      # (B*T) x K @ K x N: large enough for the BLAS path


def _model():
    rng = np.random.default_rng(0)
    x = ag.tensor(rng.standard_normal((B, T, K)).astype(np.float32))
    w = ag.tensor(rng.standard_normal((K, N)).astype(np.float32) * 0.1, requires_grad=True)

    @ag.compile
    def f(x, w):
        return (ag.tanh(x @ w) * 2.0).sum()
    return f, x, w


def _steps(f, which):
    prog = next(iter(f.cache.values()))
    return prog.compiled_graph(which).schedule.steps


def test_compiled_steps_are_events_with_their_work():
    f, x, w = _model()
    f(x, w).backward()                      # compile outside the profiled region
    g_before = w.grad.numpy().copy()
    w.grad = None
    with profiler.profile() as prof:
        loss = f(x, w)
        loss.backward()
    # profiling changes nothing of the results
    np.testing.assert_array_equal(w.grad.numpy(), g_before)
    w.grad = None
    eager = (ag.tanh(x @ w) * 2.0).sum()
    eager.backward()
    assert_close(w.grad.numpy(), g_before, rtol=1e-4, atol=1e-4, equal_nan=True)

    events = prof.function_events
    shown = [e for e in events if e.bytes]
    want = sum(1 for which in ("forward", "backward") for st in _steps(f, which)
               if isinstance(st, Kernel) or st.kind in (StepKind.DOT, StepKind.REFERENCE))
    assert len(shown) == want
    products = [e for e in shown if e.name.startswith("matmul")]
    kernels = [e for e in shown if e.name.startswith("kernel")]
    assert len(products) >= 2 and kernels      # forward x @ w, backward x^T @ dy
    fw = next(e for e in products if e.input_shapes == [[B, T, K], [K, N]])
    assert fw.flops == 2 * B * T * K * N
    assert fw.bytes == 4 * (B * T * K + K * N + B * T * N)
    assert fw.name == f"matmul ({B * T}x{K} @ {K}x{N}) float32"
    assert fw.gflops_per_s == pytest.approx(fw.flops / (fw.cpu_time_total * 1e3))
    for e in kernels:
        assert e.fused_nodes >= 1 and e.flops == 0
        assert e.cpu_parent is not None and e.cpu_parent.name.startswith(f"{f.name}_0.")
    # each step lies inside its program's event
    for e in shown:
        p = e.cpu_parent
        assert p.time_range.start <= e.time_range.start <= e.time_range.end <= p.time_range.end


def test_table_and_chrome_trace(tmp_path):
    f, x, w = _model()
    f(x, w).backward()
    with profiler.profile() as prof:
        for _ in range(2):
            f(x, w).backward()
    avg = {e.key: e for e in prof.key_averages()}
    fw_name = f"matmul ({B * T}x{K} @ {K}x{N}) float32"
    assert avg[fw_name].count == 2
    assert avg[fw_name].flops == 2 * 2 * B * T * K * N
    table = prof.key_averages().table(sort_by="self_cpu_time_total")
    assert "GFLOP/s" in table and "GB/s" in table
    assert fw_name in table

    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in trace if e.get("name") == "thread_name"}
    assert lanes[threading.get_ident()] == threading.current_thread().name
    mm = [e for e in trace if e["name"] == fw_name]
    assert len(mm) == 2
    assert mm[0]["args"]["flops"] == 2 * B * T * K * N
    assert mm[0]["args"]["input_shapes"] == [[B, T, K], [K, N]]
    assert mm[0]["tid"] in lanes


def test_each_thread_its_own_lane():
    f, x, w = _model()
    with ag.no_grad():
        f(x, w)
    seen = {}

    def run():
        with ag.no_grad():
            f(x, w)
        seen["tid"] = threading.get_ident()
    with profiler.profile() as prof:
        t = threading.Thread(target=run, name="worker-lane")
        t.start()
        t.join()
    steps = [e for e in prof.function_events if e.bytes]
    assert steps and all(e.thread == seen["tid"] for e in steps)
    assert prof._thread_names[seen["tid"]] == "worker-lane"


def test_no_clock_without_profiler():
    f, x, w = _model()
    f(x, w).backward()
    prog = next(iter(f.cache.values()))
    for which in ("forward", "backward"):
        plan = prog.compiled_graph(which).plan
        assert "_clock" not in plan.source
    # no profiler, no instrumented driver built
    assert all(prog.compiled_graph(w_).plan._profiled is None for w_ in ("forward", "backward"))
