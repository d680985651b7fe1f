"""scalar_tensor(s, dtype=None, ...): a 0-d tensor, float32 unless dtype says otherwise,
whatever the type of s (PyTorch's rule); a tensor for s is refused."""
import numpy as np
import pytest

import aotgrad as ag


@pytest.mark.parametrize("s", [3, -2.5, True, 0.0, float("inf"), np.float64(1.25)])
@pytest.mark.parametrize("dtype", [None, "float64", "int64", "bool_"])
def test_scalar_tensor_value_dtype_and_shape(s, dtype):
    if dtype == "int64" and not np.isfinite(float(s)):
        pytest.skip("inf has no int64 value")
    got = ag.scalar_tensor(s, dtype=None if dtype is None else getattr(ag, dtype))
    want_dtype = ag.float32 if dtype is None else getattr(ag, dtype)
    assert got.shape == () and got.dtype is want_dtype
    assert got.item() == np.asarray(s).astype(want_dtype.np).item()


def test_scalar_tensor_matches_torch(torch):
    for s, kw in [(3, {}), (2.5, {}), (True, {}), (7, {"dtype": "int64"}),
                  (1.5, {"dtype": "float64", "requires_grad": True})]:
        ours = ag.scalar_tensor(s, **{k: getattr(ag, v) if k == "dtype" else v
                                      for k, v in kw.items()})
        theirs = torch.scalar_tensor(s, **{k: getattr(torch, v) if k == "dtype" else v
                                           for k, v in kw.items()})
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
        assert ours.requires_grad == theirs.requires_grad
        assert ours.item() == theirs.item()


def test_scalar_tensor_refuses_a_tensor_and_a_string():
    for bad in [ag.ones(1), "3"]:
        with pytest.raises(TypeError, match="scalar_tensor\\(\\): argument 's' must be Number"):
            ag.scalar_tensor(bad)


def test_scalar_tensor_with_requires_grad_is_a_leaf_with_a_gradient():
    s = ag.scalar_tensor(2.0, requires_grad=True)
    (s * s * 3).backward()
    assert s.is_leaf and s.grad.item() == 12.0
