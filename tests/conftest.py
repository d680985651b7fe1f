"""Shared test settings: the suite's own AOTGRAD_* settings, a private per-run compile cache
directory, the aotgrad pytest plugin, pytester, and the `torch` and `vs_torch` oracle fixtures."""
import atexit
import os
import shutil
import sys
import tempfile

import numpy as np
import pytest


def _private_dir(path):
    """Is `path` a directory of this user that nobody else can write (numba's cached machine
    code is loaded from it)?"""
    try:
        st = os.stat(path)
    except OSError:
        return False
    return os.path.isdir(path) and st.st_uid == os.getuid() and not st.st_mode & 0o022


# A kept cache between runs, opt-in: AOTGRAD_TEST_CACHE_DIR=dir (made 0700 when missing,
# ignored unless private). Read before the AOTGRAD_* settings are cleared.
_KEPT = os.environ.get("AOTGRAD_TEST_CACHE_DIR")
# pytest-xdist's workers inherit the controller's environment: they share the private
# cache it made (one compile per kernel for the whole run, as the cache allows concurrent
# processes), and only the controller removes it
_WORKER = os.environ.get("PYTEST_XDIST_WORKER") is not None
_SHARED = os.environ.get("AOTGRAD_CACHE_DIR") if _WORKER else None
# The suite sets its own values: a developer's AOTGRAD_* settings (a dump directory, another
# BLAS, no helper processes, ...) would change what the tests test.
for _name in [k for k in os.environ if k.startswith("AOTGRAD_")]:
    del os.environ[_name]
if _KEPT:
    os.makedirs(_KEPT, mode=0o700, exist_ok=True)
if _KEPT and _private_dir(_KEPT):
    _CACHE = _KEPT
elif _SHARED and _private_dir(_SHARED):
    _CACHE = _SHARED
else:
    # a private compile cache per run (mode 0700, removed at exit): never a fixed path under
    # /tmp that another user could have made and filled first
    _CACHE = tempfile.mkdtemp(prefix="aotgrad-test-cache-")
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["AOTGRAD_CACHE_DIR"] = _CACHE
# kernels compiled up front, not run on numpy first while helper processes compile them
# (tests/codegen/test_first_tier.py and test_tier_order.py turn that on)
os.environ["AOTGRAD_BACKGROUND_COMPILE"] = "0"
# eager ops on their numpy kernels, not on generated ones compiled in the background
# (runtime/kernel_library.py): when a generated kernel becomes ready would change an eager
# result in its last bits from one run to the next. tests/runtime/test_kernel_library.py and
# tests/optim/test_optim_fused.py turn them on
os.environ["AOTGRAD_EAGER_KERNELS"] = "off"
# cold kernels on numpy's first tier, not on the row machine (codegen/row_vm.py), whose
# loading in the background would decide which of the two ran (tests/codegen/
# test_row_machine.py turns it on)
os.environ["AOTGRAD_ROW_MACHINE"] = "0"
# every IR pass checks the graph it returns (ir/verifier.py): a pass that breaks an IR
# invariant fails the test that compiled through it
os.environ["AOTGRAD_VERIFY"] = "1"


def _plugin_autoloads():
    """Is aotgrad's pytest plugin loaded through its entry point (an install that has it)?
    Then listing it here too would register it twice."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    from importlib.metadata import entry_points
    return any(ep.value == "aotgrad.testing.plugin" for ep in entry_points(group="pytest11"))


pytest_plugins = ["pytester"] + ([] if _plugin_autoloads() else ["aotgrad.testing.plugin"])


@pytest.fixture
def example():
    """`example(name)`: the module examples/<name>.py, imported as aotgrad.examples.<name>
    (the repository root is the package; the examples fall back to that name for their
    shared `_common` module when they are not run as scripts)."""
    import importlib
    return lambda name: importlib.import_module(f"aotgrad.examples.{name}")


@pytest.fixture(scope="module")
def module_cache_dir(tmp_path_factory):
    """A compile cache of the test module's own (AOTGRAD_CACHE_DIR for its duration): its
    kernels compile afresh, whatever the run's shared cache holds."""
    old = os.environ.get("AOTGRAD_CACHE_DIR")
    d = str(tmp_path_factory.mktemp("aotgrad_cache"))
    os.environ["AOTGRAD_CACHE_DIR"] = d
    yield d
    if old is None:
        os.environ.pop("AOTGRAD_CACHE_DIR", None)
    else:
        os.environ["AOTGRAD_CACHE_DIR"] = old


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """An empty kernel cache (tmp_path): no generated module loaded, no background work
    or compile helper left over from other tests, none left after."""
    from aotgrad.codegen import parallel_compile, row_machine, wait_for_parallel_kernels
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))
    # (the row machine's module stays: it is not the kernel cache's, and a thread may be
    # loading it, whose numba compile finds the module by its name)
    machine = os.path.join(row_machine.machine_dir(), "")
    for name in [n for n in sys.modules if n.startswith("aotgrad_gen_")
                 and not (getattr(sys.modules[n], "__file__", None) or "").startswith(machine)]:
        monkeypatch.delitem(sys.modules, name)
    assert wait_for_parallel_kernels(timeout=300)
    parallel_compile.shutdown()
    yield tmp_path
    assert wait_for_parallel_kernels(timeout=300)
    parallel_compile.shutdown()


