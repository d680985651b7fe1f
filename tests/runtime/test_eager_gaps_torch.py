"""Eager-mode corners checked against PyTorch: in-place ops whose operand requires grad on a
tensor that does not, in-place ops on views of expanded tensors, nn.init on inference
tensors, and binary_cross_entropy's gradient in the target at saturated inputs.

Each `_case(M)` builds the same computation with M = aotgrad or torch; `_same` (from
torch_compare.py) runs both and compares the results, or the error class and text.
"""

import numpy as np
import pytest

import aotgrad
from aotgrad import nn
from aotgrad.testing import assert_close



def _name(t):
    return None if t.grad_fn is None else t.grad_fn.name().replace("torch::autograd::", "")


def _grad(t):
    return None if t is None else t.grad


# ---- 1. in-place op with an operand that requires grad ------------------------------------
_BINARY = {
    "mul_": lambda x, w: x.mul_(w), "div_": lambda x, w: x.div_(w),
    "add_": lambda x, w: x.add_(w), "sub_": lambda x, w: x.sub_(w),
    "pow_": lambda x, w: x.pow_(w), "imul": lambda x, w: x.__imul__(w),
    "itruediv": lambda x, w: x.__itruediv__(w),
}


@pytest.mark.parametrize("x_kind", ["plain", "nonleaf"])
@pytest.mark.parametrize("opname", list(_BINARY))
def test_inplace_op_with_grad_operand(vs_torch, opname, x_kind):
    def case(M):
        leaf = None
        if x_kind == "plain":
            x = M.tensor([1.5, 2.])
        else:
            leaf = M.tensor([1.5, 2.], requires_grad=True)
            x = leaf * 1
        w = M.tensor([2., 3.], requires_grad=True)
        out = _BINARY[opname](x, w)
        (x * M.tensor([1., 10.])).sum().backward()
        return out is x, x, _name(x), x.is_leaf, w.grad, _grad(leaf)
    vs_torch.same(case)


def test_mul_inplace_issue_example(vs_torch):
    def case(M):
        x = M.ones(2)
        w = M.tensor([2., 3.], requires_grad=True)
        x.mul_(w)
        x.sum().backward()
        return x, x.is_leaf, _name(x), w.grad
    vs_torch.same(case)


def test_inplace_then_second_inplace_uses_saved_copy(vs_torch):
    """The saved old value is a copy: a second in-place op on x does not corrupt it."""
    def case(M):
        x = M.tensor([1., 2.])
        w = M.tensor([2., 3.], requires_grad=True)
        x.mul_(w)
        x.mul_(w)  # x is now a non-leaf: saved by the usual snapshot
        x.sum().backward()
        return x, w.grad
    vs_torch.same(case)


def test_setitem_plain_tensor_with_grad_value(vs_torch):
    def case(M):
        x = M.zeros(3)
        w = M.tensor([2., 3.], requires_grad=True)
        x[1:] = w * w
        (x * M.tensor([1., 2., 3.])).sum().backward()
        return x, w.grad, x.is_leaf
    vs_torch.same(case)


def test_copy_of_a_leaf_makes_a_non_leaf(vs_torch):
    def case(M):
        x = M.ones(2)
        w = M.tensor([2., 3.], requires_grad=True)
        x.copy_(w)
        (x * M.tensor([1., 4.])).sum().backward()
        return x, x.is_leaf, x.requires_grad, w.grad
    vs_torch.same(case)


def test_expand_to_same_shape_is_a_new_view(vs_torch):
    def case(M):
        w = M.tensor([2., 3.], requires_grad=True)
        e = w.expand(2)
        (e * M.tensor([1., 5.])).sum().backward()
        return e is w, e._base is w, w._base is None, _name(e), w.grad
    vs_torch.same(case)


