"""Each layer against PyTorch (vs_torch.module): copy the torch module's state_dict into ours
(which also checks that parameter names and shapes match), run the same input, compare output
and gradients of the input and of every parameter."""
import numpy as np
import pytest

import aotgrad
from aotgrad import nn
import aotgrad.nn.functional as F
from torch_compare import close
from aotgrad.testing import assert_close

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def rn(*shape):
    return np.asarray(np.random.randn(*shape), dtype=np.float32)


def test_linear(torch, vs_torch):
    vs_torch.module(nn.Linear(5, 3), torch.nn.Linear(5, 3), [rn(4, 5)])
    vs_torch.module(nn.Linear(5, 3), torch.nn.Linear(5, 3), [rn(2, 4, 5)])
    vs_torch.module(nn.Linear(5, 3, bias=False), torch.nn.Linear(5, 3, bias=False), [rn(5)])


def test_bilinear(torch, vs_torch):
    vs_torch.module(nn.Bilinear(3, 4, 2), torch.nn.Bilinear(3, 4, 2), [rn(5, 3), rn(5, 4)])


@pytest.mark.parametrize("kw", [
    dict(), dict(stride=2), dict(padding=1), dict(padding=(2, 0), stride=(1, 2)),
    dict(dilation=2, padding=2), dict(groups=2), dict(padding="same"), dict(padding="valid"),
    dict(bias=False, stride=3, padding=1),
])
def test_conv2d(torch, vs_torch, kw):
    vs_torch.module(nn.Conv2d(4, 6, 3, **kw), torch.nn.Conv2d(4, 6, 3, **kw), [rn(2, 4, 9, 8)],
                    atol=5e-5)


def test_conv2d_rectangular_kernel_unbatched_and_same_even(torch, vs_torch):
    vs_torch.module(nn.Conv2d(3, 2, (2, 3)), torch.nn.Conv2d(3, 2, (2, 3)), [rn(3, 7, 6)])
    vs_torch.module(nn.Conv2d(1, 2, 4, padding="same"), torch.nn.Conv2d(1, 2, 4, padding="same"),
                    [rn(2, 1, 7, 7)])


def test_conv1d(torch, vs_torch):
    vs_torch.module(nn.Conv1d(3, 5, 3, stride=2, padding=1),
                    torch.nn.Conv1d(3, 5, 3, stride=2, padding=1), [rn(2, 3, 11)])


@pytest.mark.parametrize("kw", [
    dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=3, stride=2,
                                                                       ceil_mode=True),
    dict(kernel_size=2, dilation=2), dict(kernel_size=(2, 3), stride=(1, 2)),
])
def test_max_pool2d(torch, vs_torch, kw):
    vs_torch.module(nn.MaxPool2d(**kw), torch.nn.MaxPool2d(**kw), [rn(2, 3, 9, 8)])


def test_max_pool2d_return_indices(torch):
    x = rn(2, 3, 9, 8)
    o, oi = F.max_pool2d(aotgrad.tensor(x), 3, 2, 1, return_indices=True)
    t, ti = torch.nn.functional.max_pool2d(torch.tensor(x), 3, 2, 1, return_indices=True)
    close(o, t, atol=2e-5, rtol=1e-4)
    np.testing.assert_array_equal(oi.numpy(), ti.numpy())


def test_max_pool2d_ties_route_gradient_to_first_max(torch, vs_torch):
    x = np.zeros((1, 1, 4, 4), dtype=np.float32)  # every window is a tie
    vs_torch.module(nn.MaxPool2d(2), torch.nn.MaxPool2d(2), [x])


@pytest.mark.parametrize("kw", [
    dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
    dict(kernel_size=3, stride=2, ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=2, divisor_override=3),
])
def test_avg_pool2d(torch, vs_torch, kw):
    vs_torch.module(nn.AvgPool2d(**kw), torch.nn.AvgPool2d(**kw), [rn(2, 3, 8, 9)])


def test_adaptive_avg_pool_and_1d_pools(torch, vs_torch):
    vs_torch.module(nn.AdaptiveAvgPool2d(1), torch.nn.AdaptiveAvgPool2d(1), [rn(2, 3, 4, 6)])
    vs_torch.module(nn.AdaptiveAvgPool2d((2, 3)), torch.nn.AdaptiveAvgPool2d((2, 3)),
                    [rn(2, 3, 4, 6)])
    vs_torch.module(nn.MaxPool1d(3, 2), torch.nn.MaxPool1d(3, 2), [rn(2, 3, 10)])
    vs_torch.module(nn.AvgPool1d(2), torch.nn.AvgPool1d(2), [rn(2, 3, 10)])


