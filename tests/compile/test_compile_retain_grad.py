"""retain_grad() and tensor hooks on a tensor that a compiled function writes in place.

Eagerly (and in PyTorch) a tensor modified in place keeps retaining: after backward its .grad
is the gradient of its new value, from its uses inside the function after the write as well
as from outside. Hooks registered before the write see the gradient of the old value, hooks
registered after it that of the new value (and a replacement they return flows on).
"""
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close

BACKENDS = ["interpret", "numba"]
A0 = np.array([0.5, -1.0, 2.0], np.float32)
W0 = np.array([1.0, 2.0, 3.0], np.float32)


def square_after_write(x):
    x.mul_(2)
    return (x * x).sum()


def write_and_return(x):
    x.mul_(2)
    return x


def two_writes(x, w):
    x.mul_(2)
    s = (x * 2).sum()   # a use of the first new value: not part of the final one's gradient
    x.add_(w)
    return s + (x * 3).sum()


def read_before_write(x):
    y = x.sum() * 2
    x.mul_(2)
    return y


_COMPILED = {}


def _compiled(fn, backend):
    """One compiled function per (function, backend) for the whole module (numba compiles)."""
    key = (fn, backend)
    if key not in _COMPILED:
        _COMPILED[key] = ag.compile(fn, backend=backend)
    return _COMPILED[key]


def _np(t):
    if t is None:
        return None
    return t.detach().numpy().copy() if hasattr(t, "numpy") and not hasattr(t, "_value") \
        else t._value.copy()


def _run(m, fn, retain="before", hook=None, extra_use=True):
    """fn on a non-leaf `a = leaf * 1` (and a leaf w for two_writes) with module m (aotgrad
    or torch): retain_grad before or after the call, an optional hook ("before"/"after":
    record what it sees; "scale": replace it by 10 * grad, registered after), then
    backward of the output (plus a use of `a` after the call)."""
    leaf = m.tensor(A0.copy(), requires_grad=True)
    w = m.tensor(W0.copy(), requires_grad=True)
    a = leaf * 1
    seen = []
    if retain == "before":
        a.retain_grad()
    if hook == "before":
        a.register_hook(lambda g: seen.append(_np(g)))
    out = fn(a, w) if fn.__name__ == "two_writes" else fn(a)
    if retain == "after":
        a.retain_grad()
    if hook == "after":
        a.register_hook(lambda g: seen.append(_np(g)))
    if hook == "scale":
        a.register_hook(lambda g: g * 10)
    loss = out.sum()
    if extra_use:
        loss = loss + (a * a).sum()
    loss.backward()
    return dict(same=out is a, retains=a.retains_grad, a=_np(a._grad if m is ag else a.grad),
                leaf=_np(leaf.grad), w=_np(w.grad), value=_np(a), seen=seen)


def _assert_same(got, want):
    assert got.keys() == want.keys()
    for k in want:
        if k == "seen":
            assert len(got[k]) == len(want[k]), k
            for x, y in zip(got[k], want[k]):
                assert_close(x, y, rtol=1e-5, atol=1e-6, equal_nan=True)
        elif isinstance(want[k], np.ndarray) or isinstance(got[k], np.ndarray):
            assert got[k] is not None and want[k] is not None, (k, got[k], want[k])
            assert_close(got[k], want[k], rtol=1e-5, atol=1e-6, equal_nan=True, msg=k)
        else:
            assert got[k] == want[k], (k, got[k], want[k])