# the row machine's tests (tests/codegen/test_row_*.py)
@pytest.fixture
def machine_tier(empty_cache, monkeypatch):
    """Programs built here keep their cold kernels on the first tier (no compile of
    theirs), where the row machine runs what it can; every run through the machine is
    counted in the list returned."""
    from aotgrad.codegen import row_machine, row_program, tiers
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "1")
    monkeypatch.setenv("AOTGRAD_ROW_MACHINE", "1")
    monkeypatch.delenv("AOTGRAD_FIRST_TIER", raising=False)
    monkeypatch.setattr(tiers, "submit", lambda job, priority=None: None)
    monkeypatch.setattr(tiers, "track", lambda units, priority=None: None)
    assert row_machine.wait(900), f"the row machine did not load: {row_machine._machine.failed!r}"
    runs = []
    run = row_program.RowProgram.run
    monkeypatch.setattr(row_program.RowProgram, "run",
                        lambda self, *a, **k: runs.append(run(self, *a, **k))
                        or runs[-1])
    return runs


@pytest.fixture
def captured(empty_cache, monkeypatch):
    """Programs built here keep their cold kernels on the first tier (no compile of theirs
    but the native one, which each test asks for itself); every row program run is
    recorded with its arguments: (program, copies of the arguments, whole values)."""
    from aotgrad.codegen import row_machine, row_native, row_program, tiers
    monkeypatch.setenv("AOTGRAD_BACKGROUND_COMPILE", "1")
    monkeypatch.setenv("AOTGRAD_ROW_MACHINE", "1")
    monkeypatch.delenv("AOTGRAD_FIRST_TIER", raising=False)
    monkeypatch.setattr(tiers, "submit", lambda job, priority=None: None)
    monkeypatch.setattr(tiers, "track", lambda units, priority=None: None)
    monkeypatch.setattr(row_native, "request", lambda program, seconds=0.0: None)
    assert row_machine.wait(900), f"the row machine did not load: {row_machine._machine.failed!r}"
    runs = []
    run = row_program.RowProgram.run

    def recording(self, args, whole, native=None, machine=None, addresses=None):
        runs.append((self, [np.array(a) for a in args], dict(whole)))
        return run(self, args, whole, native, machine, addresses)
    monkeypatch.setattr(row_program.RowProgram, "run", recording)
    return runs


@pytest.fixture
def torch():
    """PyTorch as an oracle: the test skips where it is not installed."""
    return pytest.importorskip("torch")


@pytest.fixture
def vs_torch(torch):
    """The one comparison against PyTorch (tests/torch_compare.py's TorchOracle): same(case),
    both(fn), module(ours, theirs, inputs); skips where torch is not installed."""
    from torch_compare import TorchOracle
    return TorchOracle(torch)


@pytest.fixture(autouse=True)
def _seed():
    import aotgrad
    aotgrad.manual_seed(0)
    np.random.seed(0)


@pytest.fixture(autouse=True)
def _global_modes_restored():
    """A test that leaves grad mode, inference mode or anomaly mode changed fails (and the
    modes are reset), so that no test depends on the one that ran before it."""
    from aotgrad.runtime.grad_mode import state
    names = ("grad_enabled", "inference", "anomaly", "anomaly_check_nan")
    before = {n: getattr(state, n) for n in names}
    yield
    after = {n: getattr(state, n) for n in names}
    for n, v in before.items():
        setattr(state, n, v)
    assert after == before, f"the test left global autograd modes changed: {after}"