def test_unfold(torch):
    x = rn(2, 3, 7, 6)
    o = F.unfold(aotgrad.tensor(x), (2, 3), dilation=(2, 1), padding=1, stride=(2, 1))
    t = torch.nn.functional.unfold(torch.tensor(x), (2, 3), dilation=(2, 1), padding=1,
                                   stride=(2, 1))
    close(o, t, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("shape", [(4, 6), (2, 3, 6), (2, 2, 3, 6)])
def test_layer_norm(torch, vs_torch, shape):
    ours, theirs = nn.LayerNorm(6), torch.nn.LayerNorm(6)
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
    vs_torch.module(ours, theirs, [rn(*shape) * 3 + 5])


def test_layer_norm_multi_dim_no_affine(torch, vs_torch):
    vs_torch.module(nn.LayerNorm((3, 4), elementwise_affine=False),
                    torch.nn.LayerNorm((3, 4), elementwise_affine=False), [rn(2, 3, 4)])


def test_rms_norm(torch, vs_torch):
    vs_torch.module(nn.RMSNorm(5), torch.nn.RMSNorm(5), [rn(3, 5)])


@pytest.mark.parametrize("cls,shape", [("BatchNorm1d", (8, 4)), ("BatchNorm1d", (8, 4, 5)),
                                       ("BatchNorm2d", (4, 4, 3, 3))])
def test_batch_norm_train_then_eval(torch, vs_torch, cls, shape):
    ours, theirs = getattr(nn, cls)(4), getattr(torch.nn, cls)(4)
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
    for _ in range(3):  # running stats evolve identically over several training batches
        vs_torch.module(ours, theirs, [rn(*shape) * 2 + 1])
        close(ours.running_mean, theirs.running_mean, "running_mean", atol=2e-5, rtol=1e-4)
        close(ours.running_var, theirs.running_var, "running_var", atol=2e-5, rtol=1e-4)
        assert int(ours.num_batches_tracked) == int(theirs.num_batches_tracked)
        for m in (ours, theirs):
            m.zero_grad()
    ours.eval(), theirs.eval()
    x = rn(*shape)
    close(ours(aotgrad.tensor(x)), theirs(torch.tensor(x)), "eval output", atol=2e-5, rtol=1e-4)


def test_batch_norm_momentum_none_cumulative(torch):
    ours, theirs = nn.BatchNorm1d(3, momentum=None), torch.nn.BatchNorm1d(3, momentum=None)
    for _ in range(3):
        x = rn(6, 3)
        ours(aotgrad.tensor(x)), theirs(torch.tensor(x))
    close(ours.running_mean, theirs.running_mean, atol=2e-5, rtol=1e-4)
    close(ours.running_var, theirs.running_var, atol=2e-5, rtol=1e-4)


def test_embedding_with_padding_idx(torch, vs_torch):
    idx = np.array([[1, 0, 3], [3, 3, 2]])
    ours, theirs = nn.Embedding(5, 4, padding_idx=0), torch.nn.Embedding(5, 4, padding_idx=0)
    vs_torch.module(ours, theirs, [idx])
    assert np.all(ours.weight.grad.numpy()[0] == 0)


@pytest.mark.parametrize("name,kw", [
    ("ReLU", {}), ("ReLU6", {}), ("LeakyReLU", {"negative_slope": 0.2}), ("ELU", {}),
    ("GELU", {}), ("GELU", {"approximate": "tanh"}), ("SiLU", {}), ("Mish", {}),
    ("Softplus", {"beta": 2.0}), ("Hardtanh", {}), ("Tanh", {}), ("Sigmoid", {}),
    ("LogSigmoid", {}), ("Softmax", {"dim": 1}), ("LogSoftmax", {"dim": -1}),
    ("Softmin", {"dim": 0}), ("Identity", {}), ("Flatten", {}),
])
def test_activations(torch, vs_torch, name, kw):
    vs_torch.module(getattr(nn, name)(**kw), getattr(torch.nn, name)(**kw), [rn(3, 4, 2) * 3])


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention(torch, vs_torch, batch_first):
    ours = nn.MultiheadAttention(8, 2, batch_first=batch_first)
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first)
    q, kv = rn(3, 5, 8), rn(3, 6, 8)
    if not batch_first:
        q, kv = q.transpose(1, 0, 2).copy(), kv.transpose(1, 0, 2).copy()
    vs_torch.module(ours, theirs, [q, kv, kv], call=lambda m, xs: m(*xs)[0])
    ours.zero_grad(), theirs.zero_grad()
    vs_torch.module(ours, theirs, [q, kv, kv], call=lambda m, xs: m(*xs)[1])  # averaged weights


