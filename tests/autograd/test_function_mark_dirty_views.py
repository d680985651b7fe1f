"""A custom Function that modifies an input in place (`ctx.mark_dirty`): when the input is a
view (of a view), the base's history is rebased so that gradients flow through the
Function's backward for the view's elements and through the old history elsewhere; PyTorch's
checks on dirty tensors. Gradients checked against finite differences and closed forms."""
import warnings

import numpy as np
import pytest

import aotgrad
from aotgrad.testing import assert_close


def _add_fn():
    class AddInto(aotgrad.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.mark_dirty(x)
            x.add_(y)
            return x

        @staticmethod
        def backward(ctx, g):
            return g, g
    return AddInto


def test_dirty_view_of_view_gradcheck():
    AddInto = _add_fn()
    a = aotgrad.randn(4, 4, dtype=aotgrad.float64, requires_grad=True)
    b = aotgrad.randn(2, 2, dtype=aotgrad.float64, requires_grad=True)

    def fn(root, b):
        x = root.clone()
        AddInto.apply(x.narrow(1, 2, 2).narrow(0, 1, 2), b)
        AddInto.apply(x.narrow(1, 0, 2).narrow(0, 1, 2), b)
        return x
    assert aotgrad.autograd.gradcheck(fn, (a, b))
    assert aotgrad.autograd.gradgradcheck(fn, (a, b))


def test_dirty_view_closed_form_and_graph():
    ScaleInPlace = _scale_fn_of(aotgrad)
    root = aotgrad.zeros(4, dtype=aotgrad.float64, requires_grad=True)
    x = root.clone()
    v = x[1:3]
    w = v[1:]
    y = ScaleInPlace.apply(w)
    assert y is w
    assert x.grad_fn.name() == "CopySlices" and w.grad_fn.name() == "AsStridedBackward0"
    assert v.grad_fn.name() == "AsStridedBackward0"   # the other live view reads the new base
    (x * aotgrad.arange(4.0, dtype=aotgrad.float64)).sum().backward()
    # element 2 went through the Function (x3); the others through the clone
    assert_close(root.grad.numpy(), [0.0, 1.0, 6.0, 3.0], rtol=1e-7, atol=0, equal_nan=True)


def test_dirty_input_version_bumped_by_function_and_op():
    ScaleInPlace = _scale_fn_of(aotgrad)
    x = aotgrad.ones(2, requires_grad=True).clone()
    v0 = x._version
    assert ScaleInPlace.apply(x) is x
    assert x._version - v0 == 2   # the in-place op, then mark_dirty


def test_dirty_multi_output_view_refused():
    ScaleInPlace = _scale_fn_of(aotgrad)
    x = aotgrad.ones(2, 3, requires_grad=True).clone()
    with pytest.raises(RuntimeError, match="output of a function that returns multiple views"):
        ScaleInPlace.apply(x.unbind()[0])
    leaf = aotgrad.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="a view of a leaf Variable that requires grad"):
        ScaleInPlace.apply(leaf.view_as(leaf))


def test_dirty_view_with_two_outputs_refused():
    class Two(aotgrad.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            a.add_(b)
            ctx.mark_dirty(a)
            return a, a + b

        @staticmethod
        def backward(ctx, ga, gab):
            return ga + gab, ga + gab
    a = aotgrad.ones(2, requires_grad=True)
    b = aotgrad.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="cannot return more than one Tensor"):
        Two.apply(a.clone().view_as(a), b)
    c, d = Two.apply(a.clone(), b)   # not a view: fine
    (c * d).sum().backward()
    # c = a + b = 2, d = c + b = 3; the backward gives a: ga + gab = d + c
    assert_close(a.grad.numpy(), [5.0, 5.0], rtol=1e-7, atol=0, equal_nan=True)


def test_mark_dirty_of_a_non_input():
    class Bad(aotgrad.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            c = 3 * a
            ctx.mark_dirty(c)
            return c

        @staticmethod
        def backward(ctx, g):
            return 3 * g

    class BadView(aotgrad.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            c = a.clone().view_as(a)
            ctx.mark_dirty(c)
            return c

        @staticmethod
        def backward(ctx, g):
            return g
    a = aotgrad.ones(2, requires_grad=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        Bad.apply(a.clone()).sum().backward()
    assert len(w) == 1 and "was not an input" in str(w[0].message)
    assert_close(a.grad.numpy(), [3.0, 3.0], rtol=1e-7, atol=0, equal_nan=True)
    with pytest.raises(RuntimeError, match="received a tensor that was not an input"):
        BadView.apply(a.clone())


def _scale_fn_of(mod):
    class ScaleInPlace(mod.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(3)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return 3 * g
    return ScaleInPlace


def test_dirty_no_grad_view_refused(torch):
    for mod in (aotgrad, torch):
        x = mod.ones(3, requires_grad=True).clone()
        with mod.no_grad():
            v = x[1:]
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been used"):
            _scale_fn_of(mod).apply(v)


def test_gradgradcheck_calls_function_under_grad_mode():
    modes = []

    def fn(x):
        modes.append(aotgrad.is_grad_enabled())
        return x * x
    x = aotgrad.randn(3, dtype=aotgrad.float64, requires_grad=True)
    assert aotgrad.autograd.gradgradcheck(fn, (x,))
    assert all(modes)


def _inplace_mul_fn(modify_tangent):
    class InplaceMul(aotgrad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.mark_dirty(x)
            return x.mul_(2)

        @staticmethod
        def backward(ctx, g):
            return 2 * g

        @staticmethod
        def jvp(ctx, x_t):
            return x_t.mul_(2) if modify_tangent else x_t
    return InplaceMul


def test_dirty_input_jvp_must_modify_the_tangent_in_place():
    fwAD = aotgrad.autograd.forward_ad
    with fwAD.dual_level():
        xt = aotgrad.ones(2)
        xd = fwAD.make_dual(aotgrad.ones(2), xt)
        with pytest.raises(RuntimeError, match="jvp function must modify the corresponding "
                                               "gradient inplace"):
            _inplace_mul_fn(False).apply(xd)
        xt = aotgrad.ones(2)
        xd = fwAD.make_dual(aotgrad.ones(2), xt)
        out = _inplace_mul_fn(True).apply(xd)
        assert out is xd and fwAD.unpack_dual(out).tangent is xt
        assert xt.tolist() == [2.0, 2.0]
