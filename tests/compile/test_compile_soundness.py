"""The compiled call never gives a silently wrong answer: arguments that alias, state the trace
read (attributes, dict entries, list items, globals, closures), Python randomness and clocks,
state left behind by an abandoned trace, recompile warnings, and threads. Each case compares
with the eager run of the same code."""
import contextlib
import random
import threading
import time
import types
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close

BACKENDS = ["interpret", "numba"]


@contextlib.contextmanager
def _strict():
    """A block in which any warning (a graph break, a recompile) fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _compiled_programs(cf):
    return [p for p in cf.cache.values() if p != "eager"]


# ---- 1. arguments that alias ---------------------------------------------------------------
def _write_then_multiply(a, b):
    a.add_(1)
    return a * b


@pytest.mark.parametrize("backend", BACKENDS)
def test_same_tensor_twice_written_in_place_matches_eager(backend):
    """h(x, x): the write through `a` is seen through `b` (4, not 2), and the gradient of the
    leaf behind x is the eager one. The trace specialises on the pattern and stays compiled."""
    cf = ag.compile(_write_then_multiply, backend=backend)
    results = []
    for f in (_write_then_multiply, cf, cf):
        w = ag.tensor([1.0, 2.0], requires_grad=True)
        x = w * 1  # a non-leaf: writing it in place is allowed
        with _strict() if f is cf else warnings.catch_warnings():
            out = f(x, x)
        out.sum().backward()
        results.append((out._value.copy(), x._value.copy(), w.grad._value.copy()))
    for got in results[1:]:
        for a, b in zip(got, results[0]):
            np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(results[0][0], [4.0, 9.0])
    assert cf.n_traces == 1 and len(_compiled_programs(cf)) == 1


def test_zero_dim_same_tensor_twice_gives_four_and_a_tensor():
    """The issue's example: 4 eagerly, 2 compiled before; the interpret backend also gave a
    numpy scalar (not an array) as a 0-d output's value, which broke printing it."""
    cf = ag.compile(_write_then_multiply, backend="interpret")
    x = ag.ones(())
    out = cf(x, x)
    assert isinstance(out._value, np.ndarray) and out.item() == 4.0 and x.item() == 2.0
    assert repr(out) == "tensor(4.)"


def test_program_traced_for_distinct_arguments_is_not_used_for_aliased_ones():
    """A program traced for h(x, y) reads both inputs; called as h(z, z) it must not run (the
    specialised fast call included): the aliasing pattern is part of the guard key."""
    cf = ag.compile(_write_then_multiply, backend="interpret")
    cf(ag.ones(2), ag.ones(2))
    cf(ag.ones(2), ag.ones(2))  # the specialised call is in place now
    z = ag.ones(2)
    np.testing.assert_array_equal(cf(z, z)._value, [4.0, 4.0])
    np.testing.assert_array_equal(z._value, [2.0, 2.0])
    np.testing.assert_array_equal(cf(ag.ones(2), ag.ones(2))._value, [2.0, 2.0])


@pytest.mark.parametrize("make", [lambda x: (x, x[0]), lambda x: (x[0], x),
                                  lambda x: (x[0], x[1]), lambda x: (x, x.detach())],
                         ids=["base-view", "view-base", "two-views", "detached-alias"])
def test_aliased_views_written_in_place_break_naming_the_arguments(make):
    """A view and its base (or two views of one tensor) with a write: the functional program
    cannot show the write through the other, so the call runs eagerly, with a warning that
    names both arguments; the result, the written tensor and the gradient are eager's."""
    cf = ag.compile(_write_then_multiply, backend="interpret")
    got = []
    for f in (_write_then_multiply, cf):
        w = ag.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        x = w * 1
        a, b = make(x)
        if f is cf:
            with pytest.warns(UserWarning, match=r"argument 'a' and argument 'b' share memory"):
                out = f(a, b)
        else:
            out = f(a, b)
        out.sum().backward()
        got.append((out._value.copy(), x._value.copy(), w.grad._value.copy()))
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_aliased_arguments_without_writes_stay_compiled(backend):
    def f(a, b):
        return (a * b).sum()
    cf = ag.compile(f, backend=backend)
    for make in (lambda x: (x, x), lambda x: (x, x[0]), lambda x: (x[0], x[1])):
        got = []
        for g in (f, cf):
            x = ag.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = g(*make(x))
            assert not [c for c in caught if "this call eagerly" in str(c.message)]
            out.backward()
            got.append((out._value.copy(), x.grad._value.copy()))
        for a, b in zip(*got):
            np.testing.assert_array_equal(a, b)
    assert "eager" not in cf.cache.values()


