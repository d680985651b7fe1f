"""Closed-form checks (no PyTorch needed) of the nn, optim and autograd behaviours that the
PyTorch conformance tests found wrong and that were fixed."""
import math

import numpy as np
import pytest

import aotgrad
import aotgrad.autograd.functional as AF
from aotgrad import nn, optim
from aotgrad.testing import assert_close


# ---- module hooks ----------------------------------------------------------------------------
def test_same_hook_function_registered_twice_runs_twice_and_handles_are_separate():
    m, log = nn.Identity(), []

    def hook(mod, args, out):
        log.append(1)
    h1 = m.register_forward_hook(hook)
    m.register_forward_hook(hook)
    m(aotgrad.ones(1))
    assert log == [1, 1]
    h1.remove()
    m(aotgrad.ones(1))
    assert log == [1, 1, 1]


def test_hook_prepend_with_kwargs_and_always_call():
    m, log = nn.Linear(2, 3), []
    m.register_forward_hook(lambda mod, a, o: log.append("second"))
    m.register_forward_hook(lambda mod, a, o: log.append("first"), prepend=True)
    m.register_forward_pre_hook(
        lambda mod, args, kwargs: ((aotgrad.zeros(4, 2),), {}), with_kwargs=True)
    m.register_forward_hook(lambda mod, a, kw, o: log.append(tuple(o.shape)), with_kwargs=True)
    y = m(input=aotgrad.ones(1, 2))
    assert log == ["first", "second", (4, 3)]
    assert tuple(y.shape) == (4, 3)

    class Boom(nn.Module):
        def forward(self, x):
            raise ValueError("boom")
    b, seen = Boom(), []
    b.register_forward_hook(lambda mod, a, o: seen.append(o), always_call=True)
    b.register_forward_hook(lambda mod, a, o: seen.append("not always"))
    with pytest.raises(ValueError, match="boom"):
        b(aotgrad.ones(1))
    assert seen == [None]


def test_modules_remove_duplicate_false():
    lin = nn.Linear(1, 1)
    s = nn.Sequential(lin, lin)
    assert len(list(s.modules())) == 2
    assert len(list(s.modules(remove_duplicate=False))) == 3


# ---- state dicts -----------------------------------------------------------------------------
def test_load_state_dict_lists_missing_keys_before_unexpected_ones():
    m = nn.Linear(2, 2)
    sd = {"bias": aotgrad.zeros(2), "extra": aotgrad.zeros(1)}
    with pytest.raises(RuntimeError) as e:
        m.load_state_dict(sd)
    msg = str(e.value)
    assert msg.index('Missing key(s) in state_dict: "weight"') < \
        msg.index('Unexpected key(s) in state_dict: "extra"')
    with pytest.raises(RuntimeError, match="expected aotgrad.Tensor or Tensor-like object from "
                                           "checkpoint but received <class 'str'>"):
        m.load_state_dict({"weight": "abc", "bias": aotgrad.zeros(2)})


def test_extra_state_is_saved_and_restored():
    class Counter(nn.Module):
        def __init__(self, seen):
            super().__init__()
            self.lin, self.seen = nn.Linear(1, 1), seen

        def get_extra_state(self):
            return {"seen": self.seen}

        def set_extra_state(self, state):
            self.seen = state["seen"]
    src, dst = nn.Sequential(Counter(7)), nn.Sequential(Counter(0))
    sd = src.state_dict()
    assert list(sd) == ["0._extra_state", "0.lin.weight", "0.lin.bias"]
    dst.load_state_dict(sd)
    assert dst[0].seen == 7
    del sd["0._extra_state"]
    with pytest.raises(RuntimeError, match='Missing key.*"0._extra_state"'):
        dst.load_state_dict(sd)
    assert dst.load_state_dict(sd, strict=False).missing_keys == ["0._extra_state"]
    assert "_extra_state" not in nn.Linear(1, 1).state_dict()


