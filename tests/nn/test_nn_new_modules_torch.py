"""GroupNorm, InstanceNorm, ConvTranspose1d/2d, Conv3d, Upsample/interpolate, Dropout1d/2d,
AdaptiveMaxPool2d, PixelShuffle, EmbeddingBag and the nn.utils additions against PyTorch with
the same weights (forward, input and parameter gradients, float32 and float64), plus checks
that run without PyTorch (shapes, finite differences in float64, compiled == eager)."""
import warnings

import numpy as np
from numpy.random import default_rng as rng
import pytest

import aotgrad
from aotgrad import nn
import aotgrad.nn.functional as F
from aotgrad.testing import assert_close

DTYPES = ["float32", "float64"]


# ---- normalisation -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm(torch, vs_torch, dtype, affine):
    x = rng(0).standard_normal((3, 6, 4, 5)) * 2 + 1
    ours, theirs = nn.GroupNorm(3, 6, affine=affine), torch.nn.GroupNorm(3, 6, affine=affine)
    if affine:  # non-trivial affine parameters
        with torch.no_grad():
            theirs.weight.uniform_(0.5, 1.5), theirs.bias.uniform_(-1, 1)
    vs_torch.module(ours, theirs, [x], dtype)
    vs_torch.module(nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4),
            [rng(1).standard_normal((2, 4, 7))], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cls,shape", [("InstanceNorm1d", (3, 4, 6)),
                                       ("InstanceNorm2d", (2, 3, 4, 5)),
                                       ("InstanceNorm2d", (3, 4, 5))])
def test_instance_norm(torch, vs_torch, dtype, cls, shape):
    x = rng(0).standard_normal(shape) * 3 - 1
    c = shape[-3] if cls == "InstanceNorm2d" else shape[-2]
    for kw in (dict(), dict(affine=True), dict(affine=True, track_running_stats=True)):
        ours, theirs = getattr(nn, cls)(c, **kw), getattr(torch.nn, cls)(c, **kw)
        vs_torch.module(ours, theirs, [x], dtype)
        if kw.get("track_running_stats"):  # the running statistics moved alike; eval uses them
            assert_close(ours.running_mean.numpy(), theirs.running_mean.detach().numpy(), rtol=1e-5,
                         atol=0, equal_nan=True)
            assert_close(ours.running_var.numpy(), theirs.running_var.detach().numpy(), rtol=1e-5,
                         atol=0, equal_nan=True)
            ours.eval(), theirs.eval()
            vs_torch.module(ours, theirs, [x + 1], dtype, load=False)


# ---- convolutions --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [
    dict(kernel_size=3),
    dict(kernel_size=3, stride=2, padding=1, output_padding=1),
    dict(kernel_size=(2, 3), stride=(2, 1), padding=(0, 1), groups=2, bias=False),
    dict(kernel_size=3, stride=2, dilation=2, padding=3, output_padding=1),
    dict(kernel_size=2, padding=2),
])
def test_conv_transpose2d(torch, vs_torch, dtype, kw):
    x = rng(0).standard_normal((2, 4, 5, 6))
    vs_torch.module(nn.ConvTranspose2d(4, 6, **kw), torch.nn.ConvTranspose2d(4, 6, **kw), [x],
            dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_transpose2d_output_size_and_unbatched(torch, vs_torch, dtype):
    x = rng(0).standard_normal((2, 3, 4, 4))
    call = lambda m, xs: m(xs[0], output_size=[9, 10])  # noqa: E731
    vs_torch.module(nn.ConvTranspose2d(3, 2, 3, stride=2), torch.nn.ConvTranspose2d(3, 2, 3,
                                                                                   stride=2),
            [x], dtype, call=call)
    vs_torch.module(nn.ConvTranspose2d(3, 2, 3), torch.nn.ConvTranspose2d(3, 2, 3), [x[0]], dtype)
    with pytest.raises(ValueError, match="valid sizes range from 9 to 10"):
        nn.ConvTranspose2d(3, 2, 3, stride=2)(aotgrad.tensor(x, dtype=aotgrad.float32),
                                              output_size=[12, 12])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=4, stride=3, padding=1,
                                                          output_padding=2, groups=2)])