W_ALIAS = ag.ones(3)


def _write_arg_read_global(a):
    a.add_(1)
    return a * W_ALIAS


def test_argument_aliasing_a_global_the_function_reads_breaks():
    """f(W) where f writes its argument and reads the global W: eagerly the write shows in the
    read. Both when the first trace sees it and when a program traced for another argument
    is called with W."""
    global W_ALIAS
    try:
        for first in (None, ag.ones(3)):
            W_ALIAS = ag.ones(3)
            cf = ag.compile(_write_arg_read_global, backend="interpret")
            if first is not None:
                np.testing.assert_array_equal(cf(first)._value, [2.0, 2.0, 2.0])
            with pytest.warns(UserWarning, match="shares? memory"):
                out = cf(W_ALIAS)
            np.testing.assert_array_equal(out._value, [4.0, 4.0, 4.0])  # eager: 2 * 2
            np.testing.assert_array_equal(W_ALIAS._value, [2.0, 2.0, 2.0])
    finally:
        W_ALIAS = ag.ones(3)


# ---- 2. guards on state the trace read ------------------------------------------------------
class _Box:
    pass


@pytest.mark.parametrize("backend", BACKENDS)
def test_rebound_attribute_tensor_retraces(backend):
    o = _Box()
    o.w = ag.ones(3)

    @ag.compile(backend=backend)
    def f(x):
        return x * o.w
    x = ag.ones(3)
    np.testing.assert_array_equal(f(x)._value, [1, 1, 1])
    np.testing.assert_array_equal(f(x)._value, [1, 1, 1])
    o.w = ag.full((3,), 2.0)
    with pytest.warns(UserWarning, match=r"recompiling: o\.w: another tensor took its place"):
        np.testing.assert_array_equal(f(x)._value, [2, 2, 2])


