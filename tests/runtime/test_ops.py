"""Every user-level op in one table: gradient vs central finite differences (float64),
forward and gradient vs PyTorch (when installed), and float32 in -> float32 out.

A row is `R(name, fn, *specs)`; `fn(M, *inputs)` is written once and runs with M = aotgrad
or M = torch. Input specs: `X(shape, dom)` a float input that requires grad, `I(shape, high)`
an int64 index tensor, `B(shape)` a bool mask, `K(array)` a constant float tensor.
Adding an op means adding a row.
"""
import re

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.ir import prims
from aotgrad.ir.core import PrimError
from aotgrad.runtime import derivatives, dispatch
from aotgrad.runtime import tprims as tp


from op_table import (OPS, X, _cotangents, _float_outs, _grads, _loss_np, _make, _np, _outs,
                      _setup)
from aotgrad.testing import assert_close


@pytest.mark.parametrize("fn,specs,opts", OPS)
def test_grad_vs_finite_differences(request, fn, specs, opts):
    if not opts["grad"]:
        pytest.skip("not differentiable")
    rng, arrays = _setup(request, specs)
    cots = _cotangents(rng, fn, specs, arrays)
    assert cots, "a differentiable row must have a float output"
    _, grads = _grads(ag, fn, specs, arrays, cots, ag.float64)
    eps = 1e-6
    k = 0
    for s, a in zip(specs, arrays):
        if not isinstance(s, X):
            continue
        fd = np.zeros(a.shape)
        for j in range(a.size):
            ap, am = a.copy(), a.copy()
            ap.flat[j] += eps
            am.flat[j] -= eps
            lp = _loss_np(fn, specs, [ap if b is a else b for b in arrays], cots)
            lm = _loss_np(fn, specs, [am if b is a else b for b in arrays], cots)
            fd.flat[j] = (lp - lm) / (2 * eps)
        assert_close(grads[k], fd, rtol=1e-5, atol=opts["tol"], equal_nan=True,
                     msg=f"gradient of input {k}")
        k += 1


