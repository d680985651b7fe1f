"""aotgrad.testing: assert_close, compare_with_eager (copies, graph-break check, kernel
bisection) and gradcheck through compiled functions."""
import inspect
import re

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.autograd import Function, gradcheck, gradgradcheck
from aotgrad.autograd.gradcheck import GradcheckError
from aotgrad.testing import CompiledPathNotRun, assert_close, compare_with_eager


# ---- assert_close -------------------------------------------------------------------------
def test_default_tolerances_follow_the_dtype():
    x = np.array([1.0, 2.0, 3.0], np.float32)
    assert_close(x * (1 + 1e-6), x)                    # within float32's rtol 1.3e-6
    with pytest.raises(AssertionError):
        assert_close(x * (1 + 1e-5), x)
    y = x.astype(np.float64)
    assert_close(y * (1 + 5e-8), y)                    # float64: 1e-7
    with pytest.raises(AssertionError):
        assert_close(y * (1 + 1e-6), y)
    assert_close(np.array([1e-6], np.float32), np.array([0.0], np.float32))  # atol 1e-5
    with pytest.raises(AssertionError):
        assert_close(np.array([1e-6]), np.array([0.0]))                      # atol 1e-7


def test_integers_and_bools_compare_exactly():
    assert_close(np.array([1, 2], np.int64), np.array([1, 2], np.int64))
    with pytest.raises(AssertionError):
        assert_close(np.array([1, 3], np.int64), np.array([1, 2], np.int64))
    with pytest.raises(AssertionError):
        assert_close(ag.tensor([True, False]), ag.tensor([True, True]))


def test_float64_against_float32_fails_unless_dtype_check_is_off():
    a = ag.tensor([1.0, 2.0], dtype=ag.float64)
    b = ag.tensor([1.0, 2.0], dtype=ag.float32)
    with pytest.raises(AssertionError, match="dtypes do not match: float64 != float32"):
        assert_close(a, b)
    assert_close(a, b, check_dtype=False)
    with pytest.raises(AssertionError, match="dtypes"):
        assert_close(np.array([1, 2], np.int32), np.array([1, 2], np.int64))


def test_nan_and_inf_semantics():
    nan, inf = float("nan"), float("inf")
    with pytest.raises(AssertionError):
        assert_close(np.array([nan]), np.array([nan]))
    assert_close(np.array([nan, 1.0]), np.array([nan, 1.0]), equal_nan=True)
    with pytest.raises(AssertionError):
        assert_close(np.array([nan]), np.array([1.0]), equal_nan=True)
    assert_close(np.array([inf, -inf]), np.array([inf, -inf]))
    with pytest.raises(AssertionError):
        assert_close(np.array([inf]), np.array([-inf]))
    with pytest.raises(AssertionError):   # no tolerance reaches infinity
        assert_close(np.array([1e308]), np.array([inf]), rtol=1.0, atol=1.0)


def test_the_message_gives_the_largest_differences_where_and_how_many():
    e = np.zeros((3, 4))
    a = e.copy()
    a[1, 2], a[2, 0] = 0.5, 0.25
    with pytest.raises(AssertionError) as info:
        assert_close(a, e, msg="grad of w: ")
    text = str(info.value)
    assert text.startswith("grad of w: ")
    assert "Mismatched elements: 2 / 12" in text
    assert re.search(r"Greatest absolute difference: 0\.5 at index \(1, 2\)", text)
    assert "relative difference: inf" in text


def test_shapes_must_match_and_tolerances_come_in_pairs():
    with pytest.raises(AssertionError, match="shapes do not match"):
        assert_close(np.zeros((2, 1)), np.zeros((2,)))
    with pytest.raises(ValueError, match="both rtol and atol"):
        assert_close(np.zeros(2), np.zeros(2), rtol=1e-3)