def test_conv_transpose1d(torch, vs_torch, dtype, kw):
    x = rng(0).standard_normal((2, 4, 7))
    vs_torch.module(nn.ConvTranspose1d(4, 2, **kw), torch.nn.ConvTranspose1d(4, 2, **kw), [x],
            dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=(2, 3, 2), stride=(2, 1, 2),
                                                          padding=1, dilation=(1, 2, 1)),
                                dict(kernel_size=3, padding="same", groups=2, bias=False)])
def test_conv3d(torch, vs_torch, dtype, kw):
    x = rng(0).standard_normal((2, 4, 5, 6, 5))
    vs_torch.module(nn.Conv3d(4, 6, **kw), torch.nn.Conv3d(4, 6, **kw), [x], dtype)


def test_conv3d_unbatched(torch, vs_torch):
    vs_torch.module(nn.Conv3d(2, 3, 2), torch.nn.Conv3d(2, 3, 2),
            [rng(0).standard_normal((2, 4, 4, 4))], "float64")


# ---- resampling ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,kw", [
    ((2, 3, 4, 5), dict(scale_factor=2)),
    ((2, 3, 4, 5), dict(size=(7, 3))),
    ((2, 3, 4, 5), dict(scale_factor=(1.7, 2.5))),
    ((2, 3, 4, 5), dict(size=(9, 11), mode="nearest-exact")),
    ((2, 3, 5), dict(scale_factor=3)),
    ((1, 2, 3, 3, 4), dict(size=(5, 6, 2))),
    ((2, 3, 4, 5), dict(scale_factor=2, mode="bilinear")),
    ((2, 3, 4, 5), dict(size=(7, 3), mode="bilinear", align_corners=True)),
    ((2, 3, 4, 5), dict(scale_factor=(1.5, 0.6), mode="bilinear")),
    ((2, 3, 4, 5), dict(size=(1, 9), mode="bilinear", align_corners=True)),
    ((2, 3, 6), dict(size=13, mode="linear")),
    ((2, 3, 6), dict(scale_factor=2.3, mode="linear", align_corners=True)),
    ((2, 3, 4, 5), dict(scale_factor=1.7, mode="bilinear", recompute_scale_factor=True)),
])
def test_interpolate(torch, vs_torch, dtype, shape, kw):
    x = rng(0).standard_normal(shape)
    vs_torch.module(nn.Upsample(**kw), torch.nn.Upsample(**kw), [x], dtype)


def test_interpolate_errors_and_fixed_modules(torch, vs_torch):
    x = aotgrad.randn(1, 1, 3, 3)
    with pytest.raises(ValueError, match="align_corners option can only be set"):
        F.interpolate(x, scale_factor=2, align_corners=True)
    with pytest.raises(ValueError, match="only one of size or scale_factor"):
        F.interpolate(x, size=4, scale_factor=2)
    with pytest.raises(NotImplementedError, match="bilinear mode needs 4D"):
        F.interpolate(aotgrad.randn(1, 1, 3), scale_factor=2, mode="bilinear")
    vs_torch.module(nn.UpsamplingBilinear2d(scale_factor=2),
            torch.nn.UpsamplingBilinear2d(scale_factor=2),
            [rng(0).standard_normal((1, 2, 3, 4))], "float64")
    assert repr(nn.Upsample(scale_factor=2, mode="bilinear")) == \
        repr(torch.nn.Upsample(scale_factor=2, mode="bilinear"))


@pytest.mark.parametrize("dtype", DTYPES)
def test_pixel_shuffle(torch, vs_torch, dtype):
    x = rng(0).standard_normal((2, 18, 3, 4))
    vs_torch.module(nn.PixelShuffle(3), torch.nn.PixelShuffle(3), [x], dtype)
    vs_torch.module(nn.PixelUnshuffle(2), torch.nn.PixelUnshuffle(2),
            [rng(1).standard_normal((5, 2, 4, 6))], dtype)  # any leading dims
    y = aotgrad.tensor(x)
    assert np.array_equal(F.pixel_unshuffle(F.pixel_shuffle(y, 3), 3).numpy(), y.numpy())


# ---- pooling -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,size", [((2, 3, 7, 9), (3, 4)), ((2, 3, 8, 8), 4),
                                        ((3, 5, 6), (None, 4)), ((1, 2, 5, 5), (7, 2))])
