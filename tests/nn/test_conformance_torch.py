"""Conformance of nn modules against PyTorch: constructor signatures, every exported module
(same seeded weights copied into both libraries, same inputs, then values and gradients),
reprs, state dicts, traversal, modes and hooks. Losses, optim, lr schedulers and the
autograd extras are in test_conformance_torch_train.py. Every test takes the `torch`
fixture, so the file skips where PyTorch is not installed."""
import inspect
import math

import numpy as np
import pytest

import aotgrad
import aotgrad.autograd.functional as AF
from aotgrad import nn, optim

from torch_compare import close, error_text, normal, same_text, to_numpy

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


# ---- constructor signatures ------------------------------------------------------------------
_SIG_EXEMPT = {"Parameter"}   # torch's is (*args, **kwargs)


def _params(fn):
    """(name, default, kind) of each parameter; a function default (Transformer's
    activation=F.relu) compares by its name, as each library has its own F.relu."""
    return [(p.name, p.default.__name__ if inspect.isfunction(p.default) else p.default,
             p.kind) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("name", sorted(set(nn.__all__) - {"functional", "init", "utils"}))
def test_module_constructor_signature(torch, name):
    ours, theirs = getattr(nn, name), getattr(torch.nn, name)
    if name in _SIG_EXEMPT:
        return
    po, pt = _params(ours.__init__), _params(theirs.__init__)
    if name == "Hardtanh":  # PyTorch's deprecated min_value/max_value aliases are left out
        pt = [p for p in pt if p[0] not in ("min_value", "max_value")]
    assert po == pt


def _api_pairs(torch):
    pairs = [(f"optim.{n}", getattr(optim, n).__init__, getattr(torch.optim, n).__init__)
             for n in ("SGD", "Adam", "AdamW")]
    pairs += [(f"lr_scheduler.{n}", getattr(optim.lr_scheduler, n).__init__,
               getattr(torch.optim.lr_scheduler, n).__init__)
              for n in optim.lr_scheduler.__all__]
    pairs += [(f"functional.{n}", getattr(AF, n), getattr(torch.autograd.functional, n))
              for n in AF.__all__]
    pairs += [(n, getattr(aotgrad.autograd, n), getattr(torch.autograd, n))
              for n in ("gradcheck", "gradgradcheck")]
    pairs += [(f"Module.{n}", getattr(nn.Module, n), getattr(torch.nn.Module, n))
              for n in ("state_dict", "load_state_dict", "named_parameters", "named_buffers",
                        "named_modules", "modules", "register_buffer", "zero_grad", "train",
                        "apply", "register_forward_hook", "register_forward_pre_hook",
                        "requires_grad_", "get_submodule", "add_module",
                        "register_parameter")]
    pairs += [(f"Optimizer.{n}", getattr(optim.Optimizer, n), getattr(torch.optim.Optimizer, n))
              for n in ("zero_grad", "add_param_group", "state_dict", "load_state_dict")]
    pairs += [(f"init.{n}", getattr(nn.init, n), getattr(torch.nn.init, n))
              for n in nn.init.__all__]
    pairs += [(f"utils.{n}", getattr(nn.utils, n), getattr(torch.nn.utils, n))
              for n in ("clip_grad_norm_", "clip_grad_value_", "parameters_to_vector",
                        "vector_to_parameters")]
    return pairs


def test_api_signatures(torch):
    bad = [name for name, o, t in _api_pairs(torch) if _params(o) != _params(t)]
    assert bad == []


# ---- every exported module: same weights, same outputs and gradients ------------------------
def _mods(lib_nn):
    n = lib_nn
    return {
        "Identity": (lambda: n.Identity(), [(3, 4)]),
        "Linear": (lambda: n.Linear(4, 3), [(2, 4)]),
        "Linear_nobias": (lambda: n.Linear(4, 3, bias=False), [(2, 5, 4)]),
        "Bilinear": (lambda: n.Bilinear(3, 2, 4), [(5, 3), (5, 2)]),
        "Flatten": (lambda: n.Flatten(), [(2, 3, 4)]),
        "Flatten02": (lambda: n.Flatten(0, 2), [(2, 3, 4, 2)]),
        "Unflatten": (lambda: n.Unflatten(1, (2, 3)), [(4, 6)]),
        "Conv1d": (lambda: n.Conv1d(3, 4, 3, stride=2, padding=1, dilation=1), [(2, 3, 9)]),
        "Conv2d": (lambda: n.Conv2d(4, 6, (3, 2), padding=(1, 0), groups=2), [(2, 4, 6, 5)]),
        "Conv2d_same": (lambda: n.Conv2d(2, 3, 3, padding="same", dilation=2), [(1, 2, 7, 7)]),
        "MaxPool1d": (lambda: n.MaxPool1d(3, 2, padding=1), [(2, 3, 10)]),
        "MaxPool2d": (lambda: n.MaxPool2d(3, 2, 1, ceil_mode=True), [(2, 2, 7, 8)]),
        "AvgPool1d": (lambda: n.AvgPool1d(3, 2, 1, count_include_pad=False), [(2, 3, 10)]),
        "AvgPool2d": (lambda: n.AvgPool2d(2, padding=1), [(2, 2, 5, 6)]),
        "AdaptiveAvgPool2d": (lambda: n.AdaptiveAvgPool2d((2, 3)), [(2, 2, 4, 6)]),
        "LayerNorm": (lambda: n.LayerNorm((3, 4)), [(2, 3, 4)]),
        "LayerNorm_nobias": (lambda: n.LayerNorm(4, bias=False), [(3, 4)]),
        "LayerNorm_noaffine": (lambda: n.LayerNorm(4, elementwise_affine=False), [(3, 4)]),
        "RMSNorm": (lambda: n.RMSNorm(4, eps=1e-6), [(3, 4)]),
        "BatchNorm1d": (lambda: n.BatchNorm1d(3), [(5, 3)]),
        "BatchNorm1d_3d": (lambda: n.BatchNorm1d(3, momentum=None), [(4, 3, 2)]),
        "BatchNorm1d_nobias": (lambda: n.BatchNorm1d(3, bias=False), [(5, 3)]),
        "BatchNorm2d": (lambda: n.BatchNorm2d(2, affine=False), [(3, 2, 3, 3)]),
        "Dropout_p0": (lambda: n.Dropout(0.0), [(3, 4)]),
        "ReLU": (lambda: n.ReLU(), [(3, 4)]),
        "ReLU6": (lambda: n.ReLU6(), [(3, 4)]),
        "LeakyReLU": (lambda: n.LeakyReLU(0.2), [(3, 4)]),
        "ELU": (lambda: n.ELU(0.7), [(3, 4)]),
        "GELU": (lambda: n.GELU(), [(3, 4)]),
        "GELU_tanh": (lambda: n.GELU("tanh"), [(3, 4)]),
        "SiLU": (lambda: n.SiLU(), [(3, 4)]),
        "Mish": (lambda: n.Mish(), [(3, 4)]),
        "Softplus": (lambda: n.Softplus(2.0, 3.0), [(3, 4)]),
        "Hardtanh": (lambda: n.Hardtanh(-0.5, 0.8), [(3, 4)]),
        "Tanh": (lambda: n.Tanh(), [(3, 4)]),
        "Sigmoid": (lambda: n.Sigmoid(), [(3, 4)]),
        "LogSigmoid": (lambda: n.LogSigmoid(), [(3, 4)]),
        "Softmax": (lambda: n.Softmax(dim=0), [(3, 4)]),
        "LogSoftmax": (lambda: n.LogSoftmax(dim=-1), [(3, 4)]),
        "Softmin": (lambda: n.Softmin(dim=1), [(3, 4)]),
        "Sequential": (lambda: n.Sequential(n.Linear(4, 5), n.Tanh(), n.LayerNorm(5),
                                            n.Linear(5, 2)), [(3, 4)]),
        "MultiheadAttention": (lambda: n.MultiheadAttention(8, 2, batch_first=True),
                               [(2, 3, 8)] * 3),
    }


@pytest.mark.parametrize("name", sorted(_mods(nn)))
def test_module_forward_and_gradients(torch, name):
    make_o, shapes = _mods(nn)[name]
    make_t, _ = _mods(torch.nn)[name]
    torch.manual_seed(0)
    theirs, ours = make_t(), make_o()
    # names, order and shapes of parameters and state dict entries agree
    assert [(k, tuple(v.shape)) for k, v in ours.named_parameters()] == \
        [(k, tuple(v.shape)) for k, v in theirs.named_parameters()]
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: aotgrad.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    xs = [normal(*s, seed=i) * 2 for i, s in enumerate(shapes)]
    xo = [aotgrad.tensor(x, requires_grad=True) for x in xs]
    xt = [torch.tensor(x, requires_grad=True) for x in xs]
    yo, yt = ours(*xo), theirs(*xt)
    if isinstance(yt, tuple):
        yo, yt = yo[0], yt[0]
    close(yo, yt, "output")
    g = normal(*yt.shape, seed=9)
    (yo * aotgrad.tensor(g)).sum().backward()
    (yt * torch.tensor(g)).sum().backward()
    for i, (a, b) in enumerate(zip(xo, xt)):
        close(a.grad, b.grad, f"grad of input {i}")
    theirs_p = dict(theirs.named_parameters())
    for k, p in ours.named_parameters():
        close(p.grad, theirs_p[k].grad, f"grad of {k}")
    for k, b in theirs.named_buffers():  # running stats after one training step
        close(ours.get_buffer(k), b, f"buffer {k}")


# ---- reprs -----------------------------------------------------------------------------------
REPRS = [
    "Linear(3, 4)", "Linear(3, 4, bias=False)", "Bilinear(2, 3, 4)", "Conv2d(3, 4, 3)",
    "Conv2d(3, 4, (3, 2), stride=2, padding=1, dilation=2, bias=False)",
    "Conv2d(4, 4, 3, padding='same', groups=2)", "Conv1d(3, 4, 3, padding=2)", "Dropout()",
    "Dropout(0.2, inplace=True)", "ReLU()", "ReLU(inplace=True)", "ReLU6(True)", "LeakyReLU()",
    "LeakyReLU(0.2, True)", "ELU()", "GELU()", "GELU('tanh')", "SiLU()", "Mish()", "Softplus()",
    "Hardtanh()", "Hardtanh(-2.0, 2.0, True)", "Tanh()", "Sigmoid()", "LogSigmoid()",
    "Softmax(dim=1)", "Softmax()", "LogSoftmax(1)", "Softmin(0)", "LayerNorm(4)",
    "LayerNorm((3, 4), elementwise_affine=False)", "LayerNorm(4, bias=False)", "RMSNorm(4)",
    "RMSNorm(4, eps=1e-6)", "BatchNorm1d(3)", "BatchNorm1d(3, bias=False)",
    "BatchNorm2d(3, momentum=None, affine=False)", "Embedding(10, 3)",
    "Embedding(10, 3, padding_idx=0)", "Embedding(10, 3, max_norm=1.0, norm_type=1.0)",
    "MaxPool2d(2)", "MaxPool2d(3, 2, 1)", "AvgPool2d(2)", "AvgPool2d(3, 2, 1)", "MaxPool1d(2)",
    "AvgPool1d(3)", "AdaptiveAvgPool2d(1)", "AdaptiveAvgPool2d((2, 3))", "Flatten()",
    "Unflatten(1, (2, 3))", "Identity()", "MSELoss()", "CrossEntropyLoss()", "NLLLoss()",
    "BCELoss()", "BCEWithLogitsLoss()", "KLDivLoss()", "HuberLoss()", "SmoothL1Loss()",
    "L1Loss()", "MultiheadAttention(8, 2)",
    "Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Sequential(nn.Tanh()))",
    "ModuleList([nn.Linear(2, 3), nn.ReLU()])", "ModuleDict({'a': nn.Linear(2, 3)})",
    "ParameterList([nn.Parameter(lib.zeros(2, 3)), nn.Parameter(lib.zeros(2))])",
]


@pytest.mark.parametrize("expr", REPRS)
def test_module_repr(torch, expr):
    ours = eval("nn." + expr, {"nn": nn, "lib": aotgrad})
    theirs = eval("nn." + expr, {"nn": torch.nn, "lib": torch})
    assert same_text(repr(ours), repr(theirs))


# ---- state dicts, traversal, modes, hooks ----------------------------------------------------
def _net(lib, n):
    m = n.Sequential(n.Linear(2, 3), n.BatchNorm1d(3), n.Sequential(n.ReLU(), n.Linear(3, 1)))
    m.register_buffer("scratch", lib.zeros(2), persistent=False)
    m.register_buffer("count", lib.zeros(1))
    return m


def test_traversal_orders_and_names(vs_torch):
    def f(lib, n):
        m = _net(lib, n)
        shared = n.Linear(1, 1)
        s = n.Sequential(shared, shared)
        order = []
        m.apply(lambda mod: order.append(type(mod).__name__))
        return ([k for k, _ in m.named_parameters()], [k for k, _ in m.named_buffers()],
                list(m.state_dict()), [k for k, _ in m.named_modules()],
                [k for k, _ in m.named_children()], [type(x).__name__ for x in m.modules()],
                order, len(list(s.children())), len(list(s.modules())),
                len(list(s.modules(remove_duplicate=False))), len(list(s.parameters())),
                list(s.state_dict()), [k for k, _ in m.named_parameters(prefix="p")],
                [k for k, _ in m[2].named_parameters(recurse=False)])
    ours, theirs = vs_torch.both(f)
    assert ours == theirs


@pytest.mark.parametrize("case", ["missing_unexpected", "size", "ok", "bad_type"])
@pytest.mark.parametrize("strict", [True, False])
def test_load_state_dict_results_and_messages(vs_torch, case, strict):
    def f(lib, n):
        m = _net(lib, n)
        sd = m.state_dict()
        if case == "missing_unexpected":
            del sd["0.weight"], sd["1.num_batches_tracked"]
            sd["zzz"] = lib.zeros(1)
            sd["scratch"] = lib.ones(2)   # a non-persistent buffer is unexpected
        elif case == "size":
            sd["0.bias"] = lib.zeros(5)
        elif case == "bad_type":
            sd["0.bias"] = "abc"
        out = []
        msg = error_text(lambda: out.append(m.load_state_dict(sd, strict=strict)))
        res = out[0] if out else None
        return msg, None if res is None else (res.missing_keys, res.unexpected_keys, str(res))
    (mo, ro), (mt, rt) = vs_torch.both(f)
    assert ro == rt
    assert (mo is None) == (mt is None)
    if mo is not None:
        assert same_text(mo, mt)


def test_extra_state_and_assign(vs_torch):
    def f(lib, n):
        class Counter(n.Module):
            def __init__(self):
                super().__init__()
                self.lin, self.seen = n.Linear(1, 1), 3

            def get_extra_state(self):
                return {"seen": self.seen}

            def set_extra_state(self, state):
                self.seen = state["seen"]
        a, b = n.Sequential(Counter()), n.Sequential(Counter())
        b[0].seen = 7
        sd = b.state_dict()
        r = a.load_state_dict(sd)
        del sd["0._extra_state"]
        missing = a.load_state_dict(sd, strict=False).missing_keys
        lin = n.Linear(2, 2)
        lin.load_state_dict({"weight": lib.ones(2, 2), "bias": lib.zeros(2)}, assign=True)
        return (list(b.state_dict()), a[0].seen, str(r), missing, type(lin.weight).__name__,
                lin.weight.requires_grad, float(lin.weight.sum()))
    ours, theirs = vs_torch.both(f)
    assert ours == theirs


def test_train_eval_dropout_batchnorm_layernorm(vs_torch):
    def f(lib, n):
        lib.manual_seed(0)
        m = _net(lib, n)
        m.eval()
        flags = [x.training for x in m.modules()]
        m[2].train()
        flags2 = [x.training for x in m.modules()]
        d = n.Dropout(0.5).eval()
        x = lib.tensor(normal(4, 3) * 3)
        stats = []
        for mom in (0.1, None):
            bn = n.BatchNorm1d(3, momentum=mom)
            for i in range(3):
                bn(x * (i + 1) + i)
            bn.eval()
            y = bn(x)
            stats.append(np.concatenate([to_numpy(bn.running_mean), to_numpy(bn.running_var),
                                         to_numpy(y).ravel()]).round(4).tolist())
            stats.append(int(bn.num_batches_tracked))
        nt = n.BatchNorm1d(3, track_running_stats=False).eval()
        ln = n.LayerNorm(3, elementwise_affine=False)
        return (flags, flags2, to_numpy(d(x)).tolist(), stats, nt.running_mean,
                list(nt.state_dict()), np.round(to_numpy(nt(x)), 4).tolist(), ln.weight, ln.bias,
                list(ln.state_dict()), np.round(to_numpy(ln(x)), 4).tolist(),
                to_numpy(n.Dropout(1.0)(x)).tolist())
    ours, theirs = vs_torch.both(f)
    assert ours == theirs


def test_dropout_training_scale_and_mask_gradient(vs_torch):
    def f(lib, n):
        lib.manual_seed(0)
        x = lib.ones(20000, requires_grad=True)
        y = n.Dropout(0.25)(x)
        y.sum().backward()
        v = to_numpy(y)
        return (sorted(set(np.round(v, 5).tolist())), abs(float((v == 0).mean()) - 0.25) < 0.02,
                bool(((to_numpy(x.grad) == 0) == (v == 0)).all()))
    ours, theirs = vs_torch.both(f)
    assert ours == theirs


def test_zero_grad_and_requires_grad(vs_torch):
    def f(lib, n):
        m = n.Linear(2, 2)
        m(lib.ones(1, 2)).sum().backward()
        m.zero_grad()
        after_default = m.weight.grad
        m(lib.ones(1, 2)).sum().backward()
        m.zero_grad(set_to_none=False)
        m.requires_grad_(False)
        return after_default, to_numpy(m.weight.grad).tolist(), [p.requires_grad for p in
                                                            m.parameters()]
    ours, theirs = vs_torch.both(f)
    assert ours == theirs


def test_forward_hooks(vs_torch):
    def f(lib, n):
        m, log = n.Linear(2, 2), []
        hook = lambda mod, args, out: log.append(("post", tuple(out.shape)))  # noqa: E731
        h1 = m.register_forward_hook(hook)
        m.register_forward_hook(hook)          # the same function twice runs twice
        m.register_forward_hook(lambda mod, a, o: log.append("first"), prepend=True)
        m.register_forward_pre_hook(lambda mod, args: log.append(("pre", len(args))))
        m.register_forward_pre_hook(lambda mod, args, kw: log.append(sorted(kw)) or
                                    ((lib.ones(3, 2),), {}), with_kwargs=True)
        m.register_forward_hook(lambda mod, a, kw, o: log.append(("kw", len(a))),
                                with_kwargs=True)
        m(input=lib.ones(1, 2))
        h1.remove()
        m(lib.ones(1, 2))
        ident = n.Identity()
        ident.register_forward_pre_hook(lambda mod, a: a[0] * 2)
        ident.register_forward_hook(lambda mod, a, o: o + 1)
        return log, to_numpy(ident(lib.ones(2))).tolist()
    ours, theirs = vs_torch.both(f)
    assert ours == theirs


def test_containers(vs_torch):
    def f(lib, n):
        names = lambda m: [type(x).__name__ for x in m]  # noqa: E731
        out = []
        for idx in (2, 1, 0, -1, -2, 3, -3):
            s = n.Sequential(n.ReLU(), n.Tanh())
            out.append(error_text(lambda: s.insert(idx, n.Sigmoid())) or names(s))
        s = n.Sequential(n.ReLU(), n.Tanh(), n.Sigmoid())
        del s[0]
        out += [list(s._modules), names(s[1:]), len(s + s)]
        pl = n.ParameterList([n.Parameter(lib.zeros(1))])
        pl.append(lib.ones(2))
        pl.extend([lib.ones(3)])
        pl[0] = n.Parameter(lib.ones(4))
        out += [[type(p).__name__ for p in pl], [tuple(p.shape) for p in pl], len(pl[1:]),
                [k for k, _ in pl.named_parameters()]]
        d = n.ModuleDict({"b": n.ReLU(), "a": n.Tanh()})
        out += [list(d.keys()), type(d.pop("b")).__name__, len(d)]
        return out
    ours, theirs = vs_torch.both(f)
    assert ours == theirs


@pytest.mark.parametrize("make", [
    lambda n: n.Linear(300, 40), lambda n: n.Conv2d(6, 32, 3), lambda n: n.Conv1d(8, 40, 5),
    lambda n: n.Bilinear(30, 20, 50), lambda n: n.Linear(2, 300),
])
def test_default_init_bounds(torch, make):
    """kaiming_uniform_(a=sqrt(5)) weights: bound sqrt(6 / ((1 + 5) fan_in)) = 1/sqrt(fan_in),
    biases U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the draws differ, the bounds must not."""
    for m in (make(nn), make(torch.nn)):
        fan_in = int(np.prod(m.weight.shape[1:])) if type(m).__name__ != "Bilinear" else \
            m.weight.shape[1]
        bound = 1 / math.sqrt(fan_in)
        for p in (m.weight, m.bias):
            v = np.abs(to_numpy(p))
            assert v.max() <= bound * (1 + 1e-6)
            if v.size > 200:
                assert v.max() > 0.95 * bound and abs(v.mean() - bound / 2) < 0.05 * bound