def test_numbers_sequences_and_mappings():
    assert_close(1.0, 1.0 + 1e-9)
    with pytest.raises(AssertionError, match="types do not match"):
        assert_close(1, 1.0)
    assert_close(ag.tensor([1.0, 2.0]), [1.0, 2.0])   # a list takes the tensor's dtype
    assert_close([ag.tensor(1.0), (np.float64(2.0), 3)], [ag.tensor(1.0), (np.float64(2.0), 3)])
    with pytest.raises(AssertionError, match=r"at \[1\]\[0\]"):
        assert_close([1.0, [2.0]], [1.0, [2.5]])
    with pytest.raises(AssertionError, match=r"at \['b'\]"):
        assert_close({"a": 1.0, "b": np.ones(2)}, {"a": 1.0, "b": np.zeros(2)})
    with pytest.raises(AssertionError, match="lengths differ"):
        assert_close([1.0], [1.0, 2.0])


def test_torch_tensors_are_accepted(torch):
    assert_close(torch.tensor([1.0, 2.0]), ag.tensor([1.0, 2.0]))
    with pytest.raises(AssertionError, match="dtypes"):
        assert_close(torch.tensor([1.0], dtype=torch.float64), ag.tensor([1.0]))


# ---- compare_with_eager -------------------------------------------------------------------
def _randn(*shape, rg=True, dtype=ag.float64):
    return ag.randn(*shape, dtype=dtype, requires_grad=rg)


def test_compare_passes_and_returns_the_compiled_function():
    cf = compare_with_eager(lambda x, w: (x @ w).tanh().sum(1), _randn(3, 4), _randn(4, 2),
                            backend="interpret")
    assert cf.eager_calls == 0 and cf.n_traces == 1


def test_a_graph_break_fails_unless_expected():
    def f(x):
        return x[x > 0].sum()
    with pytest.warns(UserWarning, match="graph break"):
        with pytest.raises(CompiledPathNotRun, match="boolean mask"):
            compare_with_eager(f, _randn(5), backend="interpret")
    with pytest.warns(UserWarning, match="graph break"):
        compare_with_eager(f, _randn(5), backend="interpret",
                           expect_graph_break="data-dependent shape")
    with pytest.raises(AssertionError, match="expected"):   # ... and a fix shows
        compare_with_eager(lambda x: x.sum(), _randn(5), backend="interpret",
                           expect_graph_break="none really")


def test_each_run_gets_its_own_copy_of_the_inputs():
    x = ag.ones(3, dtype=ag.float64)
    y = _randn(3)
    compare_with_eager(lambda a, b: a.add_(1) * b, x, y, backend="interpret")
    assert x.tolist() == [1.0, 1.0, 1.0]      # neither run wrote the caller's tensor
    assert y.grad is None


def test_the_same_tensor_passed_twice_stays_one_tensor_in_each_run():
    x = _randn(4)
    compare_with_eager(lambda a, b: (a * b).sum(), x, x, backend="interpret")


def test_an_in_place_write_that_differs_is_caught():
    # (a compiled function of another function stands in for a wrong in-place write)
    def add(k):
        def f(a):
            a.add_(k)
            return a.sum() * 0.0
        return f
    x = ag.zeros(3, dtype=ag.float64)
    with pytest.raises(AssertionError, match="argument tensor 0 after the call"):
        compare_with_eager(add(1), x, compiled=ag.compile(add(2), backend="interpret"))


def test_module_parameters_and_their_grads_are_compared():
    m = ag.nn.Sequential(ag.nn.Linear(4, 3), ag.nn.Tanh(), ag.nn.Linear(3, 1)).double()
    w_before = m[0].weight.detach().numpy().copy()
    compare_with_eager(m, _randn(5, 4, rg=False), backend="interpret")
    np.testing.assert_array_equal(m[0].weight.detach().numpy(), w_before)
    assert m[0].weight.grad is None             # the runs used copies of the module
    wrong = ag.compile(lambda x: m(x) * (1 + 1e-3), backend="interpret")
    with pytest.raises(AssertionError, match=r"output 0|grad of parameter"):
        compare_with_eager(m, _randn(5, 4, rg=False), compiled=wrong)


