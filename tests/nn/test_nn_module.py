"""nn.Module and nn.Parameter behaviour, and layers against closed forms (no PyTorch needed)."""
import copy
import math
import pickle

import numpy as np
import pytest

import aotgrad
from aotgrad import nn
import aotgrad.nn.functional as F
from aotgrad.testing import assert_close


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(3, 4)
        self.act = nn.ReLU()
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.scale = nn.Parameter(aotgrad.ones(4))
        self.register_buffer("steps", aotgrad.zeros((), dtype=aotgrad.int64))
        self.register_buffer("cache", aotgrad.zeros(2), persistent=False)

    def forward(self, x):
        x = self.act(self.fc1(x))
        for b in self.blocks:
            x = b(x)
        return x * self.scale


# ---- Parameter -----------------------------------------------------------------------------
def test_parameter_shares_data_and_is_leaf():
    t = aotgrad.zeros(3)
    p = nn.Parameter(t)
    assert isinstance(p, aotgrad.Tensor) and p.requires_grad and p.is_leaf
    with aotgrad.no_grad():
        t.add_(1.0)
    np.testing.assert_array_equal(p.detach().numpy(), [1, 1, 1])  # same storage
    assert repr(p).startswith("Parameter containing:\ntensor([1., 1., 1.], requires_grad=True)")
    assert str(p) == repr(p)
    y = p * 2
    assert type(y) is aotgrad.Tensor and y.grad_fn is not None
    assert not nn.Parameter(aotgrad.zeros(2), requires_grad=False).requires_grad
    with pytest.raises(RuntimeError, match="floating point"):
        nn.Parameter(aotgrad.tensor([1, 2]))
    assert tuple(nn.Parameter().shape) == (0,)


def test_parameter_deepcopy_and_pickle_keep_class():
    p = nn.Parameter(aotgrad.randn(2, 2))
    for q in (copy.deepcopy(p), pickle.loads(pickle.dumps(p))):
        assert type(q) is nn.Parameter and q.requires_grad
        np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy())
        assert not np.shares_memory(q.detach().numpy(), p.detach().numpy())


# ---- registration --------------------------------------------------------------------------
def test_registration_and_traversal():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "blocks.0.weight", "blocks.0.bias",
                     "blocks.1.weight", "blocks.1.bias"]
    assert len(list(net.parameters())) == 7
    assert [n for n, _ in net.named_buffers()] == ["steps", "cache"]
    assert [n for n, _ in net.named_children()] == ["fc1", "act", "blocks"]
    assert [n for n, _ in net.named_modules()] == ["", "fc1", "act", "blocks", "blocks.0",
                                                   "blocks.1"]
    assert net.get_submodule("blocks.1") is net.blocks[1]
    assert net.get_parameter("blocks.0.bias") is net.blocks[0].bias
    assert net.get_buffer("steps") is net.steps
    assert [n for n, _ in net.named_parameters(recurse=False)] == ["scale"]
    with pytest.raises(AttributeError, match="has no attribute `nope`"):
        net.get_submodule("nope")


def test_shared_parameters_are_listed_once():
    lin = nn.Linear(2, 2)
    seq = nn.Sequential(lin, nn.ReLU(), lin)
    assert len(list(seq.parameters())) == 2
    assert len(list(seq.named_parameters(remove_duplicate=False))) == 4


def test_setattr_rules_and_errors():
    net = Net()
    with pytest.raises(TypeError, match="cannot assign .* as parameter 'scale'"):
        net.scale = aotgrad.ones(4)
    net.scale = None
    assert "scale" not in dict(net.named_parameters())
    with pytest.raises(TypeError, match="as child module 'fc1'"):
        net.fc1 = 3
    net.steps = aotgrad.tensor(5)
    assert int(net.get_buffer("steps")) == 5
    with pytest.raises(TypeError, match="as buffer"):
        net.steps = 1.5
    net.extra = nn.Linear(1, 1)  # a module replaces nothing and is registered
    assert "extra" in dict(net.named_children())
    del net.extra
    assert "extra" not in dict(net.named_children())
    with pytest.raises(KeyError, match="contain"):
        net.register_buffer("a.b", aotgrad.zeros(1))
    with pytest.raises(KeyError, match="already exists"):
        net.register_parameter("act", nn.Parameter(aotgrad.zeros(1)))
    with pytest.raises(AttributeError, match="'Net' object has no attribute 'missing'"):
        net.missing

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(aotgrad.zeros(1))
    with pytest.raises(AttributeError, match="before Module.__init__"):
        Early()
    with pytest.raises(NotImplementedError, match='missing the required "forward"'):
        nn.Module()(1)


