"""A catalogue of bad input, one row per case, each run eagerly and compiled.

Every row must raise a specific exception whose message names the op, the shapes/dtypes (or
the dims, indices, types) involved and the user's source line (a line of this file), compiled
as eagerly; and leave nothing half-done: the tensors it was given keep their values and
gradients, and a compiled function keeps no program for a call that failed while tracing (a
good call afterwards traces and runs, and agrees with eager mode). Checks of data (indices,
labels, divisors) fail while the compiled program runs: its program stays cached, and the
good call reuses it.
"""
import dataclasses
import re
import warnings
from typing import Callable

import numpy as np
import pytest

import aotgrad as ag
import aotgrad.nn.functional as F
from aotgrad import nn
from aotgrad.compiler.guards import _tensor_args_key
from aotgrad.testing import assert_close

HERE = re.compile(r"test_bad_input_catalogue\.py:\d+")


@dataclasses.dataclass
class Row:
    name: str
    fn: Callable              # the user's function: fn(*args) raises
    args: Callable            # () -> fresh bad arguments
    error: type
    words: tuple              # the message must contain each (op name, shapes, dtypes, ...)
    good: Callable = None     # () -> arguments fn accepts (then compiled == eager on them)
    backends: tuple = ("interpret",)   # compiled backends the row runs on (() = eager only)
    data_check: bool = False  # fails while the compiled program runs (its program is kept)
    watch: Callable = None    # args -> tensors whose values and .grad must stay as they were
    after: Callable = None    # args -> None: asserts the state after the error (watch=[])


def _f(*shape):
    return ag.randn(*shape)


def _p(*shape):
    return ag.randn(*shape, requires_grad=True)


def _i(values):
    return ag.tensor(values)


def _linear_model():
    ag.manual_seed(1)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))


def _train_step(model, x, y):
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss


def _backward_twice(x):
    y = (x * x).sum()
    y.backward()
    y.backward()


def _inplace_saved(x):
    y = x.exp()
    y.mul_(2)
    y.sum().backward()


def _grad_of_int():
    return ag.tensor([1, 2], requires_grad=True)


BOTH = ("interpret", "numba")

