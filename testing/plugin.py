"""The aotgrad pytest plugin (entry point `pytest11: aotgrad`, active where aotgrad is
installed).

- The fixture `aotgrad_compile` runs the test twice, as `test[eager]` and `test[compiled]`:
  a function shaped like `aotgrad.compile` (decorator or call, same options) that returns
  the function unchanged in eager mode and compiles it in compiled mode. The test's
  `@pytest.mark.aotgrad_modes(**options)` gives the compile options (backend=...,
  fullgraph=...); `aotgrad_mode` is "eager" or "compiled".
- `--aotgrad-dump-on-failure[=DIR]`: when a test that compiled something fails, the IR of
  its compiled programs (forward, backward, partition, kernels: `Program.dump`) is written
  to DIR/<test id>/<program>/ (DIR defaults to ./aotgrad-failures) and the path is shown
  in the test's report. Compiled functions made by the fixture, and the one a failing
  `compare_with_eager` made, are dumped.
"""
import os
import re

import pytest

MODES = ("eager", "compiled")
DEFAULT_DUMP_DIR = "aotgrad-failures"


def pytest_addoption(parser):
    group = parser.getgroup("aotgrad")
    group.addoption("--aotgrad-dump-on-failure", action="store", nargs="?",
                    const=DEFAULT_DUMP_DIR, default=None, metavar="DIR",
                    help="write the IR of a failing test's compiled programs to DIR/<test id>/ "
                         f"(default DIR: {DEFAULT_DUMP_DIR})")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "aotgrad_modes(**compile_options): options for the aotgrad_compile "
                   "fixture, which runs the test in [eager] and [compiled] modes")


class ModeCompile:
    """The `aotgrad_compile` fixture's value: aotgrad.compile in compiled mode, the identity
    in eager mode. Remembers the compiled functions it made (for the failure dump)."""

    def __init__(self, mode, options):
        self.mode, self.options, self.compiled = mode, dict(options), []

    def __call__(self, fn=None, **options):
        if fn is None:
            return lambda f: self(f, **options)
        if self.mode == "eager":
            return fn
        import aotgrad
        cf = aotgrad.compile(fn, **{**self.options, **options})
        self.compiled.append(cf)
        return cf


@pytest.fixture(params=MODES)
def aotgrad_mode(request):
    """"eager" or "compiled": the mode this run of the test is in."""
    return request.param


@pytest.fixture
def aotgrad_compile(request, aotgrad_mode):
    """`aotgrad.compile` in the [compiled] run of the test, the identity in the [eager] one."""
    m = request.node.get_closest_marker("aotgrad_modes")
    mc = ModeCompile(aotgrad_mode, m.kwargs if m is not None else {})
    request.node.stash[_COMPILED] = mc.compiled
    return mc


_COMPILED = pytest.StashKey()


def _programs(cf):
    return [p for p in getattr(cf, "cache", {}).values() if p != "eager"]


def _safe(nodeid):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_")[:150]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    where = item.config.getoption("--aotgrad-dump-on-failure", default=None)
    if not where or not report.failed or call.when != "call":
        return
    cfs = list(item.stash.get(_COMPILED, []))
    err = call.excinfo.value if call.excinfo is not None else None
    extra = getattr(err, "aotgrad_compiled", None)
    if extra is not None and extra not in cfs:
        cfs.append(extra)
    programs = [p for cf in cfs for p in _programs(cf)]
    if not programs:
        return
    base = os.path.abspath(os.path.join(where, _safe(item.nodeid)))
    written = []
    for prog in programs:
        try:
            written.append(prog.dump(os.path.join(base, prog.name)))
        except Exception as e:  # noqa: BLE001 (the test's own failure is what matters)
            written.append(f"{prog.name}: not dumped ({type(e).__name__}: {e})")
    report.sections.append(("aotgrad IR", "compiled programs of this test written to:\n" +
                            "\n".join(written)))
