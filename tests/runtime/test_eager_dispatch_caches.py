"""The eager dispatch's caches (runtime/dispatch.py) decide nothing a fresh check would decide
otherwise: a prim's shape rule is checked once per (prim, input shapes and dtypes, plain
params) and a node's save plan once per (rule, needs_input_grad), and every switch that is no
part of those keys (requires_grad, grad mode, inference mode, anomaly mode, hooks, forward-mode
AD) still acts on the next op. Also the direct paths of `x[i]`, `x[a:b]` and `x[t]`
(runtime/index_ops.py) against the general path and PyTorch."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.ir import prims as P
from aotgrad.ir.core import PrimError
from aotgrad.runtime import dispatch
from aotgrad.runtime import tprims as tp


def _t(shape, dtype=np.float32, requires_grad=False, seed=0):
    v = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return ag.tensor(v, requires_grad=requires_grad)


# ---- the shape-rule cache ------------------------------------------------------------------
def test_a_rejected_bind_raises_every_time_and_an_accepted_key_does_not_cover_others():
    a, b = _t((2, 3)), _t((2, 3), seed=1)
    tp.add(a, b)                                        # (2, 3) f32 + (2, 3) f32: accepted
    for bad in [_t((3, 2)), _t((2, 3), np.float64), _t((2, 3, 1))]:
        for _ in range(2):                              # not remembered as accepted
            with pytest.raises(PrimError, match="prims.add"):
                tp.add(a, bad)
    np.testing.assert_array_equal(tp.add(a, b).numpy(), a.numpy() + b.numpy())


def test_params_are_part_of_the_key():
    x = _t((2, 3))
    assert tuple(tp.reshape(x, shape=(3, 2)).shape) == (3, 2)
    for _ in range(2):
        with pytest.raises(PrimError, match="prims.reshape"):
            tp.reshape(x, shape=(4, 2))
    w = _t((3, 4))
    assert tuple(tp.dot_general(x, w, contract=((1,), (0,))).shape) == (2, 4)
    with pytest.raises(PrimError, match="prims.dot_general"):
        tp.dot_general(x, w, contract=((0,), (0,)))     # 2 against 3: refused again


def test_params_of_other_types_are_checked_every_time():
    x = _t((2, 3))
    key_count = len(dispatch._checked)
    y = tp.reshape(x, shape=[3, 2])                     # a list: not a key, checked
    assert tuple(y.shape) == (3, 2) and len(dispatch._checked) == key_count
    with pytest.raises(PrimError, match="prims.reshape"):
        tp.reshape(x, shape=[5, 2])


def test_dtype_shape_and_rank_changes_give_their_own_results():
    for shape, dtype in [((4,), np.float32), ((4,), np.float64), ((2, 2), np.float32),
                         ((), np.float64), ((0, 3), np.float32), ((4,), np.int64)]:
        a, b = _t(shape, dtype), _t(shape, dtype, seed=1)
        for op, ref in [(lambda p, q: p + q, np.add), (lambda p, q: p * q, np.multiply)]:
            out = op(a, b)
            assert out.dtype == a.dtype and tuple(out.shape) == shape
            np.testing.assert_array_equal(out.numpy(), ref(a.numpy(), b.numpy()))


def test_the_cache_is_bounded():
    for n in range(1, dispatch._CHECKED_MAX // 8):
        tp.neg(_t((n,)))
    assert len(dispatch._checked) <= dispatch._CHECKED_MAX
    assert len(dispatch._avals) <= dispatch._CHECKED_MAX


# ---- what is no part of the keys still acts ------------------------------------------------
def test_requires_grad_and_grad_mode_switch_the_node_on_and_off():
    a, b = _t((3,)), _t((3,), seed=1)
    assert (a * b).grad_fn is None
    a.requires_grad_()
    y = a * b
    assert y.requires_grad and y.grad_fn.name() == "MulBackward0"
    with ag.no_grad():
        assert (a * b).grad_fn is None and not (a * b).requires_grad
    y = a * b
    g, = ag.autograd.grad(y.sum(), [a])
    np.testing.assert_array_equal(g.numpy(), b.numpy())


def test_the_save_plan_follows_which_inputs_need_a_gradient():
    # mul saves an operand only for the other operand's gradient (as PyTorch's MulBackward0)
    x, y = _t((3,), requires_grad=True), _t((3,), seed=1)
    for _ in range(2):
        n = (x * y).grad_fn
        assert n._saved_self is None and n._saved_other is y
        n = (y * x).grad_fn
        assert n._saved_self is y and n._saved_other is None
    y.requires_grad_()
    n = (x * y).grad_fn
    assert n._saved_self is x and n._saved_other is y
    gx, gy = ag.autograd.grad((x * y).sum(), [x, y])
    np.testing.assert_array_equal(gx.numpy(), y.detach().numpy())
    np.testing.assert_array_equal(gy.numpy(), x.detach().numpy())


def test_inference_mode_after_cached_binds():
    a, b = _t((3,), requires_grad=True), _t((3,), seed=1)
    a * b
    with ag.inference_mode():
        y = a * b
    assert y.is_inference() and y.grad_fn is None and not y.requires_grad
    assert not (a * b).is_inference()


@pytest.mark.filterwarnings("ignore:Anomaly Detection")
def test_anomaly_mode_after_cached_binds():
    a, b = _t((3,), requires_grad=True), _t((3,), seed=1)
    assert (a + b).grad_fn._stack is None
    with ag.autograd.detect_anomaly():
        assert (a + b).grad_fn._stack
    assert (a + b).grad_fn._stack is None


def test_a_hook_added_after_cached_binds_runs():
    a, b = _t((3,), requires_grad=True), _t((3,), seed=1)
    (a * b).sum().backward()
    seen = []
    a.register_hook(lambda g: seen.append(g.numpy().copy()))
    a.grad = None
    (a * b).sum().backward()
    assert len(seen) == 1
    np.testing.assert_array_equal(seen[0], b.numpy())


def test_an_in_place_change_of_a_saved_input_is_still_caught():
    a, b = _t((3,), requires_grad=True), _t((3,), seed=1)
    y = a * b
    b.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_forward_mode_after_cached_binds():
    import aotgrad.autograd.forward_ad as fwAD
    a, b = _t((3,)), _t((3,), seed=1)
    a * b
    t = _t((3,), seed=2)
    with fwAD.dual_level():
        d = fwAD.make_dual(a, t)
        _, tangent = fwAD.unpack_dual(d * b)
    np.testing.assert_allclose(tangent.numpy(), t.numpy() * b.numpy(), rtol=1e-6)


def test_a_profiler_sees_cached_binds():
    a, b = _t((3,)), _t((3,), seed=1)
    a + b
    with ag.autograd.profiler.profile() as prof:
        a + b
    names = [e.name for e in prof.function_events]
    assert any("add" in n for n in names)


# ---- the direct indexing paths -------------------------------------------------------------
BASIC = [1, -1, 0, slice(1, 3), slice(None, None, 2), slice(5, 1), (1, 2), (slice(1, 3), 0),
         (-1, slice(None)), (), slice(-100, 100)]


@pytest.mark.parametrize("index", BASIC, ids=repr)
def test_basic_index_equals_numpy_and_its_gradient(index):
    x = _t((4, 3), requires_grad=True)
    y = x[index]
    ref = x.detach().numpy()[index]
    assert tuple(y.shape) == ref.shape and y._is_view()
    np.testing.assert_array_equal(y.detach().numpy(), ref)
    g, = ag.autograd.grad(y.sum(), [x])
    want = np.zeros((4, 3), np.float32)
    want[index] = 1
    np.testing.assert_array_equal(g.numpy(), want)


def test_basic_index_errors_are_the_general_paths():
    x = _t((4, 3))
    with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 0 with size 4"):
        x[4]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        x[1, 1, 1]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        x[::-1]


@pytest.mark.parametrize("shape", [(5, 3), (5,), (3, 2, 2), (0, 3)])
@pytest.mark.parametrize("values", [[0, 2], [-1, 1, 1], []], ids=repr)
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_tensor_index_equals_numpy_and_its_gradient(shape, values, dtype):
    x = _t(shape, requires_grad=True)
    idx = np.array(values, dtype)
    if shape[0] == 0 and len(values):
        with pytest.raises(IndexError, match="out of bounds"):
            x[ag.tensor(idx)]
        return
    y = x[ag.tensor(idx)]
    ref = x.detach().numpy()[idx]
    assert tuple(y.shape) == ref.shape and y.dtype == x.dtype and not y._is_view()
    np.testing.assert_array_equal(y.detach().numpy(), ref)
    assert y.grad_fn.name() == "IndexBackward0"
    assert [n.name() for n, _ in y.grad_fn.next_functions] == ["AccumulateGrad"]
    gy = _t(ref.shape, seed=3)
    g, = ag.autograd.grad(y, [x], gy)
    want = np.zeros(shape, np.float32)
    np.add.at(want, idx, gy.numpy())
    np.testing.assert_array_equal(g.numpy(), want)


def test_tensor_index_out_of_range_is_the_general_paths_error():
    x = _t((3, 2))
    for bad in ([3], [-4], [0, 5]):
        with pytest.raises(IndexError, match="out of bounds for dimension with size 3"):
            x[ag.tensor(np.array(bad))]


def test_tensor_index_against_torch(torch):
    v = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    for values in ([0, 4, 4, -2], [], [1]):
        x, xt = ag.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
        y, yt = x[ag.tensor(np.array(values, np.int64))], xt[torch.tensor(values, dtype=torch.int64)]
        np.testing.assert_array_equal(y.detach().numpy(), yt.detach().numpy())
        assert y.stride() == yt.stride() or y.numel() == 0
        assert y._is_view() == yt._is_view()
        assert len(y.grad_fn.next_functions) == len(yt.grad_fn.next_functions)
        g = np.arange(y.numel(), dtype=np.float32).reshape(tuple(y.shape))
        y.backward(ag.tensor(g))
        yt.backward(torch.tensor(g))
        np.testing.assert_array_equal(x.grad.numpy(), xt.grad.numpy())


def test_indexing_under_no_grad_and_inference_mode():
    x = _t((4, 3), requires_grad=True)
    with ag.no_grad():
        for y in (x[1], x[1:3], x[ag.tensor(np.array([0, 3]))]):
            assert y.grad_fn is None and not y.requires_grad
    with ag.inference_mode():
        y = _t((4, 3))[ag.tensor(np.array([0, 3]))]
        assert y.is_inference()


def test_param_types_and_unhashable_params_are_no_shared_key():
    x = _t((2, 3))
    tp.reshape(x, shape=(3, 2))
    y = tp.reshape(x, shape=(3, 2))
    assert tuple(y.shape) == (3, 2)
    # a tuple holding a list cannot be a key: checked (and refused) every time
    for _ in range(2):
        with pytest.raises((PrimError, TypeError)):
            tp.reshape(x, shape=(3, [2]))
    w = _t((3, 4))
    a = tp.dot_general(x, w, contract=((1,), (0,)))
    b = tp.dot_general(x, w, contract=((1,), (0,)), batch=((), ()))
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_tensor_index_strided_and_int32():
    xv = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    x = ag.tensor(xv, requires_grad=True)
    for j in (ag.tensor(np.array([3, 0, 1, 2, 2, 1]))[::2],
              ag.tensor(np.array([-1, 1], np.int32))):
        x.grad = None
        y = x[j]
        np.testing.assert_array_equal(y.detach().numpy(), xv[j.numpy()])
        y.sum().backward()
        want = np.zeros_like(xv)
        np.add.at(want, j.numpy(), 1)
        np.testing.assert_array_equal(x.grad.numpy(), want)
