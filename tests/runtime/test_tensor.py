"""Tensor basics: factories, dtypes, metadata, conversion, printing (PyTorch's layout)."""
import copy
import pickle

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close

rng = np.random.default_rng(0)


# ---- factories and dtypes ------------------------------------------------------------------
def test_default_dtypes_like_torch():
    assert ag.tensor([1., 2.]).dtype is ag.float32
    assert ag.tensor(1.5).dtype is ag.float32
    assert ag.tensor([1, 2]).dtype is ag.int64
    assert ag.tensor([True]).dtype is ag.bool
    assert ag.tensor(np.zeros(2)).dtype is ag.float64  # numpy arrays keep their dtype
    assert ag.tensor(np.zeros(2, np.int32)).dtype is ag.int32
    assert ag.zeros(2).dtype is ag.float32 and ag.ones(2, 3).shape == (2, 3)
    assert ag.arange(5).dtype is ag.int64 and ag.arange(0., 1., 0.5).dtype is ag.float32
    assert ag.full((2,), 3).dtype is ag.int64 and ag.full((2,), 3.).dtype is ag.float32
    assert ag.rand(3).dtype is ag.float32 and ag.randn(2, 2, dtype=ag.float64).dtype is ag.float64


def test_factories_match_numpy():
    np.testing.assert_array_equal(ag.arange(2, 11, 3).numpy(), np.arange(2, 11, 3))
    assert_close(ag.linspace(0, 1, 5).numpy(), np.linspace(0, 1, 5), rtol=1e-7, atol=0,
                 equal_nan=True, check_dtype=False)
    np.testing.assert_array_equal(ag.eye(3, 4).numpy(), np.eye(3, 4))
    np.testing.assert_array_equal(ag.full((2, 3), 7.).numpy(), np.full((2, 3), 7.))
    np.testing.assert_array_equal(ag.zeros((2, 3)).numpy(), np.zeros((2, 3)))
    x = ag.tensor([[1., 2.]], dtype=ag.float64)
    for f, v in ((ag.zeros_like, 0), (ag.ones_like, 1)):
        y = f(x)
        assert y.dtype is ag.float64 and y.shape == (1, 2) and (y.numpy() == v).all()
    assert ag.full_like(x, 4.).numpy().tolist() == [[4., 4.]]
    assert ag.empty(2, 3).shape == (2, 3)


def test_factories_requires_grad():
    assert ag.zeros(2, requires_grad=True).requires_grad
    assert ag.randn(2, requires_grad=True).is_leaf


def test_random_is_seeded_and_in_range():
    ag.manual_seed(3)
    a = ag.randn(100)
    ag.manual_seed(3)
    b = ag.randn(100)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert abs(float(a.mean())) < 0.5 and 0.5 < float(a.std()) < 1.5
    u = ag.rand(1000)
    assert 0 <= u.numpy().min() and u.numpy().max() < 1
    r = ag.randint(2, 5, (1000,))
    assert r.dtype is ag.int64 and set(np.unique(r.numpy())) == {2, 3, 4}
    assert sorted(ag.randperm(6).tolist()) == list(range(6))


def test_from_numpy_shares_memory_and_as_tensor():
    a = np.zeros(3, np.float32)
    t = ag.from_numpy(a)
    a[0] = 5
    assert t[0].item() == 5.
    assert ag.as_tensor(t) is t
    assert ag.tensor(a).numpy() is not a
    with pytest.raises(TypeError, match="complex64"):
        ag.from_numpy(np.zeros(2, np.complex64))
    assert ag.from_numpy(np.zeros(2, np.float16)).dtype is ag.float16


def test_metadata():
    x = ag.zeros(2, 3, 4)
    assert x.shape == (2, 3, 4) and x.size() == (2, 3, 4) and x.size(1) == 3 and x.size(-1) == 4
    assert x.dim() == 3 and x.ndim == 3 and x.numel() == 24 and len(x) == 2
    assert repr(x.shape) == "aotgrad.Size([2, 3, 4])"
    assert x.is_floating_point() and not ag.tensor([1]).is_floating_point()
    assert x.element_size() == 4 and x.device == ag.device("cpu") and str(x.device) == "cpu"


def test_conversions():
    x = ag.tensor([[1.5, 2.]])
    assert x.tolist() == [[1.5, 2.]]
    assert ag.tensor(2.5).item() == 2.5 and float(ag.tensor([3.])) == 3.
    assert int(ag.tensor(7)) == 7 and [10, 20, 30][ag.tensor(1)] == 20
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        x.item()
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(x)
    with pytest.raises(RuntimeError, match="detach"):
        ag.tensor([1.], requires_grad=True).numpy()
    assert x.double().dtype is ag.float64 and x.long().tolist() == [[1, 2]]
    assert x.to(ag.float64).dtype is ag.float64 and x.to(x) is x
    assert np.asarray(x).shape == (1, 2)


