"""The eager kernels of conv2d, max_pool2d and avg_pool2d (runtime/window_kernels.py) against their
reference, the prim decomposition the op runs where no kernel applies: values and gradients
on awkward shapes (size 1, zero batch, non-contiguous inputs, padding, stride, dilation,
ceil mode, NaN), float32 stays float32, a double backward through the kernel's node, the
node's name and edges, and PyTorch where installed."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.runtime import eager_kernels
from aotgrad.testing import assert_close

F = ag.nn.functional


def _run(fn, arrays, use_kernel, monkeypatch, create_graph=False):
    """fn's output and its inputs' gradients, with the kernels on or off."""
    with monkeypatch.context() as m:
        if not use_kernel:
            m.setattr(eager_kernels, "run", lambda *a, **k: None)
        xs = [ag.tensor(a, requires_grad=True) for a in arrays]
        y = fn(*xs)
        g = np.random.default_rng(5).standard_normal(tuple(y.shape)).astype(arrays[0].dtype)
        grads = ag.autograd.grad(y, xs, ag.tensor(g), create_graph=create_graph)
        if create_graph:   # a second derivative: d/dx of sum(grad_x^2)
            total = sum((gr * gr).sum() for gr in grads)
            grads2 = ag.autograd.grad(total, xs, allow_unused=True)
            return y, grads, grads2
        return y, grads


def _assert_same(fn, arrays, monkeypatch, rtol=1e-5, atol=1e-5):
    y, gs = _run(fn, arrays, True, monkeypatch)
    y_ref, gs_ref = _run(fn, arrays, False, monkeypatch)
    assert y.dtype == y_ref.dtype and tuple(y.shape) == tuple(y_ref.shape)
    assert_close(y.detach().numpy(), y_ref.detach().numpy(), rtol=rtol, atol=atol, equal_nan=True)
    for a, b in zip(gs, gs_ref):
        assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
        assert_close(a.numpy(), b.numpy(), rtol=rtol, atol=atol, equal_nan=True)
    return y


def _rand(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


CONV_CASES = [
    ((2, 3, 9, 9), (4, 3, 3, 3), dict()),
    ((2, 3, 9, 9), (4, 3, 3, 3), dict(stride=2, padding=1, dilation=2)),
    ((1, 1, 1, 1), (1, 1, 1, 1), dict()),
    ((0, 2, 5, 5), (3, 2, 2, 2), dict(padding=1)),
    ((3, 2, 7, 5), (2, 2, 3, 1), dict(stride=(2, 1), padding=(0, 2))),
    ((2, 2, 6, 6), (2, 2, 3, 3), dict(padding="same")),
    ((1, 3, 5, 5), (4, 3, 5, 5), dict()),
    ((2, 3, 8, 7), (2, 3, 3, 2), dict(padding=(2, 1), dilation=(2, 3))),
    ((1, 2, 18, 18), (3, 2, 3, 3), dict()),                # a large image: the other scatter
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("xs,ws,kw", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_conv2d_kernel_equals_its_reference(xs, ws, kw, bias, dtype, monkeypatch):
    arrays = [_rand(*xs, dtype=dtype), _rand(*ws, dtype=dtype, seed=1)] + \
        ([_rand(ws[0], dtype=dtype, seed=2)] if bias else [])
    y = _assert_same(lambda x, w, *b: F.conv2d(x, w, *b, **kw), arrays, monkeypatch)
    assert y.grad_fn.name() == "ConvolutionBackward0"


def test_conv2d_kernel_on_a_non_contiguous_input_and_weight(monkeypatch):
    x = _rand(2, 9, 3, 8).transpose(0, 2, 1, 3)        # (2, 3, 9, 8), not contiguous
    w = _rand(3, 3, 4, 2, seed=1).transpose(2, 1, 0, 3)  # (4, 3, 3, 2)
    assert not x.flags.c_contiguous and not w.flags.c_contiguous
    _assert_same(lambda x, w: F.conv2d(x, w, padding=1), [x, w], monkeypatch)

    def sliced(x, w):   # a strided view made by the op layer
        return F.conv2d(x[:, :, ::2, 1:], w)
    _assert_same(sliced, [_rand(2, 3, 11, 9), _rand(4, 3, 2, 2, seed=1)], monkeypatch)


POOL_CASES = [
    ((2, 3, 8, 8), dict(kernel_size=2)),
    ((2, 3, 9, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    ((1, 1, 1, 1), dict(kernel_size=1)),
    ((0, 2, 4, 4), dict(kernel_size=2)),
    ((2, 2, 9, 9), dict(kernel_size=(2, 3), stride=1, dilation=2)),
    ((1, 2, 5, 5), dict(kernel_size=3, stride=3, ceil_mode=True)),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("xs,kw", POOL_CASES, ids=[str(i) for i in range(len(POOL_CASES))])
def test_max_pool2d_kernel_equals_its_reference(xs, kw, dtype, monkeypatch):
    y = _assert_same(lambda x: F.max_pool2d(x, **kw), [_rand(*xs, dtype=dtype)], monkeypatch)
    assert y.grad_fn.name() == "MaxPool2DWithIndicesBackward0"


def test_max_pool2d_kernel_ties_nan_and_unbatched(monkeypatch):
    x = np.zeros((1, 1, 4, 4), np.float32)             # ties: the first maximum gets it
    x[0, 0, 0, 1] = np.nan
    x[0, 0, 2:, 2:] = [[1, 1], [1, 1]]
    y = _assert_same(lambda x: F.max_pool2d(x, 2), [x], monkeypatch)
    assert np.isnan(y.detach().numpy()[0, 0, 0, 0])
    _assert_same(lambda x: F.max_pool2d(x, 2, 1), [_rand(3, 6, 5)], monkeypatch)


def test_double_backward_through_the_kernels_equals_the_reference(monkeypatch):
    def fn(x, w):
        return F.max_pool2d(F.conv2d(x, w, padding=1), 2)
    arrays = [_rand(2, 2, 6, 6), _rand(3, 2, 3, 3, seed=1)]
    _, g1, h1 = _run(fn, arrays, True, monkeypatch, create_graph=True)
    _, g2, h2 = _run(fn, arrays, False, monkeypatch, create_graph=True)
    for a, b in zip(g1 + h1, g2 + h2):
        assert_close(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-5, equal_nan=True)


def test_kernel_node_edges_saved_tensor_check_and_no_grad():
    x = ag.randn(1, 2, 5, 5, requires_grad=True)
    w = ag.randn(3, 2, 3, 3)
    y = F.conv2d(x, w)
    assert [n is not None for n, _ in y.grad_fn.next_functions] == [True, False, False]
    with ag.no_grad():
        w.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    with ag.no_grad():
        z = F.conv2d(x, w)
    assert z.grad_fn is None and not z.requires_grad


def test_kernels_apply_once_vmap_is_loaded_and_vmap_over_them_runs_the_prims(monkeypatch):
    import aotgrad.func  # noqa: F401 (loads the batching rules, which stay registered)
    x = ag.randn(2, 3, requires_grad=True)
    assert isinstance(F.softmax(x, -1).grad_fn, eager_kernels.KernelBackward)
    assert F.conv2d(ag.randn(1, 1, 4, 4), ag.randn(1, 1, 2, 2, requires_grad=True)) \
        .grad_fn.next_functions[1][0] is not None
    xs = _rand(4, 2, 5)
    batched = ag.func.vmap(lambda t: F.gelu(F.layer_norm(t, (5,))))(ag.tensor(xs))
    with monkeypatch.context() as m:
        m.setattr(eager_kernels, "run", lambda *a, **k: None)
        ref = F.gelu(F.layer_norm(ag.tensor(xs), (5,)))
    assert_close(batched.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)


def test_the_reference_still_raises_for_too_small_an_input():
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.conv2d(ag.randn(1, 1, 2, 2), ag.randn(1, 1, 3, 3))
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.max_pool2d(ag.randn(1, 1, 1, 1), 2)


def test_kernels_follow_pytorch(torch):
    x, w, b = _rand(2, 3, 10, 10), _rand(5, 3, 3, 3, seed=1), _rand(5, seed=2)
    ours = [ag.tensor(a, requires_grad=True) for a in (x, w, b)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    y1 = F.max_pool2d(F.conv2d(*ours, stride=1, padding=2), 3, 2, 1)
    y2 = torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(*theirs, stride=1,
                                                                   padding=2), 3, 2, 1)
    assert_close(y1.detach().numpy(), y2.detach().numpy(), rtol=1e-5, atol=1e-5, equal_nan=True)
    g = _rand(*y2.shape, seed=3)
    y1.backward(ag.tensor(g))
    y2.backward(torch.tensor(g))
    for a, b in zip(ours, theirs):
        assert_close(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-4, equal_nan=True)


ROW_SHAPES = [(4, 7), (1, 1), (2, 3, 5), (3, 1)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", ROW_SHAPES, ids=[str(s) for s in ROW_SHAPES])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_layer_norm_kernel_equals_its_reference(shape, affine, dtype, monkeypatch):
    arrays = [_rand(*shape, dtype=dtype) * 3 + 1]
    if affine:
        arrays += [_rand(shape[-1], dtype=dtype, seed=1), _rand(shape[-1], dtype=dtype, seed=2)]
    y = _assert_same(lambda x, *wb: F.layer_norm(x, (shape[-1],), *wb), arrays, monkeypatch)
    assert y.grad_fn.name() == "NativeLayerNormBackward0"
    # two normalized dims, and a non-contiguous input
    x = _rand(5, 4, 3, dtype=dtype).transpose(2, 1, 0)
    _assert_same(lambda x: F.layer_norm(x, (4, 5)), [x], monkeypatch)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape,dim", [((4, 7), -1), ((1, 1), 0), ((2, 3, 5), 1), ((3, 1), 1)])
def test_softmax_kernel_equals_its_reference(shape, dim, dtype, monkeypatch):
    x = _rand(*shape, dtype=dtype) * 4
    y = _assert_same(lambda x: F.softmax(x, dim), [x], monkeypatch)
    assert y.grad_fn.name() == "SoftmaxBackward0"
    masked = x.copy()
    masked.reshape(-1)[::3] = -np.inf                  # masked entries, as attention has
    _assert_same(lambda x: F.softmax(x, dim), [masked], monkeypatch)
    _assert_same(lambda x: F.softmax(x.transpose(0, -1), 0), [x], monkeypatch)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape,dim", [((4, 7), -1), ((1, 1), 0), ((2, 3, 5), 1), ((3, 1), 1)])
def test_log_softmax_and_cross_entropy_on_the_kernel_equal_the_reference(shape, dim, dtype,
                                                                         monkeypatch):
    x = _rand(*shape, dtype=dtype) * 4
    y = _assert_same(lambda x: F.log_softmax(x, dim), [x], monkeypatch)
    assert y.grad_fn.name() == "LogSoftmaxBackward0"
    masked = x.copy()
    masked.reshape(-1)[1::3] = -np.inf
    _assert_same(lambda x: F.log_softmax(x.transpose(0, -1), 0), [x], monkeypatch)
    with np.errstate(all="ignore"):
        _assert_same(lambda x: F.log_softmax(x, dim), [masked], monkeypatch)
    target = ag.tensor(np.arange(shape[0]) % shape[1])
    _assert_same(lambda x: F.cross_entropy(x.reshape(shape[0], -1)[:, :shape[1]], target), [x],
                 monkeypatch)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_kernel_equals_its_reference(approximate, dtype, monkeypatch):
    for x in (_rand(3, 50, dtype=dtype) * 4, _rand(1, dtype=dtype), np.zeros((0, 3), dtype),
              _rand(6, 5, dtype=dtype)[::2, 1:], np.array([-0.0, 0.0, 30.0, -30.0], dtype)):
        y = _assert_same(lambda x: F.gelu(x, approximate=approximate), [x], monkeypatch,
                         rtol=2e-5, atol=2e-6)
        assert y.grad_fn.name() == "GeluBackward0"


def test_relu_kernel_equals_its_reference(monkeypatch):
    x = _rand(3, 7)
    x[0, :4] = [0.0, -0.0, np.nan, np.inf]
    y = _assert_same(F.relu, [x], monkeypatch)
    assert y.grad_fn.name() == "ReluBackward0"
    assert np.signbit(y.detach().numpy()[0, 1]) == np.True_    # -0.0 stays -0.0 (PyTorch)
    _assert_same(F.relu, [np.zeros((0, 2), np.float32)], monkeypatch)
    _assert_same(lambda x: F.relu(x[:, ::2]), [_rand(4, 6, dtype=np.float64)], monkeypatch)


@pytest.mark.parametrize("fn", [F.relu, lambda x: F.softmax(x, -1),
                                lambda x: F.log_softmax(x, -1)], ids=["relu", "softmax",
                                                                     "log_softmax"])
def test_output_saving_kernels_check_the_output_not_the_input(fn):
    # as PyTorch: these save their result, so changing the input afterwards is no error,
    # changing the output is
    x = ag.randn(3, 4, requires_grad=True)
    h = x * 1.0
    y = fn(h)
    with ag.no_grad():
        h.add_(1.0)
    y.sum().backward()
    x.grad = None
    y = fn(x * 1.0)
    with ag.no_grad():
        y.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_row_kernels_double_backward_equals_the_reference(monkeypatch):
    def fn(x, w, b):
        return F.log_softmax(F.relu(F.softmax(F.gelu(F.layer_norm(x, (6,), w, b)), -1)), 0)
    arrays = [_rand(3, 6), _rand(6, seed=1), _rand(6, seed=2)]
    _, g1, h1 = _run(fn, arrays, True, monkeypatch, create_graph=True)
    _, g2, h2 = _run(fn, arrays, False, monkeypatch, create_graph=True)
    for a, b in zip(g1 + h1, g2 + h2):
        assert_close(a.detach().numpy(), b.detach().numpy(), rtol=1e-4, atol=1e-5, equal_nan=True)


def test_row_kernels_follow_pytorch(torch):
    x, w, b = _rand(4, 8) * 2, _rand(8, seed=1), _rand(8, seed=2)
    ours = [ag.tensor(a, requires_grad=True) for a in (x, w, b)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    tf = torch.nn.functional
    y1 = F.log_softmax(F.softmax(F.gelu(F.layer_norm(ours[0], (8,), ours[1], ours[2])), -1),
                       0)
    y2 = tf.log_softmax(tf.softmax(tf.gelu(tf.layer_norm(theirs[0], (8,), theirs[1],
                                                         theirs[2])), -1), 0)
    assert_close(y1.detach().numpy(), y2.detach().numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
    g = _rand(4, 8, seed=3)
    y1.backward(ag.tensor(g))
    y2.backward(torch.tensor(g))
    for a, b in zip(ours, theirs):
        assert_close(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_branchless_selection_is_np_where_bit_for_bit(dtype):
    rng = np.random.default_rng(7)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -3.5], dtype)
    a = rng.choice(specials, (5, 10, 4))[:, ::2].T      # non-contiguous operands
    b = rng.standard_normal((5, 10, 4)).astype(dtype)[:, 1::2].T
    mask = rng.random(a.shape) < 0.5
    bits = {4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    got, want = eager_kernels._select(mask, a, b), np.where(mask, a, b)
    assert got.dtype == dtype and np.array_equal(got.view(bits), want.view(bits))
    got, want = eager_kernels._keep(mask, a), np.where(mask, a, dtype(0))
    assert got.dtype == dtype and np.array_equal(got.view(bits), want.view(bits))


def test_pool_and_relu_kernels_on_special_values(monkeypatch):
    rng = np.random.default_rng(3)
    x = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0, -1.0], np.float32),
                   (2, 3, 6, 8))
    for fn in (lambda t: F.max_pool2d(t, 2), lambda t: F.max_pool2d(t, 3, 2, 1),
               lambda t: F.relu(t) * 3):
        y = _assert_same(fn, [x], monkeypatch)
        assert y.dtype == ag.float32


ADDMM_CASES = [((5,), (3, 4), (4, 5)), ((3, 5), (3, 4), (4, 5)), ((1,), (1, 1), (1, 1)),
               ((6,), (0, 2), (2, 6)), ((2, 3), (2, 0), (0, 3))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shapes", ADDMM_CASES, ids=[str(i) for i in range(len(ADDMM_CASES))])
def test_addmm_kernel_equals_its_reference(shapes, dtype, monkeypatch):
    arrays = [_rand(*s, dtype=dtype, seed=i) for i, s in enumerate(shapes)]
    if arrays[1].size:
        arrays[1].reshape(-1)[0] = np.nan
    y = _assert_same(ag.addmm, arrays, monkeypatch)
    assert y.dtype == {np.float32: ag.float32, np.float64: ag.float64}[dtype]
    assert y.grad_fn.name() == "AddmmBackward0"


def test_linear_on_the_addmm_kernel_keeps_pytorchs_graph_and_saved_tensors(monkeypatch):
    x, w, b = _rand(4, 3), _rand(5, 3, seed=1)[:, ::-1], _rand(5, seed=2)   # w non-contiguous
    _assert_same(F.linear, [x, w, b], monkeypatch)
    xt, wt, bt = (ag.tensor(a.copy(), requires_grad=True) for a in (x, w, b))
    y = F.linear(xt, wt, bt)
    names = [n.name() if n is not None else None for n, _ in y.grad_fn.next_functions]
    assert y.grad_fn.name() == "AddmmBackward0"
    assert names == ["AccumulateGrad", "AccumulateGrad", "TBackward0"]
    with ag.no_grad():
        bt.add_(1.0)            # the bias is not saved (as PyTorch's AddmmBackward0)
    y.sum().backward()
    assert_close(bt.grad.numpy(), np.full(5, 4.0, np.float32))
    y = F.linear(xt, wt, bt)
    with ag.no_grad():
        xt.mul_(2.0)            # mat1 is: the backward refuses it
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_addmm_kernel_double_backward_equals_the_reference(monkeypatch):
    arrays = [_rand(5), _rand(3, 4, seed=1), _rand(4, 5, seed=2)]
    outs = [_run(ag.addmm, arrays, k, monkeypatch, create_graph=True) for k in (True, False)]
    for a, b in zip(outs[0][2], outs[1][2]):
        assert (a is None) == (b is None)
        if a is not None:
            assert_close(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_avg_pool2d_node_and_double_backward_through_the_reference(monkeypatch):
    def fn(x):
        return F.avg_pool2d(x * x, 3, 2, padding=1, count_include_pad=False)
    arrays = [_rand(2, 2, 7, 6, dtype=np.float64)]
    y, g1, h1 = _run(fn, arrays, True, monkeypatch, create_graph=True)
    assert type(y.grad_fn) is eager_kernels.KernelBackward
    assert y.grad_fn.name() == "AvgPool2DBackward0"
    _, g2, h2 = _run(fn, arrays, False, monkeypatch, create_graph=True)
    for a, b in zip(g1 + h1, g2 + h2):
        assert_close(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-13)