CASES = [(square_after_write, "before", None), (square_after_write, "after", None),
         (write_and_return, "before", None), (write_and_return, "after", None),
         (two_writes, "before", None), (two_writes, "after", "after"),
         (square_after_write, "before", "before"), (square_after_write, "before", "after"),
         (square_after_write, "after", "scale"), (write_and_return, "before", "scale")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_retained_input_written_in_place_matches_eager(backend):
    # compiled functions of its own: the module's shared ones may already hold a trace
    # without grad (another test's call under no_grad), whatever order the tests run in
    compiled = {}
    for fn, retain, hook in CASES:
        if fn not in compiled:
            compiled[fn] = ag.compile(fn, backend=backend)
        cf = compiled[fn]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = _run(ag, cf, retain, hook)
        _assert_same(got, _run(ag, fn, retain, hook))
    # retain_grad and hooks, before or after the call, reuse the one trace
    assert all(cf.n_traces == 1 for cf in compiled.values())


@pytest.mark.parametrize("backend", BACKENDS)
def test_retained_input_written_in_place_matches_torch(backend, torch):
    for fn, retain, hook in CASES:
        _assert_same(_run(ag, _compiled(fn, backend), retain, hook), _run(torch, fn, retain, hook))


@pytest.mark.parametrize("backend", BACKENDS)
def test_retained_grad_is_the_gradient_of_the_new_value(backend):
    # loss = sum((2 a)^2) + sum((2 a)^2): d/d(new a) = 8 a0 (the old grad_fn would give
    # only the part from outside, 4 a0; before the fix .grad was not kept at all)
    r = _run(ag, _compiled(square_after_write, backend), "before")
    assert r["retains"]
    assert_close(r["a"], 8 * A0, rtol=1e-6, atol=0, equal_nan=True)
    assert_close(r["leaf"], 16 * A0, rtol=1e-6, atol=0, equal_nan=True)
    # only its uses after the last write: s reads the first new value
    r = _run(ag, _compiled(two_writes, backend), "after", extra_use=False)
    assert_close(r["a"], np.full(3, 3.0), rtol=1e-7, atol=0, equal_nan=True, check_dtype=False)
    # 2 * (2 + 3)
    assert_close(r["leaf"], np.full(3, 10.0), rtol=1e-7, atol=0, equal_nan=True, check_dtype=False)
    assert_close(r["w"], np.full(3, 3.0), rtol=1e-7, atol=0, equal_nan=True, check_dtype=False)
    # a hook registered after the call sees that gradient and its replacement flows on
    r = _run(ag, _compiled(square_after_write, backend), "after", hook="scale")
    assert_close(r["a"], 80 * A0, rtol=1e-6, atol=0, equal_nan=True)
    assert_close(r["leaf"], 160 * A0, rtol=1e-5, atol=0, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_argument_written_and_returned_is_the_argument(backend):
    cf = _compiled(write_and_return, backend)
    leaf = ag.tensor(A0.copy(), requires_grad=True)
    a = leaf * 1
    a.retain_grad()
    out = cf(a)
    assert out is a and a.retains_grad and a._version == 1
    assert_close(a._value, 2 * A0, rtol=1e-7, atol=0, equal_nan=True)
    (out * out).sum().backward()
    assert_close(a.grad._value, 4 * A0, rtol=1e-6, atol=0, equal_nan=True)
    assert_close(leaf.grad._value, 8 * A0, rtol=1e-6, atol=0, equal_nan=True)
    # without grad, the same: the caller's tensor, written
    with ag.no_grad():
        b = ag.tensor(A0.copy())
        assert cf(b) is b
    assert_close(b._value, 2 * A0, rtol=1e-7, atol=0, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_retain_grad_no_grad_and_no_warning(backend):
    cf = _compiled(square_after_write, backend)
    for fn in (square_after_write, cf):
        leaf = ag.tensor(A0.copy(), requires_grad=True)
        a = leaf * 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fn(a).backward()
            assert not a.retains_grad and a._grad is None
        with pytest.warns(UserWarning, match="not a leaf Tensor"):
            assert a.grad is None   # as eagerly
        assert_close(leaf.grad._value, 8 * A0, rtol=1e-6, atol=0, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_new_value_the_loss_does_not_read_gets_no_grad(backend):
    # eagerly the node of the write never runs: no hook call, no retained .grad
    for fn in (read_before_write, _compiled(read_before_write, backend)):
        leaf = ag.tensor(A0.copy(), requires_grad=True)
        a = leaf * 1
        a.retain_grad()
        seen = []
        y = fn(a)
        a.register_hook(seen.append)
        y.backward()
        assert a.retains_grad and a.grad is None and seen == []
        assert_close(leaf.grad._value, np.full(3, 2.0), rtol=1e-7, atol=0, equal_nan=True,
                     check_dtype=False)


def test_retained_grad_accumulates_and_follows_create_graph():
    # its own compiled function: float64 inputs would make the module's shared one
    # recompile (and warn) in the tests that run after this one
    cf = ag.compile(square_after_write, backend="interpret")
    res = []
    for fn in (square_after_write, cf):
        leaf = ag.tensor(A0.astype(np.float64), requires_grad=True)
        a = leaf * 1
        a.retain_grad()
        loss = fn(a)
        loss.backward(retain_graph=True)
        first = a.grad
        assert not first.requires_grad
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (PyTorch warns about create_graph backward)
            loss.backward(create_graph=True)
        assert a.grad.requires_grad
        # autograd.grad on a new call: retained .grad filled as by the eager engine
        b = leaf * 1
        b.retain_grad()
        gl, = ag.autograd.grad(fn(b) * 3, [leaf])
        res.append([first._value.copy(), a.grad._value, leaf.grad._value, gl._value,
                    None if b._grad is None else b._grad._value])
    for x, y in zip(*res):
        assert_close(x, y, rtol=1e-12, atol=0, equal_nan=True)
    assert_close(res[1][0], 4 * A0, rtol=1e-6, atol=0, equal_nan=True, check_dtype=False)
    assert_close(res[1][1], 8 * A0, rtol=1e-6, atol=0, equal_nan=True, check_dtype=False)


def retain_inside(x, w):
    x.retain_grad()
    return (x * w).sum()


def retain_inside_then_write(x, w):
    x.retain_grad()
    x.mul_(2)
    return (x * w).sum()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [retain_inside, retain_inside_then_write])
def test_retain_grad_called_inside_on_an_argument_reaches_the_callers_tensor(backend, fn):
    """Eagerly x.retain_grad() inside the function sets the caller's tensor retaining; the
    compiled call does the same on every call (x.grad = w: d/dx of sum(x * w), of the new
    value where x is written first)."""
    cf = ag.compile(fn, backend=backend)
    w = ag.tensor(W0)
    for _ in range(2):   # the second call runs the compiled program (no trace)
        leaf = ag.tensor(A0, requires_grad=True)
        a, ae = leaf * 1, ag.tensor(A0, requires_grad=True) * 1
        cf(a, w).backward()
        fn(ae, w).backward()
        assert a.retains_grad and ae.retains_grad
        np.testing.assert_array_equal(a.grad.numpy(), W0)
        np.testing.assert_array_equal(a.grad.numpy(), ae.grad.numpy())
    assert len(cf.cache) == 1


def retain_inside_square(x):
    x.retain_grad()
    return (x * x).sum()


def retain_inside_times_constant(x):
    x.retain_grad()
    return (x * ag.tensor(W0)).sum()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn, want", [(retain_inside_square, lambda a: 2 * a),
                                      (retain_inside_times_constant, lambda a: W0)])
def test_retain_grad_on_the_only_argument_compiles(backend, fn, want):
    """x.retain_grad() on a function's only argument, whose gradient is computed from the
    argument itself or from a constant made inside: the traced backward's gradient of x is
    not stored anywhere (the call repeats retain_grad() on the caller's tensor), so the call
    compiles, with no eager fallback, and x.grad is eager mode's."""
    cf = ag.compile(fn, backend=backend)
    for _ in range(2):
        a = ag.tensor(A0, requires_grad=True) * 2
        ae = ag.tensor(A0, requires_grad=True) * 2
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            cf(a).backward()
        fn(ae).backward()
        assert a.retains_grad
        np.testing.assert_array_equal(a.grad.numpy(), want(A0 * 2))
        np.testing.assert_array_equal(a.grad.numpy(), ae.grad.numpy())
    assert cf.stats.eager_fallbacks == 0 and cf.stats.compiles == 1
