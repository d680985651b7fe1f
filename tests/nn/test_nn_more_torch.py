"""The rest of torch.nn's activations and nn.ParameterDict: against PyTorch (values,
gradients, reprs), closed forms and finite differences. The rest of the lr schedulers is in
test_lr_scheduler_more_torch.py."""
import inspect
import math
import pickle
from collections import OrderedDict

import numpy as np
import pytest

import aotgrad
import aotgrad.nn.functional as F
from aotgrad import nn, optim
from torch_compare import close
from aotgrad.autograd import gradcheck
from aotgrad.testing import assert_close

LS = optim.lr_scheduler
NAN = float("nan")
# special points: the kinks of hardswish/hardsigmoid (+-3), the shrink bounds (+-0.5), zero,
# the threshold used below (0.25), NaN, and ordinary values on both sides
SPECIAL = [NAN, -4.0, -3.0, -1.0, -0.5, -0.2, 0.0, 0.2, 0.25, 0.5, 1.0, 3.0, 4.0]


def _np(t):
    return t.detach().numpy() if hasattr(t, "detach") else np.asarray(t)


def _finite(grad, x):
    """The gradient where x is not NaN: PyTorch's gradient at NaN depends on whether the
    element fell in its vectorised loop or the scalar tail (NaN against 1 for elu, celu, selu
    and hardswish; 0 against 1 for the shrinks). Ours is the scalar tail's: see
    test_activation_closed_forms."""
    return _np(grad)[~np.isnan(x)]


def _data(dtype=np.float32, shape=(3, 13)):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    x[0, :len(SPECIAL)] = SPECIAL
    return x


# ---- activations -----------------------------------------------------------------------------
# name -> constructor, given the library's nn
MODULES = {
    "Threshold": lambda n: n.Threshold(0.25, -2.0),
    "RReLU_eval": lambda n: n.RReLU(0.1, 0.3).eval(),
    "Hardsigmoid": lambda n: n.Hardsigmoid(),
    "Hardswish": lambda n: n.Hardswish(),
    "CELU": lambda n: n.CELU(),
    "CELU_alpha": lambda n: n.CELU(alpha=0.7),
    "SELU": lambda n: n.SELU(),
    "GLU": lambda n: n.GLU(),
    "GLU_dim0": lambda n: n.GLU(dim=0),
    "Hardshrink": lambda n: n.Hardshrink(),
    "Hardshrink_1": lambda n: n.Hardshrink(1.0),
    "Softshrink": lambda n: n.Softshrink(),
    "Softshrink_0": lambda n: n.Softshrink(0.0),
    "PReLU": lambda n: n.PReLU(),
    "PReLU_channels": lambda n: n.PReLU(3, init=0.1),
    "Softsign": lambda n: n.Softsign(),
    "Tanhshrink": lambda n: n.Tanhshrink(),
    "Softmax2d": lambda n: n.Softmax2d(),
}
SHAPES = {"GLU": (3, 14), "GLU_dim0": (4, 13), "Softmax2d": (2, 3, 2, 13),
          "PReLU_channels": (2, 3, 13)}  # the others take (3, 13)


def _module_input(name, dtype=np.float32):
    shape = SHAPES.get(name, (3, 13))
    x = _data(dtype, (int(np.prod(shape[:-1])), shape[-1])).reshape(shape)
    if name in ("GLU", "GLU_dim0", "Softmax2d", "Softsign", "Tanhshrink"):
        x = np.nan_to_num(x)  # NaN rows would only compare NaN with NaN
    return x


@pytest.mark.parametrize("name", sorted(MODULES))
def test_activation_module_matches_torch(torch, name):
    """Output, input gradient (NaN and the kinks included) and parameter gradients."""
    ours, theirs = MODULES[name](nn), MODULES[name](torch.nn)
    assert repr(ours) == repr(theirs)
    assert [(k, tuple(p.shape)) for k, p in ours.named_parameters()] == \
        [(k, tuple(p.shape)) for k, p in theirs.named_parameters()]
    for k, p in ours.named_parameters():
        close(p, dict(theirs.named_parameters())[k], f"initial {k}")
    x = _module_input(name)
    xo, xt = aotgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    yo, yt = ours(xo), theirs(xt)
    assert yo.dtype is aotgrad.float32
    close(yo, yt, "output")
    g = np.random.default_rng(1).standard_normal(tuple(yt.shape)).astype(np.float32)
    (yo * aotgrad.tensor(g)).sum().backward()
    (yt * torch.tensor(g)).sum().backward()
    close(_finite(xo.grad, x), _finite(xt.grad, x), "input grad")
    tp = dict(theirs.named_parameters())
    for k, p in ours.named_parameters():
        close(p.grad, tp[k].grad, f"grad of {k}", atol=1e-5)