def test_views_made_before_root_required_grad_are_regenerated(vs_torch):
    def case(M):
        base = M.zeros(2, 3)
        b, c = base.view(2, 3), base[1]
        w = M.tensor(2., requires_grad=True)
        b[0].add_(w)
        (b * M.tensor([[1.], [10.]])).sum().backward(retain_graph=True)
        g1 = w.grad.clone()
        w.grad = None
        (base * 3).sum().backward()
        return b.requires_grad, c.requires_grad, base.requires_grad, g1, w.grad
    vs_torch.same(case)


def test_root_inplace_gives_its_plain_views_history(vs_torch):
    def case(M):
        x = M.zeros(3)
        v = x[:2]
        w = M.tensor([1., 2., 3.], requires_grad=True)
        x.add_(w)
        (v * M.tensor([2., 5.])).sum().backward()
        return v.requires_grad, v, w.grad
    vs_torch.same(case)


# ---- 2. in-place on views of an expanded tensor --------------------------------------------
def _expanded(M, kind):
    """(base, expanded view, leaf or None)."""
    if kind == "plain":
        base = M.zeros(3)
        return base, base.expand(2, 3), None
    if kind == "nonleaf":
        leaf = M.tensor([1., 2., 3.], requires_grad=True)
        base = leaf * 1
        return base, base.expand(2, 3), leaf
    base = M.zeros(3)  # "operand": the written value requires grad
    return base, base.expand(2, 3), M.tensor(2., requires_grad=True)


@pytest.mark.parametrize("kind", ["plain", "nonleaf", "operand"])
@pytest.mark.parametrize("opname", ["add_", "mul_"])
@pytest.mark.parametrize("row", [0, 1])
def test_inplace_on_a_row_of_an_expanded_tensor(vs_torch, kind, opname, row):
    def case(M):
        base, b, leaf = _expanded(M, kind)
        arg = leaf if kind == "operand" else 2.
        getattr(b[row], opname)(arg)
        out = [base, b, b._version, base._version]
        if leaf is not None:
            (b * M.tensor([[1.], [10.]])).sum().backward()
            out += [leaf.grad, _name(base), b.requires_grad]
        return out
    vs_torch.same(case)


@pytest.mark.parametrize("kind", ["plain", "nonleaf", "operand"])
@pytest.mark.parametrize("what", ["whole add_", "whole mul_", "column add_", "t row add_",
                                  "column setitem", "copy_ whole"])
def test_overlapping_write_raises_pytorch_error(vs_torch, kind, what):
    def case(M):
        base, b, leaf = _expanded(M, kind)
        arg = leaf if kind == "operand" else 2.
        if what == "whole add_":
            b.add_(arg)
        elif what == "whole mul_":
            b.mul_(arg)
        elif what == "column add_":
            b[:, 1].add_(arg)
        elif what == "t row add_":
            b.t()[0].add_(arg)
        elif what == "column setitem":
            b[:, 0] = arg
        else:
            b.copy_(M.ones(2, 3))
        return base
    vs_torch.same(case, exact_error=True)


@pytest.mark.parametrize("what", ["row setitem", "element setitem", "fill_ whole",
                                  "zero_ whole", "fill_ row", "copy_ row", "index_add_ row",
                                  "advanced setitem", "slice of row add_"])
def test_writes_into_expanded_tensors_pytorch_allows(vs_torch, what):
    def case(M):
        base = M.tensor([1., 2., 3.])
        b = base.expand(2, 3)
        if what == "row setitem":
            b[1] = 7.
        elif what == "element setitem":
            b[0, 2] = 5.
        elif what == "fill_ whole":
            b.fill_(4.)
        elif what == "zero_ whole":
            b.zero_()
        elif what == "fill_ row":
            b[0].fill_(2.)
        elif what == "copy_ row":
            b[1].copy_(M.tensor([4., 5., 6.]))
        elif what == "index_add_ row":
            b[0].index_add_(0, M.tensor([0, 0, 2]), M.tensor([1., 1., 5.]))
        elif what == "advanced setitem":
            b[M.tensor([0])] = 9.
        else:
            b[0][1:].add_(10.)
        return base, b, base._version
    vs_torch.same(case)


