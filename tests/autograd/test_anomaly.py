"""Anomaly mode: forward stacks on nodes, NaN detection, the report users read."""
import inspect
import os
import warnings

import numpy as np
import pytest

import aotgrad
from aotgrad.autograd import Function, detect_anomaly, set_detect_anomaly

HERE = os.path.abspath(__file__)


def _line_of(marker):
    src = inspect.getsource(inspect.getmodule(_line_of)).splitlines()
    return next(i + 1 for i, s in enumerate(src) if s.rstrip().endswith(marker))


def test_off_by_default_records_nothing():
    assert not aotgrad.autograd.is_anomaly_enabled()
    x = aotgrad.tensor([-1.0, 4.0], requires_grad=True)
    y = x.sqrt()
    assert y.grad_fn._stack is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y.sum().backward()  # NaN gradient, silently, like PyTorch
    assert np.isnan(x.grad.numpy()[0])


def test_nan_raises_with_forward_traceback():
    x = aotgrad.tensor([-1.0, 4.0], requires_grad=True)
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        mode = detect_anomaly()
    with mode:
        assert aotgrad.autograd.is_anomaly_enabled()
        y = x.sqrt()  # forward: sqrt
        with pytest.warns(UserWarning) as rec:
            with pytest.raises(RuntimeError) as info:
                y.sum().backward()
    assert not aotgrad.autograd.is_anomaly_enabled()
    # PyTorch's message, then the user's line of the backward() call
    line = info.traceback[0].lineno + 1   # the pytest.raises block's backward() call
    assert str(info.value) == ("Function 'SqrtBackward0' returned nan values in its 0th output."
                               f" (at test_anomaly.py:{line}: `y.sum().backward()`)")
    msgs = [str(w.message) for w in rec if "Error detected" in str(w.message)]
    assert len(msgs) == 1
    msg = msgs[0]
    assert msg.startswith("Error detected in SqrtBackward0. Traceback of forward call that "
                          "caused the error:\n")
    line = _line_of("# forward: sqrt")
    assert f'File "{HERE}", line {line}, in test_nan_raises_with_forward_traceback' in msg
    assert msg.rstrip().endswith("y = x.sqrt()  # forward: sqrt")
    assert "runtime" + os.sep not in msg  # aotgrad's own frames are cut from the stack's end


def test_nan_output_index():
    a = aotgrad.tensor(float("nan"))
    b = aotgrad.tensor(2.0, requires_grad=True)
    with set_detect_anomaly(True):
        y = a * b
        with pytest.warns(UserWarning, match="Error detected in MulBackward0"):
            with pytest.raises(RuntimeError, match=r"^Function 'MulBackward0' returned nan values "
                                                   r"in its 1th output\."):
                y.backward()


def test_check_nan_false_and_set_detect_anomaly_call():
    x = aotgrad.tensor([-1.0], requires_grad=True)
    set_detect_anomaly(True, check_nan=False)
    try:
        assert aotgrad.autograd.is_anomaly_enabled()
        assert not aotgrad.autograd.is_anomaly_check_nan_enabled()
        y = x.sqrt()
        assert y.grad_fn._stack is not None
        y.backward()
        assert np.isnan(x.grad.numpy()[0])
    finally:
        set_detect_anomaly(False)
    assert not aotgrad.autograd.is_anomaly_enabled()
    assert aotgrad.autograd.is_anomaly_check_nan_enabled()


def test_error_in_custom_backward_shows_forward_line():
    class Broken(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            raise ValueError("boom in backward")

    x = aotgrad.randn(3, requires_grad=True)
    with set_detect_anomaly(True):
        y = Broken.apply(x)  # forward: Broken
        with pytest.warns(UserWarning) as rec:
            with pytest.raises(ValueError, match="boom in backward") as info:
                y.sum().backward()
    msg = next(str(w.message) for w in rec if "Error detected" in str(w.message))
    assert msg.startswith("Error detected in BrokenBackward. Traceback of forward call that "
                          "caused the error:")
    assert f"line {_line_of('# forward: Broken')}" in msg
    assert "y = Broken.apply(x)  # forward: Broken" in msg
    notes = getattr(info.value, "__notes__", None)
    if notes is not None:  # Python >= 3.11 attaches the stack to the error too
        assert any("y = Broken.apply(x)" in n for n in notes)


def test_nan_from_custom_function():
    class NanGrad(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g * float("nan")

    x = aotgrad.randn(2, requires_grad=True)
    with set_detect_anomaly(True):
        y = NanGrad.apply(x)
        with pytest.warns(UserWarning, match="Error detected in NanGradBackward"):
            with pytest.raises(RuntimeError, match="Function 'NanGradBackward' returned nan "
                                                   "values in its 0th output."):
                y.sum().backward()


def test_decorator_form():
    def run(x):
        assert aotgrad.autograd.is_anomaly_enabled()
        return x.sqrt().sum()

    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        deco = detect_anomaly(check_nan=True)(run)
    x = aotgrad.tensor([4.0], requires_grad=True)
    with pytest.warns(UserWarning):
        out = deco(x)
    assert not aotgrad.autograd.is_anomaly_enabled()
    assert out.grad_fn.next_functions[0][0]._stack is not None


def test_matches_torch_messages(torch):
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        tx = torch.tensor([-1.0, 4.0], requires_grad=True)
        with torch.autograd.detect_anomaly():
            with pytest.raises(RuntimeError) as t_err:
                tx.sqrt().sum().backward()
        ax = aotgrad.tensor([-1.0, 4.0], requires_grad=True)
        with detect_anomaly():
            with pytest.raises(RuntimeError) as a_err:
                ax.sqrt().sum().backward()
    assert str(a_err.value) == str(t_err.value) + \
        f" (at test_anomaly.py:{_line_of('ax.sqrt().sum().backward()')}: `ax.sqrt().sum().backward()`)"
