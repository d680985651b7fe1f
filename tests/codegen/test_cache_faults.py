"""Faults around the on-disk compile cache, in separate processes: damaged cache files, a
read-only directory, cache_clear racing a compile, a process killed in a cold compile, and
several processes compiling into one cache at once. Each must end in correct results (the
cache is rebuilt where needed), never a crash or a wrong answer."""
import errno
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

from aotgrad.codegen import cache, compile_graph
from aotgrad.ir import Aval, GraphBuilder, prims
from aotgrad.ir import dtypes as dt


# three kernels that cannot fuse, so a helper process takes some of them (workers=1)
CHILD = textwrap.dedent("""
    import warnings, numpy as np
    from aotgrad.ir import Aval, GraphBuilder, prims
    from aotgrad.ir import dtypes as dt
    from aotgrad.ir.core import evaluate
    from aotgrad.codegen import compile_graph
    F32 = dt.float32
    b = GraphBuilder("f")
    x = b.add_input(Aval((12, 9), F32), "x")
    y = b.add_input(Aval((7, 5), F32), "y")
    z = b.add_input(Aval((11,), F32), "z")
    with b:
        m = prims.reduce_max(x, dims=(1,))
        e = prims.exp(prims.sub(x, prims.broadcast_in_dim(m, shape=(12, 9), dims=(0,))))
        c = prims.reduce_sum(prims.tanh(y), dims=(0,))
        w = prims.mul(prims.sin(z), prims.add(z, prims.full(shape=(11,), value={salt}, dtype=F32)))
    b.graph.outputs = [e, c, w]
    rng = np.random.default_rng(0)
    args = [rng.uniform(-2, 2, s).astype(np.float32) for s in ((12, 9), (7, 5), (11,))]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = compile_graph(b.graph)
        got = p(*args)
    for r, g in zip(evaluate(b.graph, args), got):
        assert np.allclose(r, g, rtol=1e-5, atol=1e-6), (r, g)
    print("WARNINGS", len([w for w in caught if "compile cache" in str(w.message)]))
    print("STATUS", p.cache_status)
""")


def _env(d, **extra):
    return dict(os.environ, AOTGRAD_CACHE_DIR=str(d), AOTGRAD_COMPILE_WORKERS="1",
                AOTGRAD_BACKGROUND_COMPILE="0", **extra)


def _script(salt=0):
    return CHILD.format(salt=float(salt))


def _child(d, salt=0, **extra):
    """Run the child; returns (status, number of cache warnings)."""
    r = subprocess.run([sys.executable, "-c", _script(salt)], env=_env(d, **extra),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout.split()
    return out[out.index("STATUS") + 1], int(out[out.index("WARNINGS") + 1])


def _numba_files(d, ext):
    return sorted((d / "__pycache__").glob(f"aotgrad_gen_*.{ext}"))


def test_damaged_cache_files_are_rebuilt(tmp_path):
    assert _child(tmp_path) == ("new", 0)
    for ext in ("nbi", "nbc"):   # numba's index, then its data: as a crash mid-write leaves them
        files = _numba_files(tmp_path, ext)
        assert files, f"numba wrote no .{ext} files"
        for p in files:
            p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
        assert _child(tmp_path)[0] in ("disk", "rebuilt")
    for p in list(tmp_path.glob("aotgrad_gen_*.py")) + _numba_files(tmp_path, "nbi"):
        p.write_bytes(b"")       # an empty module and index
    assert _child(tmp_path)[0] == "rebuilt"
    assert _child(tmp_path)[0] == "disk"     # repaired for the next process


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root writes into a read-only directory regardless")
def test_read_only_cache_directory_falls_back_with_one_warning(tmp_path):
    d = tmp_path / "cache"
    assert _child(d) == ("new", 0)
    d.chmod(0o500)
    try:
        assert _child(d) == ("new", 1)       # a private temporary directory, said once
    finally:
        d.chmod(0o700)


def test_read_only_cache_directory_as_seen_by_any_user(monkeypatch, tmp_path):
    # (root writes through a mode-0500 directory: simulate the refused write instead)
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(d))
    monkeypatch.setattr(cache, "_usable", {})
    real_mkstemp = cache.tempfile.mkstemp

    def mkstemp(*a, dir=None, **k):
        if dir is not None and os.path.realpath(dir) == os.path.realpath(d):
            raise OSError(errno.EROFS, "Read-only file system")
        return real_mkstemp(*a, dir=dir, **k)

    monkeypatch.setattr(cache.tempfile, "mkstemp", mkstemp)
    with pytest.warns(RuntimeWarning, match="not writable.*Read-only file system"):
        use = cache.cache_dir()
    b = GraphBuilder("ro")
    x = b.add_input(Aval((5,), dt.float32), "x")
    with b:
        y = prims.mul(prims.cos(x), x)
    b.graph.outputs = [y]
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # said once
        prog = compile_graph(b.graph)
        v = np.linspace(-1, 1, 5).astype(np.float32)
        assert np.allclose(prog(v)[0], np.cos(v) * v, rtol=1e-6)
    assert not list(d.iterdir()) and list(os.scandir(use))