def test_iteration_over_dim0():
    x = ag.tensor([[1., 2.], [3., 4.], [5., 6.]], requires_grad=True)
    rows = list(x)
    assert len(rows) == 3 and rows[1].tolist() == [3., 4.]
    sum(r.sum() * i for i, r in enumerate(rows)).backward()
    assert x.grad.tolist() == [[0., 0.], [1., 1.], [2., 2.]]
    with pytest.raises(TypeError, match="0-d"):
        iter(ag.tensor(1.))


def test_deepcopy_and_pickle():
    x = ag.tensor([1., 2.], requires_grad=True)
    y = copy.deepcopy(x)
    assert y.requires_grad and y.tolist() == [1., 2.] and y._value is not x._value
    z = pickle.loads(pickle.dumps(x))
    assert z.requires_grad and z.tolist() == [1., 2.]
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(x * 2)


def test_python_scalar_promotion():
    i = ag.tensor([1, 2])
    assert (i + 1).dtype is ag.int64 and (i + 1.5).dtype is ag.float32
    assert (i / 2).dtype is ag.float32 and (i * True).dtype is ag.int64
    f = ag.tensor([1.], dtype=ag.float64)
    assert (f + 1.5).dtype is ag.float64
    assert (ag.tensor([1.]) + f).dtype is ag.float64


def test_broadcast_error_is_clear():
    with pytest.raises(RuntimeError, match=r"\[2, 3\].*\[4\].*not broadcastable"):
        ag.ones(2, 3) + ag.ones(4)
    with pytest.raises(RuntimeError, match=r"cannot be multiplied \(2x3 and 4x5\)"):
        ag.ones(2, 3) @ ag.ones(4, 5)
    with pytest.raises(RuntimeError, match="shape '\\[5\\]' is invalid for input of size 6"):
        ag.ones(2, 3).reshape(5)
    with pytest.raises(IndexError, match="Dimension out of range"):
        ag.ones(2, 3).sum(2)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        ag.ones(3)[3]


# ---- printing ------------------------------------------------------------------------------
def test_repr_literals():
    assert repr(ag.tensor([[8., 9., 10.]])) == "tensor([[ 8.,  9., 10.]])"
    assert repr(ag.tensor([[1., -2.], [3., 4.]])) == "tensor([[ 1., -2.],\n        [ 3.,  4.]])"
    assert repr(ag.tensor([1.5, 2.25])) == "tensor([1.5000, 2.2500])"
    assert repr(ag.tensor([1e-5, 3.])) == "tensor([1.0000e-05, 3.0000e+00])"
    assert repr(ag.tensor(3.5)) == "tensor(3.5000)"
    assert repr(ag.tensor([1, 2], dtype=ag.int32)) == "tensor([1, 2], dtype=aotgrad.int32)"
    assert repr(ag.tensor([True, False])) == "tensor([ True, False])"
    assert repr(ag.zeros(0, 3)) == "tensor([], size=(0, 3))"
    x = ag.tensor([1., 2.], requires_grad=True)
    assert repr(x) == "tensor([1., 2.], requires_grad=True)"
    assert repr(x + 1) == "tensor([2., 3.], grad_fn=<AddBackward0>)"
    assert repr(ag.tensor([1.], dtype=ag.float64)) == "tensor([1.], dtype=aotgrad.float64)"


def test_return_types_repr():
    r = ag.tensor([[1., 3.], [4., 2.]]).max(1)
    assert repr(r) == ("aotgrad.return_types.max(\nvalues=tensor([3., 4.]),\n"
                       "indices=tensor([1, 0]))")
    values, indices = r
    assert r.values is values and r.indices is indices and isinstance(r, tuple)
    assert type(ag.tensor([1., 0.]).sort()).__name__ == "sort"


PRINT_CASES = [
    np.array([[8., 9., 10.]]), np.array([1e-5, 3.]), np.array(3.5), np.array([1, -20, 3]),
    np.array([True, False]), rng.standard_normal((3, 4)), rng.standard_normal((2, 3, 4)),
    rng.standard_normal((40, 50)), rng.standard_normal(30), np.array([np.nan, np.inf, -1.]),
    np.array([np.nan, 1.5]), np.zeros((0, 3)), np.zeros(0), np.array([1e10, 1.]),
    np.array([123456.789]), rng.integers(-1000, 1000, (5, 30)), np.array([0., 0.]),
    np.arange(1500.), rng.standard_normal((2, 1000)), np.array([1e-8]), np.array(-0.),
    rng.standard_normal((4, 4, 4, 4)), rng.standard_normal((1, 70)) * 1e4,
]


@pytest.mark.parametrize("i", range(len(PRINT_CASES)))
def test_repr_like_torch(torch, i):
    a = PRINT_CASES[i]
    for d in ([None] if a.dtype.kind != "f" else [np.float32, np.float64]):
        v = a if d is None else a.astype(d)
        rg = v.dtype.kind == "f"
        t, ours = torch.tensor(v, requires_grad=rg), ag.tensor(v, requires_grad=rg)
        assert repr(ours) == repr(t).replace("torch.", "aotgrad.")
        if rg:
            assert repr(ours * 2) == repr(t * 2).replace("torch.", "aotgrad.")