def test_setitem_on_expanded_nonleaf_with_grad_value(vs_torch):
    def case(M):
        leaf = M.tensor([1., 2., 3.], requires_grad=True)
        base = leaf * 2
        b = base.expand(2, 3)
        w = M.tensor([5., 6.], requires_grad=True)
        b[1, 1:] = w
        (b * M.tensor([[1.], [10.]])).sum().backward()
        return base, b, leaf.grad, w.grad
    vs_torch.same(case)


def test_expanded_of_a_unit_dim_row(vs_torch):
    def case(M):
        base = M.zeros(1, 3)
        b = base.expand(4, 3)
        b[2].add_(M.tensor([1., 2., 3.]))
        return base, b
    vs_torch.same(case)


# ---- 3. nn.init on inference tensors -------------------------------------------------------
_INITS = {
    "normal_": lambda I, t: I.normal_(t), "zeros_": lambda I, t: I.zeros_(t),
    "ones_": lambda I, t: I.ones_(t), "constant_": lambda I, t: I.constant_(t, 2.5),
    "uniform_": lambda I, t: I.uniform_(t, -1., 1.), "eye_": lambda I, t: I.eye_(t),
    "xavier_uniform_": lambda I, t: I.xavier_uniform_(t),
    "xavier_normal_": lambda I, t: I.xavier_normal_(t),
    "kaiming_normal_": lambda I, t: I.kaiming_normal_(t),
    "kaiming_uniform_": lambda I, t: I.kaiming_uniform_(t),
    "trunc_normal_": lambda I, t: I.trunc_normal_(t), "orthogonal_": lambda I, t: I.orthogonal_(t),
}
_INFERENCE_MSG = "Inplace update to inference tensor outside InferenceMode is not allowed."


def _init_outcome(M, name, where):
    with M.inference_mode():
        t = M.full((4, 3), 7.)
    target = {"tensor": lambda: t, "row view": lambda: t[1:]}[where]
    try:
        _INITS[name](M.nn.init, target())
    except RuntimeError as e:
        return "err", str(e)
    return "ok", None


@pytest.mark.parametrize("where", ["tensor", "row view"])
@pytest.mark.parametrize("name", list(_INITS))
def test_nn_init_on_inference_tensor_outside_mode_raises(torch, name, where):
    for M in (torch, aotgrad):
        kind, msg = _init_outcome(M, name, where)
        assert kind == "err" and _INFERENCE_MSG in msg, (M.__name__, msg)
    assert f"nn.init.{name}" in _init_outcome(aotgrad, name, where)[1]  # names the function


@pytest.mark.parametrize("name", list(_INITS))
def test_nn_init_on_inference_tensor_inside_mode_writes(name):
    with aotgrad.inference_mode():
        t = aotgrad.full((4, 3), 7.)
        out = _INITS[name](nn.init, t)
    assert out is t and t.is_inference()
    assert not np.any(t.numpy() == 7.)  # every element was written


def test_views_and_parameters_of_inference_tensors(torch, vs_torch):
    def case(M):
        with M.inference_mode():
            t = M.zeros(2, 3)
        return t[0].is_inference(), t.view(6).is_inference(), t.clone().is_inference()
    vs_torch.same(case)

    def param(M):
        with M.inference_mode():
            t = M.zeros(2, 3)
        return M.nn.Parameter(t)
    vs_torch.same(param, exact_error=True)

    def view_add(M):
        with M.inference_mode():
            t = M.zeros(2, 3)
        t.reshape(6).add_(1.)
    ours = pytest.raises(RuntimeError, view_add, aotgrad)
    theirs = pytest.raises(RuntimeError, view_add, torch)
    assert _INFERENCE_MSG in str(ours.value) and _INFERENCE_MSG in str(theirs.value)


# ---- 4. binary_cross_entropy: the gradient in the target -----------------------------------
_X = np.array([0., 1., 0.5, 0., 1., 1e-30, 1 - 1e-7, 0.25, 1e-45, 0.], dtype=np.float32)
_T = np.array([0.3, 0.3, 0.7, 0., 1., 0.5, 0.5, 0.9, 0.2, 1.], dtype=np.float32)
_W = np.array([1., 2., 3., 0., -1., 6., 7., 0.5, 2., -2.], dtype=np.float32)