# ---- containers ------------------------------------------------------------------------------
@pytest.mark.parametrize("index,order", [(0, "SRT"), (1, "RST"), (2, "RTS"), (-1, "RST"),
                                         (-2, "SRT")])
def test_sequential_insert_uses_list_semantics(index, order):
    s = nn.Sequential(nn.ReLU(), nn.Tanh())
    s.insert(index, nn.Sigmoid())
    assert "".join(type(m).__name__[0] for m in s) == order
    assert list(s._modules) == ["0", "1", "2"]


@pytest.mark.parametrize("index", [3, -3])
def test_sequential_insert_out_of_range(index):
    with pytest.raises(IndexError, match=f"Index out of range: {index}"):
        nn.Sequential(nn.ReLU(), nn.Tanh()).insert(index, nn.Sigmoid())


def test_parameter_list_setitem_extend_slice_and_repr():
    pl = nn.ParameterList([aotgrad.zeros(2, 3)])
    pl.extend([aotgrad.ones(2)])
    pl[0] = aotgrad.full((4,), 2.0)
    assert [type(p).__name__ for p in pl] == ["Parameter", "Parameter"]
    assert [tuple(p.shape) for p in pl] == [(4,), (2,)]
    assert float(pl[0].sum()) == 8.0 and pl[0].requires_grad
    assert len(pl[1:]) == 1 and pl[1:][0] is pl[1]
    assert repr(pl) == ("ParameterList(\n"
                        "    (0): Parameter containing: [aotgrad.float32 of size 4]\n"
                        "    (1): Parameter containing: [aotgrad.float32 of size 2]\n)")


# ---- layers ----------------------------------------------------------------------------------
@pytest.mark.parametrize("module,text", [
    (lambda: nn.LayerNorm(4), "LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)"),
    (lambda: nn.LayerNorm(4, elementwise_affine=False),
     "LayerNorm((4,), eps=1e-05, elementwise_affine=False, bias=False)"),
    (lambda: nn.BatchNorm1d(3, bias=False),
     "BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, bias=False, "
     "track_running_stats=True)"),
    (lambda: nn.Conv2d(2, 2, 3, padding="same"),
     "Conv2d(2, 2, kernel_size=(3, 3), stride=(1, 1), padding=same)"),
    (lambda: nn.Hardtanh(-2.0, 2.0, True), "Hardtanh(min_val=-2.0, max_val=2.0, inplace=True)"),
    (lambda: nn.Embedding(10, 3, max_norm=1.0, norm_type=1.0),
     "Embedding(10, 3, max_norm=1.0, norm_type=1.0)"),
    (lambda: nn.MaxPool1d(2), "MaxPool1d(kernel_size=2, stride=2, padding=0, dilation=1, "
                              "ceil_mode=False)"),
    (lambda: nn.AvgPool1d(3), "AvgPool1d(kernel_size=(3,), stride=(3,), padding=(0,))"),
])
def test_layer_reprs(module, text):
    assert repr(module()) == text


def test_batch_norm_without_bias_is_scaled_normalisation():
    bn = nn.BatchNorm1d(2, bias=False)
    assert [k for k, _ in bn.named_parameters()] == ["weight"] and bn.bias is None
    with aotgrad.no_grad():
        bn.weight.copy_(aotgrad.tensor([2.0, -1.0]))
    x = np.array([[1.0, 2.0], [3.0, 7.0], [0.0, 1.0]], dtype=np.float32)
    y = bn(aotgrad.tensor(x)).detach().numpy()
    ref = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5) * np.array([2.0, -1.0])
    assert_close(y, ref, rtol=1e-5, atol=1e-6, equal_nan=True, check_dtype=False)


