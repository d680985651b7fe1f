"""aotgrad.compiler as a package: its public names, is_compiling() and
assume_constant_result() (PyTorch's torch.compiler markers)."""
import time
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad import compiler
from aotgrad.testing import assert_close
from aotgrad.compiler.call import CallBlock


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
    assert_close(cf(x).numpy(), x.numpy() * 2.0, rtol=1e-7, atol=0, equal_nan=True)
    assert len(calls) == 1  # ran while tracing
    config["scale"] = 5.0   # the program keeps the value it saw: no guard on it
    assert_close(cf(x).numpy(), x.numpy() * 2.0, rtol=1e-7, atol=0, equal_nan=True)
    assert len(calls) == 1 and cf.n_traces == 1
    assert scale() == 5.0 and len(calls) == 2  # eagerly a plain call
    assert_close(f(x).numpy(), x.numpy() * 5.0, rtol=1e-7, atol=0, equal_nan=True)


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
    assert_close(out.detach().numpy(), [9.0, 11.0, 15.0], rtol=1e-7, atol=0, equal_nan=True)
    out.sum().backward()
    assert_close(x.grad.numpy(), [7.0] * 3, rtol=1e-7, atol=0, equal_nan=True)
    with ag.no_grad():
        table.mul_(10)                  # the constant was copied while tracing: not read again
    assert_close(cf(x).detach().numpy(), [9.0, 11.0, 15.0], rtol=1e-7, atol=0, equal_nan=True)


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
        # eagerly, as without compile
        assert_close(cf(x).numpy(), [9.0, 3.0], rtol=1e-7, atol=0, equal_nan=True)


def test_the_stages_are_typed_and_printable():
    from aotgrad.compiler.program import partition_trace
    from aotgrad.tracer import Mutation, Role, trace

    def f(x, w, b):
        b.add_(1.0)                          # an in-place write: a mutation
        return (x @ w + b).tanh().sum(), 2   # a non-tensor output too
    x, w, b = ag.randn(3, 4), ag.randn(4, 5, requires_grad=True), ag.zeros(5)
    tr = trace(f, (x, w, b), {})
    assert [k for k, _ in tr.roles] == [Role.ARG] * 3
    assert tr.mutations == [(Mutation.ARG, 2)] and tr.diff_roles == [(Role.ARG, 1)]
    lay = tr.layout
    assert (lay.n_tensor_outputs, lay.n_mutations, lay.n_grads) == (1, 1, 1)
    assert len(tr.graph.outputs[lay.forward]) == lay.n_forward == 2
    assert len(tr.graph.outputs[lay.grads]) == 1 and tr.graph.outputs[lay.written] == []
    with pytest.raises(AttributeError):
        tr.roles = []                        # frozen
    assert "def joint(" in str(tr) and "x1=arg[1]" in str(tr)
    graphs = partition_trace(tr, None)
    assert graphs.has_backward and "def forward(" in str(graphs) and "# partition" in str(graphs)
    cf = ag.compile(f, backend="interpret")
    b2 = ag.zeros(5)
    out, two = cf(x, w, b2)
    assert two == 2 and b2.numpy().tolist() == [1.0] * 5
    prog = cf.ir(x, w, b2)
    plan = prog.call_plan()  # a mutation and a constant output: blocks of the one call
    assert plan.call is not None and plan.inline is None
    assert CallBlock.WRITE_BACK in plan.blocks and CallBlock.CONSTANT_OUTPUTS in plan.blocks
    assert "write_back(" in str(plan) and "in-place writes written back" in str(plan)
    g = ag.compile(lambda x, w: (x @ w).sum(), backend="interpret")
    g(x, w)
    plan = g.ir(x, w).call_plan()
    assert plan.call is not None and plan.inline is not None and "inline" in str(plan)
