"""Shared nodes of multi-output ops without PyTorch: closed-form gradients through
var_mean/split/unbind, prehooks seeing every output's gradient, freeing by reference
counting (no cycle between a shared node and the prims' nodes it runs), and the compiled
path."""
import gc
import weakref

import numpy as np

import aotgrad as ag
from aotgrad.testing import assert_close


def test_var_mean_gradients_closed_form():
    x0 = np.array([[1., 2.], [4., 8.], [0., -3.]])
    x = ag.tensor(x0, dtype=ag.float64, requires_grad=True)
    v, m = ag.var_mean(x, 0)
    (v.sum() + 3 * m.sum()).backward()
    n = x0.shape[0]
    expected = 2 * (x0 - x0.mean(0)) / (n - 1) + 3 / n
    assert_close(x.grad.numpy(), expected, rtol=1e-7, atol=0, equal_nan=True)


def test_prehook_sees_all_outputs_and_unused_ones_are_none():
    x = ag.arange(12.).reshape(4, 3).requires_grad_()
    parts = x.split(1)
    seen = []
    parts[0].grad_fn.register_prehook(lambda gs: seen.append([g is not None for g in gs]))
    (parts[0].sum() + 2 * parts[3].sum()).backward()
    assert seen == [[True, False, False, True]]
    assert_close(x.grad.numpy(), [[1.] * 3, [0.] * 3, [0.] * 3, [2.] * 3], rtol=1e-7, atol=0,
                 equal_nan=True)


def test_shared_node_is_freed_without_the_cycle_collector():
    gc.disable()
    try:
        x = ag.ones(4, 3, requires_grad=True)
        outs = x.unbind(0)
        ref = weakref.ref(outs[0].grad_fn)
        del outs
        assert ref() is None
    finally:
        gc.enable()


def test_compiled_split_and_var_mean_match_eager():
    def f(x):
        a, b = x.split(2)
        v, m = ag.var_mean(a * b, 1)
        return (v * m).sum()

    x0 = ag.randn(4, 3)
    xe = x0.clone().requires_grad_()
    f(xe).backward()
    xc = x0.clone().requires_grad_()
    out = ag.compile(f, backend="interpret")(xc)
    out.backward()
    assert_close(out.item(), f(x0).item(), rtol=1e-5, atol=0, equal_nan=True)
    assert_close(xc.grad.numpy(), xe.grad.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
