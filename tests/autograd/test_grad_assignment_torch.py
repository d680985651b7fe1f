"""Assigning `.grad`: a non-tensor is a TypeError; a tensor of another shape or dtype, or the
tensor itself, a RuntimeError with PyTorch's messages; a matching tensor or None is kept."""
import pytest

import aotgrad


def _outcomes(mod):
    x = mod.randn(5, 5)
    out = []
    for v in (0, mod.randn(2, 2), mod.randn(5, 5).long(), x, mod.zeros(5, 5), None):
        try:
            x.grad = v
            out.append("ok")
        except (TypeError, RuntimeError) as e:
            out.append(type(e).__name__)
    return out, x.grad


def test_grad_assignment_outcomes():
    out, g = _outcomes(aotgrad)
    assert out == ["TypeError", "RuntimeError", "RuntimeError", "RuntimeError", "ok", "ok"]
    assert g is None


def test_self_assignment_message():
    x = aotgrad.randn(3)
    with pytest.raises(RuntimeError, match="can't assign Variable as its own grad"):
        x.grad = x


def test_grad_assignment_matches_torch(torch):
    assert _outcomes(aotgrad)[0] == _outcomes(torch)[0]
