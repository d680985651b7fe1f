"""Sparse COO tensors (dense storage behind PyTorch's sparse API): construction, coalesce,
to_sparse/to_dense, sparse.mm/spmm/sum; results and gradients against closed forms and
PyTorch."""
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close

IDX = [[0, 1, 1, 0], [2, 0, 2, 2]]   # (0, 2) appears twice: uncoalesced
VALS = [3., 4., 5., 1.]


def _dense(idx, vals, shape):
    out = np.zeros(shape)
    for k, pos in enumerate(zip(*idx)):
        out[pos] += vals[k]
    return out


def test_construction_and_attributes():
    s = ag.sparse_coo_tensor(IDX, VALS, (2, 3))
    assert s.is_sparse and s.layout is ag.sparse_coo and not ag.ones(1).is_sparse
    assert s.shape == (2, 3) and s.dtype is ag.float32 and s._nnz() == 4
    assert s.sparse_dim() == 2 and s.dense_dim() == 0 and not s.is_coalesced()
    np.testing.assert_array_equal(s.to_dense().numpy(), _dense(IDX, VALS, (2, 3)))
    assert not s.to_dense().is_sparse
    assert s._values().tolist() == VALS
    with pytest.raises(RuntimeError, match="coalesce"):
        s.values()
    with pytest.raises(RuntimeError, match="coalesce"):
        s.indices()
    c = s.coalesce()
    assert c.is_coalesced() and c._nnz() == 3
    assert c.indices().tolist() == [[0, 1, 1], [2, 0, 2]] and c.values().tolist() == [4., 4., 5.]
    assert ag.sparse_coo_tensor(IDX, VALS).shape == (2, 3)           # size inferred
    h = ag.sparse_coo_tensor([[0, 2]], [[1., 2.], [3., 4.]], (3, 2))  # hybrid: a dense dim
    assert h.sparse_dim() == 1 and h.dense_dim() == 1
    np.testing.assert_array_equal(h.to_dense().numpy(), [[1, 2], [0, 0], [3, 4]])
    assert "layout=aotgrad.sparse_coo" in repr(s) and "nnz=4" in repr(s)


def test_construction_errors():
    with pytest.raises(RuntimeError, match="inconsistent"):
        ag.sparse_coo_tensor(IDX, VALS, (1, 3))
    with pytest.raises(RuntimeError, match="same number"):
        ag.sparse_coo_tensor(IDX, VALS[:3], (2, 3))
    with pytest.raises(RuntimeError, match="sparse_dim x nnz"):
        ag.sparse_coo_tensor([0, 1], [1., 2.], (2,))
    with pytest.raises(RuntimeError, match="strided"):
        ag.ones(2).values()
    with pytest.raises(AssertionError, match="CUDA"):
        ag.sparse_coo_tensor(IDX, VALS, (2, 3), device="cuda")


def test_to_sparse_roundtrip_and_grad():
    x = ag.tensor([[0., 2., 0.], [3., 0., -1.]], requires_grad=True)
    s = x.to_sparse()
    assert s.is_coalesced() and s.indices().tolist() == [[0, 1, 1], [1, 0, 2]]
    assert s.values().tolist() == [2., 3., -1.]
    w = ag.arange(6.).reshape(2, 3)
    (s.to_dense() * w).sum().backward()
    # the gradient reaching x through its sparse form is zero outside the pattern
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 0], [3, 0, 5]])
    r = ag.tensor([[0., 0.], [1., 0.], [0., 0.]]).to_sparse(1)
    assert r.indices().tolist() == [[1]] and r.values().tolist() == [[1., 0.]]


