"""Run-time checks of values in compiled programs (the prim `check_values`), and errors raised
while a compiled program runs naming the op and the user's line (the node's provenance)."""
import re
import warnings

import numpy as np
import pytest

import aotgrad as ag
import aotgrad.nn.functional as F
from aotgrad.ir import dtypes as dt
from aotgrad.ir import prims
from aotgrad.ir.core import Graph, Node, Provenance, Var, evaluate, located_error
from aotgrad.ir.printer import HEADER, format_graph, load_graph_source
from aotgrad.ir.value_checks import ValueCheck
from aotgrad.testing import assert_close

BACKENDS = ["interpret", "numba"]
HERE = re.compile(r"test_runtime_checks\.py:\d+: `")


def test_value_check_rules():
    c = ValueCheck(IndexError, "bad {value}", low=-3, high=3, exempt=-100)
    assert c.first_violation(np.array([0, -3, 2, -100])) is None
    assert c.first_violation(np.array([0, 3, -4])) == 3
    assert ValueCheck(RuntimeError, "zero", nonzero=True).first_violation(np.array([1, 0])) == 0
    closed = ValueCheck(RuntimeError, "{value}", low=0.0, high=1.0, high_inclusive=True)
    assert closed.first_violation(np.array([0.0, 1.0], np.float32)) is None
    assert np.isnan(closed.first_violation(np.array([0.5, np.nan], np.float32)))
    with pytest.raises(IndexError, match="bad 3"):
        c.raise_if_violated(np.array([3]))


def test_printed_graph_with_a_check_runs():
    """The check's parameters print as valid Python: the printed graph runs and raises."""
    @ag.compile(backend="interpret")
    def f(x, i):
        return x.index_select(0, i)
    x = ag.randn(3, 2)
    g = f.ir(x, ag.tensor([0, 2])).inference
    text = format_graph(g)
    assert "prims.check_values" in text and "ValueCheck(error=IndexError" in text
    run = load_graph_source(HEADER + text)
    np.testing.assert_array_equal(run(x.numpy(), np.array([2, 0]))[0], x.numpy()[[2, 0]])
    with pytest.raises(IndexError, match="index 5 is out of bounds"):
        run(x.numpy(), np.array([5, 0]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_checked_index_computed_in_a_kernel_is_not_clobbered(backend):
    """The check step aliases its input (no copy): the buffer of an index computed by a kernel
    stays alive while the gather after the check reads it, call after call."""
    def fn(x, i, y):
        j = (i * 3 + 1) % 3          # computed in a kernel, checked, then used twice
        a = x.index_select(0, j)
        b = (y * 2.0 + 1.0).exp()    # more kernels between the check and the second use
        return a.sum(1) + b.sum() + x.index_select(0, j).mean()
    cf = ag.compile(fn, backend=backend, fullgraph=True)
    for k in range(3):
        x, y = ag.randn(4, 5), ag.randn(6)
        i = ag.tensor(np.random.randint(0, 4, size=7))
        assert_close(cf(x, i, y).numpy(), fn(x, i, y).numpy(), rtol=1e-5, atol=0, equal_nan=True)
    if backend == "numba":
        assert "run-time check of values" in cf.ir(x, i, y).schedule_report()


@pytest.mark.parametrize("backend", BACKENDS)
def test_ignore_index_passes_the_label_check(backend):
    def fn(x, t):
        return F.cross_entropy(x, t, ignore_index=7)
    x, t = ag.randn(4, 3, requires_grad=True), ag.tensor([0, 7, 2, 7])
    cf = ag.compile(fn, backend=backend, fullgraph=True)
    assert_close(cf(x, t).item(), fn(x, t).item(), rtol=1e-6, atol=0, equal_nan=True)
    with pytest.raises(IndexError, match=r"cross_entropy: Target -100 is out of bounds"):
        cf(x, ag.tensor([0, -100, 2, 7]))   # -100 is not ignored here


@pytest.mark.parametrize("backend", BACKENDS)
def test_check_in_a_training_step_leaves_nothing_half_done(backend):
    """A label checked at run time fails before any write-back: parameters, their .grad and
    optimizer state are as they were; the next good call trains as eagerly."""
    ag.manual_seed(0)
    model = ag.nn.Linear(3, 4)
    opt = ag.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    cf = ag.compile(step, backend=backend)
    x = ag.randn(5, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cf(x, ag.tensor([0, 1, 2, 3, 0]))
        before = [p.detach().numpy().copy() for p in model.parameters()]
        grads = [p.grad.numpy().copy() for p in model.parameters()]
        with pytest.raises(IndexError, match=HERE.pattern):
            cf(x, ag.tensor([0, 1, 9, 3, 0]))
        for p, v, g in zip(model.parameters(), before, grads):
            np.testing.assert_array_equal(p.detach().numpy(), v)
            np.testing.assert_array_equal(p.grad.numpy(), g)
        loss = cf(x, ag.tensor([0, 1, 2, 3, 0]))
    assert np.isfinite(loss.item())


def test_error_while_evaluating_names_the_node():
    """The interpret backend: an error a prim raises names the node's op, phase and line."""
    x = Var("x", (2,), dt.int64)
    y = Var("y", (2,), dt.int64)
    check = ValueCheck(RuntimeError, "value {value} is bad", low=0)
    prov = Provenance("/somewhere/model.py", 12, "loss = f(x)", "my_op", "bw")
    g = Graph([x], [Node(prims.check_values, [x], [y], {"check": check}, prov)], [y])
    with pytest.raises(RuntimeError) as ei:
        evaluate(g, [np.array([1, -2])])
    assert str(ei.value) == "my_op (backward): value -2 is bad (at model.py:12: `loss = f(x)`)"


def test_located_error_keeps_type_and_a_located_message():
    node = Node(prims.neg, [], [], {}, Provenance("/a/b.py", 3, "y = -x", "neg"))
    e = located_error(IndexError("boom"), node)
    assert type(e) is IndexError and str(e) == "neg: boom (at b.py:3: `y = -x`)"
    again = located_error(e, node)
    assert again is e   # already names a line
    odd = UnicodeDecodeError("utf-8", b"x", 0, 1, "bad")
    assert located_error(odd, node) is odd   # cannot be re-made: left as it is


@pytest.mark.parametrize("backend", BACKENDS)
def test_run_time_errors_name_op_and_line(backend):
    def fn(a, b):
        return a * 2 + (a // b)          # the line the error must name
    cf = ag.compile(fn, backend=backend, fullgraph=True)
    with pytest.raises(RuntimeError) as ei:
        cf(ag.tensor([3, 4]), ag.tensor([1, 0]))
    msg = str(ei.value)
    assert msg.startswith("floor_divide: ZeroDivisionError")
    assert "test_runtime_checks.py:" in msg and "return a * 2 + (a // b)" in msg