def test_adaptive_max_pool2d(torch, vs_torch, dtype, shape, size):
    x = rng(0).standard_normal(shape)
    vs_torch.module(nn.AdaptiveMaxPool2d(size), torch.nn.AdaptiveMaxPool2d(size), [x], dtype)
    (o, i), (t, ti) = vs_torch.module(nn.AdaptiveMaxPool2d(size, return_indices=True),
                              torch.nn.AdaptiveMaxPool2d(size, return_indices=True), [x], dtype)
    assert i.dtype == aotgrad.int64 and np.array_equal(i.numpy(), ti.numpy())


def test_adaptive_max_pool1d(torch, vs_torch):
    x = rng(0).standard_normal((2, 3, 10))
    vs_torch.module(nn.AdaptiveMaxPool1d(4), torch.nn.AdaptiveMaxPool1d(4), [x], "float64")


# ---- dropout ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cls,shape", [("Dropout1d", (4, 16, 8)), ("Dropout1d", (16, 8)),
                                       ("Dropout2d", (4, 16, 3, 3))])
def test_channel_dropout(cls, shape):
    m = getattr(nn, cls)(0.5)
    x = aotgrad.ones(*shape, requires_grad=True)
    y = m(x)
    v = y.detach().numpy()
    # whole channels are zero or scaled by 1/(1-p)
    chans = v.reshape(v.shape[0], -1) if len(shape) == 2 else v.reshape(*v.shape[:2], -1)
    assert np.all((chans == chans[..., :1]))
    assert set(np.unique(v)) <= {0.0, 2.0} and 0 < (v == 0).mean() < 1
    y.sum().backward()
    assert np.array_equal(x.grad.numpy(), v)
    assert np.array_equal(m.eval()(x).detach().numpy(), x.detach().numpy())


def test_channel_dropout_errors_like_torch(torch):
    with pytest.raises(RuntimeError, match="dropout1d: Expected 2D or 3D input"):
        nn.Dropout1d()(aotgrad.ones(2, 3, 4, 5))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        nn.Dropout2d()(aotgrad.ones(2, 3, 4))
    assert any("Received a 3D input to dropout2d" in str(x.message) for x in w)
    assert repr(nn.Dropout2d(0.3)) == repr(torch.nn.Dropout2d(0.3))


# ---- embedding bag ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(torch, vs_torch, dtype, mode):
    idx = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0, 7], dtype=np.int64)
    offsets = np.array([0, 3, 3, 7], dtype=np.int64)  # bag 1 is empty
    call = lambda m, xs: m(xs[0], xs[1])  # noqa: E731
    vs_torch.module(nn.EmbeddingBag(10, 4, mode=mode), torch.nn.EmbeddingBag(10, 4, mode=mode),
            [idx, offsets], dtype, call=call)
    two_d = idx.reshape(2, 5)
    vs_torch.module(nn.EmbeddingBag(10, 4, mode=mode, padding_idx=4),
            torch.nn.EmbeddingBag(10, 4, mode=mode, padding_idx=4), [two_d], dtype)
    vs_torch.module(nn.EmbeddingBag(10, 4, mode=mode, include_last_offset=True),
            torch.nn.EmbeddingBag(10, 4, mode=mode, include_last_offset=True),
            [idx, np.array([0, 2, 6, 10])], dtype, call=call)


@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding_bag_per_sample_weights(torch, vs_torch, dtype):
    idx = np.array([1, 2, 4, 5, 4, 3], dtype=np.int64)
    offsets = np.array([0, 2], dtype=np.int64)
    w = rng(2).standard_normal(6)
    call = lambda m, xs: m(xs[0], xs[1], per_sample_weights=xs[2])  # noqa: E731
    vs_torch.module(nn.EmbeddingBag(6, 3, mode="sum"), torch.nn.EmbeddingBag(6, 3, mode="sum"),
            [idx, offsets, w], dtype, call=call)
    with pytest.raises(NotImplementedError, match="only supported for mode='sum'"):
        nn.EmbeddingBag(6, 3)(aotgrad.tensor(idx), aotgrad.tensor(offsets),
                              per_sample_weights=aotgrad.tensor(w, dtype=aotgrad.float32))


