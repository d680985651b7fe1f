"""Tensor API fixes found by the bug hunt against PyTorch (torch-free: closed forms and numpy)."""
import numpy as np
import pytest

import aotgrad as A
from aotgrad.testing import assert_close


def _x(*shape, requires_grad=False):
    n = int(np.prod(shape))
    return A.tensor(np.arange(n, dtype=np.float64).reshape(shape), requires_grad=requires_grad)


def test_movedim_with_tuples_places_each_source_at_its_destination():
    x = _x(2, 3, 4)
    assert tuple(A.movedim(x, (0, 1), (2, 0)).shape) == (3, 4, 2)
    np.testing.assert_array_equal(A.movedim(x, (0, 1), (2, 0)).numpy(),
                                  np.moveaxis(x.numpy(), (0, 1), (2, 0)))
    np.testing.assert_array_equal(x.movedim(-1, 0).numpy(), np.moveaxis(x.numpy(), -1, 0))
    with pytest.raises(RuntimeError, match="same number of dims"):
        A.movedim(x, (0, 1), (2,))


def test_gather_index_smaller_than_input_outside_dim():
    x = _x(3, 4, requires_grad=True)
    out = x.gather(0, A.tensor([[0, 2]]))
    np.testing.assert_array_equal(out.detach().numpy(), [[0., 9.]])
    out.sum().backward()
    expect = np.zeros((3, 4))
    expect[0, 0] = expect[2, 1] = 1
    np.testing.assert_array_equal(x.grad.numpy(), expect)


def test_gather_and_index_select_reject_negative_indices():
    with pytest.raises(IndexError, match="out of bounds"):
        A.arange(5).gather(0, A.tensor([-1]))
    with pytest.raises(IndexError, match="out of bounds"):
        A.arange(5).index_select(0, A.tensor([-1]))
    assert A.arange(5)[A.tensor([-1])].tolist() == [4]  # indexing does wrap


def test_take_along_dim_without_dim_uses_flat_input():
    x = _x(3, 4)
    assert A.take_along_dim(x, A.tensor([0, 11, 3])).tolist() == [0., 11., 3.]


def test_list_of_sequences_index_reads_as_tuple():
    x = _x(4, 3)
    assert x[[[0, 1], [1, 2]]].tolist() == [x[0, 1].item(), x[1, 2].item()]
    assert x[[0, slice(1, None)]].tolist() == [1., 2.]
    assert tuple(x[[0, 2]].shape) == (2, 3)  # a flat list stays a tensor index


def test_empty_list_index_selects_nothing():
    x = _x(3, 4, requires_grad=True)
    y = x[[]]
    assert tuple(y.shape) == (0, 4)
    (y.sum() + x.sum()).backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((3, 4)))


def test_bool_scalar_index_adds_a_dim():
    x = _x(4, 3)
    assert tuple(x[True].shape) == (1, 4, 3)
    assert tuple(x[False].shape) == (0, 4, 3)
    assert tuple(x[1, True].shape) == (1, 3)
    assert tuple(x[..., False].shape) == (4, 3, 0)


def test_contiguous_copies_a_non_contiguous_tensor():
    x = A.zeros(3, 4)
    c = x.t().contiguous()
    c[0, 0] = 5.
    assert x[0, 0].item() == 0.
    assert c.is_contiguous() and not x.t().is_contiguous() and x.is_contiguous()
    assert x.contiguous() is x
    assert not x[:, ::2].is_contiguous() and x[1].is_contiguous()
    assert x.t().stride() == (1, 4) and x.stride(0) == 4


def test_view_of_non_contiguous_tensor_raises_and_reshape_copies():
    x = A.zeros(3, 4)
    with pytest.raises(RuntimeError, match="Use .reshape"):
        x.t().view(12)
    assert tuple(x.t().reshape(12).shape) == (12,)
    v = x.view(2, 6)
    v[0, 0] = 1.
    assert x[0, 0].item() == 1.


def test_expand_rejects_minus_one_in_a_new_leading_dim():
    with pytest.raises(RuntimeError, match="leading, non-existing dimension 0"):
        A.zeros(2).expand(-1, 2)
    assert tuple(A.zeros(2, 1).expand(3, -1, 4).shape) == (3, 2, 4)


def test_cat_zero_dim_and_tril_one_dim_errors():
    with pytest.raises(RuntimeError, match="zero-dimensional tensor"):
        A.cat([A.tensor(1.), A.tensor(2.)])
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        A.zeros(3).tril()