# ---- state dict ----------------------------------------------------------------------------
def test_state_dict_shares_storage_and_skips_non_persistent():
    net = Net()
    sd = net.state_dict()
    assert list(sd) == ["scale", "steps", "fc1.weight", "fc1.bias", "blocks.0.weight",
                        "blocks.0.bias", "blocks.1.weight", "blocks.1.bias"]
    assert not sd["fc1.weight"].requires_grad
    with aotgrad.no_grad():
        net.fc1.weight.mul_(0.0)
    assert float(sd["fc1.weight"].abs().sum()) == 0.0  # same storage, like PyTorch
    assert net.state_dict(keep_vars=True)["scale"] is net.scale


def test_load_state_dict_roundtrip_and_errors():
    a, b = Net(), Net()
    res = b.load_state_dict(a.state_dict())
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert str(res) == "<All keys matched successfully>"
    x = aotgrad.randn(5, 3)
    np.testing.assert_array_equal(a(x).detach().numpy(), b(x).detach().numpy())
    assert b.fc1.weight is not a.fc1.weight  # copied, not aliased
    sd = a.state_dict()
    del sd["fc1.bias"]
    sd["bogus"] = aotgrad.zeros(1)
    with pytest.raises(RuntimeError) as e:
        b.load_state_dict(sd)
    msg = str(e.value)
    assert "Error(s) in loading state_dict for Net" in msg
    assert 'Missing key(s) in state_dict: "fc1.bias"' in msg
    assert 'Unexpected key(s) in state_dict: "bogus"' in msg
    res = b.load_state_dict(sd, strict=False)
    assert res.missing_keys == ["fc1.bias"] and res.unexpected_keys == ["bogus"]
    sd = a.state_dict()
    sd["fc1.weight"] = aotgrad.zeros(2, 2)
    with pytest.raises(RuntimeError, match=r"size mismatch for fc1.weight: copying a param with "
                                           r"shape aotgrad.Size\(\[2, 2\]\) from checkpoint, the "
                                           r"shape in current model is aotgrad.Size\(\[4, 3\]\)"):
        b.load_state_dict(sd, strict=False)
    # numpy values are accepted
    b.load_state_dict({k: v.numpy() for k, v in a.state_dict().items()})


def test_deepcopy_module_is_independent():
    a = Net()
    b = copy.deepcopy(a)
    assert type(b.fc1.weight) is nn.Parameter
    with aotgrad.no_grad():
        b.fc1.weight.add_(1.0)
    assert not np.allclose(a.fc1.weight.detach().numpy(), b.fc1.weight.detach().numpy())


# ---- modes, grads, dtype -------------------------------------------------------------------
def test_train_eval_does_not_disable_autograd():
    net = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    assert net.training and net[1].training
    net.eval()
    assert not net.training and not net[1].training
    x = aotgrad.ones(4, 3)
    y = net(x)
    assert y.requires_grad  # eval() is not no_grad()
    np.testing.assert_array_equal(y.detach().numpy(), net[0](x).detach().numpy())
    net.train()
    assert net[1].training
    with pytest.raises(ValueError, match="boolean"):
        net.train("yes")