def test_cache_clear_keeps_temporary_files_of_writes_in_flight(monkeypatch, tmp_path):
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "_usable", {})
    pyc = tmp_path / "__pycache__"
    pyc.mkdir()
    mod = tmp_path / "aotgrad_gen_0123.py"
    ours = tmp_path / ".tmp_abc.py"                          # cache._write_atomic's
    numbas = pyc / "aotgrad_gen_0123.k-1.py311.nbi.tmp.0f0f"  # numba's _open_for_write
    old_ours = tmp_path / ".tmp_old.py"
    old_numbas = pyc / "aotgrad_gen_0123.k-1.py311.1.nbc.tmp.dead"
    for p in (mod, ours, numbas, old_ours, old_numbas):
        p.write_text("x" * 10)
    hour_ago = time.time() - cache.STALE_TEMP_SECONDS - 60
    for p in (old_ours, old_numbas):           # left by a process that died
        os.utime(p, (hour_ago, hour_ago))
    assert cache.cache_clear() == 30
    assert ours.exists() and numbas.exists()
    assert not mod.exists() and not old_ours.exists() and not old_numbas.exists()


def test_cache_clear_in_a_loop_while_another_process_compiles(monkeypatch, tmp_path):
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "_usable", {})
    p = subprocess.Popen([sys.executable, "-c", _script()], env=_env(tmp_path),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while p.poll() is None:
            cache.cache_clear()
            time.sleep(0.005)
        out, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err[-3000:]


def _session_pids(sid):
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.getsid(int(name)) == sid:
                    pids.append(int(name))
            except OSError:
                pass
    return pids


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc to find the helpers")
def test_a_process_killed_in_a_cold_compile_leaves_a_usable_cache(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", _script()], env=_env(tmp_path),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("aotgrad_gen_*.py")) and p.poll() is None and \
                time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.4)                    # inside a compile (its module is written)
        p.kill()
        p.wait()
        # its compile helpers see their input end and exit on their own
        deadline = time.monotonic() + 60
        while _session_pids(p.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _session_pids(p.pid)
        assert not left, f"compile helpers outlived their parent: {left}"
    finally:
        for pid in _session_pids(p.pid):
            os.kill(pid, signal.SIGKILL)
    assert _child(tmp_path)[0] in ("new", "disk", "rebuilt")
    assert _child(tmp_path)[0] == "disk"


def test_several_processes_compile_into_one_cache_at_once(tmp_path):
    procs = [subprocess.Popen([sys.executable, "-c", _script(salt=k % 2)], env=_env(tmp_path),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    assert _child(tmp_path, salt=0)[0] == "disk"
    assert _child(tmp_path, salt=1)[0] == "disk"
    leftovers = [p.name for p in tmp_path.rglob("*") if ".tmp" in p.name]
    assert not leftovers, leftovers

