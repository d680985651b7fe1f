"""int8/int16/uint8 and the integer bitwise ops against PyTorch: dtypes from type promotion,
wrap-around arithmetic, shifts by any count, eager and compiled (interpret and numba)."""
import numpy as np
import pytest

import aotgrad
from torch_compare import close

INTS = ("uint8", "int8", "int16", "int32", "int64")


def _pair(torch, name, values):
    return aotgrad.tensor(np.array(values).astype(name)), \
        torch.tensor(np.array(values).astype(name))


@pytest.mark.parametrize("a", INTS + ("bool",))
@pytest.mark.parametrize("b", INTS + ("bool",))
def test_promotion_matches_torch(torch, a, b):
    x, tx = _pair(torch, a, [1, 0])
    y, ty = _pair(torch, b, [1, 1])
    assert aotgrad.promote_types(getattr(aotgrad, a if a != "bool" else "bool"),
                                 getattr(aotgrad, b if b != "bool" else "bool")).name == \
        str(torch.promote_types(tx.dtype, ty.dtype)).split(".")[1]
    close(x + y, tx + ty)
    close(x * 3, tx * 3)
    close(x | y, tx | ty)


@pytest.mark.parametrize("name", ("uint8", "int8", "int16"))
def test_wraparound_and_reductions(torch, name):
    rng = np.random.default_rng(1)
    vals = rng.integers(0 if name == "uint8" else -100, 100, 40)
    x, tx = _pair(torch, name, vals)
    y, ty = _pair(torch, name, vals[::-1].copy())
    close(x + y * 2, tx + ty * 2)
    close(x - 7, tx - 7)
    close(-x, -tx)
    close(x.sum(), tx.sum())
    close(x.cumsum(0), tx.cumsum(0))
    close(x.max(), tx.max())
    close(x / 3, tx / 3)
    close(x.float() * 0.5, tx.float() * 0.5)


@pytest.mark.parametrize("name", INTS)
def test_bitwise_ops_match_torch(torch, name):
    rng = np.random.default_rng(2)
    lo = 0 if name == "uint8" else -120
    x, tx = _pair(torch, name, rng.integers(lo, 120, 64))
    y, ty = _pair(torch, name, rng.integers(lo, 120, 64))
    s, ts = _pair(torch, name, rng.integers(0 if name == "uint8" else -3, 70, 64))
    close(x & y, tx & ty)
    close(x | y, tx | ty)
    close(x ^ y, tx ^ ty)
    close(~x, ~tx)
    close(x << s, tx << ts)
    close(x >> s, tx >> ts)
    close(aotgrad.bitwise_left_shift(x, 2), torch.bitwise_left_shift(tx, 2))
    close(x & 6, tx & 6)
    close(5 ^ x, 5 ^ tx)
    close(1 << s.clamp(0, 5), 1 << ts.clamp(0, 5))
    z, tz = x.clone(), tx.clone()
    z &= y
    tz &= ty
    z >>= 1
    tz >>= 1
    close(z, tz)


def test_bool_bitwise_and_errors(torch):
    a, ta = _pair(torch, "bool", [True, False, True])
    b, tb = _pair(torch, "bool", [True, True, False])
    close(a & b, ta & tb)
    close(a ^ b, ta ^ tb)
    close(~a, ~ta)
    close(a & 1, ta & 1)
    with pytest.raises(TypeError, match="bitwise_and.*float32"):
        aotgrad.tensor([1.0]) & 1
    with pytest.raises(TypeError, match="bitwise_left_shift"):
        aotgrad.tensor([1.0]) << 1


def test_legacy_names(torch):
    assert aotgrad.ByteTensor([1, 2]).dtype is aotgrad.uint8
    assert aotgrad.CharTensor(3).dtype is aotgrad.int8
    assert aotgrad.ShortTensor([1]).dtype is aotgrad.int16
    t = aotgrad.tensor([1, 2])
    assert t.byte().dtype is aotgrad.uint8 and t.char().dtype is aotgrad.int8
    assert t.short().type() == torch.tensor([1, 2]).short().type()
    assert isinstance(t.byte(), aotgrad.ByteTensor)
    assert aotgrad.tensor(np.array([3, 4], np.uint8)).dtype is aotgrad.uint8


@pytest.mark.parametrize("backend", ("interpret", "numba"))
@pytest.mark.parametrize("name", INTS)
def test_compiled_equals_eager(name, backend):
    def f(a, b, s):
        return ((a & b) ^ (a | 3)) + ~a, a << s, a >> s, (a + b) * 3 - b, (a ^ b).sum()

    rng = np.random.default_rng(3)
    d = getattr(aotgrad, name)
    a, b = (aotgrad.tensor(rng.integers(-128, 127, 50).astype(d.np)) for _ in range(2))
    s = aotgrad.tensor(rng.integers(-2, 70, 50).astype(d.np))
    for e, c in zip(f(a, b, s), aotgrad.compile(f, backend=backend)(a, b, s)):
        assert e.dtype is c.dtype
        np.testing.assert_array_equal(e.numpy(), c.numpy())


@pytest.mark.parametrize("name", ("uint8", "int8", "int16", "int32"))
def test_python_int_outside_the_range_wraps_like_torch(torch, name):
    x, tx = _pair(torch, name, [1, 100])
    for v in (-5, 300, -70000):
        close(x + v, tx + v)
        close(x * v, tx * v)
    close(x.clamp(-5, 5), tx.clamp(-5, 5))
