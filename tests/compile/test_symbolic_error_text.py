"""Errors raised while tracing with symbolic sizes name the sizes of the call, as eager
does (not the symbols), and a value check whose bound is a symbolic size still runs."""
import numpy as np
import pytest

import aotgrad
import aotgrad.nn.functional as F
from aotgrad.testing import assert_close


def _message(fn, args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return type(info.value), str(info.value)


def _t(shape, dtype=np.float32):
    return aotgrad.tensor(np.zeros(shape, dtype))


def add(x, y):
    return x + y


def matmul(x, w):
    return x @ w


def linear(x, w):
    return F.linear(x, w)


def cross_entropy(x, t):
    return F.cross_entropy(x, t)


@pytest.mark.parametrize("fn, args", [
    (add, (_t((5, 3)), _t((4, 3)))),
    (matmul, (_t((5, 3)), _t((4, 3)))),
    (linear, (_t((5, 3)), _t((4, 2)))),
    (cross_entropy, (_t((5, 3)), aotgrad.tensor(np.array([0, 1, 2, 7, 1])))),
], ids=["broadcast", "matmul", "linear", "target_out_of_range"])
@pytest.mark.parametrize("dynamic", [True, False])
def test_compiled_message_is_eager_message(fn, args, dynamic):
    eager = _message(fn, args)
    compiled = _message(aotgrad.compile(fn, dynamic=dynamic, backend="interpret"), args)
    assert compiled == eager
    assert "s0" not in eager[1] and "s1" not in eager[1]


def test_broadcast_message_names_the_sizes_that_differ():
    _, text = _message(add, (_t((5, 3)), _t((4, 3))))
    assert "tensor a (5)" in text and "tensor b (4)" in text


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_class_bound_check_runs_at_every_size_of_a_symbolic_program(backend):
    f = aotgrad.compile(cross_entropy, dynamic=True, backend=backend)
    rng = np.random.default_rng(0)
    for n, c in ((5, 3), (7, 4)):
        x = aotgrad.tensor(rng.standard_normal((n, c)).astype(np.float32))
        good = aotgrad.tensor(np.arange(n) % c)
        assert_close(f(x, good).numpy(), cross_entropy(x, good).numpy(), rtol=1e-6, atol=0,
                     equal_nan=True)
        bad = aotgrad.tensor(np.where(np.arange(n) == 2, c, np.arange(n) % c))
        with pytest.raises(IndexError, match=f"Target {c} is out of bounds \\(number of "
                                             f"classes {c};"):
            f(x, bad)
    assert f.stats.compiles == 1


def take_rows(x, idx):
    return x[idx]


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_index_bound_message_names_this_calls_size(backend):
    f = aotgrad.compile(take_rows, dynamic=True, backend=backend)
    for n in (5, 9):
        x = aotgrad.tensor(np.arange(n * 2, dtype=np.float32).reshape(n, 2))
        ok = aotgrad.tensor(np.array([0, n - 1]))
        np.testing.assert_array_equal(f(x, ok).numpy(), take_rows(x, ok).numpy())
        bad = aotgrad.tensor(np.array([0, n]))
        eager = _message(take_rows, (x, bad))
        assert f"with size {n}" in eager[1]
        with pytest.raises(eager[0], match=f"index {n} is out of bounds for dimension with "
                                           f"size {n} "):
            f(x, bad)
    assert f.stats.compiles == 1


# Each row: an op whose shape error, raised while tracing with symbolic sizes, must read as
# eager's for the same call (sizes, never the symbols s0, s1, ...).
_SHAPE_ERRORS = {
    "reshape": (lambda x: x.reshape(4, 4), ((5, 3),)),
    "view": (lambda x: x.view(7, -1), ((5, 3),)),
    "cat": (lambda x, y: aotgrad.cat([x, y], 0), ((5, 3), (5, 4))),
    "stack": (lambda x, y: aotgrad.stack([x, y]), ((5, 3), (4, 3))),
    "mm": (lambda x, y: aotgrad.mm(x, y), ((5, 3), (4, 2))),
    "bmm": (lambda x, y: aotgrad.bmm(x, y), ((2, 5, 3), (2, 4, 2))),
    "addmm": (lambda b, x, y: aotgrad.addmm(b, x, y), ((5, 2), (5, 3), (4, 2))),
    "index_int": (lambda x: x[7], ((5, 3),)),
    "select": (lambda x: x.select(0, 6), ((5, 3),)),
    "narrow": (lambda x: x.narrow(0, 3, 4), ((5, 3),)),
    "inplace_broadcast": (lambda x, y: x.add_(y), ((2, 3), (5, 3))),
    "expand": (lambda x: x.expand(5, 4), ((5, 3),)),
    "cat_other_dim": (lambda x, y: aotgrad.cat([x, y], 1), ((5, 3), (4, 3))),
    "bmm_batch": (lambda x, y: aotgrad.bmm(x, y), ((2, 5, 3), (3, 3, 2))),
    "tensordot": (lambda x, y: aotgrad.tensordot(x, y, dims=([1], [0])), ((5, 3), (4, 2))),
    "topk": (lambda x: aotgrad.topk(x, 9), ((5,),)),
    "split_sizes": (lambda x: x.split([2, 2], 0), ((5, 3),)),
    "conv2d_channels": (lambda x, w: F.conv2d(x, w), ((2, 3, 6, 6), (4, 5, 3, 3))),
    "max_pool2d_too_small": (lambda x: F.max_pool2d(x, 7), ((2, 3, 6, 6),)),
    "unfold": (lambda x: x.unfold(0, 7, 1), ((5, 3),)),
    "pad_negative": (lambda x: F.pad(x, (0, 0, -6, 0)), ((5, 3),)),
    "repeat_interleave": (lambda x: x.repeat_interleave(aotgrad.tensor(np.array([1, 2])), 0),
                          ((5, 3),)),
    # raised by a prim's shape rule (the sizes through its hints, as the call's)
    "scatter_add_src": (lambda x, i, s: x.scatter_add(0, i.long(), s), ((5, 3), (4, 3), (4, 2))),
    "scatter_index_larger": (lambda x, i, s: x.scatter(0, i.long(), s), ((5, 3), (7, 3), (5, 3))),
    "gather_index_dims": (lambda x, i: x.gather(1, i.long()), ((5, 3), (5,))),
    "dot_prim": (lambda x, y: aotgrad.tensordot(x, y, dims=([0], [0])), ((5, 3), (4, 3))),
}


@pytest.mark.parametrize("name", list(_SHAPE_ERRORS))
def test_shape_error_traced_with_symbolic_sizes_is_eager_message(name):
    fn, shapes = _SHAPE_ERRORS[name]
    args = tuple(_t(s) for s in shapes)
    eager = _message(fn, args)
    compiled = _message(aotgrad.compile(fn, dynamic=True, backend="interpret"), args)
    assert compiled == eager
    sizes_named = {str(n) for s in shapes for n in s}
    assert any(n in eager[1] for n in sizes_named)
    assert not any(f"s{k}" in eager[1] for k in range(4))


def test_addmm_inner_size_mismatch_names_both_shapes_in_eager():
    kind, text = _message(aotgrad.addmm, (_t((5, 2)), _t((5, 3)), _t((4, 2))))
    assert kind is RuntimeError and "(5x3 and 4x2)" in text


def embedding(idx, w):
    return F.embedding(idx, w)


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_embedding_index_message_names_num_embeddings_of_each_call(backend):
    f = aotgrad.compile(embedding, dynamic=True, backend=backend)
    for n in (5, 8):
        w = _t((n, 3))
        bad = aotgrad.tensor(np.array([0, n]))
        eager = _message(embedding, (bad, w))
        assert f"num_embeddings={n};" in eager[1]
        kind, text = _message(f, (bad, w))
        assert kind is eager[0] and f"num_embeddings={n};" in text
        assert text.startswith("embedding(): index out of range")
    assert f.stats.compiles == 1


# Each row: an op whose run-time value check names the type of a tensor (the checked one or
# another); a symbolic program must name this call's sizes, not the traced call's.
_VALUE_CHECKS = {
    "embedding": (lambda i, w: F.embedding(i, w),
                  lambda n: (aotgrad.tensor(np.array([0, 9])), _t((n, 3)))),
    "one_hot": (lambda x: F.one_hot(x, 4),
                lambda n: (aotgrad.tensor(np.where(np.arange(n) == 2, 9, 1)),)),
    "cross_entropy": (cross_entropy,
                      lambda n: (_t((n, 3)), aotgrad.tensor(np.where(np.arange(n) == 1, 5, 0)))),
    "bce": (lambda x, t: F.binary_cross_entropy(x, t),
            lambda n: (aotgrad.tensor(np.where(np.arange(n) == 2, 1.5, .5).astype(np.float32)),
                       _t((n,)))),
    "index_select": (lambda x, i: x.index_select(0, i),
                     lambda n: (_t((n, 2)), aotgrad.tensor(np.array([0, n])))),
    "int_div": (lambda a, b: a // b,
                lambda n: (aotgrad.tensor(np.arange(n)), aotgrad.tensor(np.arange(n) % 2))),
}


@pytest.mark.parametrize("backend", ["interpret", "numba"])
@pytest.mark.parametrize("name", list(_VALUE_CHECKS))
def test_value_check_message_names_this_calls_types(name, backend):
    fn, make = _VALUE_CHECKS[name]
    f = aotgrad.compile(fn, dynamic=True, backend=backend)
    for n in (5, 7):
        args = make(n)
        eager = _message(fn, args)
        assert str(n) in eager[1], eager
        assert _message(f, args) == eager
    assert f.stats.compiles == 1
