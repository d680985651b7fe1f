"""empty_strided: the requested shape and strides (in elements); a leaf made from it gets a
contiguous gradient where its layout is not dense, as in PyTorch."""
import pytest

import aotgrad


def _layout(mod):
    c = mod.empty_strided((2, 2), (4, 2)).copy_(mod.ones(2, 2)).requires_grad_()
    (c * 3).sum().backward()
    return tuple(c.shape), c.stride(), c.grad.stride(), c.grad.tolist()


def test_empty_strided_layout_and_grad():
    assert _layout(aotgrad) == ((2, 2), (4, 2), (2, 1), [[3.0, 3.0], [3.0, 3.0]])


def test_empty_strided_matches_torch(torch):
    assert _layout(aotgrad) == _layout(torch)


def test_empty_strided_bad_arguments():
    with pytest.raises(RuntimeError, match="mismatch in length"):
        aotgrad.empty_strided((2, 2), (1,))