def test_flip_accepts_dims_as_varargs():
    x = _x(2, 3)
    np.testing.assert_array_equal(x.flip(0, 1).numpy(), x.numpy()[::-1, ::-1])
    np.testing.assert_array_equal(x.flip([1]).numpy(), x.numpy()[:, ::-1])


def test_numpy_scalar_keeps_its_dtype():
    assert A.tensor(np.float64(2.5)).dtype is A.float64
    assert A.tensor(np.int32(2)).dtype is A.int32
    assert A.tensor(2.5).dtype is A.float32


def test_arange_errors_and_float_lengths():
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        A.arange(0, 5, 0)
    with pytest.raises(RuntimeError, match="inconsistent with step sign"):
        A.arange(0, 5, -1)
    assert A.arange(0, 1, 0.1).shape[0] == 10
    assert A.arange(-1, 1, 0.3).shape[0] == 7  # ceil((end - start) / step)
    assert A.arange(A.tensor(3)).tolist() == [0, 1, 2]


def test_randint_high_and_size_positional_and_bernoulli_p():
    r = A.randint(5, (200,))
    assert tuple(r.shape) == (200,) and r.dtype is A.int64
    assert 0 <= r.min().item() and r.max().item() < 5
    assert A.bernoulli(A.zeros(3), p=1.0).tolist() == [1., 1., 1.]
    assert A.bernoulli(A.ones(3), p=0.0).tolist() == [0., 0., 0.]


def test_logspace():
    assert_close(A.logspace(0, 2, 3).numpy(), [1., 10., 100.], rtol=1e-7, atol=0, equal_nan=True)
    assert_close(A.logspace(0, 3, 4, base=2).numpy(), [1., 2., 4., 8.], rtol=1e-7, atol=0,
                 equal_nan=True)
    assert A.logspace(0, 1, 2).dtype is A.float32


def test_bitwise_operators_integer_bitwise_bool_logical_float_raises():
    assert (A.tensor([5, 6]) & A.tensor([3, 3])).tolist() == [5 & 3, 6 & 3]
    assert (~A.tensor([5, 0])).tolist() == [~5, ~0]
    with pytest.raises(TypeError, match="float32"):
        ~A.tensor([5.0, 0.0])
    assert (A.tensor([True, False]) & A.tensor([True, True])).tolist() == [True, False]
    assert (~A.tensor([True, False])).tolist() == [False, True]
    b = A.tensor([True, False])
    b |= A.tensor([False, True])
    assert b.tolist() == [True, True]


def test_type_and_inplace_floordiv_mod():
    assert A.tensor([1.5]).type() == "torch.FloatTensor"
    assert A.tensor([1.5]).type(A.int64).dtype is A.int64
    assert A.tensor([1.5]).type("torch.DoubleTensor").dtype is A.float64
    x = A.tensor([5, 7])
    x //= 2
    assert x.tolist() == [2, 3]
    x %= 2
    assert x.tolist() == [0, 1]
    assert A.zeros(2, 3).ndimension() == 2 and A.zeros(2, 3).nelement() == 6


@pytest.mark.parametrize("fn, name", [
    (lambda x: x[0], "SelectBackward0"), (lambda x: x[1:], "SliceBackward0"),
    (lambda x: x[A.tensor([0, 0])], "IndexBackward0"), (lambda x: x.split(1)[1], "SplitBackward0"),
    (lambda x: x.split([1, 1])[0], "SplitWithSizesBackward0"),
    (lambda x: x.unbind()[1], "UnbindBackward0"),
    (lambda x: x[:, :1].squeeze(1), "SqueezeBackward1"),
    (lambda x: x[:, :1].squeeze(), "SqueezeBackward0"),
])
def test_grad_fn_names_of_indexing_and_splitting(fn, name):
    assert fn(A.ones(2, 3, requires_grad=True)).grad_fn.name() == name


def test_version_is_an_int():
    x = A.zeros(3)
    v0 = x._version
    x[0] = 1.
    assert x._version - v0 == 1


def test_version_int_is_shared_with_views_and_detached_aliases_but_not_data():
    x = A.zeros(4)
    v, d, data = x[1:], x.detach(), x.data
    v.add_(1)
    d.mul_(2)
    assert type(x._version) is int and type(v._version) is int
    assert x._version == v._version == d._version == 2
    data.add_(1)                      # .data has a counter of its own (as in PyTorch)
    assert (x._version, data._version) == (2, 1)
    with pytest.raises(AttributeError):
        x._version = 5


def test_asarray_of_grad_requiring_tensor_raises():
    with pytest.raises(RuntimeError, match="requires grad"):
        np.asarray(A.ones(2, requires_grad=True))


