"""ir.symbolic: sizes as integer polynomials with hints; decisions guarded under a ShapeEnv,
structural outside one."""
import itertools
import math
import operator

import pytest

from aotgrad.ir import symbolic
from aotgrad.ir.symbolic import ShapeEnv, hint, same, source


def _env(*hints):
    env = ShapeEnv()
    return env, [env.create_symbol(h, f"x.size({i})") for i, h in enumerate(hints)]


EXPRS = [
    lambda a, b: a * 4 + 2,
    lambda a, b: (a * b) // b,
    lambda a, b: (a * 4 + 6) // 4,
    lambda a, b: (a * 4 + 6) % 4,
    lambda a, b: (a + b) // a,
    lambda a, b: (a * b * 6) // (2 * a),
    lambda a, b: (a - 1) * (b + 3) - a * b,
    lambda a, b: math.prod((a, b, 3)),
    lambda a, b: (a * 4 - 1) // 4 + a % 3,
    lambda a, b: 100 // a + 7 % b,
]


@pytest.mark.parametrize("f", EXPRS)
def test_arithmetic_equals_integer_arithmetic_at_every_size(f):
    env, (s0, s1) = _env(8, 12)
    with env:
        e = f(s0, s1)
    assert hint(e) == f(8, 12)
    for a, b in itertools.product((2, 3, 5, 8, 13), (2, 4, 7, 12)):
        v = e.evaluate({"s0": a, "s1": b}) if hasattr(e, "evaluate") else e
        assert v == f(a, b), (source(e), a, b)
        if hasattr(e, "source"):
            assert eval(e.source(), {"s0": a, "s1": b}) == f(a, b)


def test_decisions_answer_from_hints_and_record_guards():
    env, (s0, s1) = _env(8, 12)
    with env:
        assert (s0 == s1) is False
        assert s0 % 4 == 0
        assert s1 > s0
    texts = [g.text for g in env.guards]
    assert texts == ["s0 != s1", "(s0 % 4) == 0", "s1 > s0"]   # what held at the hints
    for t in texts:
        assert eval(t, {"s0": 8, "s1": 12}) is True
    assert env.check({"s0": 16, "s1": 20})
    assert not env.check({"s0": 6, "s1": 20})      # 6 % 4 != 0
    assert not env.check({"s0": 16, "s1": 16})     # s0 == s1 now
    assert not env.check({"s0": 16, "s1": 12})     # s1 > s0 no longer
    for g in env.guards:
        assert eval(g.source(), {"s0": 16, "s1": 20}) is True


def test_facts_true_for_every_size_record_no_guard():
    env, (s0, s1) = _env(8, 12)
    with env:
        assert s0 != 1 and s0 != 0 and s0 > 1 and bool(s0)
        assert s0 + 1 > s0 and s0 * 3 >= s0 + 2 and s0 == s0
    assert env.guards == []


def test_int_specialises_with_a_guard_and_a_reason():
    env, (s0,) = _env(8)
    with env:
        assert int(s0 * 2) == 16
        assert list(range(s0)) == list(range(8))
    assert [s.value for s in env.specialised] == [16, 8]
    assert env.check({"s0": 8}) and not env.check({"s0": 9})


def test_outside_a_trace_comparisons_are_structural_and_int_refuses():
    env, (s0, s1) = _env(8, 8)
    assert (s0 == s1) is False and (s0 != s1) is True   # not provably equal
    assert (s0 * 2 == 2 * s0) is True and same(s0 * s1, s1 * s0)
    assert same(3, 3) and not same(s0, 8)
    assert {s0 * 2: "a"}[2 * s0] == "a"
    with pytest.raises(TypeError, match="s0"):
        int(s0)
    # an order that depends on the sizes has no answer without a trace to guard it (a
    # silent False for both s0 < s1 and s0 >= s1 would pick one branch for every size)
    for op in (operator.lt, operator.le, operator.gt, operator.ge):
        with pytest.raises(TypeError, match="depends on the sizes"):
            op(s0, s1)
    assert (s0 + 1 > s0) is True   # provable: answered
    assert env.guards == []


def test_substitute_and_free_symbols():
    env, (s0, s1) = _env(8, 12)
    e = (s0 * s1 + s0) // 2
    assert e.free_symbols == {"s0", "s1"}
    f = e.substitute({"s1": 4})
    assert f.free_symbols == {"s0"} and f.evaluate({"s0": 6}) == (6 * 4 + 6) // 2


def test_zero_and_one_are_never_symbols():
    env = ShapeEnv()
    for size in (0, 1):
        with pytest.raises(ValueError, match="specialised"):
            env.create_symbol(size, "x.size(0)")


def test_guard_ops_cover_every_comparison():
    env, (s0,) = _env(8)
    ops = [operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge]
    with env:
        got = [op(s0, 8) for op in ops]
    assert got == [op(8, 8) for op in ops]
    for v in (7, 8, 9):
        assert env.check({"s0": v}) == (v == 8)


def test_source_of_floor_division_by_a_product_evaluates_as_the_expression():
    # `n // 2*s0` would read as `(n // 2)*s0`: the divisor is parenthesised in the source
    env = symbolic.ShapeEnv()
    s0, s1 = env.create_symbol(3, "x.size(0)"), env.create_symbol(6, "x.size(1)")
    for e in ((s0 * s1) // (2 * s0), (s0 * s1) % (2 * s0), s1 // (s0 + 1)):
        for values in ({"s0": 3, "s1": 8}, {"s0": 5, "s1": 7}):
            assert eval(symbolic.source(e), {}, dict(values)) == symbolic.evaluate(e, values)