def test_zero_grad_requires_grad_apply_and_to():
    net = Net()
    net(aotgrad.randn(2, 3)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(float(p.grad.abs().sum()) == 0 for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "ReLU", "Linear", "Linear", "ModuleList", "Net"]
    w = net.fc1.weight
    net.to(aotgrad.float64)
    assert net.fc1.weight is w and w.dtype is aotgrad.float64
    assert net.steps.dtype is aotgrad.int64  # integer buffers keep their dtype
    assert net(aotgrad.randn(2, 3, dtype=aotgrad.float64)).dtype is aotgrad.float64
    net.float()
    assert w.dtype is aotgrad.float32
    with pytest.raises(RuntimeError, match="CPU only"):
        net.to("cuda")


def test_forward_hooks():
    lin = nn.Linear(2, 2)
    calls = []
    h1 = lin.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    h2 = lin.register_forward_hook(lambda m, args, out: calls.append(out.shape) or out + 1)
    y = lin(aotgrad.ones(1, 2))
    assert_close(y.detach().numpy(), lin.bias.detach().numpy()[None] + 1, rtol=1e-6, atol=0,
                 equal_nan=True)
    assert calls == [aotgrad.Size([1, 2])]
    h1.remove(), h2.remove()
    assert len(calls) == 1 and lin(aotgrad.ones(1, 2)) is not None and len(calls) == 1


def test_repr():
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                        nn.Sequential(nn.Linear(64, 10), nn.Dropout(0.1)))
    assert repr(net) == (
        "Sequential(\n"
        "  (0): Conv2d(1, 4, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))\n"
        "  (1): ReLU()\n"
        "  (2): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
        "  (3): Flatten(start_dim=1, end_dim=-1)\n"
        "  (4): Sequential(\n"
        "    (0): Linear(in_features=64, out_features=10, bias=True)\n"
        "    (1): Dropout(p=0.1, inplace=False)\n"
        "  )\n"
        ")")
    assert repr(nn.LayerNorm(5)) == \
        "LayerNorm((5,), eps=1e-05, elementwise_affine=True, bias=True)"
    assert repr(nn.GELU("tanh")) == "GELU(approximate='tanh')"


# ---- containers ----------------------------------------------------------------------------
def test_sequential_indexing_and_editing():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert isinstance(seq[-1], nn.Linear) and len(seq[:2]) == 2
    assert isinstance(seq[:2], nn.Sequential)
    seq.append(nn.Sigmoid())
    assert len(seq) == 4 and [n for n, _ in seq.named_children()] == ["0", "1", "2", "3"]
    del seq[1]
    assert [type(m).__name__ for m in seq] == ["Linear", "Linear", "Sigmoid"]
    assert [n for n, _ in seq.named_children()] == ["0", "1", "2"]
    y = seq(aotgrad.randn(4, 2))
    assert tuple(y.shape) == (4, 1) and float(y.min()) > 0
    from collections import OrderedDict
    named = nn.Sequential(OrderedDict(a=nn.Linear(1, 1), b=nn.Tanh()))
    assert named.a is named[0]
    with pytest.raises(IndexError):
        seq[5]


def test_module_list_and_dict():
    ml = nn.ModuleList([nn.Linear(1, 1)])
    ml.append(nn.Linear(1, 1))
    ml += [nn.Linear(1, 1)]
    assert len(ml) == 3 and len(list(ml.parameters())) == 6
    md = nn.ModuleDict({"enc": nn.Linear(2, 2), "act": nn.ReLU()})
    md["dec"] = nn.Linear(2, 1)
    assert list(md.keys()) == ["enc", "act", "dec"] and "act" in md
    assert [n for n, _ in md.named_parameters()] == ["enc.weight", "enc.bias", "dec.weight",
                                                     "dec.bias"]
    md.pop("act")
    assert len(md) == 2
    pl = nn.ParameterList([nn.Parameter(aotgrad.ones(2)), aotgrad.zeros(3)])
    assert len(list(pl.parameters())) == 2 and isinstance(pl[1], nn.Parameter)


# ---- layers against closed forms -----------------------------------------------------------
def test_linear_closed_form_and_errors():
    lin = nn.Linear(3, 2)
    x = np.random.randn(4, 3).astype(np.float32)
    y = lin(aotgrad.tensor(x)).detach().numpy()
    W, b = lin.weight.detach().numpy(), lin.bias.detach().numpy()
    assert_close(y, x @ W.T + b, rtol=1e-5, atol=1e-6, equal_nan=True)
    with pytest.raises(RuntimeError, match=r"shapes cannot be multiplied \(4x5 and 3x2\)"):
        lin(aotgrad.ones(4, 5))
    with pytest.raises(RuntimeError, match="same dtype"):
        lin(aotgrad.ones(4, 3, dtype=aotgrad.float64))


