"""The shape helpers of ir/symbolic.py the tracer and shape rules use: broadcasting,
slice bounds, the equalities a ShapeEnv pins, and the permissive checks a verifier makes
after the trace."""
import operator

import pytest

from aotgrad.ir import symbolic as S


def test_broadcast_keeps_symbols_and_guards_equal_sizes():
    env = S.ShapeEnv()
    with env:
        a, b = env.create_symbol(5, "x.size(0)"), env.create_symbol(5, "y.size(0)")
        assert S.broadcast_shapes((a, 4), (1, 4)) == (a, 4)
        out = S.broadcast_shapes((a, 1), (b, 3))
        assert out[0] is a and out[1] == 3
        with pytest.raises(ValueError):
            S.broadcast_shapes((a,), (3,))   # 5 != 3: cannot broadcast (a guard says why)
    assert any(g.text in ("s1 != s0", "s1 == s0") for g in env.guards)
    rep = env.replacements()
    assert list(rep) == ["s1"] and S.same(rep["s1"], a)   # the newer symbol pinned


def test_slice_indices_clamp_with_guards():
    env = S.ShapeEnv()
    with env:
        t = env.create_symbol(5, "x.size(1)")
        assert S.slice_indices(slice(None, t), 16) == (0, t, 1)
        n = env.create_symbol(7, "y.size(0)")
        start, stop, step = S.slice_indices(slice(-2, None), n)
        assert S.same(start, n - 2) and stop is n and step == 1
    assert env.check({"s0": 16, "s1": 7}) and not env.check({"s0": 17, "s1": 7})


def test_replacements_pin_equalities():
    env = S.ShapeEnv()
    with env:
        a, b, c = (env.create_symbol(h, f"x.size({i})") for i, h in enumerate((8, 3, 3)))
        assert a == 8 and c == b
        assert (a * 4) % 8 == 0      # a relation, not an equality of one symbol
    rep = env.replacements()
    assert rep["s0"] == 8 and S.same(rep["s2"], b) and "s1" not in rep


def test_checks_outside_an_env_trust_guarded_facts():
    env = S.ShapeEnv()
    with env:
        s = env.create_symbol(12, "x.size(0)")
        q = s // 4
    assert S.agree(q * 4, s)                 # s % 4 == 0 was the trace's guard to keep
    assert not S.agree(s + 1, s)             # provably different
    assert S.size_le(q, s) and not S.size_le(s + 1, s)
    assert S.nonnegative(q)
    with env:
        assert S.agree(q * 4, s) is True     # decided from hints under an env
    assert S.Guard(s - 12, operator.eq, True, "").source() == "(s0 - 12) == 0"


def test_pow_of_a_size():
    env = S.ShapeEnv()
    with env:
        s = env.create_symbol(3, "x.size(0)")
        assert S.same(s ** 2, s * s)
        assert s ** 0.5 == pytest.approx(3 ** 0.5)   # a number: specialised
    assert env.specialised and env.specialised[0].value == 3
