"""`aotgrad.is_inference(t)` (the torch-level spelling of `Tensor.is_inference`): tensors made
inside `inference_mode` are inference tensors, views and results made outside are not, and the
flags agree with PyTorch's for the same program."""
import pytest

import aotgrad


def _flags(mod):
    out = []
    with mod.inference_mode():
        c = mod.ones(1, 2, 3)
        out += [mod.is_inference(c), mod.is_inference(c * 2), mod.is_inference(c.view(-1))]
    s = mod.ones(1, 2, 3, requires_grad=True)
    a = s.clone()
    with mod.inference_mode():
        v = a.view(-1)
        a2 = a.clone()
    out += [mod.is_inference(s), mod.is_inference(a), mod.is_inference(v),
            mod.is_inference(a2), mod.is_inference(c.view(-1)), mod.is_inference(c + s)]
    out.append(mod.is_inference(c) == c.is_inference())
    return out


def test_is_inference_flags():
    assert _flags(aotgrad) == [True, True, True, False, False, False, True, True, False, True]


def test_is_inference_matches_torch(torch):
    assert _flags(aotgrad) == _flags(torch)


def test_is_inference_rejects_non_tensor():
    with pytest.raises(TypeError, match="is_inference"):
        aotgrad.is_inference(3)
