"""The `_foreach_*` functions: one op over a list of tensors (a tuple of results), with the
operand forms PyTorch takes (a number, a list of numbers or tensors, a 0-d tensor, a 1-d
tensor of values), in-place forms that modify each tensor and return the list given,
gradients through them, and the list errors. Closed forms against the per-tensor ops, and
PyTorch where installed."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.runtime import foreach_ops
from aotgrad.testing import assert_close

XS = [[0.5, 0.25, 0.75], [0.2], [[0.1, 0.6], [0.3, 0.9]]]


def _list(T, dtype="float64", rg=False):
    return [T.tensor(x, dtype=getattr(T, dtype), requires_grad=rg) for x in XS]


def _np(ts):
    return [t.detach().numpy() for t in ts]


@pytest.mark.parametrize("op", foreach_ops.UNARY)
def test_unary_is_the_op_on_each_tensor(op):
    xs = _list(ag)
    got = getattr(ag, f"_foreach_{op}")(xs)
    assert type(got) is tuple and len(got) == len(xs)
    for g, x in zip(got, xs):
        assert_close(g.numpy(), getattr(x, op)().numpy(), rtol=1e-7, atol=0, equal_nan=True)
    ys = _list(ag)
    assert getattr(ag, f"_foreach_{op}_")(ys) is ys
    for y, g in zip(ys, got):
        assert_close(y.numpy(), g.numpy(), rtol=1e-7, atol=0, equal_nan=True)
        assert y._version == 1


OPERANDS = {"number": lambda T: 2.0, "numbers": lambda T: [2.0, 3.0, 0.5],
            "tensors": lambda T: [T.tensor(v, dtype=T.float64) for v in
                                  ([1.0, 2.0, 3.0], [4.0], [[0.5], [2.0]])],
            "scalar_tensor": lambda T: T.tensor(1.5, dtype=T.float64)}


@pytest.mark.parametrize("op", foreach_ops.BINARY)
@pytest.mark.parametrize("operand", OPERANDS)
def test_binary_forms(op, operand):
    xs, other = _list(ag), OPERANDS[operand](ag)
    others = other if isinstance(other, list) else [other] * len(xs)
    got = getattr(ag, f"_foreach_{op}")(xs, other)
    for g, x, o in zip(got, xs, others):
        assert_close(g.numpy(), getattr(x, op)(o).numpy(), rtol=1e-7, atol=0, equal_nan=True)
    ys = _list(ag)
    getattr(ag, f"_foreach_{op}_")(ys, other)
    for y, g in zip(ys, got):
        assert_close(y.numpy(), g.numpy(), rtol=1e-7, atol=0, equal_nan=True)


def test_alpha_and_ternary_ops():
    xs = _list(ag)
    got = ag._foreach_sub(xs, [ag.full_like(x, v) for x, v in zip(xs, (1.0, 2.0, 3.0))],
                          alpha=2)
    assert_close(got[1].numpy(), [0.2 - 4.0], rtol=1e-7, atol=0, equal_nan=True)
    with pytest.raises(TypeError, match="alpha"):
        ag._foreach_sub(xs, 1.0, alpha=2)
    t1, t2 = _list(ag), [ag.full_like(x, 2.0) for x in xs]
    for value in (0.5, [0.5, 1.0, 2.0], ag.tensor([0.5, 1.0, 2.0], dtype=ag.float64)):
        vs = [0.5, 1.0, 2.0] if not isinstance(value, float) else [0.5] * 3
        for op in ("addcmul", "addcdiv"):
            got = getattr(ag, f"_foreach_{op}")(xs, t1, t2, value)
            for g, x, a, b, v in zip(got, xs, t1, t2, vs):
                assert_close(g.numpy(), getattr(x, op)(a, b, value=v).numpy(), rtol=1e-7, atol=0,
                             equal_nan=True)
    got = ag._foreach_lerp(xs, t2, 0.25)
    assert_close(got[0].numpy(), np.array(XS[0]) + 0.25 * (2 - np.array(XS[0])), rtol=1e-7, atol=0,
                 equal_nan=True)
    norms = ag._foreach_norm(xs)
    assert_close([n.item() for n in norms], [np.linalg.norm(np.ravel(x)) for x in XS], rtol=1e-7,
                 atol=0, equal_nan=True)
    ag._foreach_zero_(xs)
    assert all(not x.numpy().any() for x in xs)
    ag._foreach_copy_(xs, t2)
    assert all((x.numpy() == 2).all() for x in xs)


def test_gradients_flow_through_each_tensor():
    a = [ag.tensor(1.0, requires_grad=True), ag.tensor(2.0, requires_grad=True)]
    b = ag._foreach_sin(a)               # (sin saves its input: b may be modified in place)
    ag._foreach_mul_(b, [2.0, 3.0])
    (b[0] + b[1]).backward()
    assert_close([a[0].grad.item(), a[1].grad.item()], [2 * np.cos(1.0), 3 * np.cos(2.0)],
                 rtol=1e-7, atol=0, equal_nan=True)
    # exp saves its result: modifying it in place is refused, as for the per-tensor op
    b = ag._foreach_exp(a)
    ag._foreach_add_(b, 1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        (b[0] + b[1]).backward()


def test_errors():
    xs = _list(ag)
    with pytest.raises(RuntimeError, match="must have the same number of tensors, got 3 and 2"):
        ag._foreach_add(xs, [1.0, 2.0])
    with pytest.raises(RuntimeError, match="at least one tensor"):
        ag._foreach_exp([])
    with pytest.raises(TypeError, match="alpha"):
        ag._foreach_mul(xs, 2.0, alpha=3)


def test_dtype_kept():
    got = ag._foreach_mul(_list(ag, "float32"), 3)
    assert all(g.dtype is ag.float32 for g in got)


def _all_ops(T):
    res = []
    for op in foreach_ops.UNARY:
        res.append(_np(getattr(T, f"_foreach_{op}")(_list(T))))
    for op in foreach_ops.BINARY:
        for make in OPERANDS.values():
            res.append(_np(getattr(T, f"_foreach_{op}")(_list(T), make(T))))
    xs = _list(T)
    T._foreach_addcdiv_(xs, _list(T), [T.full_like(x, 2.0) for x in xs], [0.5, 1.0, 2.0])
    res.append(_np(xs))
    a = [T.tensor(1.0, requires_grad=True), T.tensor(1.0, requires_grad=True)]
    b = T._foreach_sin(a)
    T._foreach_add_(b, T.tensor(1.0), alpha=2)
    (b[0] * b[1]).backward()
    res.append([a[0].grad.numpy(), a[1].grad.numpy()])
    return res


def test_matches_torch(torch):
    for got, want in zip(_all_ops(ag), _all_ops(torch)):
        for g, w in zip(got, want):
            assert_close(g, w, rtol=1e-6, atol=0, equal_nan=True)


def test_return_types_match_torch(torch):
    def kinds(T):
        xs = _list(T)
        return (type(T._foreach_exp(xs)), type(T._foreach_add(xs, 1.0)),
                type(T._foreach_norm(xs)), T._foreach_add_(xs, 1.0) is xs,
                T._foreach_zero_(xs) is xs)
    assert kinds(ag) == kinds(torch)
