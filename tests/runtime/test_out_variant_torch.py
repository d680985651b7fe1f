"""`out=`: the result written into the given tensor(s) (resized and cast as PyTorch does, version
bumped once); refused where autograd (reverse or forward mode) would have to record it.
resize_/set_ version counting. Compared with PyTorch where it is installed."""
import warnings

import numpy as np
import pytest

import aotgrad
from aotgrad.testing import assert_close


def test_out_receives_result_and_is_returned():
    a, b = aotgrad.tensor([1.0, 2.0]), aotgrad.tensor([3.0, 4.0])
    o = aotgrad.zeros(2)
    v0 = o._version
    assert aotgrad.mul(a, b, out=o) is o
    assert o.tolist() == [3.0, 8.0] and o._version == v0 + 1
    view_target = aotgrad.zeros(4)
    aotgrad.exp(aotgrad.zeros(2), out=view_target[1:3])   # written through a view
    assert view_target.tolist() == [0.0, 1.0, 1.0, 0.0]


def test_out_multi_output():
    x = aotgrad.tensor([[1.0, 5.0], [7.0, 2.0]])
    values, indices = aotgrad.zeros(2), aotgrad.zeros(2, dtype=aotgrad.int64)
    r = aotgrad.max(x, 1, out=(values, indices))
    assert r.values is values and r.indices is indices
    assert values.tolist() == [5.0, 7.0] and indices.tolist() == [1, 0]


def test_out_requires_grad_refused_and_allowed_under_no_grad():
    a = aotgrad.randn(2, 2, requires_grad=True)
    b = aotgrad.randn(2, 2)
    o = aotgrad.zeros(2, 2)
    with pytest.raises(RuntimeError, match=r"mul\(\): functions with out=\.\.\. arguments don't "
                                           r"support automatic differentiation"):
        aotgrad.mul(a, b, out=o)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        aotgrad.mul(b, b, out=a)
    with aotgrad.no_grad():
        aotgrad.mul(a, b, out=o)
    assert_close(o.numpy(), a.detach().numpy() * b.numpy(), rtol=1e-7, atol=0, equal_nan=True)


def test_out_forward_ad_refused():
    fwAD = aotgrad.autograd.forward_ad
    with fwAD.dual_level():
        dual = fwAD.make_dual(aotgrad.rand(2), aotgrad.rand(2))
        plain = aotgrad.rand(2)
        for args, out in (((plain, plain), dual), ((dual, plain), plain)):
            with pytest.raises(RuntimeError, match="add_out that does not support it because "
                                                   "it is an out= function"):
                aotgrad.add(*args, out=out)


def _resize_and_cast(mod):
    b = mod.ones(2, 2)
    o = mod.zeros(3)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        mod.add(b, b, out=o)
    empty = mod.zeros(0)
    with warnings.catch_warnings(record=True) as w_empty:
        warnings.simplefilter("always")
        mod.add(b, b, out=empty)
    wide = mod.zeros(2, 2, dtype=mod.float64)
    mod.add(b, b, out=wide)
    try:
        mod.add(b, b, out=mod.zeros(2, 2, dtype=mod.int64))
        cast_error = None
    except RuntimeError as e:
        cast_error = "can't be cast" in str(e)
    return (tuple(o.shape), o._version, len(w), len(w_empty), tuple(empty.shape),
            str(wide.dtype).split(".")[-1], cast_error, o.tolist())


def test_out_resize_and_cast(torch):
    assert _resize_and_cast(aotgrad) == _resize_and_cast(torch)


def _resize_versions(mod):
    x = mod.zeros(2, 3)
    seen = []
    for size in ((3, 2), (3, 2), (2,), (7,)):
        x.resize_(size)
        seen.append(x._version)
    return seen


def test_resize_bumps_version_only_when_the_shape_changes(torch):
    assert _resize_versions(aotgrad) == [1, 1, 2, 3]
    assert _resize_versions(aotgrad) == _resize_versions(torch)


def test_set_shares_memory_and_shrinks_a_parameter():
    p = aotgrad.nn.Parameter(aotgrad.ones(16, dtype=aotgrad.float64))
    for n in (15, 14):
        with aotgrad.no_grad():
            p.set_(p[1:])
            p.grad = None
        aotgrad.cat((p, p)).sum().backward()
        assert tuple(p.grad.shape) == (n,) and p.grad.tolist() == [2.0] * n
    src = aotgrad.zeros(3)
    t = aotgrad.ones(2)
    v0 = t._version
    t.set_(src)
    src[0] = 5.0
    assert t.tolist() == [5.0, 0.0, 0.0] and t._version > v0
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        aotgrad.ones(2, requires_grad=True).set_(src)