def _bce(M, reduction, weighted, input_grad):
    x = M.tensor(_X, requires_grad=input_grad)
    t = M.tensor(_T, requires_grad=True)
    w = M.tensor(_W) if weighted else None
    loss = M.nn.functional.binary_cross_entropy(x, t, weight=w, reduction=reduction)
    with np.errstate(invalid="ignore"):  # inf * 0 where the weight is 0, as in PyTorch
        (loss * 1.5).sum().backward()
    return [loss.detach().numpy(), t.grad.numpy()] + ([x.grad.numpy()] if input_grad else [])


def _assert_same_floats(a, b, what):
    """Non-finite values identical (inf signs, NaN), finite ones to float32 rounding."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b), err_msg=what)
    np.testing.assert_array_equal(np.where(np.isinf(a), a, 0), np.where(np.isinf(b), b, 0),
                                  err_msg=what)
    assert_close(a, b, rtol=2e-6, atol=0, equal_nan=True, msg=what)


@pytest.mark.parametrize("input_grad", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_bce_target_gradient_at_saturated_input(torch, reduction, weighted, input_grad):
    ours = _bce(aotgrad, reduction, weighted, input_grad)
    ref = _bce(torch, reduction, weighted, input_grad)
    for name, a, b in zip(["loss", "d/dtarget", "d/dinput"], ours, ref):
        _assert_same_floats(a, b, f"{reduction} weighted={weighted} {name}")
    # the saturated inputs' -logit(x): infinite (NaN where the weight is 0: inf * 0)
    assert not np.isfinite(ours[1][[0, 1, 3, 4, 9]]).any()


def test_bce_target_gradient_closed_form():
    """d/dt = -w * logit(x) * 2 (the outer scale), inf * w at saturation (NaN for w = 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = -np.log(_X / (np.float32(1) - _X)) * _W * np.float32(2)
    _, gt = _bce_closed(_W)
    _assert_same_floats(gt, expected, "d/dtarget")


def _bce_closed(w):
    x = aotgrad.tensor(_X)
    t = aotgrad.tensor(_T, requires_grad=True)
    loss = nn.functional.binary_cross_entropy(x, t, weight=aotgrad.tensor(w), reduction="none")
    with np.errstate(invalid="ignore"):
        (loss * 2.).sum().backward()
    return loss, t.grad.numpy()


def test_bce_forward_and_input_gradient_unchanged_by_target_grad():
    """The loss and the input gradient are the same whether the target requires grad."""
    res = []
    for tg in (False, True):
        x = aotgrad.tensor(_X, requires_grad=True)
        t = aotgrad.tensor(_T, requires_grad=tg)
        loss = nn.functional.binary_cross_entropy(x, t, weight=aotgrad.tensor(_W),
                                                  reduction="none")
        with np.errstate(invalid="ignore"):
            loss.sum().backward()
        res.append((loss.detach().numpy(), x.grad.numpy()))
    for a, b in zip(*res):
        np.testing.assert_array_equal(a, b)


def test_bce_target_gradient_compiled_matches_eager():
    w = aotgrad.tensor(_W)

    def f(x, t):
        return nn.functional.binary_cross_entropy(x, t, weight=w, reduction="mean")
    res = []
    for fn in (f, aotgrad.compile(f)):
        x = aotgrad.tensor(_X, requires_grad=True)
        t = aotgrad.tensor(_T, requires_grad=True)
        with np.errstate(invalid="ignore"):  # inf * 0 where the weight is 0
            loss = fn(x, t)
            loss.backward()
        res.append((loss.item(), t.grad.numpy(), x.grad.numpy()))
    (l0, t0, x0), (l1, t1, x1) = res
    assert l1 == pytest.approx(l0, rel=1e-6)
    _assert_same_floats(t1, t0, "compiled d/dtarget")
    _assert_same_floats(x1, x0, "compiled d/dinput")