def test_multihead_attention_masks(torch, vs_torch):
    ours, theirs = nn.MultiheadAttention(8, 4, batch_first=True), \
        torch.nn.MultiheadAttention(8, 4, batch_first=True)
    vs_torch.load_state(ours, theirs)
    x = rn(2, 5, 8)
    causal = np.triu(np.ones((5, 5), dtype=bool), 1)
    pad = np.zeros((2, 5), dtype=bool)
    pad[1, 3:] = True
    o, ow = ours(aotgrad.tensor(x), aotgrad.tensor(x), aotgrad.tensor(x),
                 attn_mask=aotgrad.tensor(causal), key_padding_mask=aotgrad.tensor(pad),
                 average_attn_weights=False)
    t, tw = theirs(torch.tensor(x), torch.tensor(x), torch.tensor(x),
                   attn_mask=torch.tensor(causal), key_padding_mask=torch.tensor(pad),
                   average_attn_weights=False)
    close(o, t, atol=2e-5, rtol=1e-4), close(ow, tw, atol=2e-5, rtol=1e-4)
    # is_causal alone (an aotgrad convenience) equals the explicit mask
    o2, _ = ours(aotgrad.tensor(x), aotgrad.tensor(x), aotgrad.tensor(x), is_causal=True)
    t2, _ = theirs(torch.tensor(x), torch.tensor(x), torch.tensor(x),
                   attn_mask=torch.tensor(causal))
    close(o2, t2, atol=2e-5, rtol=1e-4)
    # float mask, unbatched input
    fm = rn(5, 5)
    o3, _ = ours(aotgrad.tensor(x[0]), aotgrad.tensor(x[0]), aotgrad.tensor(x[0]),
                 attn_mask=aotgrad.tensor(fm))
    t3, _ = theirs(torch.tensor(x[0]), torch.tensor(x[0]), torch.tensor(x[0]),
                   attn_mask=torch.tensor(fm))
    close(o3, t3, atol=2e-5, rtol=1e-4)


def test_multihead_attention_kdim_vdim(torch, vs_torch):
    ours = nn.MultiheadAttention(8, 2, kdim=5, vdim=3, batch_first=True)
    theirs = torch.nn.MultiheadAttention(8, 2, kdim=5, vdim=3, batch_first=True)
    vs_torch.module(ours, theirs, [rn(2, 4, 8), rn(2, 6, 5), rn(2, 6, 3)],
                    call=lambda m, xs: m(*xs)[0])


def test_scaled_dot_product_attention(torch):
    q, k, v = rn(2, 3, 5, 4), rn(2, 3, 6, 4), rn(2, 3, 6, 4)
    for kw in (dict(), dict(scale=0.3)):
        o = F.scaled_dot_product_attention(aotgrad.tensor(q), aotgrad.tensor(k),
                                           aotgrad.tensor(v), **kw)
        t = torch.nn.functional.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k),
                                                             torch.tensor(v), **kw)
        close(o, t, atol=2e-5, rtol=1e-4)
    o = F.scaled_dot_product_attention(*(aotgrad.tensor(a) for a in (q, q, v[:, :, :5])),
                                       is_causal=True)
    t = torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(a) for a in (q, q, v[:, :, :5])), is_causal=True)
    close(o, t, atol=2e-5, rtol=1e-4)


