"""Inference mode and views, in-place ops and resize_, as PyTorch: a view of an inference tensor
is an inference tensor that records nothing (not a view, no grad); a view of a normal tensor
taken in inference mode is a normal view that requires grad when its base does but has no
gradient edge; modifying it in place outside inference mode under grad mode raises, and so
does reading its grad_fn once its base was modified in place. Explicit expectations, and the
same scenarios on PyTorch where installed."""
import re

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close


def _flags(T, t):
    return (T.is_inference(t), t.requires_grad, t.is_leaf, t._is_view())


INPLACE = "modified in place"   # "... created in inference mode and is being modified inplace"
REBASED = "base modified"       # "... created in inference mode and its base or another view
#                                  of its base has been modified inplace"


def _error(fn):
    """What RuntimeError fn raises: INPLACE, REBASED, another message's first sentence, or
    None. (PyTorch words the first differently for `view[0] = x`, a view of the view.)"""
    try:
        fn()
    except RuntimeError as e:
        msg = str(e)
        if "created in inference mode and is being modified inplace in normal mode" in msg:
            return INPLACE
        if "created in inference mode and its base or another view of its base has been " \
                "modified inplace in normal mode" in msg:
            return REBASED
        return msg.split(".")[0]
    return None


def view_of_inference_tensor(T, rg, inside):
    with T.inference_mode():
        c = T.ones(1, 2, 3, requires_grad=rg)
        if inside:
            return _flags(T, c.view(-1)) + _flags(T, c[0]) + _flags(T, c.transpose(0, 1))
    return _flags(T, c.view(-1)) + _flags(T, c[0]) + _flags(T, c.transpose(0, 1))


def view_made_in_inference_mode(T, rg):
    a = T.ones(1, 2, 3, requires_grad=rg).clone()
    with T.inference_mode():
        v = a.view(-1)
        w = v.view(2, 3)             # a view of that view, still inside
        inside = _flags(T, v) + _flags(T, w) + (v._base is a,)
    after = _flags(T, v) + ((v * v).requires_grad, _flags(T, v.view(2, 3)))
    with T.inference_mode():
        v.add_(1)                    # in place inside inference mode: allowed, not recorded
    # its grad_fn was never recorded: once the memory was modified in place, reading it raises
    return inside + after + (a._version, _error(lambda: v.grad_fn), _error(lambda: w.is_leaf))


def inplace_on_inference_view_outside(T, rg, op, mode):
    a = T.ones(1, 2, 3, requires_grad=rg).clone()
    with T.inference_mode():
        v = a.view_as(a)
    ops = {"add_": lambda: v.add_(2), "transpose_": lambda: v.transpose_(0, 1),
           "setitem": lambda: v.__setitem__(0, 5.0)}
    if mode == "no_grad":
        with T.no_grad():
            return _error(ops[op])
    return _error(ops[op])


def grad_fn_after_base_modified(T, rg, op, mode):
    a = T.ones(1, 2, 3, requires_grad=rg).clone()
    with T.inference_mode():
        v = a.view(-1)
    before = _error(lambda: v.grad_fn)
    ops = {"add_": lambda: a.add_(2), "transpose_": lambda: a.transpose_(0, 1)}
    if mode == "no_grad":
        with T.no_grad():
            ops[op]()
    else:
        ops[op]()
    return before, _error(lambda: v.grad_fn), _error(lambda: v * 2)


def inplace_and_resize_inside(T, rg):
    out = []
    with T.inference_mode():
        for fn in (lambda x: x.add_(2), lambda x: x.transpose_(0, 1), lambda x: x.resize_(1, 2),
                   lambda x: x.resize_as_(T.ones(3)), lambda x: x.copy_(T.zeros(1, 2, 3))):
            c = T.ones(1, 2, 3, requires_grad=rg)
            fn(c)
            out.append((T.is_inference(c), c.requires_grad, tuple(c.shape)))
    return out


RG = [True, False]


@pytest.mark.parametrize("rg", RG)
@pytest.mark.parametrize("inside", [True, False])
def test_view_of_inference_tensor(rg, inside):
    assert view_of_inference_tensor(ag, rg, inside) == (True, False, True, False) * 3


