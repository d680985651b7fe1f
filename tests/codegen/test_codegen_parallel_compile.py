"""codegen: one module per kernel, kernels compiled by helper processes into the disk cache,
and the fallbacks (no helpers, helpers that die, an unwritable cache directory)."""
import glob
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from aotgrad.codegen import cache, compile_graph, parallel_compile, tiers
from aotgrad.codegen.compile_worker import numba_signature
from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close

F32 = dt.float32


@pytest.fixture
def cold(tmp_path, monkeypatch):
    """An empty cache directory, and no generated module remembered by this process (so
    every kernel really compiles)."""
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("aotgrad_gen_")]:
        monkeypatch.delitem(sys.modules, name)
    tiers.wait(120)                      # background compiles of earlier tests, and
    parallel_compile.shutdown()          # the helpers they left idle
    yield tmp_path
    parallel_compile.shutdown()


def three_kernel_graph():
    """Three kernels over different domains (they cannot fuse): a row softmax-ish, a
    column sum and an elementwise op on a third input."""
    b = GraphBuilder("f")
    x = b.add_input(Aval((12, 9), F32), "x")
    y = b.add_input(Aval((7, 5), F32), "y")
    z = b.add_input(Aval((11,), F32), "z")
    with b:
        m = prims.reduce_max(x, dims=(1,))
        e = prims.exp(prims.sub(x, prims.broadcast_in_dim(m, shape=(12, 9), dims=(0,))))
        c = prims.reduce_sum(prims.tanh(y), dims=(0,))
        w = prims.mul(prims.sin(z), z)
    b.graph.outputs = [e, c, w]
    return b.graph


def inputs():
    rng = np.random.default_rng(0)
    return [rng.uniform(-2, 2, s).astype(np.float32) for s in ((12, 9), (7, 5), (11,))]


def check_outputs(prog, g):
    args = inputs()
    for got, want in zip(prog(*args), evaluate(g, args)):
        assert_close(got, want, rtol=2e-6, atol=1e-6, equal_nan=True)


def child_pids():
    """This process's children (Linux /proc); None where that cannot be read."""
    try:
        pids = []
        for task in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
            with open(task) as f:
                pids += f.read().split()
        return pids
    except OSError:
        return None


def left_behind(before):
    """Children of this process started since `before` (child_pids()) and still there
    (one an earlier test left, which exits meanwhile, is not this test's)."""
    return set(child_pids()) - set(before)


def numba_index_files(d):
    return glob.glob(os.path.join(str(d), "__pycache__", "*.nbi"))


def test_helpers_fill_the_cache_and_results_match(cold, monkeypatch):
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "1")
    before = child_pids()
    g = three_kernel_graph()
    prog = compile_graph(g)
    assert len(prog.module_names) == 3, prog.report()
    assert prog.cache_status == "new"
    assert prog.helper_compiled >= 1, prog.report()        # a helper did part of the work
    assert "in helper processes" in prog.report()
    check_outputs(prog, g)
    # every kernel's machine code is in numba's cache, one module file per kernel
    assert len(glob.glob(str(cold / "aotgrad_gen_*.py"))) == 3
    assert len(numba_index_files(cold)) == 3
    parallel_compile.shutdown()
    if before is not None:
        assert left_behind(before) == set(), "a helper process was left behind"


def test_idle_helper_is_reused_then_stopped(cold, monkeypatch):
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "1")
    monkeypatch.setattr(parallel_compile, "LINGER", 60.0)
    parallel_compile.shutdown()
    started = []
    real_start = parallel_compile._start

    def counting(cwd):
        started.append(real_start(cwd))
        return started[-1]
    monkeypatch.setattr(parallel_compile, "_start", counting)
    before = child_pids()
    g = three_kernel_graph()
    p1 = compile_graph(g)
    assert len(started) == 1 and started[0].poll() is None    # lingers, ready for more
    b = GraphBuilder("g")
    xs = [b.add_input(Aval((5, k + 2), F32), f"x{k}") for k in range(3)]
    with b:   # three new kernels: different reductions over different shapes
        outs = [prims.reduce_sum(prims.exp(xs[0]), dims=(1,)),
                prims.reduce_max(prims.tanh(xs[1]), dims=(0,)),
                prims.mul(prims.logistic(xs[2]), xs[2])]
    b.graph.outputs = outs
    p2 = compile_graph(b.graph)
    assert p1.helper_compiled >= 1 and p2.helper_compiled >= 1, p2.report()
    assert len(started) == 1, "the idle helper was not reused"
    args = [np.full((5, k + 2), 0.5, np.float32) for k in range(3)]
    for got, want in zip(p2(*args), evaluate(b.graph, args)):
        assert_close(got, want, rtol=2e-6, atol=0, equal_nan=True)
    parallel_compile.shutdown()
    assert started[0].returncode is not None
    if before is not None:
        assert left_behind(before) == set()


def test_no_helpers_when_disabled(cold, monkeypatch):
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "0")
    g = three_kernel_graph()
    prog = compile_graph(g)
    assert prog.helper_compiled == 0
    check_outputs(prog, g)
    assert len(numba_index_files(cold)) == 3


def test_bad_worker_setting_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "many")
    with pytest.raises(ValueError, match="AOTGRAD_COMPILE_WORKERS"):
        parallel_compile.workers()


def test_falls_back_when_helpers_cannot_start(cold, monkeypatch):
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "1")

    def no_processes(cwd):
        raise OSError("no processes here")
    monkeypatch.setattr(parallel_compile, "_start", no_processes)
    g = three_kernel_graph()
    prog = compile_graph(g)
    assert prog.helper_compiled == 0
    check_outputs(prog, g)


