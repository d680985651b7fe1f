"""A tensor saved for backward as an op's input and then detached in place (`detach_()`) makes
the backward raise PyTorch's error; one saved as the op's output (exp saves its result) does
not."""
import pytest

import aotgrad


def test_detached_saved_input_raises():
    a = aotgrad.tensor(1.0, requires_grad=True).clone()
    b = a.sin()   # saves a
    a.detach_()
    with pytest.raises(RuntimeError, match="saved tensor that has been detached in-place"):
        b.backward()


def test_detached_saved_output_is_fine():
    x = aotgrad.tensor(1.0, requires_grad=True)
    a = x.clone()
    b = a.exp()   # saves its result, not a
    a.detach_()
    b.backward()
    assert abs(x.grad.item() - 2.718281828) < 1e-5