FUNCS = {
    "threshold": (lambda F_, x: F_.threshold(x, 0.25, 7.0)),
    "rrelu": (lambda F_, x: F_.rrelu(x, 0.2, 0.4)),
    "hardsigmoid": (lambda F_, x: F_.hardsigmoid(x)),
    "hardswish": (lambda F_, x: F_.hardswish(x)),
    "celu": (lambda F_, x: F_.celu(x, 1.5)),
    "selu": (lambda F_, x: F_.selu(x)),
    "glu": (lambda F_, x: F_.glu(x, 0)),
    "hardshrink": (lambda F_, x: F_.hardshrink(x, 0.2)),
    "softshrink": (lambda F_, x: F_.softshrink(x, 0.25)),
    "prelu": (lambda F_, x: F_.prelu(x, F_._w)),
    "softsign": (lambda F_, x: F_.softsign(x)),
    "tanhshrink": (lambda F_, x: F_.tanhshrink(x)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(FUNCS))
def test_activation_functional_matches_torch(torch, name, dtype):
    """F.<name> against torch.nn.functional.<name> in both float dtypes; dtype kept."""
    import torch.nn.functional as TF
    x = _data(dtype, (4, 13))
    w = np.linspace(-0.5, 2.0, 13).astype(dtype)  # one slope per channel (dim 1)
    F._w, TF._w = aotgrad.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    try:
        xo, xt = aotgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        yo, yt = FUNCS[name](F, xo), FUNCS[name](TF, xt)
        assert yo.dtype.name == str(yt.dtype).split(".")[1]
        close(yo, yt, "output", atol=1e-12 if dtype == np.float64 else 1e-6)
        g = np.random.default_rng(2).standard_normal(tuple(yt.shape)).astype(dtype)
        (yo * aotgrad.tensor(g)).sum().backward()
        (yt * torch.tensor(g)).sum().backward()
        close(_finite(xo.grad, x), _finite(xt.grad, x), "input grad")
        if name == "prelu":
            close(F._w.grad, TF._w.grad, "weight grad", atol=1e-5)
    finally:
        del F._w, TF._w


SMOOTH = {
    "celu": lambda x: F.celu(x, 0.6),
    "selu": F.selu,
    "softsign": F.softsign,
    "tanhshrink": F.tanhshrink,
    "glu": lambda x: F.glu(x, -1),
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "softshrink": lambda x: F.softshrink(x, 0.3),
    "threshold": lambda x: F.threshold(x, 0.1, -1.0),
}


@pytest.mark.parametrize("name", sorted(SMOOTH))
def test_activation_gradcheck_float64(name):
    """Finite differences in float64, away from the kinks (where they are not defined)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-5, 5, (3, 6))
    for kink in (0.0, 0.1, 0.3, -0.3, 3.0, -3.0):
        x[np.abs(x - kink) < 1e-2] += 0.05
    xt = aotgrad.tensor(x, dtype=aotgrad.float64, requires_grad=True)
    assert gradcheck(SMOOTH[name], (xt,))


def test_prelu_gradcheck_weight_and_input():
    rng = np.random.default_rng(4)
    x = aotgrad.tensor(rng.uniform(-2, 2, (2, 3, 4)) + 0.01, dtype=aotgrad.float64,
                       requires_grad=True)
    w = aotgrad.tensor([0.2, -0.5, 1.5], dtype=aotgrad.float64, requires_grad=True)
    assert gradcheck(F.prelu, (x, w))


def test_activation_closed_forms():
    x = np.linspace(-5, 5, 41)
    t = aotgrad.tensor(x, dtype=aotgrad.float64)
    a, s = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    close(F.selu(t), s * np.where(x > 0, x, a * np.expm1(x)), atol=1e-14)
    close(F.celu(t, 2.0), np.maximum(0, x) + np.minimum(0, 2.0 * np.expm1(x / 2.0)), atol=1e-14)
    close(F.hardsigmoid(t), np.clip(x / 6 + 0.5, 0, 1), atol=1e-15)
    close(F.hardswish(t), x * np.clip(x + 3, 0, 6) / 6, atol=1e-15)
    close(F.softsign(t), x / (1 + np.abs(x)), atol=1e-15)
    close(F.tanhshrink(t), x - np.tanh(x), atol=1e-15)
    close(F.hardshrink(t, 1.0), np.where(np.abs(x) > 1.0, x, 0), atol=0)
    close(F.softshrink(t, 1.0), np.sign(x) * np.maximum(np.abs(x) - 1.0, 0), atol=1e-15)
    close(F.threshold(t, 0.5, -9.0), np.where(x > 0.5, x, -9.0), atol=0)
    close(F.rrelu(t, 0.1, 0.3), np.where(x >= 0, x, 0.2 * x), atol=1e-15)
    m = np.arange(12.0).reshape(3, 4) / 5 - 1
    close(F.glu(aotgrad.tensor(m, dtype=aotgrad.float64), 1),
          m[:, :2] / (1 + np.exp(-m[:, 2:])), atol=1e-15)
    sm = np.exp(m).reshape(3, 2, 2, 1)
    close(nn.Softmax2d()(aotgrad.tensor(m.reshape(3, 2, 2, 1), dtype=aotgrad.float64)),
          sm / sm.sum(1, keepdims=True), atol=1e-15)
    # the gradient at the kinks, PyTorch's convention
    k = aotgrad.tensor([-3.0, 3.0, NAN], requires_grad=True)
    F.hardswish(k).sum().backward()
    close(k.grad, [0.0, 1.0, 1.0], atol=0)
    k.grad = None
    F.hardsigmoid(k).sum().backward()
    close(k.grad, [0.0, 0.0, 0.0], atol=0)
    # at NaN: the value is NaN and the gradient that of the identity branch (the slope for
    # the leaky kinds), as PyTorch's scalar loop gives
    nan = aotgrad.tensor([NAN], requires_grad=True)
    for f, g in ((F.celu, 1.0), (F.selu, 1.0507009873554804934193349852946),
                 (F.hardshrink, 1.0), (F.softshrink, 1.0), (F.hardswish, 1.0),
                 (lambda t: F.threshold(t, 0.0, 2.0), 1.0), (lambda t: F.rrelu(t, 0.1, 0.3), 0.2),
                 (lambda t: F.prelu(t, aotgrad.tensor([0.25])), 0.25)):
        nan.grad = None
        y = f(nan)
        y.sum().backward()
        assert np.isnan(_np(y)).all()
        close(nan.grad, [g], atol=1e-7)


@pytest.mark.parametrize("name,call,args", [
    ("relu", "relu_", ()), ("elu", "elu_", (0.5,)), ("leaky_relu", "leaky_relu_", (0.2,)),
    ("hardtanh", "hardtanh_", (-0.5, 0.5)), ("threshold", "threshold_", (0.25, -1.0)),
    ("selu", "selu_", ()), ("celu", "celu_", (0.5,)), ("rrelu", "rrelu_", (0.1, 0.3)),
    ("hardsigmoid", None, ()), ("hardswish", None, ()),
])
def test_inplace_forms_match_torch(torch, name, call, args):
    """F.<name>_(x) and F.<name>(x, ..., inplace=True) write into x, return it, bump its
    version, and give the same gradient as PyTorch through the non-leaf they overwrote."""
    import torch.nn.functional as TF
    x = _data(np.float32, (2, 13))
    for style in ("underscore", "kwarg") if call else ("kwarg",):
        xo, xt = aotgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        ho, ht = xo * 1.5, xt * 1.5
        v0 = int(ho._version)
        if style == "underscore":
            ro, rt = getattr(F, call)(ho, *args), getattr(TF, call)(ht, *args)
        else:
            ro = getattr(F, name)(ho, *args, inplace=True)
            rt = getattr(TF, name)(ht, *args, inplace=True)
        assert ro is ho and rt is ht and ho._version > v0
        close(ho, ht, f"{style} value")
        (ho * ho).sum().backward()
        (ht * ht).sum().backward()
        close(_finite(xo.grad, x), _finite(xt.grad, x), f"{style} grad")


def test_inplace_on_leaf_requiring_grad_raises():
    x = aotgrad.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        F.selu_(x)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        nn.Hardswish(inplace=True)(x)


def test_rrelu_training_draws_slopes():
    """Training mode: each negative element gets its own slope a ~ U(lower, upper) and its
    gradient is that slope; positives pass with gradient 1; eval uses the midpoint."""
    lo, hi = 0.1, 0.3
    x = aotgrad.tensor(-np.linspace(0.5, 2.0, 20000), requires_grad=True)
    y = F.rrelu(x, lo, hi, training=True)
    a = _np(y) / _np(x)
    assert a.min() >= lo and a.max() <= hi
    assert abs(a.mean() - 0.2) < 3e-3 and abs(a.std() - (hi - lo) / math.sqrt(12)) < 3e-3
    y.sum().backward()
    close(x.grad, a, atol=1e-6)
    m = nn.RReLU(lo, hi)
    assert m.training
    p = aotgrad.tensor([1.0, 2.0])
    close(m(p), [1.0, 2.0], atol=0)
    y1, y2 = m(aotgrad.tensor([-1.0] * 50)), m(aotgrad.tensor([-1.0] * 50))
    assert not np.array_equal(_np(y1), _np(y2))  # fresh draws per call
    m.eval()
    close(m(aotgrad.tensor([-1.0])), [-0.2], atol=1e-7)


def test_gumbel_softmax():
    logits = aotgrad.tensor(np.log([0.1, 0.2, 0.3, 0.4]), dtype=aotgrad.float64)
    big = logits.expand(20000, 4)
    y = F.gumbel_softmax(big, tau=0.5)
    close(y.sum(-1), np.ones(20000), atol=1e-12)
    h = F.gumbel_softmax(big, hard=True)
    hv = _np(h)
    assert set(np.unique(hv)) == {0.0, 1.0} and (hv.sum(-1) == 1).all()
    # the argmax of logits + Gumbel noise is a sample of softmax(logits)
    freq = hv.mean(0)
    assert_close(freq, [0.1, 0.2, 0.3, 0.4], rtol=1e-7, atol=0.015, equal_nan=True)
    # straight-through: the hard sample's gradient is the soft sample's (same noise)
    w = aotgrad.tensor(np.random.default_rng(0).standard_normal((5, 4)))
    grads = []
    for hard in (False, True):
        lg = aotgrad.tensor(np.zeros((5, 4)), requires_grad=True)
        aotgrad.manual_seed(7)
        (F.gumbel_softmax(lg, tau=0.7, hard=hard) * w).sum().backward()
        grads.append(_np(lg.grad))
    assert_close(grads[0], grads[1], rtol=1e-7, atol=1e-12, equal_nan=True)
    assert np.abs(grads[0]).max() > 0
    with pytest.warns(UserWarning, match="eps"):
        F.gumbel_softmax(logits, eps=1e-3)


def test_activation_errors(torch):
    with pytest.raises(RuntimeError, match="Halving dimension must be even"):
        F.glu(aotgrad.ones(3))
    with pytest.raises(RuntimeError, match="scalars"):
        F.glu(aotgrad.tensor(1.0))
    with pytest.raises(IndexError, match="Dimension out of range"):
        F.glu(aotgrad.ones(4), dim=2)
    with pytest.raises(RuntimeError, match="channel size"):
        F.prelu(aotgrad.ones(2, 3), aotgrad.ones(2))
    with pytest.raises(RuntimeError, match="channel size = 1"):
        F.prelu(aotgrad.ones(3), aotgrad.ones(3))
    with pytest.raises(RuntimeError, match="scalar or 1D"):
        F.prelu(aotgrad.ones(2, 3), aotgrad.ones(1, 3))
    with pytest.raises(RuntimeError, match="lambda"):
        F.softshrink(aotgrad.ones(2), -1.0)
    with pytest.raises(RuntimeError, match="alpha cannot be 0"):
        F.celu(aotgrad.ones(2), 0.0)
    with pytest.raises(RuntimeError, match="Lower bound"):
        F.rrelu(aotgrad.ones(2), 0.5, 0.2, True)
    with pytest.raises(ValueError, match="expected input to be 3D or 4D, got 2D"):
        nn.Softmax2d()(aotgrad.ones(2, 2))
    # PyTorch raises the same kinds for the same inputs
    import torch.nn.functional as TF
    for bad in (lambda: TF.glu(torch.ones(3)), lambda: TF.prelu(torch.ones(2, 3), torch.ones(2)),
                lambda: TF.celu(torch.ones(2), 0.0)):
        with pytest.raises(RuntimeError):
            bad()


def test_prelu_scalar_and_1d_inputs(torch):
    import torch.nn.functional as TF
    for shape, w in (((), [0.3]), ((5,), [0.3]), ((2, 3), [0.3]), ((2, 3, 2, 2), [0.1, 0.2, 0.3])):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        close(F.prelu(aotgrad.tensor(x), aotgrad.tensor(w)),
              TF.prelu(torch.tensor(x), torch.tensor(w)), str(shape))
    m = nn.PReLU(2, init=0.5, dtype=aotgrad.float64)
    assert m.weight.dtype is aotgrad.float64 and _np(m.weight).tolist() == [0.5, 0.5]
    m.weight.data.fill_(0.0)
    m.reset_parameters()
    assert _np(m.weight).tolist() == [0.5, 0.5]


def test_activation_api_matches_torch(torch):
    """Every activation module and functional form PyTorch has is here, with its signature."""
    import torch.nn.functional as TF
    import torch.nn.modules.activation as TA
    assert [n for n in TA.__all__ if not hasattr(nn, n)] == []
    assert [n for n in TA.__all__ if n not in nn.__all__] == []
    names = ["threshold", "threshold_", "relu", "relu_", "glu", "hardtanh", "hardtanh_",
             "hardswish", "relu6", "elu", "elu_", "selu", "selu_", "celu", "celu_",
             "leaky_relu", "leaky_relu_", "prelu", "rrelu", "rrelu_", "logsigmoid", "gelu",
             "hardshrink", "tanhshrink", "softsign", "softplus", "softmin", "softmax",
             "gumbel_softmax", "log_softmax", "softshrink", "tanh", "sigmoid", "hardsigmoid",
             "silu", "mish"]
    assert [n for n in names if not hasattr(F, n)] == []
    for n in ("threshold", "glu", "hardswish", "selu", "celu", "rrelu", "softsign",
              "tanhshrink", "gumbel_softmax", "hardsigmoid"):
        po = [(p.name, p.default) for p in inspect.signature(getattr(F, n)).parameters.values()]
        pt = [(p.name, p.default) for p in inspect.signature(getattr(TF, n)).parameters.values()]
        assert po == pt, n
    for n in ("Threshold", "RReLU", "Hardsigmoid", "Hardswish", "CELU", "SELU", "GLU",
              "Hardshrink", "Softshrink", "PReLU", "Softsign", "Tanhshrink", "Softmax2d"):
        po = [(p.name, p.default) for p in inspect.signature(getattr(nn, n)).parameters.values()]
        pt = [(p.name, p.default)
              for p in inspect.signature(getattr(torch.nn, n)).parameters.values()]
        assert po == pt, n


@pytest.mark.parametrize("expr", [
    "Threshold(0.1, 20)", "Threshold(0.1, 20.0, True)", "RReLU()", "RReLU(0.1, 0.3, True)",
    "Hardsigmoid()", "Hardsigmoid(True)", "Hardswish(inplace=True)", "CELU()", "CELU(2.0, True)",
    "SELU()", "SELU(True)", "GLU()", "GLU(1)", "Hardshrink()", "Hardshrink(0.3)",
    "Softshrink(0.3)", "PReLU()", "PReLU(3)", "Softsign()", "Tanhshrink()", "Softmax2d()",
])
def test_activation_repr(torch, expr):
    assert repr(eval("nn." + expr, {"nn": nn})) == repr(eval("nn." + expr, {"nn": torch.nn}))


# ---- ParameterDict -----------------------------------------------------------------------------
def test_parameter_dict_registration_and_keys(torch):
    rng = np.random.default_rng(0)
    arrays = {"b": rng.standard_normal(2), "a": rng.standard_normal((2, 3)),
              "c": rng.standard_normal(4)}
    ours = nn.ParameterDict({k: aotgrad.tensor(v) for k, v in arrays.items()})
    theirs = torch.nn.ParameterDict({k: torch.tensor(v) for k, v in arrays.items()})
    assert list(ours.keys()) == list(theirs.keys()) == ["a", "b", "c"]  # a plain dict: sorted
    assert [type(v).__name__ for v in ours.values()] == ["Parameter"] * 3
    assert all(p.requires_grad and p.is_leaf for p in ours.values())
    for k in arrays:
        close(ours[k], arrays[k], k, atol=0)
    # order of an OrderedDict or of pairs is kept
    od = OrderedDict((k, aotgrad.tensor(v)) for k, v in arrays.items())
    assert list(nn.ParameterDict(od)) == ["b", "a", "c"]
    assert list(nn.ParameterDict(list(od.items()))) == ["b", "a", "c"]
    # a parent module sees them under the dict's attribute name
    mo, mt = nn.Module(), torch.nn.Module()
    mo.pd, mt.pd = ours, theirs
    assert [k for k, _ in mo.named_parameters()] == [k for k, _ in mt.named_parameters()]
    assert list(mo.state_dict()) == list(mt.state_dict()) == ["pd.a", "pd.b", "pd.c"]
    assert len(list(mo.parameters())) == 3
    # state dict round trip into a fresh dict of the same keys
    fresh = nn.Module()
    fresh.pd = nn.ParameterDict({k: aotgrad.zeros(*v.shape) for k, v in arrays.items()})
    fresh.load_state_dict(mo.state_dict())
    for k in arrays:  # copied into the float32 parameters, as PyTorch's copy_ does
        close(fresh.pd[k], arrays[k].astype(np.float32), k, atol=0)
    assert repr(ours).replace("aotgrad.", "") == repr(theirs).replace("torch.", "")


def test_parameter_dict_keeps_parameters_and_objects(torch):
    p = nn.Parameter(aotgrad.ones(2), requires_grad=False)
    t = aotgrad.ones(3)
    pd = nn.ParameterDict({"p": p, "t": t, "o": "text"})
    assert pd["p"] is p and not pd["p"].requires_grad  # a Parameter is stored as it is
    assert isinstance(pd["t"], nn.Parameter) and pd["t"].requires_grad
    assert pd["o"] == "text" and [k for k, _ in pd.named_parameters()] == ["p", "t"]
    theirs = torch.nn.ParameterDict({"p": torch.nn.Parameter(torch.ones(2), requires_grad=False),
                                     "t": torch.ones(3), "o": "text"})
    assert repr(pd).replace("aotgrad.", "") == repr(theirs).replace("torch.", "")
    # gradients reach the registered parameters; an optimizer updates them
    loss = (pd["t"] * aotgrad.tensor([1.0, 2.0, 3.0])).sum()
    loss.backward()
    close(pd["t"].grad, [1.0, 2.0, 3.0], atol=0)
    optim.SGD(pd.parameters(), lr=0.5).step()
    close(pd["t"], [0.5, 0.0, -0.5], atol=1e-7)


def test_parameter_dict_dict_api_matches_torch(torch):
    """The same sequence of dict operations on both sides leaves the same keys and shapes."""
    def run(lib, nn_):
        log = []
        pd = nn_.ParameterDict()
        pd["x"] = lib.zeros(2)
        pd.update({"z": lib.zeros(3), "y": lib.zeros(1)})
        pd.update([("w", lib.zeros(4, 1))])
        log.append(list(pd.keys()))
        log.append(tuple(pd.pop("z").shape))
        log.append(("z" in pd, "y" in pd, len(pd)))
        log.append(tuple(pd.setdefault("v", lib.ones(5)).shape))
        log.append(tuple(pd.setdefault("v", lib.ones(7)).shape))
        log.append(pd.get("nope") is None)
        log.append(pd.get("nope", 3))
        log.append(tuple(pd.get("x").shape))
        k, v = pd.popitem()
        log.append((k, tuple(v.shape), list(pd)))
        del pd["x"]
        log.append(list(reversed(pd)))
        c = pd.copy()
        log.append((list(c), all(c[k] is pd[k] for k in c)))
        f = pd.fromkeys(["m", "n"], lib.ones(2))
        log.append((type(f).__name__, list(f), [type(x).__name__ for x in f.values()]))
        u = pd | f
        log.append((list(u), list(pd)))
        r = OrderedDict(q=lib.ones(1)) | pd
        log.append((type(r).__name__, list(r)))
        pd |= f
        log.append(list(pd))
        log.append([(n, tuple(p.shape)) for n, p in pd.named_parameters()])
        pd.clear()
        log.append((len(pd), list(pd.parameters())))
        return log
    assert run(aotgrad, nn) == run(torch, torch.nn)


def test_parameter_dict_errors(torch):
    pd = nn.ParameterDict()
    with pytest.raises(TypeError, match="not a string"):
        pd[1] = aotgrad.ones(1)
    with pytest.raises(TypeError, match="iterable"):
        pd.update(3)
    with pytest.raises(TypeError, match="element #0 should be Iterable"):
        pd.update([3])
    with pytest.raises(ValueError, match="element #1 has length 3"):
        pd.update([("a", aotgrad.ones(1)), ("b", 1, 2)])
    with pytest.raises(KeyError):
        pd.update({"a.b": aotgrad.ones(1)})  # a parameter name cannot hold a dot
    with pytest.raises(RuntimeError, match="should not be called"):
        pd()
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        pd["missing"]
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        torch.nn.ParameterDict()["missing"]
    with pytest.raises(KeyError):
        nn.ParameterDict().popitem()
    for bad in (lambda: torch.nn.ParameterDict().__setitem__(1, torch.ones(1)),
                lambda: torch.nn.ParameterDict().update(3)):
        with pytest.raises(TypeError):
            bad()


def test_parameter_dict_pickles():
    pd = nn.ParameterDict({"a": aotgrad.tensor([1.0, 2.0])})
    back = pickle.loads(pickle.dumps(pd))
    assert list(back) == ["a"] and isinstance(back["a"], nn.Parameter)
    close(back["a"], [1.0, 2.0], atol=0)


def test_new_activations_and_parameter_dict_trace():
    """The new layers are plain op compositions: traced by aotgrad.compile (reference
    backend) they give eager's loss and gradients, ParameterDict parameters included."""
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, 6), nn.PReLU(6), nn.Hardswish(),
                                      nn.Linear(6, 6), nn.SELU(), nn.GLU(), nn.Softshrink(0.1),
                                      nn.CELU(0.5), nn.Threshold(-0.2, -1.0),
                                      nn.Hardsigmoid())
            self.extra = nn.ParameterDict({"scale": aotgrad.ones(3) * 1.5,
                                           "shift": aotgrad.zeros(3)})

        def forward(self, x):
            h = self.body(x) * self.extra["scale"] + self.extra["shift"]
            return (F.softsign(h) + F.tanhshrink(h) + F.hardshrink(h, 0.3)).pow(2).sum()

    net = Net()
    x = aotgrad.tensor(np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32),
                       requires_grad=True)
    eager = net(x)
    eager.backward()
    ref = [_np(x.grad).copy()] + [_np(p.grad).copy() for p in net.parameters()]
    x.grad = None
    net.zero_grad()
    compiled = aotgrad.compile(net.forward, backend="interpret")(x)
    compiled.backward()
    got = [_np(x.grad)] + [_np(p.grad) for p in net.parameters()]
    assert float(compiled) == pytest.approx(float(eager), rel=1e-6)
    assert len(got) == 8  # x, 2 Linear x (weight, bias), PReLU's weight, scale, shift
    for a, b in zip(got, ref):
        assert np.abs(b).max() > 1e-3  # every gradient is non-trivial
        assert_close(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