def test_helper_that_dies_is_reaped_and_its_work_redone(cold, monkeypatch):
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "2")
    started = []

    def dying(cwd):    # a helper that exits at once: its feeder sees a broken pipe / EOF
        p = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        started.append(p)
        return p
    monkeypatch.setattr(parallel_compile, "_start", dying)
    before = child_pids()
    g = three_kernel_graph()
    prog = compile_graph(g)
    assert len(started) == 2 and all(p.returncode is not None for p in started)
    assert prog.helper_compiled == 0
    check_outputs(prog, g)
    if before is not None:
        assert left_behind(before) == set()


def test_helper_compile_error_is_raised_by_the_caller(monkeypatch, tmp_path):
    parallel_compile.shutdown()
    """A kernel that does not compile: the helper reports failure, the caller compiles it
    itself and the error propagates (with the helpers stopped)."""
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))
    src = "import numba\n\n@numba.njit(cache=True)\ndef k_bad(n):\n    return undefined_name + n\n"
    good = "import numba\n\n@numba.njit(cache=True)\ndef k_ok(n):\n    return n + %d\n"
    mods = [cache.load_module(src)[0]] + [cache.load_module(good % i)[0] for i in range(3)]
    units = [parallel_compile.Unit(m.__file__, m.__name__, k, [["size"]])
             for m, k in zip(mods, ["k_bad", "k_ok", "k_ok", "k_ok"])]
    before = child_pids()

    def here(u):
        getattr(sys.modules[u.module], u.kernel).compile(numba_signature(u.sig))
    with pytest.raises(Exception, match="undefined_name"):
        # whoever got k_bad: the caller raises in its share, or in its own final pass
        parallel_compile.compile_units(units, here, cwd=str(tmp_path), max_workers=1)
        for u in units:
            here(u)
    parallel_compile.shutdown()
    if before is not None:
        assert left_behind(before) == set()
    assert mods[1].k_ok(np.int64(1)) == 1 and mods[3].k_ok(np.int64(1)) == 3


def test_unwritable_cache_dir_falls_back_to_a_private_one(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "1")
    for name in [n for n in sys.modules if n.startswith("aotgrad_gen_")]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.warns(RuntimeWarning, match="not writable"):
        d = cache.cache_dir()
    assert os.path.isdir(d) and not d.startswith(str(blocker))
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # warned once per directory, not per compile
        g = three_kernel_graph()
        prog = compile_graph(g)
    check_outputs(prog, g)
    assert all(os.path.dirname(sys.modules[n].__file__) == d for n in prog.module_names)
    parallel_compile.shutdown()


def test_kernels_shared_between_programs_compile_once(cold, monkeypatch):
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "0")
    g1 = three_kernel_graph()
    b = GraphBuilder("g")
    z = b.add_input(Aval((11,), F32), "z")
    with b:
        w = prims.mul(prims.sin(z), z)               # the same kernel as in g1
    b.graph.outputs = [w]
    p1 = compile_graph(g1)
    p2 = compile_graph(b.graph)
    assert p2.cache_status == "memory"
    assert set(p2.module_names) <= set(p1.module_names)
    fn1 = {id(fn) for fn, _ in p1.plan.kernel_fns.values()}
    assert all(id(fn) in fn1 for fn, _ in p2.plan.kernel_fns.values())


@pytest.mark.parametrize("arr", [np.zeros((2, 3), np.float32), np.zeros(4, np.int64),
                                 np.zeros((1, 2, 3), np.bool_), np.zeros(3, np.float64)])
def test_signature_description_matches_numba_typeof(arr):
    import numba
    desc = [["size"], ["scalar", arr.dtype.name], ["array", arr.dtype.name, arr.ndim]]
    sig = numba_signature(desc)
    assert sig == (numba.typeof(np.int64(3)), numba.typeof(arr.dtype.type(1)), numba.typeof(arr))


class _FakeHelper:
    """Stands in for a helper process: records the kernels it is asked for and answers
    each one compiled."""

    def __init__(self):
        self.asked, self.pid = [], 0
        self.stdin, self.stdout = self, self

    def write(self, line):
        self.asked.append(json.loads(line)["kernel"])

    def flush(self):
        pass

    def readline(self):
        return json.dumps({"ok": True}) + "\n"

    def poll(self):
        return None


def test_background_order_is_read_as_each_kernel_is_taken(monkeypatch, tmp_path):
    # a measurement made while the first kernel compiles (here: when it is done) reorders
    # the kernels left, as the first tier's measured numpy times do
    helper = _FakeHelper()
    monkeypatch.setenv("AOTGRAD_COMPILE_WORKERS", "1")
    monkeypatch.setattr(parallel_compile, "_take", lambda n, cwd, nice=0: [helper])
    monkeypatch.setattr(parallel_compile, "_give_back", lambda procs, cwd, nice=0: None)
    units = [parallel_compile.Unit("f.py", "m", name, [], cost)
             for name, cost in (("a", 3.0), ("b", 2.0), ("c", 1.0))]
    measured = {"a": 0.0, "b": 0.0, "c": 0.0}

    def on_done(unit):
        if unit.kernel == "a":
            measured["c"] = 5.0

    done = parallel_compile.compile_in_helpers(
        units, str(tmp_path), on_done=on_done,
        order=lambda u: (-measured[u.kernel], -u.cost))
    assert helper.asked == ["a", "c", "b"]
    assert [u.kernel for u in done] == ["a", "c", "b"]
