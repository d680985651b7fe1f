"""autograd.profiler: events, self/total times, the table, record_function, Chrome traces."""
import json
import re
import time

import pytest

import aotgrad
from aotgrad.autograd import Function
from aotgrad.autograd import profiler
from aotgrad.runtime import profiling

HEADER = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg",
          "# of Calls"]


def _run_model():
    x = aotgrad.randn(16, 16, requires_grad=True)
    with profiler.profile() as prof:
        with profiler.record_function("forward_pass"):
            y = x
            for _ in range(3):
                y = (y * 0.5).tanh()
            loss = y.sum()
        loss.backward()
    return prof


def _rows(table):
    lines = table.splitlines()
    body = lines[3:lines.index(lines[0], 3)]
    return [re.split(r"\s{2,}", ln.strip()) for ln in body]


def test_events_for_ops_prims_backward_and_ranges():
    prof = _run_model()
    by_name = {e.key: e for e in prof.key_averages()}
    assert by_name["aten::tanh"].count == 3 and by_name["aten::mul"].count == 3
    assert by_name["TanhBackward0"].count == 3
    assert by_name["SumBackward0"].count == 1
    assert by_name["forward_pass"].count == 1
    assert by_name["prims.tanh"].count == 3
    kinds = {e.name: e.kind for e in prof.function_events}
    assert kinds["aten::tanh"] == "op" and kinds["prims.tanh"] == "prim"
    assert kinds["TanhBackward0"] == "backward" and kinds["forward_pass"] == "user"
    # the range contains the forward ops but not the backward nodes
    fp = next(e for e in prof.function_events if e.name == "forward_pass")
    child_names = {c.name for c in fp.cpu_children}
    assert {"aten::mul", "aten::tanh", "aten::sum"} <= child_names and "TanhBackward0" not in child_names


def test_self_and_total_times_are_consistent():
    prof = _run_model()
    events = prof.function_events
    for e in events:
        assert e.cpu_time_total >= 0 and e.self_cpu_time_total >= -1e-9
        assert e.self_cpu_time_total <= e.cpu_time_total + 1e-9
        for c in e.cpu_children:
            assert c.cpu_parent is e
            assert e.time_range.start <= c.time_range.start <= c.time_range.end \
                <= e.time_range.end
        assert abs(e.cpu_time_total - e.self_cpu_time_total -
                   sum(c.cpu_time_total for c in e.cpu_children)) < 1e-6
    top_total = sum(e.cpu_time_total for e in events if e.cpu_parent is None)
    assert prof.self_cpu_time_total == pytest.approx(top_total, rel=1e-9)
    avg = {e.key: e for e in prof.key_averages()}["aten::tanh"]
    tanh_events = [e for e in events if e.name == "aten::tanh"]
    assert avg.cpu_time_total == pytest.approx(sum(e.cpu_time_total for e in tanh_events))
    assert avg.cpu_time == pytest.approx(avg.cpu_time_total / 3)


def test_op_events_take_pytorch_names_and_input_shapes():
    x = aotgrad.randn(10, 10)
    lin1, lin2 = aotgrad.nn.Linear(20, 30), aotgrad.nn.Linear(30, 40)
    with profiler.profile(record_shapes=True) as prof:
        x * 2 + 4
        lin2(lin1(aotgrad.randn(128, 20)))
        aotgrad.linalg.inv(aotgrad.eye(3))
    events = prof.function_events
    names = {e.name for e in events}
    assert {"aten::mul", "aten::add", "aten::linear", "aten::linalg_inv"} <= names
    shapes = {e.name: [] for e in events}
    for e in events:
        shapes[e.name].append(e.input_shapes)
    assert [[10, 10], []] in shapes["aten::mul"]  # a number argument: []
    assert shapes["aten::linear"] == [[[128, 20], [30, 20], [30]], [[128, 30], [40, 30], [40]]]
    with profiler.profile() as prof:  # without record_shapes: none
        x * 2
    assert all(e.input_shapes is None for e in prof.function_events)


def test_record_function_measures_wall_time():
    with profiler.profile() as prof:
        with profiler.record_function("sleepy"):
            time.sleep(0.02)
    ev, = prof.function_events
    assert ev.name == "sleepy" and ev.cpu_time_total >= 19_000  # microseconds
    assert ev.self_cpu_time_total == ev.cpu_time_total