def test_linear_grad_matches_finite_differences():
    lin = nn.Linear(3, 2).double()
    x = aotgrad.randn(4, 3, dtype=aotgrad.float64, requires_grad=True)
    f = lambda: float((aotgrad.tanh(lin(x)) ** 2).sum())  # noqa: E731
    (aotgrad.tanh(lin(x)) ** 2).sum().backward()
    W = lin.weight
    eps = 1e-6
    num = np.zeros(W.shape)
    for i in range(W.shape[0]):
        for j in range(W.shape[1]):
            with aotgrad.no_grad():
                W[i, j] += eps
            up = f()
            with aotgrad.no_grad():
                W[i, j] -= 2 * eps
            down = f()
            with aotgrad.no_grad():
                W[i, j] += eps
            num[i, j] = (up - down) / (2 * eps)
    assert_close(W.grad.numpy(), num, rtol=1e-6, atol=1e-8, equal_nan=True)


def test_gelu_silu_softplus_closed_forms():
    x = np.linspace(-4, 4, 17).astype(np.float64)
    t = aotgrad.tensor(x)
    erf = np.vectorize(math.erf)
    assert_close(F.gelu(t).numpy(), 0.5 * x * (1 + erf(x / math.sqrt(2))), rtol=1e-12, atol=0,
                 equal_nan=True)
    tanh_form = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    assert_close(F.gelu(t, approximate="tanh").numpy(), tanh_form, rtol=1e-12, atol=0,
                 equal_nan=True)
    assert_close(F.silu(t).numpy(), x / (1 + np.exp(-x)), rtol=1e-12, atol=0, equal_nan=True)
    assert_close(F.softplus(t).numpy(), np.log1p(np.exp(x)), rtol=1e-12, atol=0, equal_nan=True)
    big = aotgrad.tensor([100.0, -100.0])
    assert_close(F.softplus(big).numpy(), [100.0, 0.0], rtol=1e-7, atol=1e-30, equal_nan=True)
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(t, approximate="fast")


def test_layer_norm_closed_form_and_large_offset_stability():
    x = (np.random.randn(4, 8) + 1e4).astype(np.float32)  # large mean: two-pass variance
    y = F.layer_norm(aotgrad.tensor(x), (8,)).numpy()
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    assert_close(y, ref, rtol=1e-7, atol=2e-3, equal_nan=True, check_dtype=False)
    with pytest.raises(RuntimeError, match=r"normalized_shape=\[5\], expected input with shape "
                                           r"\[\*, 5\], but got input of size\[?"):
        F.layer_norm(aotgrad.ones(2, 4), (5,))


def test_batch_norm_train_eval_closed_form():
    bn = nn.BatchNorm1d(3, momentum=0.5)
    x = np.random.randn(10, 3).astype(np.float32) * 2 + 3
    y = bn(aotgrad.tensor(x)).detach().numpy()
    assert_close(y, (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5), rtol=1e-7, atol=1e-5,
                 equal_nan=True)
    assert_close(bn.running_mean.numpy(), 0.5 * x.mean(0), rtol=1e-5, atol=0, equal_nan=True)
    assert_close(bn.running_var.numpy(), 0.5 + 0.5 * x.var(0, ddof=1), rtol=1e-5, atol=0,
                 equal_nan=True)
    bn.eval()
    y2 = bn(aotgrad.tensor(x)).detach().numpy()
    rm, rv = bn.running_mean.numpy(), bn.running_var.numpy()
    assert_close(y2, (x - rm) / np.sqrt(rv + 1e-5), rtol=1e-5, atol=0, equal_nan=True)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        nn.BatchNorm1d(3)(aotgrad.ones(1, 3))
    with pytest.raises(ValueError, match=r"expected 2D or 3D input \(got 4D input\)"):
        nn.BatchNorm1d(3)(aotgrad.ones(2, 3, 1, 1))


def test_dropout_statistics_and_seed_reproducibility():
    x = aotgrad.ones(20000)
    aotgrad.manual_seed(3)
    y = F.dropout(x, 0.3).numpy()
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.7)}
    assert abs((y == 0).mean() - 0.3) < 0.02
    aotgrad.manual_seed(3)
    np.testing.assert_array_equal(F.dropout(x, 0.3).numpy(), y)
    assert F.dropout(x, 0.3, training=False) is x
    np.testing.assert_array_equal(F.dropout(x, 1.0).numpy(), 0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)
    # gradient flows only through kept elements, scaled
    xg = aotgrad.ones(1000, requires_grad=True)
    out = F.dropout(xg, 0.5)
    out.sum().backward()
    np.testing.assert_array_equal(xg.grad.numpy(), out.detach().numpy())