ROWS = [
    # ---- elementwise: shapes, dtypes, operand types ---------------------------------------
    Row("inplace_expanded", lambda a: (a * 1.0).expand(3, 4).add_(1), lambda: (_f(1, 4),),
        RuntimeError, ("add_", "single memory location", "f32[3,4]", "(0, 1)")),
    Row("add_shapes", lambda a, b: a + b, lambda: (_f(3, 4), _f(5)), RuntimeError,
        ("add", "[3, 4]", "[5]"), good=lambda: (_f(3, 4), _f(4))),
    Row("mul_shapes", lambda a, b: ag.mul(a, b), lambda: (_f(2, 3), _f(3, 2)), RuntimeError,
        ("mul", "[2, 3]", "[3, 2]"), good=lambda: (_f(2, 3), _f(1, 3))),
    Row("where_shapes", lambda c, a, b: ag.where(c, a, b),
        lambda: (_f(3) > 0, _f(3), _f(4)), RuntimeError, ("where", "[3]", "[4]"),
        good=lambda: (_f(3) > 0, _f(3), _f(3))),
    Row("exp_list", lambda: ag.exp([1.0, 2.0]), lambda: (), TypeError,
        ("exp()", "'input'", "must be Tensor, not list")),
    Row("exp_numpy", lambda: ag.exp(np.ones(2, np.float32)), lambda: (), TypeError,
        ("exp()", "must be Tensor, not numpy.ndarray")),
    Row("add_numpy", lambda a: ag.add(a, np.ones(3, np.float32)), lambda: (_f(3),), TypeError,
        ("add()", "'other'", "numpy.ndarray")),
    Row("mul_list_operator", lambda a: a * [1.0, 2.0, 3.0], lambda: (_f(3),), TypeError,
        ("mul()", "'other'", "list")),
    Row("relu_numpy", lambda: F.relu(np.ones(2, np.float32)), lambda: (), TypeError,
        ("relu()", "numpy.ndarray")),
    Row("int_exp_inplace", lambda a: a.exp_(), lambda: (_i([1, 2]),), RuntimeError,
        ("exp_", "float32", "int64", "i64[2]")),
    # ---- matmul / linear / conv ------------------------------------------------------------
    Row("matmul_shapes", lambda a, b: a @ b, lambda: (_f(3, 4), _f(3, 5)), RuntimeError,
        ("matmul", "3x4", "3x5"), good=lambda: (_f(3, 4), _f(4, 5))),
    Row("matmul_list", lambda a: ag.matmul(a, [1.0, 2.0]), lambda: (_f(2, 2),), TypeError,
        ("matmul()", "'other'", "list")),
    Row("mm_dtypes", lambda a, b: ag.mm(a, b), lambda: (_f(2, 3), _f(3, 2).double()),
        RuntimeError, ("mm", "float", "double"), good=lambda: (_f(2, 3), _f(3, 2))),
    Row("linear_in_features", lambda m, x: m(x), lambda: (nn.Linear(4, 2), _f(3, 5)),
        RuntimeError, ("linear", "3x5", "4x2"), good=lambda: (nn.Linear(4, 2), _f(3, 4)),
        watch=lambda a: list(a[0].parameters())),
    Row("conv2d_channels", lambda w, x: F.conv2d(x, w),
        lambda: (_p(2, 4, 3, 3), _f(1, 3, 5, 5)), RuntimeError,
        ("conv2d", "[2, 4, 3, 3]", "[1, 3, 5, 5]", "4 channels"),
        good=lambda: (_p(2, 3, 3, 3), _f(1, 3, 5, 5))),
    Row("conv_module_channels", lambda m, x: m(x), lambda: (nn.Conv2d(4, 2, 3), _f(1, 3, 5, 5)),
        RuntimeError, ("conv2d", "[2, 4, 3, 3]", "[1, 3, 5, 5]"),
        good=lambda: (nn.Conv2d(3, 2, 3), _f(1, 3, 5, 5)),
        watch=lambda a: list(a[0].parameters())),
    # ---- reductions ------------------------------------------------------------------------
    Row("sum_dim", lambda a: a.sum(5), lambda: (_f(3, 4),), IndexError,
        ("sum", "Dimension out of range", "[-2, 1]", "got 5")),
    Row("softmax_dim", lambda a: ag.softmax(a, dim=2), lambda: (_f(3, 4),), IndexError,
        ("softmax", "[-2, 1]", "got 2")),
    Row("max_empty", lambda a: a.max(), lambda: (_f(0, 3),), RuntimeError,
        ("max", "empty"), good=lambda: (_f(2, 3),)),
    # ---- views / reshape -------------------------------------------------------------------
    Row("view_numel", lambda a: a.view(5), lambda: (_f(3, 4),), RuntimeError,
        ("view", "'[5]'", "size 12"), good=lambda: (_f(5),)),
    Row("view_transposed", lambda a: a.t().view(-1), lambda: (_f(3, 4),), RuntimeError,
        ("view", "f32[4,3]", "stride"), good=lambda: (_f(1, 4),), backends=BOTH),
    Row("view_two_minus_one", lambda a: a.view(-1, -1), lambda: (_f(3, 4),), RuntimeError,
        ("view", "only one dimension can be inferred")),
    Row("permute_dims", lambda a: a.permute(0, 0), lambda: (_f(3, 4),), RuntimeError,
        ("permute", "duplicate dims", "f32[3,4]")),
    Row("expand_size", lambda a: a.expand(3, 5), lambda: (_f(3, 4),), RuntimeError,
        ("expand", "[3, 4]", "[3, 5]"), good=lambda: (_f(3, 1),)),
    # ---- cat / stack -----------------------------------------------------------------------
    Row("cat_shapes", lambda a, b: ag.cat([a, b]), lambda: (_f(3, 4), _f(2, 3)), RuntimeError,
        ("cat", "[3, 4]", "[2, 3]"), good=lambda: (_f(3, 4), _f(2, 4))),
    Row("cat_numpy", lambda a: ag.cat([a, np.ones((1, 4), np.float32)]), lambda: (_f(3, 4),),
        TypeError, ("cat", "Tensor", "numpy.ndarray")),
    Row("stack_shapes", lambda a, b: ag.stack([a, b]), lambda: (_f(3, 4), _f(2, 3)),
        RuntimeError, ("stack", "[3, 4]", "[2, 3]"), good=lambda: (_f(3, 4), _f(3, 4))),
    # ---- indexing (static and data-dependent) ---------------------------------------------
    Row("getitem_int", lambda a: a[5], lambda: (_f(3, 4),), IndexError,
        ("getitem", "index 5", "size 3"), good=lambda: (_f(6, 4),)),
    Row("getitem_tensor", lambda a, i: a[i], lambda: (_f(3, 4), _i([0, 3])), IndexError,
        ("getitem", "index 3", "size 3", "i64[2]"), good=lambda: (_f(3, 4), _i([0, -3])),
        backends=BOTH, data_check=True),
    Row("gather_negative", lambda a, i: a.gather(1, i), lambda: (_f(3, 4), _i([[0], [-1], [1]])),
        IndexError, ("gather", "index -1", "size 4", "i64[3,1]"),
        good=lambda: (_f(3, 4), _i([[0], [3], [1]])), backends=BOTH, data_check=True),
    Row("index_select_big", lambda a, i: a.index_select(0, i), lambda: (_f(3, 4), _i([0, 3])),
        IndexError, ("index_select", "index 3", "size 3"),
        good=lambda: (_f(3, 4), _i([0, 2])), data_check=True),
    Row("embedding_big", lambda w, i: F.embedding(i, w), lambda: (_p(3, 4), _i([0, 3])),
        IndexError, ("embedding", "index 3", "num_embeddings=3", "f32[3,4]"),
        good=lambda: (_p(3, 4), _i([0, 2])), data_check=True),
    Row("one_hot_big", lambda i: F.one_hot(i, 3), lambda: (_i([0, 3]),), RuntimeError,
        ("one_hot", "smaller than num_classes", "i64[2]"), good=lambda: (_i([0, 2]),),
        data_check=True),
    Row("gather_float_index", lambda a, i: a.gather(1, i), lambda: (_f(3, 4), _f(3, 1)),
        RuntimeError, ("gather", "int64", "float32")),
    # ---- losses ----------------------------------------------------------------------------
    Row("cross_entropy_negative_label", lambda x, t: F.cross_entropy(x, t),
        lambda: (_p(3, 4), _i([0, -1, 2])), IndexError,
        ("cross_entropy", "Target -1", "f32[3,4]", "i64[3]"),
        good=lambda: (_p(3, 4), _i([0, -100, 2])), backends=BOTH, data_check=True),
    Row("nll_loss_big_label", lambda x, t: F.nll_loss(x, t), lambda: (_p(3, 4), _i([0, 4, 2])),
        IndexError, ("nll_loss", "Target 4", "f32[3,4]"), good=lambda: (_p(3, 4), _i([0, 3, 2])),
        data_check=True),
    Row("cross_entropy_target_dtype", lambda x, t: F.cross_entropy(x, t),
        lambda: (_p(3, 4), _f(3)), RuntimeError, ("cross_entropy", "[3, 4]", "[3]")),
    Row("mse_shapes", lambda x, t: F.mse_loss(x, t), lambda: (_p(3), _f(4)), RuntimeError,
        ("mse_loss", "[3]", "[4]"), good=lambda: (_p(3), _f(3))),
    Row("bce_out_of_range", lambda x, t: F.binary_cross_entropy(x, t),
        lambda: (ag.tensor([0.5, 1.5], requires_grad=True), ag.tensor([1.0, 0.0])),
        RuntimeError, ("binary_cross_entropy", "between 0 and 1", "1.5", "f32[2]"),
        good=lambda: (ag.tensor([0.5, 0.25], requires_grad=True), ag.tensor([1.0, 0.0])),
        backends=BOTH, data_check=True),
    Row("multinomial_negative", lambda p: ag.multinomial(p, 1),
        lambda: (ag.tensor([0.5, -1.0]),), RuntimeError,
        ("multinomial", "element < 0", "-1.0", "f32[2]"), data_check=True),
    Row("train_step_bad_label", _train_step, lambda: (_linear_model(), _f(5, 4),
                                                      _i([0, 1, 2, 1, 0])),
        IndexError, ("cross_entropy", "Target 2", "number of classes 2"),
        good=lambda: (_linear_model(), _f(5, 4), _i([0, 1, 1, 1, 0])), backends=BOTH,
        data_check=True, watch=lambda a: list(a[0].parameters())),
    # ---- autograd misuse -------------------------------------------------------------------
    Row("backward_non_scalar", lambda x: (x * 2).backward(), lambda: (_p(3),), RuntimeError,
        (".backward()", "scalar outputs", "[3]")),
    Row("backward_twice", _backward_twice, lambda: (_p(3),), RuntimeError,
        (".backward()", "second time"), backends=(), watch=lambda a: [],
        after=lambda a: assert_close(a[0].grad.numpy(), 2 * a[0].detach().numpy(),
                                     rtol=1e-7, atol=0, equal_nan=True)),
    Row("inplace_leaf", lambda w: w.add_(1), lambda: (_p(3),), RuntimeError,
        ("add_", "leaf Variable", "requires grad", "f32[3]")),
    Row("inplace_saved", _inplace_saved, lambda: (_p(3),), RuntimeError,
        (".backward()", "modified by an inplace operation", "[3]"), backends=()),
    Row("int_requires_grad", _grad_of_int, lambda: (), RuntimeError,
        ("requires_grad", "floating point", "i64[2]")),
    # ---- integer division by zero ----------------------------------------------------------
    Row("floor_divide_zero", lambda a, b: a // b, lambda: (_i([4, 5]), _i([2, 0])),
        RuntimeError, ("floor_divide", "ZeroDivisionError", "i64[2]"),
        good=lambda: (_i([4, 5]), _i([2, -3])), backends=BOTH, data_check=True),
    Row("remainder_zero", lambda a, b: a % b, lambda: (_i([4, 5]), _i([2, 0])),
        RuntimeError, ("remainder", "ZeroDivisionError"),
        good=lambda: (_i([4, 5]), _i([2, 3])), data_check=True),
    Row("div_trunc_zero", lambda a, b: ag.div(a, b, rounding_mode="trunc"),
        lambda: (_i([4, 5]), _i([0, 1])), RuntimeError, ("div", "ZeroDivisionError"),
        good=lambda: (_i([4, 5]), _i([3, 1])), data_check=True),
]