@pytest.mark.parametrize("fn,specs,opts", OPS)
def test_forward_and_grad_vs_torch(request, torch, fn, specs, opts):
    if not opts["torch"]:
        pytest.skip("no PyTorch counterpart")
    rng, arrays = _setup(request, specs)
    cots = _cotangents(rng, fn, specs, arrays)
    outs, grads = _grads(ag, fn, specs, arrays, cots, ag.float64, opts["grad"])
    touts, tgrads = _grads(torch, fn, specs, arrays, cots, torch.float64, opts["grad"])
    assert len(outs) == len(touts)
    for o, to in zip(outs, touts):
        assert tuple(o.shape) == tuple(to.shape)
        assert o.dtype.name == str(to.dtype).replace("torch.", "")
        assert_close(_np(o), _np(to), rtol=1e-10, atol=1e-12, equal_nan=True)
    if opts["grad"]:
        for g, tg in zip(grads, tgrads):
            assert_close(g, tg, rtol=1e-9, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("fn,specs,opts", OPS)
def test_float32_stays_float32(request, fn, specs, opts):
    rng, arrays = _setup(request, specs)
    ins = _make(ag, specs, arrays, ag.float32)
    outs = _outs(fn(ag, *ins))
    for o in outs:
        assert o.dtype in (ag.float32, ag.int64, ag.bool), o.dtype
        assert o.numpy(force=True).dtype == o.dtype.np
    fouts = _float_outs(outs)
    if opts["grad"] and fouts:
        diff = [t for t, s in zip(ins, specs) if isinstance(s, X)]
        gs = ag.autograd.grad(sum(o.sum() for o in fouts), diff, allow_unused=True)
        for g in gs:
            assert g is None or (g.dtype is ag.float32 and g.numpy().dtype == np.float32)


# ---- the prim table ------------------------------------------------------------------------
def test_every_prim_has_a_vjp_or_is_non_differentiable():
    for name, prim in prims.PRIMS.items():
        assert (prim in dispatch.VJP) != (prim in derivatives.NON_DIFFERENTIABLE), name


def test_vjp_table_is_keyed_by_the_prim_object():
    # every key is a registered Prim (no name strings), each prim has at most one rule
    assert all(prims.PRIMS.get(p.name) is p for p in dispatch.VJP), \
        [p for p in dispatch.VJP if prims.PRIMS.get(getattr(p, "name", None)) is not p]
    with pytest.raises(TypeError, match="expected a Prim"):
        derivatives.defvjp("neg")
    with pytest.raises(ValueError, match="already has a derivative rule"):
        derivatives.defvjp(prims.PRIMS["neg"])


def test_op_table_names_are_unique():
    ids = [p.id for p in OPS]
    assert len(ids) == len(set(ids))


f32, i64 = np.float32, np.int64


def _a(*shape, dtype=f32):
    return np.ones(shape, dtype)


PRIM_ERRORS = [  # (prim, args, params, words the message must contain)
    ("exp", [_a(2, dtype=i64)], {}, ["i64[2]", "floating-point"]),
    ("logical_not", [_a(2)], {}, ["f32[2]", "bool"]),
    ("add", [_a(2), _a(3)], {}, ["f32[2]", "f32[3]", "differ"]),
    ("mul", [_a(2), _a(2, dtype=np.float64)], {}, ["f32[2]", "f64[2]", "dtypes"]),
    ("where", [_a(2), _a(2), _a(2)], {}, ["condition must be bool"]),
    ("convert_element_type", [_a(2)], {"dtype": "float32"}, ["dtype"]),
    ("broadcast_in_dim", [_a(3)], {"shape": (2, 4), "dims": (1,)}, ["f32[3]", "size 3",
                                                                     "[2, 4]"]),
    ("reshape", [_a(2, 3)], {"shape": (4, 2)}, ["f32[2,3]", "[4, 2]"]),
    ("transpose", [_a(2, 3)], {"perm": (0, 0)}, ["f32[2,3]", "permutation"]),
    ("slice", [_a(4)], {"start": (1,), "limit": (6,)}, ["f32[4]", "out of range"]),
    ("pad", [_a(4)], {"config": ((1, 1, 0), (0, 0, 0))}, ["f32[4]", "pad config"]),
    ("concatenate", [_a(2, 3), _a(2, 4)], {"dim": 0}, ["f32[2,3]", "f32[2,4]", "dim 0"]),
    ("rev", [_a(2)], {"dims": (1,)}, ["f32[2]", "out of range"]),
    ("reduce_sum", [_a(2, 3)], {"dims": (2,)}, ["f32[2,3]", "out of range"]),
    ("reduce_max", [_a(0, 3)], {"dims": (0,)}, ["f32[0,3]", "empty"]),
    ("argmax", [_a(2, 3)], {"dim": 5}, ["f32[2,3]", "dim 5"]),
    ("cumsum", [_a(2, 3)], {"dim": -1}, ["f32[2,3]", "dim -1"]),
    ("argsort", [_a(2, 3)], {"dim": 2}, ["f32[2,3]", "dim 2"]),
    ("dot_general", [_a(2, 3), _a(4, 5)], {"contract": ((1,), (0,))},
     ["f32[2,3]", "f32[4,5]", "size mismatch"]),
    ("gather", [_a(2, 3), _a(2, 3)], {"dim": 0}, ["f32[2,3]", "integer"]),
    ("scatter_add", [_a(3), np.zeros(2, i64), _a(3)], {"dim": 0}, ["f32[3]", "i64[2]"]),
    ("iota", [], {"shape": (2, 3), "dim": 2, "dtype": ag.int64}, ["dim 2"]),
    ("full", [], {"shape": (-1,), "value": 0.0, "dtype": ag.float32}, ["negative"]),
    ("uniform", [np.zeros(2, i64)], {"shape": (2,), "dtype": ag.float32}, ["i64[2]", "seed"]),
    ("linalg_inv", [_a(2, 3)], {}, ["f32[2,3]", "square"]),
    ("check_values", [np.zeros(2, i64)], {"check": "x >= 0"}, ["i64[2]", "ValueCheck"]),
    ("collective_start", [_a(2)], {"call": "all_reduce"}, ["f32[2]", "CollectiveCall"]),
]


@pytest.mark.parametrize("name,args,params,words", PRIM_ERRORS, ids=[e[0] for e in PRIM_ERRORS])
def test_prim_shape_rule_errors(name, args, params, words):
    with pytest.raises(PrimError) as ei:
        prims.PRIMS[name].bind(*args, **params)  # the user line is this one
    msg = str(ei.value)
    assert f"prims.{name}(" in msg
    for w in words:
        assert w in msg, (w, msg)
    assert re.search(r"test_ops\.py:\d+: `prims\.PRIMS\[name\]\.bind", msg), msg


def test_prim_error_through_the_op_layer_names_the_user_line():
    x = ag.ones(2, 3)
    with pytest.raises(PrimError, match=r"prims\.reshape.*test_ops\.py:\d+: `tp\.reshape"):
        tp.reshape(x, shape=(5,))


def test_every_prim_family_has_an_error_case():
    covered = {e[0] for e in PRIM_ERRORS}
    families = {}
    for name, p in prims.PRIMS.items():
        families.setdefault(p.kind, set()).add(name)
    for kind, names in families.items():
        assert names & covered, f"no shape-rule error test for the family {kind}"


# ---- integer and bool inputs: dtype promotion and values like PyTorch ----------------------
INT_EXPRS = [
    "x.sum()", "x.sum(1, keepdim=True)", "x.prod()", "x.max()", "x.max(1).values", "x.argmax()",
    "x.cumsum(0)", "x.abs()", "-x", "x * 2", "x / 2", "x // 2", "x % 3", "x ** 2", "x + 1.5",
    "x.clamp(0, 2)", "x.clamp(min=0.5)", "x.float().mean()", "x > 1", "(x > 1).sum()",
    "x.sign()", "M.where(x > 0, x, 0)", "x[:, [0, 2]]", "M.maximum(x, x.flip(0))",
    "x.sort(1).values", "x.topk(2).values", "x.amax(0)", "M.cat([x, x], 1)",
    "x.masked_fill(x > 1, 7)", "x.tril()", "x.sum(dtype=M.float64)", "x.exp()",
    "x.sqrt()", "x.floor()", "x.round()", "x.logsumexp(1)", "x.square()", "x == 2",
    "x.count_nonzero()", "x.any()", "x.all()",
]


@pytest.mark.parametrize("expr", INT_EXPRS)
def test_integer_inputs_like_torch(torch, expr):
    a = np.array([[3, -1, 2], [0, 5, -4]])
    out, ref = (eval(expr, {"M": M, "x": M.tensor(a)}) for M in (ag, torch))
    assert out.dtype.name == str(ref.dtype).replace("torch.", "")
    assert_close(out.numpy().astype(float), ref.numpy().astype(float), rtol=1e-6, atol=0,
                 equal_nan=True)


@pytest.mark.parametrize("expr", ["x.sum()", "x & ~x", "x | x.flip(1)", "x ^ True", "x.any(1)",
                                  "x.all()", "x.float()", "x + 1", "x * 2.5", "x.long().sum(0)",
                                  "x.max()", "M.where(x, 1.0, 0.0)", "M.where(x, 2, 0)",
                                  "x == False"])
def test_bool_inputs_like_torch(torch, expr):
    a = np.array([[True, False, True], [False, False, True]])
    out, ref = (eval(expr, {"M": M, "x": M.tensor(a)}) for M in (ag, torch))
    assert out.dtype.name == str(ref.dtype).replace("torch.", "")
    np.testing.assert_array_equal(out.numpy(), ref.numpy())


RELU_POINTS = [-1.0, 0.0, -0.0, 2.0, float("nan"), float("inf"), -float("inf")]


@pytest.mark.parametrize("backend", [None, "interpret", "numba"])
def test_relu_is_zero_with_zero_gradient_at_zero_and_passes_nan(backend):
    """PyTorch's relu: out = 0 where x <= 0 else x, so the gradient at 0 is 0 (not the 0.5
    a max(x, 0) subgradient would give) and NaN passes through with gradient 1."""
    x = ag.tensor(RELU_POINTS, requires_grad=True)
    f = (lambda t: ag.relu(t) * ag.arange(1, 8, dtype=ag.float32))
    if backend is not None:
        f = ag.compile(f, backend=backend)
    y = f(x)
    y.sum().backward()
    xs = np.array(RELU_POINTS, np.float32)
    want_y = np.where(xs <= 0, 0, xs) * np.arange(1, 8)
    want_g = np.where(xs <= 0, 0, 1) * np.arange(1, 8)
    np.testing.assert_array_equal(y.detach().numpy(), want_y.astype(np.float32))
    np.testing.assert_array_equal(x.grad.numpy(), want_g.astype(np.float32))


def test_relu_at_zero_and_nan_like_torch(torch):
    x = ag.tensor(RELU_POINTS, requires_grad=True)
    tx = torch.tensor(RELU_POINTS, requires_grad=True)
    y, ty = ag.relu(x), torch.relu(tx)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