# ---- nn.utils ----------------------------------------------------------------------------------
def test_parameters_vector_round_trip(torch, vs_torch):
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    t = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    vs_torch.load_state(m, t)
    v = nn.utils.parameters_to_vector(m.parameters())
    tv = torch.nn.utils.parameters_to_vector(t.parameters())
    np.testing.assert_array_equal(v.detach().numpy(), tv.detach().numpy())
    nn.utils.vector_to_parameters(v * 2, m.parameters())
    torch.nn.utils.vector_to_parameters(tv * 2, t.parameters())
    for (k, a), (_, b) in zip(m.named_parameters(), t.named_parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy(), err_msg=k)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm(torch, vs_torch, dtype, dim):
    ours = nn.utils.weight_norm(nn.Linear(4, 3), dim=dim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch.nn.utils.weight_norm(torch.nn.Linear(4, 3), dim=dim)
    vs_torch.module(ours, theirs, [rng(0).standard_normal((5, 4))], dtype)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    nn.utils.remove_weight_norm(ours)
    torch.nn.utils.remove_weight_norm(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert_close(ours.weight.detach().numpy(), theirs.weight.detach().numpy(), rtol=1e-6, atol=0,
                 equal_nan=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_parametrizations_weight_norm(torch, vs_torch, dtype):
    ours = nn.utils.parametrizations.weight_norm(nn.Conv1d(2, 3, 3))
    theirs = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(2, 3, 3))
    vs_torch.module(ours, theirs, [rng(0).standard_normal((2, 2, 6))], dtype)
    assert list(ours.state_dict()) == list(theirs.state_dict())


# ---- without PyTorch ---------------------------------------------------------------------------
def _fd_check(fn, x, eps=1e-6, seed=0):
    """d/dx <fn(x), g> against central finite differences, float64."""
    x = np.asarray(x, dtype=np.float64)
    xt = aotgrad.tensor(x, requires_grad=True)
    y = fn(xt)
    g = rng(seed).standard_normal(tuple(y.shape))
    (y * aotgrad.tensor(g)).sum().backward()
    num = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        hi = (fn(aotgrad.tensor(x + d)).detach().numpy() * g).sum()
        lo = (fn(aotgrad.tensor(x - d)).detach().numpy() * g).sum()
        num[i] = (hi - lo) / (2 * eps)
    assert_close(xt.grad.numpy(), num, rtol=1e-5, atol=1e-7, equal_nan=True)


def test_shapes_and_finite_differences():
    x = rng(0).standard_normal((1, 2, 3, 3))
    m = nn.ConvTranspose2d(2, 2, 3, stride=2, padding=1, output_padding=1).double()
    assert tuple(m(aotgrad.tensor(x)).shape) == (1, 2, 6, 6)
    _fd_check(m, x)
    _fd_check(lambda t: F.interpolate(t, size=(5, 4), mode="bilinear"), x)
    _fd_check(lambda t: F.group_norm(t, 2), x)
    _fd_check(lambda t: F.adaptive_max_pool2d(t, (2, 2)), x)
    c3 = nn.Conv3d(1, 2, 2, padding=1).double()
    assert tuple(c3(aotgrad.tensor(x[:, :1, None].repeat(3, 2))).shape) == (1, 2, 4, 4, 4)
    assert tuple(nn.PixelShuffle(2)(aotgrad.ones(8, 2, 2)).shape) == (2, 4, 4)


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_compiled_matches_eager(backend):
    x = aotgrad.tensor(rng(0).standard_normal((2, 4, 5, 5)).astype(np.float32),
                       requires_grad=True)
    model = nn.Sequential(nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1), nn.GroupNorm(2, 4),
                          nn.Upsample(scale_factor=0.5, mode="bilinear"),
                          nn.AdaptiveMaxPool2d(3), nn.PixelShuffle(1))

    def step(x):
        loss = (model(x) ** 2).mean()
        loss.backward()
        return loss

    eager = step(x).item()
    ge = [p.grad.numpy().copy() for p in model.parameters()] + [x.grad.numpy().copy()]
    model.zero_grad()
    x.grad = None
    compiled = aotgrad.compile(step, backend=backend)
    assert compiled(x).item() == pytest.approx(eager, rel=1e-5)
    gc = [p.grad.numpy() for p in model.parameters()] + [x.grad.numpy()]
    for a, b in zip(gc, ge):
        assert_close(a, b, rtol=1e-4, atol=1e-6, equal_nan=True)


def test_parametrize_register_and_remove(torch):
    class Symmetric(nn.Module):
        def forward(self, x):
            return x.triu() + x.triu(1).mT

    m = nn.Linear(3, 3)
    nn.utils.parametrize.register_parametrization(m, "weight", Symmetric())
    assert nn.utils.parametrize.is_parametrized(m, "weight")
    assert type(m).__name__ == "ParametrizedLinear"
    w = m.weight.detach().numpy()
    np.testing.assert_array_equal(w, w.T)
    assert sorted(m.state_dict()) == ["bias", "parametrizations.weight.original"]
    y = m(aotgrad.ones(2, 3)).sum()
    y.backward()
    g = m.parametrizations.weight.original.grad.numpy()
    assert np.allclose(np.tril(g, -1), 0)  # the lower triangle never reaches the output
    nn.utils.parametrize.remove_parametrizations(m, "weight")
    assert type(m) is nn.Linear and sorted(m.state_dict()) == ["bias", "weight"]
    np.testing.assert_array_equal(m.weight.detach().numpy(), w)


def test_module_layout_matches_torch(torch):
    """Every class aotgrad.nn exports that PyTorch defines in torch.nn.modules.<sub> is
    importable from aotgrad.nn.modules.<sub>."""
    import importlib
    import inspect
    for name in nn.__all__:
        theirs = getattr(torch.nn, name, None)
        if not inspect.isclass(theirs) or not theirs.__module__.startswith("torch.nn.modules."):
            continue
        sub = importlib.import_module("aotgrad.nn.modules." + theirs.__module__.split(".")[3])
        assert getattr(sub, name, None) is getattr(nn, name), (name, sub.__name__)
    from aotgrad.nn.modules.module import Module, register_module_full_backward_hook  # noqa
    assert nn.modules.rnn.LSTM is nn.LSTM and nn.modules.Module is nn.Module


@pytest.mark.parametrize("name", ["interpolate", "group_norm", "instance_norm", "embedding_bag",
                                  "dropout1d", "dropout2d", "upsample"])
def test_functional_signatures_match_torch(torch, name):
    """(PyTorch's convolutions and pixel_shuffle are builtins without a signature.)"""
    import inspect

    def params(fn):
        return [(p.name, p.default, p.kind) for p in inspect.signature(fn).parameters.values()]

    assert params(getattr(F, name)) == params(getattr(torch.nn.functional, name))


def test_utils_signatures_match_torch(torch):
    import inspect
    for mod, names in [("rnn", ["pad_sequence", "pack_padded_sequence", "pad_packed_sequence",
                                "pack_sequence", "unpad_sequence", "unpack_sequence"]),
                       ("parametrize", ["register_parametrization", "remove_parametrizations",
                                        "is_parametrized"]),
                       ("parametrizations", ["weight_norm"])]:
        for name in names:
            ours = inspect.signature(getattr(getattr(nn.utils, mod), name)).parameters
            theirs = inspect.signature(getattr(getattr(torch.nn.utils, mod), name)).parameters
            assert [(p.name, p.default, p.kind) for p in ours.values()] == \
                [(p.name, p.default, p.kind) for p in theirs.values()], (mod, name)
    for name in ["weight_norm", "remove_weight_norm", "parameters_to_vector",
                 "vector_to_parameters"]:
        ours = inspect.signature(getattr(nn.utils, name)).parameters
        theirs = inspect.signature(getattr(torch.nn.utils, name)).parameters
        assert list(ours) == list(theirs), name


def test_modules_utils_helpers(torch):
    from aotgrad.nn.modules.utils import _pair, _quadruple, _single, _triple
    from torch.nn.modules import utils as tu
    for ours, theirs in [(_single, tu._single), (_pair, tu._pair), (_triple, tu._triple),
                         (_quadruple, tu._quadruple)]:
        for v in (3, (1, 2), [4, 5, 6]):
            assert ours(v) == theirs(v)