def test_spmm_gradients_closed_form():
    idx = ag.tensor(IDX)
    v = ag.tensor(VALS, dtype=ag.float64, requires_grad=True)
    d = ag.randn(3, 2, dtype=ag.float64, requires_grad=True)
    s = ag.sparse_coo_tensor(idx, v, (2, 3))
    out = ag.sparse.mm(s, d)
    a = _dense(IDX, VALS, (2, 3))
    assert_close(out.detach().numpy(), a @ d.detach().numpy(), rtol=1e-7, atol=0, equal_nan=True)
    g = ag.randn(2, 2, dtype=ag.float64)
    out.backward(g)
    assert_close(d.grad.numpy(), a.T @ g.numpy(), rtol=1e-7, atol=0, equal_nan=True)
    full = g.numpy() @ d.detach().numpy().T     # d out / d A
    assert_close(v.grad.numpy(), [full[i, j] for i, j in zip(*IDX)], rtol=1e-7, atol=0,
                 equal_nan=True)
    assert ag.spmm(s, d).tolist() == out.tolist()


def test_sparse_leaf_grad_is_masked():
    s = ag.sparse_coo_tensor([[0, 1], [1, 0]], [2., 3.], (2, 2), requires_grad=True)
    assert s.is_leaf and s.requires_grad and s.is_sparse
    d = ag.ones(2, 2)
    ag.sparse.mm(s, d).sum().backward()
    np.testing.assert_array_equal(s.grad.numpy(), [[0, 2], [2, 0]])


def test_sparse_sum():
    s = ag.sparse_coo_tensor(IDX, VALS, (2, 3))
    assert ag.sparse.sum(s).item() == sum(VALS)
    r = ag.sparse.sum(s, 1)
    assert r.is_sparse and r.to_dense().tolist() == [4., 9.]
    assert not ag.sparse.sum(s, (0, 1)).is_sparse


def test_gradcheck_through_sparse():
    idx = ag.tensor(IDX)
    v = ag.tensor(VALS, dtype=ag.float64, requires_grad=True)
    d = ag.randn(3, 4, dtype=ag.float64, requires_grad=True)
    assert ag.autograd.gradcheck(
        lambda v, d: ag.sparse.mm(ag.sparse_coo_tensor(idx, v, (2, 3)), d).tanh(), (v, d))
    assert ag.autograd.gradcheck(
        lambda v: ag.sparse.sum(ag.sparse_coo_tensor(idx, v, (2, 3)), 0).to_dense() ** 2,
        (v,))


