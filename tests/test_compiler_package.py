"""aotgrad.compiler as a package: its public names, is_compiling() and
assume_constant_result() (PyTorch's torch.compiler markers)."""
import time
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad import compiler


def test_public_names_resolve_through_the_package_and_the_root():
    assert ag.compile is compiler.compile and ag.explain is compiler.explain
    assert ag.GraphBreakError is compiler.GraphBreakError
    cf = ag.compile(lambda x: x * 2, backend="interpret")
    assert isinstance(cf, compiler.CompiledFunction)
    assert isinstance(cf.ir(ag.ones(2)), compiler.Program)
    for name in compiler.__all__:
        assert hasattr(compiler, name), name


def test_is_compiling_is_true_only_while_tracing():
    runs = np.zeros(2, dtype=int)  # [eager runs, traced runs] (an array: no guarded state)

    def f(x):
        runs[int(compiler.is_compiling())] += 1
        return x * 2 if compiler.is_compiling() else x * 3
    cf = ag.compile(f, backend="interpret", fullgraph=True)
    x = ag.ones(3)
    assert not compiler.is_compiling()
    np.testing.assert_array_equal(f(x).numpy(), 3 * np.ones(3))   # eagerly: False
    np.testing.assert_array_equal(cf(x).numpy(), 2 * np.ones(3))  # traced: True, baked in
    np.testing.assert_array_equal(cf(x).numpy(), 2 * np.ones(3))  # the cached program
    assert runs.tolist() == [1, 1]  # the cached call does not run the Python function
    assert not compiler.is_compiling()


def test_assume_constant_result_runs_once_while_tracing_and_is_baked_in():
    calls = []
    config = {"scale": 2.0}

    @compiler.assume_constant_result
    def scale():
        calls.append(1)
        return config["scale"]

    def f(x):
        return x * scale()
    cf = ag.compile(f, backend="interpret")
    x = ag.arange(3.0)
    np.testing.assert_allclose(cf(x).numpy(), x.numpy() * 2.0)
    assert len(calls) == 1  # ran while tracing
    config["scale"] = 5.0   # the program keeps the value it saw: no guard on it
    np.testing.assert_allclose(cf(x).numpy(), x.numpy() * 2.0)
    assert len(calls) == 1 and cf.n_traces == 1
    assert scale() == 5.0 and len(calls) == 2  # eagerly a plain call
    np.testing.assert_allclose(f(x).numpy(), x.numpy() * 5.0)


def test_assume_constant_result_may_read_the_clock_and_concrete_tensors():
    table = ag.tensor([1.0, 2.0, 4.0])

    @compiler.assume_constant_result
    def stamp_and_total():
        time.perf_counter()             # a clock read outside it is a graph break
        return table.sum().item(), table * 2   # .item() on a real tensor: concrete

    def f(x):
        total, doubled = stamp_and_total()
        return x * total + doubled
    cf = ag.compile(f, backend="interpret", fullgraph=True)
    x = ag.ones(3, requires_grad=True)
    out = cf(x)
    np.testing.assert_allclose(out.detach().numpy(), [9.0, 11.0, 15.0])
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [7.0] * 3)
    with ag.no_grad():
        table.mul_(10)                  # the constant was copied while tracing: not read again
    np.testing.assert_allclose(cf(x).detach().numpy(), [9.0, 11.0, 15.0])


def test_assume_constant_result_on_a_traced_tensor_is_a_graph_break():
    @compiler.assume_constant_result
    def first(t):
        return t[0].item()

    def f(x):
        return x * first(x)
    with pytest.raises(ag.GraphBreakError, match="assume_constant_result"):
        ag.compile(f, backend="interpret", fullgraph=True)(ag.ones(2))
    cf = ag.compile(f, backend="interpret")
    x = ag.tensor([3.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_allclose(cf(x).numpy(), [9.0, 3.0])  # eagerly, as without compile