def test_table_columns_sorting_and_limit():
    prof = _run_model()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=5)
    lines = table.splitlines()
    assert set(lines[0]) <= {"-", " "} and lines[0] == lines[2]
    assert re.split(r"\s{2,}", lines[1].strip()) == HEADER
    rows = _rows(table)
    assert len(rows) == 5
    assert lines[-1].startswith("Self CPU time total: ")

    def us(s):
        unit = re.search(r"[a-z]+$", s).group(0)
        return float(s[:-len(unit)]) * {"us": 1, "ms": 1e3, "s": 1e6}[unit]

    selfs = [us(r[2]) for r in rows]
    assert selfs == sorted(selfs, reverse=True)
    for r in rows:
        assert r[1].endswith("%") and r[3].endswith("%") and int(r[6]) >= 1
        assert us(r[5]) == pytest.approx(us(r[4]) / int(r[6]), rel=2e-3, abs=2e-3)
    by_calls = _rows(prof.key_averages().table(sort_by="count", row_limit=100))
    counts = [int(r[6]) for r in by_calls]
    assert counts == sorted(counts, reverse=True)
    assert len(by_calls) == len(prof.key_averages())
    with pytest.raises(AttributeError, match="sort_by"):
        prof.key_averages().table(sort_by="no_such_column")


def test_time_format():
    assert profiler._format_time(12.3456) == "12.346us"
    assert profiler._format_time(1500.0) == "1.500ms"
    assert profiler._format_time(2.5e6) == "2.500s"


def test_custom_function_rows():
    class Double(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = aotgrad.randn(4, requires_grad=True)
    with profiler.profile() as prof:
        Double.apply(x).sum().backward()
    names = {e.key: e.count for e in prof.key_averages()}
    assert names["Double"] == 1 and names["DoubleBackward"] == 1


def test_chrome_trace(tmp_path):
    prof = _run_model()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    data = json.loads(path.read_text())
    events = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert len(events) == len(prof.function_events)
    for e in events:
        assert isinstance(e["ts"], (int, float)) and e["dur"] >= 0
        assert {"name", "pid", "tid", "cat"} <= set(e)
    names = {e["name"] for e in events}
    assert {"forward_pass", "aten::tanh", "prims.tanh", "TanhBackward0"} <= names
    fp = next(e for e in events if e["name"] == "forward_pass")
    inner = [e for e in events if e["name"] == "aten::tanh"]
    assert all(fp["ts"] <= e["ts"] and e["ts"] + e["dur"] <= fp["ts"] + fp["dur"] + 1e-6
               for e in inner)


def test_kernel_hook():
    with profiler.profile() as prof:
        t0 = time.perf_counter_ns()
        profiling.add_event("fused_kernel_0", "kernel", t0, t0 + 5000)
        with profiling.record("fused_kernel_1", kind="kernel"):
            pass
    evs = {e.name: e for e in prof.function_events}
    assert evs["fused_kernel_0"].kind == "kernel"
    assert evs["fused_kernel_0"].cpu_time_total == pytest.approx(5.0)
    assert evs["fused_kernel_1"].kind == "kernel"


def test_disabled_unfinished_and_cleanup():
    x = aotgrad.randn(3)
    with profiler.profile(enabled=False) as prof:
        x.exp()
    assert not profiling._profilers
    assert len(prof.function_events) == 0
    p = profiler.profile()
    with pytest.raises(RuntimeError, match="Profiler didn't finish running"):
        p.key_averages()
    with pytest.raises(ValueError):
        with profiler.profile() as prof2:
            with profiler.record_function("fails"):
                x.exp()
                raise ValueError
    assert not profiling._profilers
    ev = next(e for e in prof2.function_events if e.name == "fails")
    assert ev.time_range.end >= ev.time_range.start
    # outside a profiler, record_function (context and decorator) just runs the code
    with profiler.record_function("nobody_listens"):
        pass

    @profiler.record_function("decorated")
    def f(a):
        return a.exp()

    with profiler.profile() as prof3:
        f(x)
    deco = next(e for e in prof3.function_events if e.name == "decorated")
    assert [c.name for c in deco.cpu_children] == ["aten::exp"]


def test_header_matches_torch(torch):
    with torch.autograd.profiler.profile() as tprof:
        torch.ones(3).exp()
    theader = tprof.key_averages().table(row_limit=1).splitlines()[1]
    prof = _run_model()
    aheader = prof.key_averages().table(row_limit=1).splitlines()[1]
    assert re.split(r"\s{2,}", theader.strip()) == re.split(r"\s{2,}", aheader.strip())
    # the numeric columns have the same widths and right alignment
    assert theader.split("Name")[1] == aheader.split("Name")[1]