def _torch_sparse(torch, idx, vals, shape, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.sparse_coo_tensor(torch.tensor(idx), vals, shape, **kw)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_spmm_matches_torch(torch, dtype):
    rng = np.random.default_rng(0)
    n, m, k, nnz = 5, 4, 3, 9
    idx = [rng.integers(0, n, nnz).tolist(), rng.integers(0, m, nnz).tolist()]
    vals = rng.standard_normal(nnz).astype(dtype)
    dense = rng.standard_normal((m, k)).astype(dtype)
    g = rng.standard_normal((n, k)).astype(dtype)
    res = {}
    for mod in (ag, torch):
        v = mod.tensor(vals, requires_grad=True)
        d = mod.tensor(dense, requires_grad=True)
        s = (_torch_sparse(torch, idx, v, (n, m)) if mod is torch else
             ag.sparse_coo_tensor(idx, v, (n, m)))
        out = mod.sparse.mm(s, d)
        (out * mod.tensor(g)).sum().backward()
        c = s.coalesce()
        res[mod.__name__] = (out.detach().numpy(), v.grad.numpy(), d.grad.numpy(),
                             c.indices().numpy(), c.values().detach().numpy(),
                             mod.spmm(s, d).detach().numpy(),
                             mod.sparse.sum(s).detach().numpy(),
                             mod.sparse.sum(s, 1).to_dense().detach().numpy())
    tol = 1e-5 if dtype == "float32" else 1e-12
    for a, b in zip(res["aotgrad"], res["torch"]):
        assert_close(a, b, rtol=tol, atol=tol, equal_nan=True)


def test_to_sparse_matches_torch(torch):
    x = np.array([[0., 2., 0.], [3., 0., -1.]])
    for mod in (ag, torch):
        t = mod.tensor(x, requires_grad=True)
        s = t.to_sparse()
        (s.to_dense() * mod.tensor(x + 1)).sum().backward()
        if mod is ag:
            ours = (s.indices().numpy(), s.values().detach().numpy(), t.grad.numpy())
        else:
            theirs = (s.indices().numpy(), s.values().detach().numpy(), t.grad.numpy())
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


def test_compiled_spmm_equals_eager():
    idx = ag.tensor(IDX)

    def f(v, d):
        return ag.sparse.mm(ag.sparse_coo_tensor(idx, v, (2, 3)), d).tanh().sum()

    v = ag.tensor(VALS, requires_grad=True)
    d = ag.randn(3, 2, requires_grad=True)
    f(v, d).backward()
    ge = (v.grad.numpy().copy(), d.grad.numpy().copy())
    v.grad = d.grad = None
    cf = ag.compile(f, backend="interpret")
    out = cf(v, d)
    out.backward()
    assert_close(out.item(), f(v, d).item(), rtol=1e-6, atol=0, equal_nan=True)
    assert_close(v.grad.numpy(), ge[0], rtol=1e-6, atol=0, equal_nan=True)
    assert_close(d.grad.numpy(), ge[1], rtol=1e-6, atol=0, equal_nan=True)


class _Spmm(ag.autograd.Function):
    """The sparse-attention pattern of graph attention networks: a sparse matrix saved for a
    hand-written backward that reads its indices."""

    @staticmethod
    def forward(ctx, indices, values, shape, b):
        a = ag.sparse_coo_tensor(indices, values, shape)
        ctx.save_for_backward(a, b)
        return ag.matmul(a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        assert a.is_sparse                      # the saved tensor keeps its layout
        edge = a._indices()[0, :] * a.shape[1] + a._indices()[1, :]
        return None, g.matmul(b.t()).view(-1)[edge], None, a.t().matmul(g)


def test_sparse_tensor_saved_by_a_function():
    idx = ag.tensor([[0, 1, 1], [2, 0, 2]])
    v = ag.tensor([3., 4., 5.], dtype=ag.float64, requires_grad=True)
    d = ag.randn(3, 2, dtype=ag.float64, requires_grad=True)
    assert ag.autograd.gradcheck(lambda v, d: _Spmm.apply(idx, v, ag.Size([2, 3]), d), (v, d))
    out = _Spmm.apply(idx, v, ag.Size([2, 3]), d)
    ref = ag.sparse.mm(ag.sparse_coo_tensor(idx, v, (2, 3)), d)
    assert_close(out.detach().numpy(), ref.detach().numpy(), rtol=1e-7, atol=0, equal_nan=True)


@pytest.mark.parametrize("log", [False, True])
def test_sparse_softmax_matches_torch(torch, log):
    idx = [[0, 0, 1, 2, 2], [0, 2, 1, 0, 1]]          # row 3 of 4 has no entries
    vals = np.array([1., 2., 3., 4., -1.])
    w = np.cos(np.arange(5.))
    res = []
    for mod in (ag, torch):
        v = mod.tensor(vals, requires_grad=True)
        s = (_torch_sparse(torch, idx, v, (4, 3)) if mod is torch else
             ag.sparse_coo_tensor(idx, v, (4, 3)))
        fn = mod.sparse.log_softmax if log else mod.sparse.softmax
        out = fn(s, 1).coalesce()
        (out.values() * mod.tensor(w)).sum().backward()
        res.append((out.indices().numpy(), out.values().detach().numpy(),
                    out.to_dense().detach().numpy(), v.grad.numpy()))
    for a, b in zip(*res):
        assert_close(a, b, rtol=1e-12, atol=1e-12, equal_nan=True)


def test_legacy_sparse_constructors():
    s = ag.sparse.FloatTensor(ag.tensor([[0, 1], [1, 0]]), ag.tensor([2., 3.], dtype=ag.float64),
                              ag.Size([2, 2]))
    assert s.is_sparse and s.dtype is ag.float32 and s.to_dense().tolist() == [[0, 2], [3, 0]]
    assert ag.sparse.DoubleTensor([[0]], [1.], (2,)).dtype is ag.float64