# ---- losses --------------------------------------------------------------------------------
def _loss_pair(torch, name, kw, inp, target, target_grad=False):
    ko = {k: (aotgrad.tensor(v) if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
    kt = {k: (torch.tensor(v) if isinstance(v, np.ndarray) else v) for k, v in kw.items()}
    xo, xt = aotgrad.tensor(inp, requires_grad=True), torch.tensor(inp, requires_grad=True)
    rg = target_grad and target.dtype.kind == "f"
    to, tt = aotgrad.tensor(target, requires_grad=rg), torch.tensor(target, requires_grad=rg)
    lo, lt = getattr(nn, name)(**ko)(xo, to), getattr(torch.nn, name)(**kt)(xt, tt)
    close(lo, lt, f"{name} value", atol=2e-5, rtol=1e-4)
    g = rn(*lt.shape)
    (lo * aotgrad.tensor(g)).sum().backward()
    (lt * torch.tensor(g)).sum().backward()
    close(xo.grad, xt.grad, f"{name} input grad", atol=2e-5, rtol=1e-4)
    if rg:
        close(to.grad, tt.grad, f"{name} target grad", atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name", ["MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss"])
def test_regression_losses(torch, name, reduction):
    _loss_pair(torch, name, dict(reduction=reduction), rn(4, 3), rn(4, 3), target_grad=True)


@pytest.mark.parametrize("kw", [
    dict(), dict(reduction="sum"), dict(reduction="none"), dict(ignore_index=2),
    dict(label_smoothing=0.1), dict(weight="w"), dict(weight="w", ignore_index=1),
    dict(weight="w", label_smoothing=0.2, ignore_index=0),
    dict(weight="w", label_smoothing=0.2, reduction="sum"),
    dict(label_smoothing=0.3, reduction="none", ignore_index=1),
])
def test_cross_entropy_class_targets(torch, kw):
    kw = {k: (np.abs(rn(5)) + 0.1 if v == "w" else v) for k, v in kw.items()}
    _loss_pair(torch, "CrossEntropyLoss", kw, rn(6, 5) * 2, np.array([0, 1, 2, 4, 1, 2]))


def test_cross_entropy_spatial_and_probability_targets(torch):
    _loss_pair(torch, "CrossEntropyLoss", dict(ignore_index=0), rn(2, 4, 3, 3),
               np.random.randint(0, 4, (2, 3, 3)))
    p = np.random.rand(3, 4).astype(np.float32)
    p /= p.sum(1, keepdims=True)
    for kw in (dict(), dict(label_smoothing=0.2), dict(weight=np.abs(rn(4))),
               dict(reduction="none")):
        _loss_pair(torch, "CrossEntropyLoss", kw, rn(3, 4), p)
    _loss_pair(torch, "CrossEntropyLoss", {}, rn(4), np.array(2))  # unbatched


@pytest.mark.parametrize("kw", [dict(), dict(weight="w"), dict(ignore_index=1, reduction="sum"),
                                dict(reduction="none")])
def test_nll_loss(torch, kw):
    kw = {k: (np.abs(rn(4)) if v == "w" else v) for k, v in kw.items()}
    logp = np.log(np.random.dirichlet(np.ones(4), 5)).astype(np.float32)
    _loss_pair(torch, "NLLLoss", kw, logp, np.array([0, 1, 3, 1, 2]))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_losses(torch, reduction):
    p = np.random.uniform(0.05, 0.95, (4, 3)).astype(np.float32)
    t = np.random.randint(0, 2, (4, 3)).astype(np.float32)
    _loss_pair(torch, "BCELoss", dict(reduction=reduction), p, t)
    _loss_pair(torch, "BCELoss", dict(weight=np.abs(rn(3))), p, t)
    logits = rn(4, 3) * 5
    _loss_pair(torch, "BCEWithLogitsLoss", dict(reduction=reduction), logits, t,
               target_grad=True)
    _loss_pair(torch, "BCEWithLogitsLoss", dict(pos_weight=np.abs(rn(3)) + 0.5,
                                                weight=np.abs(rn(3))), logits, t)


def test_kl_div(torch):
    logq = np.log(np.random.dirichlet(np.ones(4), 3)).astype(np.float32)
    p = np.random.dirichlet(np.ones(4), 3).astype(np.float32)
    for kw in (dict(reduction="batchmean"), dict(reduction="sum")):
        _loss_pair(torch, "KLDivLoss", kw, logq, p)
    _loss_pair(torch, "KLDivLoss", dict(log_target=True, reduction="mean"), logq, np.log(p))


def test_default_initialisation_bounds_match_pytorch(torch):
    """Same distribution as PyTorch: compare the bounds of uniform inits and the moments."""
    aotgrad.manual_seed(0)
    lin = nn.Linear(400, 300)
    bound = 1 / np.sqrt(400)  # kaiming_uniform(a=sqrt(5)) gives U(-1/sqrt(fan_in), ...)
    w = lin.weight.detach().numpy()
    assert w.min() >= -bound and w.max() <= bound and w.max() > 0.99 * bound
    assert_close(w.std(), bound / np.sqrt(3), rtol=0.02, atol=0, equal_nan=True, check_dtype=False)
    tw = torch.nn.Linear(400, 300).weight.detach().numpy()
    assert_close(w.std(), tw.std(), rtol=0.02, atol=0, equal_nan=True)
    conv = nn.Conv2d(8, 16, 3)
    cb = 1 / np.sqrt(8 * 9)
    assert np.abs(conv.weight.detach().numpy()).max() <= cb
    assert np.abs(conv.bias.detach().numpy()).max() <= cb
    mha = nn.MultiheadAttention(16, 4)
    xb = np.sqrt(6 / (16 + 48))
    assert np.abs(mha.in_proj_weight.detach().numpy()).max() <= xb
    assert np.all(mha.in_proj_bias.detach().numpy() == 0)
    assert np.all(mha.out_proj.bias.detach().numpy() == 0)
