"""The aotgrad pytest plugin (aotgrad.testing.plugin), run in pytester's inner sessions."""
import pytest

from conftest import _plugin_autoloads

# the plugin as the inner session loads it: through the entry point where aotgrad is
# installed with it, else named on the command line
PLUGIN = [] if _plugin_autoloads() else ["-p", "aotgrad.testing.plugin"]

MODES_TEST = """
import aotgrad as ag

def test_square(aotgrad_compile, aotgrad_mode):
    @aotgrad_compile
    def f(x):
        return (x * x).sum()
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    f(x).backward()
    assert x.grad.tolist() == [2.0, 4.0]
    assert isinstance(f, ag.compiler.CompiledFunction) == (aotgrad_mode == "compiled")
"""


def _run(pytester, *args):
    # in a subprocess: an in-process run would drop the numba modules it imported from
    # sys.modules afterwards, and numba cannot import them twice
    return pytester.runpytest_subprocess(*PLUGIN, "-p", "no:randomly", "-p", "no:cacheprovider",
                                         *args)


def test_the_fixture_runs_a_test_in_eager_and_compiled_modes(pytester):
    pytester.makepyfile(MODES_TEST)
    r = _run(pytester, "-v")
    r.assert_outcomes(passed=2)
    r.stdout.fnmatch_lines(["*test_square?eager? PASSED*", "*test_square?compiled? PASSED*"])


def test_the_marker_gives_compile_options(pytester):
    pytester.makepyfile("""
        import pytest
        import aotgrad as ag

        @pytest.mark.aotgrad_modes(backend="interpret")
        def test_opts(aotgrad_compile, aotgrad_mode):
            f = aotgrad_compile(lambda x: x + 1)
            if aotgrad_mode == "compiled":
                assert f.backend == "interpret"
            assert f(ag.tensor([1.0])).tolist() == [2.0]

        def test_call_options(aotgrad_compile, aotgrad_mode):
            f = aotgrad_compile(fullgraph=True)(lambda x: x * 2)
            if aotgrad_mode == "compiled":
                assert f.fullgraph
            assert f(ag.tensor([1.0])).tolist() == [2.0]
    """)
    r = _run(pytester, "--strict-markers")
    r.assert_outcomes(passed=4)


FAILING = """
import aotgrad as ag

def test_fails_compiled(aotgrad_compile, aotgrad_mode):
    @aotgrad_compile(backend="interpret")
    def f(x):
        return x.exp().sum()
    y = f(ag.tensor([0.0, 1.0]))
    assert aotgrad_mode == "eager"   # the compiled run fails
"""


def test_dump_on_failure_writes_the_failing_compiled_tests_ir(pytester):
    pytester.makepyfile(FAILING)
    r = _run(pytester, "--aotgrad-dump-on-failure=dumps")
    r.assert_outcomes(passed=1, failed=1)
    r.stdout.fnmatch_lines(["*aotgrad IR*", "*compiled programs of this test written to:*"])
    root = pytester.path / "dumps"
    (test_dir,) = list(root.iterdir())
    assert "test_fails_compiled" in test_dir.name and "compiled" in test_dir.name
    (prog_dir,) = list(test_dir.iterdir())
    text = (prog_dir / "forward.py").read_text()
    assert "prims.exp" in text and "reduce_sum" in text


def test_dump_on_failure_default_directory_and_compare_with_eager(pytester):
    pytester.makepyfile("""
        import aotgrad as ag
        from aotgrad.testing import compare_with_eager

        def test_mismatch():
            x = ag.tensor([1.0, 2.0], requires_grad=True)
            other = ag.compile(lambda a: a.exp() * 2, backend="interpret")
            compare_with_eager(lambda a: a.exp(), x, compiled=other)
    """)
    r = _run(pytester, "--aotgrad-dump-on-failure")
    r.assert_outcomes(failed=1)
    dumped = list((pytester.path / "aotgrad-failures").rglob("forward.py"))
    assert len(dumped) == 1 and "prims.exp" in dumped[0].read_text()


def test_no_dump_without_the_option(pytester):
    pytester.makepyfile(FAILING)
    r = _run(pytester)
    r.assert_outcomes(passed=1, failed=1)
    assert not (pytester.path / "aotgrad-failures").exists()
    assert "aotgrad IR" not in r.stdout.str()


def test_the_plugin_is_registered_once_in_this_session(request):
    from aotgrad.testing import plugin
    pm = request.config.pluginmanager
    assert pm.is_registered(plugin)
    assert sum(1 for p in pm.get_plugins() if p is plugin) == 1