def test_asarray_of_detached_or_grad_free_tensor_still_converts():
    x = A.tensor([1., 2.], requires_grad=True)
    np.testing.assert_array_equal(np.asarray(x.detach()), [1., 2.])
    a = np.asarray((x * 2).detach(), dtype=np.float64)
    assert a.dtype == np.float64
    np.testing.assert_array_equal(a, [2., 4.])
    with A.no_grad():
        np.testing.assert_array_equal(np.asarray(x * 3), [3., 6.])
    with pytest.raises(RuntimeError, match="requires grad"):
        np.array(x * 2)


def test_float_and_int_of_many_elements_are_value_errors():
    for conv in (float, int):
        with pytest.raises(ValueError, match="only one element tensors"):
            conv(A.tensor([1., 2.]))
    assert float(A.tensor([[2.5]])) == 2.5 and int(A.tensor([3])) == 3


# ---- ops added by the hunt (closed forms / numpy) ------------------------------------------
def test_diagonal_diag_and_diag_embed_against_numpy():
    a = np.arange(12.).reshape(3, 4)
    x = A.tensor(a, requires_grad=True)
    for k in (-2, 0, 1, 5):
        np.testing.assert_array_equal(x.diagonal(k).detach().numpy(), np.diagonal(a, k))
        np.testing.assert_array_equal(A.diag(x, k).detach().numpy(), np.diag(a, k))
    x.diagonal(1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.eye(3, 4, 1))
    v = np.array([1., 2., 3.])
    for k in (-1, 0, 2):
        np.testing.assert_array_equal(A.diag(A.tensor(v), k).numpy(), np.diag(v, k))
    e = A.diag_embed(A.tensor(np.arange(6.).reshape(2, 3)))
    np.testing.assert_array_equal(e.numpy()[1], np.diag([3., 4., 5.]))


def test_unfold_tensor_split_rot90_repeat_interleave():
    a = np.arange(7.)
    x = A.tensor(a, requires_grad=True)
    w = x.unfold(0, 3, 2)
    np.testing.assert_array_equal(w.detach().numpy(), [[0, 1, 2], [2, 3, 4], [4, 5, 6]])
    w.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1, 1, 2, 1, 2, 1, 1])
    assert [len(p) for p in A.tensor_split(A.tensor(a), 3)] == [3, 2, 2]
    assert [p.tolist() for p in A.tensor(a).tensor_split([1, 5])] == [[0.], [1., 2., 3., 4.],
                                                                        [5., 6.]]
    m = np.arange(6.).reshape(2, 3)
    for k in range(-1, 5):
        np.testing.assert_array_equal(A.rot90(A.tensor(m), k).numpy(), np.rot90(m, k))
    np.testing.assert_array_equal(A.tensor(m).repeat_interleave(2, dim=1).numpy(),
                                  np.repeat(m, 2, axis=1))
    np.testing.assert_array_equal(
        A.tensor(m).repeat_interleave(A.tensor([0, 2]), dim=0).numpy(),
        np.repeat(m, [0, 2], axis=0))


def test_scatter_index_add_copy_fill_and_gradients():
    x = A.tensor(np.zeros((2, 4)), requires_grad=True)
    src = A.tensor(np.array([[1., 2.], [3., 4.]]), requires_grad=True)
    y = x.scatter(1, A.tensor([[3, 0], [1, 1]]), src)
    # duplicate targets: the last write wins here (PyTorch leaves the winner unspecified)
    np.testing.assert_array_equal(y.detach().numpy(), [[2, 0, 0, 1], [0, 4, 0, 0]])
    (y * A.tensor(np.arange(8.).reshape(2, 4))).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 1, 2, 0], [4, 0, 6, 7]])
    assert src.grad.numpy()[0].tolist() == [3., 0.]
    z = A.zeros(3, 2).index_add(0, A.tensor([0, 0, 2]), A.ones(3, 2), alpha=2)
    assert z.tolist() == [[4., 4.], [0., 0.], [2., 2.]]
    c = A.zeros(3, 2).index_copy(0, A.tensor([2, 0]), A.tensor([[1., 2.], [3., 4.]]))
    assert c.tolist() == [[3., 4.], [0., 0.], [1., 2.]]
    f = A.zeros(2, 3).index_fill(1, A.tensor([-1]), 5.)
    assert f.tolist() == [[0., 0., 5.], [0., 0., 5.]]
    t = A.zeros(3)
    t.index_fill_(0, A.tensor([1]), 2.)
    assert t.tolist() == [0., 2., 0.]