def test_random_ops_see_the_same_generator_state_in_both_runs():
    compare_with_eager(lambda x: x * ag.rand(3, dtype=ag.float64), _randn(3),
                       backend="interpret")


def _two_kernel_program(x, w1, w2):
    h = x @ w1
    t = h.tanh()                                 # the kernel the test breaks
    return (t @ w2).exp().sum(1)


def _wrong_tanh(ctx, node, a):
    return f"(np.tanh({a[0]}) * 1.001)"


def test_bisection_names_the_wrong_kernel_its_nodes_and_line(monkeypatch):
    from aotgrad.codegen import templates
    from aotgrad.ir import prims
    monkeypatch.setitem(templates.TEMPLATES, prims.tanh, _wrong_tanh)
    ag.manual_seed(1)
    args = (_randn(4, 6, rg=False), _randn(6, 5), _randn(5, 3))
    with pytest.raises(AssertionError) as info:
        compare_with_eager(_two_kernel_program, *args, backend="numba")
    text = str(info.value)
    report = text.split("kernel bisection:\n", 1)[1]
    line = inspect.getsourcelines(_two_kernel_program)[1] + 2
    assert report.startswith("first diverging step of _two_kernel_program_0_forward")
    head = report.splitlines()[1]
    assert re.match(r"step \[\d+\] of \S+: kernel k_\w+ \(elementwise", head), head
    assert "prims.tanh" in report and "prims.exp" not in report.split("user source lines")[0]
    assert f"test_testing.py:{line} `t = h.tanh()" in report
    assert "Greatest relative difference: 0.001" in report


def test_bisection_of_a_correct_program_finds_nothing():
    from aotgrad.testing import bisect_compiled_graph
    ag.manual_seed(2)
    args = (_randn(4, 6, rg=False), _randn(6, 5), _randn(5, 3))
    prog = ag.compile(_two_kernel_program).ir(*args)
    g = prog.compiled_graph("forward")
    report = bisect_compiled_graph(g, [a._value for a in args])
    assert report.first is None and len(report.steps) >= 3
    assert "every step matches" in str(report)


# ---- gradcheck through compiled functions -------------------------------------------------
class _WrongSquare(Function):  # backward is off: 3g instead of 2xg
    @staticmethod
    def forward(ctx, x):
        return x ** 2

    @staticmethod
    def backward(ctx, g):
        return g * 3


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_gradcheck_and_gradgradcheck_through_compile(backend):
    cf = ag.compile(lambda x, w: (x @ w).tanh().sum(1) * x[:, 0], backend=backend)
    x, w = _randn(3, 4), _randn(4, 5)
    assert gradcheck(cf, (x, w))
    assert gradgradcheck(cf, (x, w))
    assert cf.eager_calls == 0 and cf.n_traces >= 1


def test_gradcheck_through_compile_catches_a_wrong_backward():
    cf = ag.compile(lambda x: _WrongSquare.apply(x).sum(), backend="interpret")
    with pytest.raises(GradcheckError):
        gradcheck(cf, (_randn(3),))
    assert cf.eager_calls == 0


def test_a_non_leaf_argument_gets_a_leaf_of_its_own_in_each_run():
    base = _randn(3)
    x = base * 2                                  # a non-leaf: its copies have history too
    cf = compare_with_eager(lambda a: a.add_(1).exp().sum(), x, backend="interpret")
    assert cf.eager_calls == 0 and base.grad is None


def test_the_suite_compiles_into_a_private_cache_directory():
    import os
    d = os.environ["AOTGRAD_CACHE_DIR"]
    st = os.stat(d)
    assert st.st_uid == os.getuid() and st.st_mode & 0o077 == 0
