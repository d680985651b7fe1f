"""gradcheck and gradgradcheck: passing checks, the failure report, options and warnings."""
import re
import warnings

import numpy as np
import pytest

import aotgrad
from aotgrad.autograd import Function, gradcheck, gradgradcheck
from aotgrad.autograd.gradcheck import GradcheckError
from aotgrad.testing import assert_close


def f64(*shape, requires_grad=True):
    return aotgrad.randn(*shape, dtype=aotgrad.float64, requires_grad=requires_grad)


class WrongSquare(Function):  # backward is off: 3g instead of 2xg
    @staticmethod
    def forward(ctx, x):
        return x ** 2

    @staticmethod
    def backward(ctx, g):
        return g * 3


def test_builtin_ops_pass():
    x, y = f64(3, 2), f64(2, 4)
    assert gradcheck(lambda a, b: (a @ b).tanh(), (x, y))
    assert gradcheck(lambda a: a.softmax(-1), (x,))
    assert gradcheck(lambda a: (a.sum(0), a.exp()), (x,))  # several outputs
    assert gradgradcheck(lambda a, b: (a @ b).sin(), (x, y))
    assert gradcheck(lambda a: a * 2, f64(3))  # a single tensor is accepted as inputs


def test_failure_names_indices_and_shows_jacobians():
    x = f64(3)
    with pytest.raises(GradcheckError) as info:
        gradcheck(WrongSquare.apply, (x,))
    msg = str(info.value)
    assert msg.startswith("Jacobian mismatch for output 0 with respect to input 0,\nnumerical:")
    num = re.search(r"numerical:(tensor\(.*?\))\nanalytical:", msg, re.S).group(1)
    ana = re.search(r"analytical:(tensor\(.*\))", msg, re.S).group(1)
    assert "float64" in num and "float64" in ana
    # the numerical Jacobian shows 2x on the diagonal, the analytical one 3
    diag = np.diag(2 * x.detach().numpy())
    nums = np.array([float(v) for v in re.findall(r"-?\d+\.\d+", num)]).reshape(3, 3)
    assert_close(nums, diag, rtol=1e-7, atol=1e-3, equal_nan=True)
    anas = np.array([float(v) for v in re.findall(r"-?\d+\.\d+|-?\d+\.", ana)]).reshape(3, 3)
    assert_close(anas, 3 * np.eye(3), rtol=1e-7, atol=0, equal_nan=True)
    assert isinstance(info.value, RuntimeError)
    assert gradcheck(WrongSquare.apply, (x,), raise_exception=False) is False


def test_failure_index_is_position_in_inputs():
    class BadSecond(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b, a + b

        @staticmethod
        def backward(ctx, g1, g2):
            return g1 * 0 + g2, g1 * 3 + g2  # d(a*b)/da is wrong too, but output 0 vs input 0

    a, b = f64(2), f64(2)
    with pytest.raises(GradcheckError, match="output 0 with respect to input 0"):
        gradcheck(BadSecond.apply, (a, b))
    const = aotgrad.randn(2, dtype=aotgrad.float64)

    class BadB(Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, g):
            return None, g * 3

    with pytest.raises(GradcheckError, match="output 0 with respect to input 1"):
        gradcheck(BadB.apply, (const, b))


def test_tolerances():
    x = f64(3)

    class SlightlyOff(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2.01  # off by 0.01 against a true derivative of 2

    assert not gradcheck(SlightlyOff.apply, (x,), raise_exception=False)
    assert gradcheck(SlightlyOff.apply, (x,), atol=0.02)
    assert gradcheck(SlightlyOff.apply, (x,), atol=0, rtol=1e-2)
    assert not gradcheck(SlightlyOff.apply, (x,), atol=0, rtol=1e-3, raise_exception=False)
    # a huge eps makes the central difference of a cubic visibly wrong
    assert not gradcheck(lambda a: a ** 3, (x,), eps=0.5, raise_exception=False)


def test_nonfloat64_warning_and_no_grad_input_error():
    x = aotgrad.randn(3, requires_grad=True)
    with pytest.warns(UserWarning, match="Input #0 requires gradient and is not a double "
                                         "precision floating point"):
        gradcheck(lambda a: a * 2, (x,), eps=1e-2, atol=1e-2, raise_exception=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gradcheck(lambda a: a * 2, (f64(3),))  # float64: no warning
    with pytest.raises(ValueError, match="gradcheck expects at least one input tensor to require "
                                         "gradient"):
        gradcheck(lambda a: a * 2, (f64(3, requires_grad=False),))


def test_detached_output_and_nondeterminism():
    x = f64(3)
    with pytest.raises(GradcheckError, match="Numerical gradient for function expected to be "
                                             "zero"):
        gradcheck(lambda a: a.detach() * 2, (x,))

    calls = [0]

    class Drifting(Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            calls[0] += 1
            return g * (2 + calls[0] * 1e-4)   # linear in g (gradcheck checks that too)

    with pytest.raises(GradcheckError, match="Backward is not reentrant"):
        gradcheck(Drifting.apply, (x,), atol=1e-2)
    assert gradcheck(Drifting.apply, (x,), atol=1e-2, nondet_tol=1.0)


def test_gradgradcheck_detects_wrong_double_backward():
    class CubeBadDouble(Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a ** 3

        @staticmethod
        def backward(ctx, g):
            a, = ctx.saved_tensors
            return g * 3 * a * a.detach()  # first derivative right, second derivative halved

    x = f64(3)
    assert gradcheck(CubeBadDouble.apply, (x,))
    with pytest.raises(GradcheckError, match="Jacobian mismatch for output 0 with respect to "
                                             "input 0"):
        gradgradcheck(CubeBadDouble.apply, (x,))
    go = aotgrad.randn(3, dtype=aotgrad.float64, requires_grad=True)
    assert gradgradcheck(lambda a: a ** 3, (x,), (go,))


def test_inputs_restored_after_check():
    x = f64(4)
    before = x.detach().numpy().copy()
    gradcheck(lambda a: a.exp(), (x,))
    np.testing.assert_array_equal(x.detach().numpy(), before)
    assert x.grad is None


def test_agrees_with_torch(torch):
    xs = np.random.randn(3)

    class TWrong(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x ** 2

        @staticmethod
        def backward(ctx, g):
            return g * 3

    tx = torch.tensor(xs, requires_grad=True)
    ax = aotgrad.tensor(xs, requires_grad=True)
    assert torch.autograd.gradcheck(TWrong.apply, (tx,), raise_exception=False) is False
    assert gradcheck(WrongSquare.apply, (ax,), raise_exception=False) is False
    with pytest.raises(RuntimeError) as t_err:
        torch.autograd.gradcheck(TWrong.apply, (tx,))
    with pytest.raises(GradcheckError) as a_err:
        gradcheck(WrongSquare.apply, (ax,))
    assert str(t_err.value).splitlines()[0] == str(a_err.value).splitlines()[0]