@pytest.mark.parametrize("rg", RG)
def test_view_made_in_inference_mode(rg):
    got = view_made_in_inference_mode(ag, rg)
    assert got[:9] == (False, rg, True, True) * 2 + (True,)
    assert got[9:15] == (False, rg, True, True, rg, (False, rg, not rg, True))
    assert got[15:] == ((1, REBASED, REBASED) if rg else (1, None, None))


@pytest.mark.parametrize("rg", RG)
@pytest.mark.parametrize("op", ["add_", "transpose_", "setitem"])
@pytest.mark.parametrize("mode", ["grad", "no_grad"])
def test_inplace_on_inference_view_outside(rg, op, mode):
    got = inplace_on_inference_view_outside(ag, rg, op, mode)
    assert got == (INPLACE if rg and mode == "grad" else None)


@pytest.mark.parametrize("rg", RG)
@pytest.mark.parametrize("op", ["add_", "transpose_"])
@pytest.mark.parametrize("mode", ["grad", "no_grad"])
def test_grad_fn_after_base_modified(rg, op, mode):
    before, after, used = grad_fn_after_base_modified(ag, rg, op, mode)
    assert before is None
    assert after == (REBASED if rg else None)
    assert used == (REBASED if rg else None)


@pytest.mark.parametrize("rg", RG)
def test_inplace_and_resize_inside_inference_mode(rg):
    assert inplace_and_resize_inside(ag, rg) == [
        (True, rg, (1, 2, 3)), (True, rg, (2, 1, 3)), (True, rg, (1, 2)), (True, rg, (3,)),
        (True, rg, (1, 2, 3))]


def test_resize_of_tensor_requiring_grad_still_raises_outside():
    with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
        ag.ones(2, requires_grad=True).resize_(3)
    with ag.no_grad(), pytest.raises(RuntimeError, match="cannot resize"):
        ag.ones(2, requires_grad=True).resize_(3)


def test_inference_view_has_no_gradient_edge():
    """Used outside inference mode it makes the result require grad, but no gradient flows
    to it or to its base (the view was never recorded)."""
    a = ag.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = a * 1
    with ag.inference_mode():
        v = b.view(3)
    y = (v * v).sum()
    assert y.requires_grad
    assert [n for n, _ in y.grad_fn.next_functions[0][0].next_functions] == [None, None]
    y.backward()
    assert v.grad is None and a.grad is None
    z = (v * a).sum()                 # the normal input still gets its gradient
    z.backward()
    assert_close(a.grad.numpy(), [1.0, 2.0, 3.0], rtol=1e-7, atol=0, equal_nan=True)


SCENARIOS = {
    "view_of_inference_tensor": [(view_of_inference_tensor, (rg, inside))
                                 for rg in RG for inside in (True, False)],
    "view_made_in_inference_mode": [(view_made_in_inference_mode, (rg,)) for rg in RG],
    "inplace_outside": [(inplace_on_inference_view_outside, (rg, op, mode)) for rg in RG
                        for op in ("add_", "transpose_", "setitem")
                        for mode in ("grad", "no_grad")],
    "grad_fn_after_base_modified": [(grad_fn_after_base_modified, (rg, op, mode)) for rg in RG
                                    for op in ("add_", "transpose_")
                                    for mode in ("grad", "no_grad")],
    "inplace_and_resize_inside": [(inplace_and_resize_inside, (rg,)) for rg in RG],
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_matches_torch(torch, name):
    for fn, args in SCENARIOS[name]:
        assert fn(ag, *args) == fn(torch, *args), (fn.__name__, args)


def aliases_and_versions(T):
    """detach/.data keep whether the tensor is an inference tensor (in or out of inference
    mode); an inference tensor has no version counter to show."""
    a = T.ones(2, 3, requires_grad=True).clone()
    with T.inference_mode():
        c = T.ones(2, 3)
        inside = (T.is_inference(a.detach()), T.is_inference(c.detach()),
                  T.is_inference(a.clone()))
    outside = (T.is_inference(c.detach()), T.is_inference(c.data), T.is_inference(a.detach()))
    return inside, outside, _error(lambda: c._version), a._version


def test_aliases_and_versions():
    assert aliases_and_versions(ag) == (
        (False, True, True), (True, True, False),
        "Inference tensors do not track version counter", 0)


def test_aliases_and_versions_match_torch(torch):
    assert aliases_and_versions(ag) == aliases_and_versions(torch)