def test_masked_select_take_nonzero_where_single_arg():
    a = np.arange(6.).reshape(2, 3)
    x = A.tensor(a, requires_grad=True)
    s = x.masked_select(A.tensor([True, False, True]))
    assert s.tolist() == [0., 2., 3., 5.]
    s.sum().backward()
    assert x.grad.tolist() == [[1., 0., 1.], [1., 0., 1.]]
    assert A.take(A.tensor(a), A.tensor([[-1, 0]])).tolist() == [[5., 0.]]
    assert (A.tensor(a) > 2).nonzero().tolist() == [[1, 0], [1, 1], [1, 2]]
    rows, cols = A.where(A.tensor(a) > 3)
    assert rows.tolist() == [1, 1] and cols.tolist() == [1, 2]
    assert A.argwhere(A.tensor([0., 1.])).tolist() == [[1]]


def test_multinomial_shapes_distinctness_and_frequencies():
    p = A.tensor([0.1, 0., 0.6, 0.3])
    s = A.multinomial(p, 20000, replacement=True)
    assert s.dtype is A.int64 and tuple(s.shape) == (20000,)
    freq = np.bincount(s.numpy(), minlength=4) / 20000
    assert_close(freq, [0.1, 0., 0.6, 0.3], rtol=1e-7, atol=0.02, equal_nan=True)
    d = A.multinomial(A.ones(2, 5), 5)
    assert all(sorted(r) == list(range(5)) for r in d.tolist())
    with pytest.raises(RuntimeError, match="not enough"):
        A.multinomial(p, 4)


def test_bool_mask_of_wrong_shape_raises():
    with pytest.raises(IndexError, match="shape of the mask"):
        A.zeros(5)[A.tensor([True, False])]
    with pytest.raises(IndexError, match="shape of the mask"):
        A.zeros(3, 4)[:, A.tensor([True, False, True])]
    assert A.tensor(5.)[A.tensor(True)].tolist() == [5.]  # a 0-d mask acts like True
    assert tuple(A.tensor(5.)[A.tensor(False)].shape) == (0,)


def test_float_index_is_index_error_and_setitem_rejects_negative_steps():
    with pytest.raises(IndexError, match="valid indices"):
        A.zeros(5)[1.0]
    x = A.zeros(5)
    with pytest.raises(ValueError, match="step must be greater than zero"):
        x[::-1] = 1.
    assert x.tolist() == [0.] * 5


def test_inplace_after_mul_by_constant_is_fine():
    x = A.ones(3, requires_grad=True)
    y = x * 1
    z = y * A.tensor([5., 5., 5.])
    y.add_(1)
    z.sum().backward()
    assert x.grad.tolist() == [5., 5., 5.]


def test_mul_saves_each_operand_only_for_the_other_ones_gradient():
    x, c = A.tensor([1., 2.], requires_grad=True), A.tensor([3., 4.])
    n = (x * c).grad_fn
    assert n._saved_self is None and n._saved_other.tolist() == [3., 4.]
    n = (c * x).grad_fn
    assert n._saved_other is None and n._saved_self.tolist() == [3., 4.]
    y = x * 1
    z = y * c
    c.add_(1)                          # c was saved for y's gradient: backward refuses
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    w = x * 1
    z = w * w                          # both need a gradient: both saved
    w.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_inplace_after_mul_by_constant_is_fine_when_compiled():
    def f(x, c):
        y = x * 1
        z = y * c
        y.add_(1)
        return (z * x).sum()
    x, c = A.tensor([1., 2., 3.], requires_grad=True), A.tensor([5., 6., 7.])
    out = A.compile(f, backend="interpret")(x, c)
    out.backward()
    assert_close(out.item(), 5. + 24. + 63., rtol=1e-7, atol=0, equal_nan=True)
    assert_close(x.grad.numpy(), 2 * c.numpy() * x.detach().numpy(), rtol=1e-7, atol=0,
                 equal_nan=True)


def test_negative_sizes_raise_runtime_error_and_new_empty():
    with pytest.raises(RuntimeError, match="negative dimension"):
        A.zeros(-1)
    with pytest.raises(RuntimeError, match="greater or equal to 0"):
        A.eye(-1)
    e = A.ones(1, dtype=A.float64).new_empty(2, 3)
    assert tuple(e.shape) == (2, 3) and e.dtype is A.float64


def test_python_float_dtype_is_float64():
    assert A.zeros(2, dtype=float).dtype is A.float64
    assert A.ones(2).to(float).dtype is A.float64 and A.ones(2).to(int).dtype is A.int64