def _tensors(args):
    out = []
    for a in args:
        if isinstance(a, ag.Tensor):
            out.append(a)
        elif isinstance(a, nn.Module):
            out += list(a.parameters())
    return out


def _state(tensors):
    return [(t.detach().numpy().copy(), None if t.grad is None else t.grad.numpy().copy())
            for t in tensors]


def _same(a, b):
    return a is None and b is None or (a is not None and b is not None and
                                       np.array_equal(a, b, equal_nan=True))


def _check_error(row, ei):
    msg = str(ei.value)
    for w in row.words:
        assert w in msg, (row.name, w, msg)
    assert HERE.search(msg), (row.name, "the user's line is missing", msg)


def _outputs(out):
    if isinstance(out, (tuple, list)):
        return [o for x in out for o in _outputs(x)]
    return [out.detach().numpy()] if isinstance(out, ag.Tensor) else [out]


MODES = [(r, "eager") for r in ROWS] + [(r, b) for r in ROWS for b in r.backends]


@pytest.mark.parametrize("row,mode", MODES, ids=[f"{r.name}-{m}" for r, m in MODES])
def test_bad_input(row, mode):
    args = row.args()
    watched = row.watch(args) if row.watch else _tensors(args)
    before = _state(watched)
    f = row.fn if mode == "eager" else ag.compile(row.fn, backend=mode)
    with warnings.catch_warnings():
        # no graph break: compiled code raises the error itself
        warnings.filterwarnings("error", message=".*graph break.*")
        with pytest.raises(row.error) as ei:
            f(*args)
    _check_error(row, ei)
    for t, (v, g) in zip(watched, before):   # nothing half-done
        assert _same(t.detach().numpy(), v), (row.name, "a value changed")
        assert _same(None if t.grad is None else t.grad.numpy(), g), \
            (row.name, "a gradient changed")
    if row.after is not None:
        row.after(args)
    if mode == "eager":
        return
    key = _tensor_args_key(args, None)
    if key is not None and not row.data_check:
        assert key not in f.cache, (row.name, "the failing call left a program behind")
    if row.good is not None:   # a good call afterwards works, as eagerly
        ag.manual_seed(7)
        got = _outputs(f(*row.good()))
        ag.manual_seed(7)   # the same arguments again
        want = _outputs(row.fn(*row.good()))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_close(g, w, rtol=1e-5, atol=1e-6, equal_nan=True, msg=row.name)


def test_every_family_has_rows():
    """The catalogue covers each family the issue lists (a row removed shows here)."""
    names = {r.name for r in ROWS}
    for prefix in ("add", "matmul", "sum", "view", "cat", "stack", "getitem", "gather",
                   "cross_entropy", "conv2d", "linear", "backward", "inplace", "int_requires",
                   "floor_divide", "exp_list", "exp_numpy", "one_hot", "embedding"):
        assert any(n.startswith(prefix) for n in names), prefix