def test_rebound_dict_list_and_nested_attribute_tensors_retrace():
    d = {"w": ag.ones(2)}
    lst = [ag.ones(2)]
    outer = _Box()
    outer.inner = _Box()
    outer.inner.w = ag.ones(2)

    @ag.compile(backend="interpret")
    def f(x):
        return x * d["w"] + x * lst[0] + x * outer.inner.w
    x = ag.ones(2)
    assert f(x)._value.tolist() == [3, 3]
    d["w"] = ag.full((2,), 2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert f(x)._value.tolist() == [4, 4]
        lst[0] = ag.full((2,), 2.0)
        assert f(x)._value.tolist() == [5, 5]
        outer.inner.w = ag.full((2,), 2.0)
        assert f(x)._value.tolist() == [6, 6]
        outer.inner = types.SimpleNamespace(w=ag.full((2,), 3.0))
        assert f(x)._value.tolist() == [7, 7]
    assert f.n_traces == 5


def test_python_values_read_through_attributes_globals_and_dicts_are_guarded():
    cfg = _Box()
    cfg.scale = 2.0
    opts = {"shift": 1, "dims": (0,)}

    @ag.compile(backend="interpret")
    def f(x):
        return (x * cfg.scale + opts["shift"]).sum(opts["dims"])
    x = ag.ones(2, 2)
    assert f(x)._value.tolist() == [6, 6]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg.scale = 3.0
        assert f(x)._value.tolist() == [8, 8]
        opts["shift"] = 0
        assert f(x)._value.tolist() == [6, 6]
        opts["dims"] = (1,)
        assert f(x)._value.tolist() == [6, 6]
        assert f(ag.tensor([[1.0, 1.0], [2.0, 2.0]]))._value.tolist() == [6, 12]


SCALE = 2.0


def _times_global_scale(x):
    return x * SCALE


def test_global_python_scalar_is_guarded():
    global SCALE
    cf = ag.compile(_times_global_scale, backend="interpret")
    try:
        assert cf(ag.ones(1))._value.tolist() == [2]
        SCALE = 5.0
        with pytest.warns(UserWarning, match=r"SCALE \(a Python value, 2\.0 at the trace\)"):
            assert cf(ag.ones(1))._value.tolist() == [5]
    finally:
        SCALE = 2.0


class _Cfg:
    def __init__(self):
        self.scale = 2.0
        self.bias = ag.zeros(3)


class _Scaled(ag.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = ag.nn.Linear(3, 3)
        self.cfg = _Cfg()

    def forward(self, x):
        return self.fc(x) * self.cfg.scale + self.cfg.bias


@pytest.mark.parametrize("backend", BACKENDS)
def test_module_config_values_tensors_and_replaced_submodules_are_guarded(backend):
    ag.manual_seed(0)
    m = _Scaled()
    cm = ag.compile(m, backend=backend)
    x = ag.randn(2, 3)

    def same():
        assert_close(cm(x)._value, m(x)._value, rtol=1e-6, atol=1e-6, equal_nan=True)
    same()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.cfg.scale = 3.0
        same()
        m.cfg.bias = ag.ones(3)
        same()
        m.fc = ag.nn.Linear(3, 3)  # a new submodule: its parameters are other tensors
        same()
        m.cfg = _Cfg()
        same()


INNER_W = ag.ones(2)


@ag.compile(backend="interpret")
def _inner_reads_global(x):
    return x * INNER_W


def test_state_read_by_a_compiled_function_called_inside_is_guarded():
    global INNER_W
    outer = ag.compile(lambda x: _inner_reads_global(x) + 1, backend="interpret")
    try:
        assert outer(ag.ones(2))._value.tolist() == [2, 2]
        INNER_W = ag.full((2,), 3.0)
        with pytest.warns(UserWarning, match=r"recompiling: INNER_W: another tensor"):
            assert outer(ag.ones(2))._value.tolist() == [4, 4]
    finally:
        INNER_W = ag.ones(2)


def test_counter_changed_inside_breaks_and_counts_once_per_call():
    """A Python counter the function increments cannot be repeated by the program: the call
    runs eagerly, and the abandoned trace's increment is rolled back (one per call)."""
    state = _Box()
    state.calls = 0

    def f(x):
        state.calls += 1
        return x * 2
    cf = ag.compile(f, backend="interpret")
    with pytest.warns(UserWarning, match=r"changes Python state it can reach \(state\.calls\)"):
        cf(ag.ones(1))
    cf(ag.ones(1))
    assert state.calls == 2


def test_list_appended_inside_breaks_and_appends_once_per_call():
    hist = []

    def f(x):
        hist.append(1.0)
        return x * 2
    cf = ag.compile(f, backend="interpret")
    with pytest.warns(UserWarning, match=r"changes Python state it can reach \(hist\)"):
        cf(ag.ones(1))
    cf(ag.ones(1))
    assert hist == [1.0, 1.0]


def test_explain_lists_the_state_guards():
    o = _Box()
    o.w, o.k = ag.ones(2), 3

    def f(x):
        return x * o.w * o.k
    text = ag.explain(f, ag.ones(2))
    assert "o.w is" in text and "o.k == 3" in text


# ---- 3. Python randomness and clocks ---------------------------------------------------------
class _RandomDepth(ag.nn.Module):
    """A network whose depth is drawn per call (the dynamic-net tutorial's pattern)."""

    def __init__(self):
        super().__init__()
        self.inp = ag.nn.Linear(4, 8)
        self.mid = ag.nn.Linear(8, 8)
        self.out = ag.nn.Linear(8, 1)

    def forward(self, x):
        h = self.inp(x).relu()
        for _ in range(random.randint(0, 3)):
            h = self.mid(h).relu()
        return self.out(h)


def _train_random_depth(compiled):
    ag.manual_seed(0)
    random.seed(123)
    model = _RandomDepth()
    opt = ag.optim.SGD(model.parameters(), lr=0.05)
    fwd = ag.compile(model, backend="interpret") if compiled else model
    x, y = ag.randn(5, 4), ag.randn(5, 1)
    losses = []
    for _ in range(6):
        opt.zero_grad()
        loss = ((fwd(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss._value))
    return losses, [p._value.copy() for p in model.parameters()]


def test_random_depth_network_trains_as_eagerly_with_a_warning_naming_the_call():
    eager = _train_random_depth(False)
    with pytest.warns(UserWarning, match=r"test_compile_soundness\.py:\d+: random\.randint\(\)"):
        compiled = _train_random_depth(True)
    assert compiled[0] == eager[0]
    for a, b in zip(compiled[1], eager[1]):
        np.testing.assert_array_equal(a, b)


_RNG = np.random.default_rng(0)


@pytest.mark.parametrize("draw, what", [
    (lambda: random.random(), r"random\.random\(\)"),
    (lambda: np.random.rand(), r"numpy\.random's global generator"),
    (lambda: _RNG.random(), r"the generator `_RNG`"),
    (lambda: time.time() * 0, r"time\.time\(\)"),
])
def test_random_draws_and_clock_reads_break_the_graph(draw, what):
    def f(x):
        return x * draw()
    cf = ag.compile(f, backend="interpret")
    state = _RNG.bit_generator.state
    random.seed(5)
    np.random.seed(5)
    with pytest.warns(UserWarning, match=what):
        got = [cf(ag.ones(1))._value.tolist() for _ in range(2)]
    _RNG.bit_generator.state = state
    random.seed(5)
    np.random.seed(5)
    want = [f(ag.ones(1))._value.tolist() for _ in range(2)]
    assert got == want or what.startswith(r"time")


def test_aotgrad_randomness_still_compiles():
    """aotgrad's own generator (rand, dropout) is a program input drawn per call: no break."""
    cf = ag.compile(lambda x: ag.nn.functional.dropout(x, 0.5) + ag.rand(3), backend="interpret")
    with _strict():
        a, b = cf(ag.ones(3)), cf(ag.ones(3))
    assert not np.array_equal(a._value, b._value)
    assert cf.n_traces == 1


# ---- 4. state left by an abandoned trace ------------------------------------------------------
def _train_logging_item(compiled, make_opt, backend="interpret", steps=4):
    ag.manual_seed(0)
    model = ag.nn.Linear(3, 2)
    opt = make_opt(model.parameters())
    x, y = ag.randn(4, 3), ag.randn(4, 2)
    logs = []

    def step(x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        logs.append(loss.item())  # a graph break after the optimizer step traced
        return loss
    f = ag.compile(step, backend=backend) if compiled else step
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(steps):
            f(x, y)
    return logs, [p._value.copy() for p in model.parameters()], opt


@pytest.mark.parametrize("make_opt", [
    lambda p: ag.optim.Adam(p, lr=0.1),
    lambda p: ag.optim.SGD(p, lr=0.1, momentum=0.9),
], ids=["adam", "sgd-momentum"])
def test_abandoned_training_step_leaves_no_optimizer_state(make_opt):
    eager = _train_logging_item(False, make_opt)
    compiled = _train_logging_item(True, make_opt)
    assert compiled[0] == eager[0]
    for a, b in zip(compiled[1], eager[1]):
        np.testing.assert_array_equal(a, b)
    for (pe, se), (pc, sc) in zip(eager[2].state.items(), compiled[2].state.items()):
        assert se.keys() == sc.keys()
        for k in se:
            np.testing.assert_array_equal(np.asarray(se[k]._value), np.asarray(sc[k]._value))


def test_abandoned_training_step_numba():
    make = lambda p: ag.optim.Adam(p, lr=0.1)  # noqa: E731
    eager = _train_logging_item(False, make, steps=2)
    compiled = _train_logging_item(True, make, backend="numba", steps=2)
    assert compiled[0] == eager[0]
    for a, b in zip(compiled[1], eager[1]):
        np.testing.assert_array_equal(a, b)


class _Remembers(ag.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = ag.nn.Linear(2, 2)

    def forward(self, x):
        h = self.fc(x)
        self.last = h  # set during the trace
        self.register_buffer("seen", h.detach().sum())
        if h.sum().item() > 1e9:  # a graph break after the writes
            return h * 0
        return h


def test_abandoned_trace_rolls_back_module_attributes_and_buffers():
    ag.manual_seed(0)
    m = _Remembers()
    cm = ag.compile(m, backend="interpret")
    x = ag.randn(3, 2)
    with pytest.warns(UserWarning, match="graph break"):
        out = cm(x)
    assert isinstance(m.last._value, np.ndarray) and isinstance(m.seen._value, np.ndarray)
    np.testing.assert_array_equal(m.last._value, out._value)
    assert_close(m.seen._value, out._value.sum(), rtol=1e-6, atol=0, equal_nan=True)


# ---- 5. recompile warnings --------------------------------------------------------------------
def test_growing_sequence_warns_once_naming_argument_dim_and_remedy(monkeypatch):
    import aotgrad.compiler as compiler
    monkeypatch.setattr(compiler, "cache_size_limit", 4)

    @ag.compile(backend="interpret", dynamic=False)  # (the default makes the dim symbolic)
    def step(tokens, w):
        return (tokens * w).sum()
    w = ag.ones(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(3, 12):
            step(ag.ones(2, n), w)
    msgs = [str(c.message) for c in caught]
    assert len(msgs) == 2, msgs  # one recompile warning, one cache_size_limit warning
    assert "argument 'tokens' changed size in dim 1 (3 -> 4)" in msgs[0]
    assert "cache_size_limit (4) reached" in msgs[1] and "argument 'tokens'" in msgs[1]
    assert "(6 -> 7)" in msgs[1]
    for m in msgs:
        assert "pad it to a fixed length" in m and "raise cache_size_limit" in m
        assert "('T'" not in m and "dtype(" not in m
    assert all(c.filename == __file__ for c in caught)


def test_recompile_warning_names_dtype_and_python_value_changes():
    @ag.compile(backend="interpret")
    def f(x, k):
        return x * k
    f(ag.ones(2), 2)
    with pytest.warns(UserWarning, match=r"argument 'k' changed value \(2 -> 3\)"):
        f(ag.ones(2), 3)
    with pytest.warns(UserWarning, match=r"argument 'x' changed dtype"):
        f(ag.ones(2, dtype=ag.float64), 3)


# ---- 6. threads ---------------------------------------------------------------------------------
def test_threads_calling_at_once_trace_once():
    def f(x):
        time.sleep(0.05)  # widen the race: every thread arrives while the first traces
        return x * 2 + 1
    cf = ag.compile(f, backend="interpret")
    xs = [ag.full((3,), float(i)) for i in range(8)]
    outs = [None] * 8
    barrier = threading.Barrier(8)

    def run(i):
        barrier.wait()
        outs[i] = cf(xs[i])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (time.sleep reads no clock value: no break)
        ts = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    assert cf.n_traces == 1
    for i, o in enumerate(outs):
        np.testing.assert_array_equal(o._value, 2 * xs[i]._value + 1)


def test_printing_a_traced_value_breaks_and_prints_every_call(capsys):
    def f(x):
        y = x * 2
        print(y)
        return y
    cf = ag.compile(f, backend="interpret")
    with pytest.warns(UserWarning, match="printing a tensor value"):
        cf(ag.ones(2))
    cf(ag.ones(2))
    assert capsys.readouterr().out.count("tensor([2., 2.])") == 2


class _Scaler:
    def __init__(self):
        self.w = ag.ones(2)
        self.k = 2.0

    @ag.compile(backend="interpret")
    def apply(self, x):
        return x * self.w * self.k


def test_method_reads_of_self_are_guarded():
    s = _Scaler()
    x = ag.ones(2)
    assert s.apply(x)._value.tolist() == [2, 2]
    s.k = 3.0
    with pytest.warns(UserWarning, match=r"recompiling: self\.k"):
        assert s.apply(x)._value.tolist() == [3, 3]
    s.w = ag.full((2,), 2.0)
    with pytest.warns(UserWarning, match=r"recompiling: self\.w"):
        assert s.apply(x)._value.tolist() == [6, 6]