def test_conv2d_closed_form():
    x = np.random.randn(1, 2, 5, 5).astype(np.float64)
    w = np.random.randn(3, 2, 3, 3).astype(np.float64)
    y = F.conv2d(aotgrad.tensor(x), aotgrad.tensor(w), padding=1, stride=2).numpy()
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((1, 3, 3, 3))
    for o in range(3):
        for i in range(3):
            for j in range(3):
                ref[0, o, i, j] = (xp[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] * w[o]).sum()
    assert_close(y, ref, rtol=1e-12, atol=0, equal_nan=True)
    with pytest.raises(RuntimeError, match="expected input.* to have 4 channels, but got 2"):
        F.conv2d(aotgrad.tensor(x), aotgrad.ones(3, 4, 3, 3, dtype=aotgrad.float64))
    with pytest.raises(RuntimeError, match="Output size is too small"):
        F.conv2d(aotgrad.tensor(x), aotgrad.ones(3, 2, 7, 7, dtype=aotgrad.float64))


def test_pooling_closed_forms():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    np.testing.assert_array_equal(F.max_pool2d(aotgrad.tensor(x), 2).numpy(),
                                  [[[[5, 7], [13, 15]]]])
    np.testing.assert_array_equal(F.avg_pool2d(aotgrad.tensor(x), 2).numpy(),
                                  [[[[2.5, 4.5], [10.5, 12.5]]]])
    with pytest.raises(RuntimeError, match="pad should be at most half"):
        F.max_pool2d(aotgrad.tensor(x), 2, padding=2)


def test_embedding_closed_form_and_errors():
    emb = nn.Embedding(4, 2, padding_idx=1)
    assert np.all(emb.weight.detach().numpy()[1] == 0)
    idx = aotgrad.tensor([[0, 1], [3, 0]])
    out = emb(idx)
    np.testing.assert_array_equal(out.detach().numpy(),
                                  emb.weight.detach().numpy()[[[0, 1], [3, 0]]])
    out.sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.numpy(), [[2, 2], [0, 0], [0, 0], [1, 1]])
    with pytest.raises(IndexError, match="index out of range"):
        emb(aotgrad.tensor([4]))
    with pytest.raises(RuntimeError, match="int64 or int32"):
        emb(aotgrad.tensor([1.0]))


def test_cross_entropy_closed_form_and_errors():
    logits = np.random.randn(5, 4)
    y = np.array([0, 3, 1, 1, 2])
    lp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    t = aotgrad.tensor(logits)
    assert_close(float(F.cross_entropy(t, aotgrad.tensor(y))), -lp[np.arange(5), y].mean(),
                 rtol=1e-12, atol=0, equal_nan=True)
    eps = 0.1
    smooth = -(1 - eps) * lp[np.arange(5), y] - eps / 4 * lp.sum(1)
    assert_close(float(F.cross_entropy(t, aotgrad.tensor(y), label_smoothing=eps)), smooth.mean(),
                 rtol=1e-12, atol=0, equal_nan=True)
    keep = y != 1
    assert_close(float(F.cross_entropy(t, aotgrad.tensor(y), ignore_index=1)),
                 -lp[np.arange(5), y][keep].mean(), rtol=1e-12, atol=0, equal_nan=True)
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        F.cross_entropy(t, aotgrad.tensor([7, 0, 0, 0, 0]))
    with pytest.raises(ValueError, match=r"Expected input batch_size \(5\) to match target "
                                         r"batch_size \(3\)"):
        F.cross_entropy(t, aotgrad.tensor([0, 0, 0]))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.cross_entropy(t, aotgrad.tensor(y), reduction="avg")


def test_losses_closed_forms():
    a, b = np.random.randn(6), np.random.randn(6)
    ta, tb = aotgrad.tensor(a), aotgrad.tensor(b)
    assert_close(float(nn.MSELoss()(ta, tb)), ((a - b) ** 2).mean(), rtol=1e-12, atol=0,
                 equal_nan=True)
    assert_close(float(nn.L1Loss(reduction="sum")(ta, tb)), np.abs(a - b).sum(), rtol=1e-12, atol=0,
                 equal_nan=True)
    p = 1 / (1 + np.exp(-a))
    t = (b > 0).astype(np.float64)
    bce = -(t * np.log(p) + (1 - t) * np.log(1 - p)).mean()
    assert_close(float(nn.BCELoss()(aotgrad.tensor(p), aotgrad.tensor(t))), bce, rtol=1e-10, atol=0,
                 equal_nan=True)
    assert_close(float(nn.BCEWithLogitsLoss()(ta, aotgrad.tensor(t))), bce, rtol=1e-10, atol=0,
                 equal_nan=True)
    # extreme logits stay finite
    big = aotgrad.tensor([1000.0, -1000.0])
    assert float(nn.BCEWithLogitsLoss()(big, aotgrad.tensor([0.0, 1.0]))) == pytest.approx(1000)
    with pytest.raises(ValueError, match="that is different to the input size"):
        nn.BCELoss()(aotgrad.tensor([0.5]), aotgrad.tensor([[1.0]]))