def test_max_pool1d_return_indices():
    x = aotgrad.tensor([[[1.0, 5.0, 2.0, 2.0, 9.0, 0.0, 3.0]]])
    out, idx = nn.MaxPool1d(3, 2, return_indices=True)(x)
    assert out.tolist() == [[[5.0, 9.0, 9.0]]]
    assert idx.tolist() == [[[1, 4, 4]]] and idx.dtype == aotgrad.int64
    out, idx = aotgrad.nn.functional.max_pool1d(x[0], 2, return_indices=True)
    assert idx.tolist() == [[1, 2, 4]]


# ---- optim -----------------------------------------------------------------------------------
def test_param_groups_carry_pytorch_implementation_flags_and_repr_layout():
    p, q = nn.Parameter(aotgrad.ones(1)), nn.Parameter(aotgrad.ones(1))
    sgd = optim.SGD([p], lr=0.1)
    assert {k: sgd.param_groups[0][k] for k in ("foreach", "differentiable", "fused")} == \
        {"foreach": None, "differentiable": False, "fused": None}
    adam = optim.AdamW([q])
    assert adam.param_groups[0]["capturable"] is False
    sgd.add_param_group({"params": [q]})
    assert "weight_decay: 0\n\nParameter Group 1\n" in repr(sgd)


@pytest.mark.parametrize("make,expected", [
    (lambda S, o: S.ExponentialLR(o, 0.5, last_epoch=4), [1.0, 0.5, 0.25]),
    # cosine: the constructor's step takes last_epoch to 5 and keeps lr 1.0; the next step is
    # the recursive update to epoch 6
    (lambda S, o: S.CosineAnnealingLR(o, 10, last_epoch=4),
     [1.0, (1 + math.cos(math.pi * 6 / 10)) / (1 + math.cos(math.pi * 5 / 10))]),
])
def test_resumed_scheduler_does_not_move_the_lr_on_construction(make, expected):
    opt = optim.SGD([nn.Parameter(aotgrad.ones(1))], lr=1.0)
    opt.param_groups[0]["initial_lr"] = 1.0
    s = make(optim.lr_scheduler, opt)
    got = [s.get_last_lr()[0]]
    for _ in range(len(expected) - 1):
        opt.step()
        s.step()
        got.append(s.get_last_lr()[0])
    assert_close(got, expected, rtol=1e-12, atol=0, equal_nan=True)


# ---- autograd extras -------------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda: AF.hessian(lambda x: x.sum() * 2, aotgrad.ones(3, dtype=aotgrad.float64),
                       strict=True),
    lambda: AF.hvp(lambda x: x.sum(), aotgrad.ones(3), aotgrad.ones(3), strict=True,
                   create_graph=True),
    lambda: AF.vhp(lambda x: x.sum(), aotgrad.ones(3), aotgrad.ones(3), strict=True),
])
def test_strict_second_order_of_a_linear_function(call):
    with pytest.raises(RuntimeError, match="While computing the hessian, found that the "
                                           "jacobian of the user-provided function with respect "
                                           "to input 0 is independent of the input"):
        call()


def test_hessian_non_strict_of_linear_function_is_zero():
    h = AF.hessian(lambda x: x.sum() * 2, aotgrad.ones(3, dtype=aotgrad.float64))
    assert h.tolist() == [[0.0] * 3] * 3


def test_profiler_formatted_times_and_top_level_anomaly_flags():
    x = aotgrad.ones(3, requires_grad=True)
    with aotgrad.autograd.profiler.profile() as prof:
        (x * 2).sum().backward()
    for e in list(prof.key_averages()) + list(prof.function_events):
        assert e.cpu_time_total_str == aotgrad.autograd.profiler._format_time(e.cpu_time_total)
        assert e.self_cpu_time_total_str.endswith("s")
        assert e.cpu_time_str.endswith("s")
    assert aotgrad.is_anomaly_enabled() is False
    with aotgrad.autograd.detect_anomaly(check_nan=False):
        assert aotgrad.is_anomaly_enabled() and not aotgrad.is_anomaly_check_nan_enabled()