def test_attention_causal_mask_blocks_the_future():
    mha = nn.MultiheadAttention(4, 2, batch_first=True)
    x = aotgrad.randn(1, 5, 4)
    _, w = mha(x, x, x, is_causal=True)
    w = w.detach().numpy()[0]
    assert np.all(np.triu(w, 1) == 0)
    assert_close(w.sum(-1), np.ones_like(w.sum(-1)), rtol=1e-5, atol=0, equal_nan=True)
    # changing a later token does not change earlier outputs
    x2 = x.detach().clone()
    x2[0, 4] = 10.0
    o1, _ = mha(x, x, x, is_causal=True)
    o2, _ = mha(x2, x2, x2, is_causal=True)
    assert_close(o1.detach().numpy()[0, :4], o2.detach().numpy()[0, :4], rtol=1e-5, atol=0,
                 equal_nan=True)


def test_init_functions_work_in_place_under_no_grad():
    p = nn.Parameter(aotgrad.empty(64, 32))
    q = nn.init.xavier_uniform_(p)
    assert q is p and p.is_leaf and p.requires_grad and p.grad_fn is None
    bound = math.sqrt(6 / 96)
    assert float(p.abs().max()) <= bound
    nn.init.constant_(p, 0.5)
    assert np.all(p.detach().numpy() == 0.5)
    nn.init.kaiming_normal_(p, nonlinearity="relu")
    assert_close(p.detach().numpy().std(), math.sqrt(2 / 32), rtol=0.1, atol=0, equal_nan=True)
    nn.init.trunc_normal_(p, std=1.0, a=-0.5, b=0.5)
    assert float(p.abs().max()) <= 0.5
    nn.init.orthogonal_(p)
    w = p.detach().numpy()
    assert_close(w.T @ w, np.eye(32), rtol=1e-7, atol=1e-5, equal_nan=True, check_dtype=False)
    nn.init.eye_(p)
    assert float(p.sum()) == 32
    assert nn.init.calculate_gain("leaky_relu", math.sqrt(5)) == pytest.approx(math.sqrt(1 / 3))
    with pytest.raises(ValueError, match="Fan in and fan out"):
        nn.init.xavier_uniform_(nn.Parameter(aotgrad.empty(3)))


def test_clip_grad_norm():
    ps = [nn.Parameter(aotgrad.ones(3)), nn.Parameter(aotgrad.ones(4))]
    for p in ps:
        p.grad = aotgrad.full((p.numel(),), 2.0)
    total = nn.utils.clip_grad_norm_(ps, 1.0)
    assert float(total) == pytest.approx(math.sqrt(7 * 4))
    new = math.sqrt(sum(float((p.grad ** 2).sum()) for p in ps))
    assert new == pytest.approx(1.0, rel=1e-5)


def test_causal_attention_equals_the_explicit_mask_values_and_grads():
    """is_causal skips the safe-softmax check for queries that may attend nowhere (a causal
    query always sees key 0); it must still equal the same mask passed explicitly."""
    rng = np.random.default_rng(3)
    arrs = [rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 5, 4), (2, 3, 6, 4),
                                                                 (2, 3, 6, 4))]
    mask = aotgrad.tensor(np.tril(np.ones((5, 6), dtype=bool)))
    outs = []
    for kw in (dict(is_causal=True), dict(attn_mask=mask)):
        q, k, v = (aotgrad.tensor(a, requires_grad=True) for a in arrs)
        o = F.scaled_dot_product_attention(q, k, v, **kw)
        (o * o).sum().backward()
        outs.append([o.detach().numpy()] + [t.grad.numpy() for t in (q, k, v)])
    for a, b in zip(*outs):
        assert_close(a, b, rtol=1e-6, atol=1e-7, equal_nan=True)
