"""A bad operand shape gets one error, eager and compiled (both backends): PyTorch's message
content and the user's line. And where PyTorch accepts a shape, eager and compiled accept it
too with the same value. Covered: a linear's bias (addmm expands it over the output's rows)
and the value of `x[index] = value` (expand for a view, index_put for an advanced index)."""
import numpy as np
import pytest

import aotgrad
import aotgrad.nn.functional as F
from aotgrad.testing import assert_close

BACKENDS = ["interpret", "numba"]


def _outcome(fn, args):
    """("ok", value) or (error class, message)."""
    try:
        return "ok", fn(*args).numpy()
    except Exception as e:  # noqa: BLE001 - the outcome is compared
        return type(e), str(e)


def _same_outcome(compiled, eager):
    assert compiled[0] == eager[0], (compiled, eager)
    if eager[0] == "ok":
        assert_close(compiled[1], eager[1], rtol=1e-5, atol=1e-6)
    else:
        assert compiled[1] == eager[1]
        assert " (at test_shape_error_agreement.py:" in eager[1]


def _arrays(*shapes):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


# (input shape, bias shape) with weight (5, 3): PyTorch's linear uses addmm (bias expanded to
# [rows, 5]) for a matrix input or a 1-D bias, otherwise matmul then the bias added in place
LINEAR_BIAS = [((4, 3), (4,)), ((2, 4, 3), (4,)), ((3,), (4,)), ((4, 3), (3, 5)),
               ((4, 3), (2, 4, 5)), ((2, 4, 3), (3, 5)), ((2, 4, 3), (3, 2, 4, 5)),
               ((3,), (2, 5)), ((2, 4, 3), (2, 1, 5)), ((2, 4, 3), (4, 5)), ((4, 3), (1, 5))]


def linear(x, w, b):
    return F.linear(x, w, b)


@pytest.mark.parametrize("ishape, bshape", LINEAR_BIAS)
def test_linear_bias_shape_eager_is_torch(ishape, bshape, vs_torch):
    arrays = _arrays(ishape, (5, 3), bshape)
    vs_torch.same(lambda M: M.nn.functional.linear(*(M.tensor(a) for a in arrays)),
                  exact_error=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("ishape, bshape", LINEAR_BIAS)
def test_linear_bias_shape_compiled_is_eager(ishape, bshape, backend):
    if backend == "numba" and bshape in ((1, 5), (4, 5)):
        pytest.skip("an accepted shape: the interpreter's run covers its value")
    args = [aotgrad.tensor(a) for a in _arrays(ishape, (5, 3), bshape)]
    _same_outcome(_outcome(aotgrad.compile(linear, backend=backend), args),
                  _outcome(linear, args))


def test_linear_wrong_bias_names_the_expand():
    kind, text = _outcome(linear, [aotgrad.tensor(a) for a in _arrays((4, 3), (5, 3), (4,))])
    assert kind is RuntimeError
    assert text.startswith("linear: The expanded size of the tensor (5) must match the existing "
                           "size (4) at non-singleton dimension 1.  Target sizes: [4, 5].  "
                           "Tensor sizes: [4]")


# (index, value shape) written into a (4, 3) tensor
SETITEM = [((slice(0, 2),), (3, 3)), (([0, 1],), (3, 3)), ((0,), (2,)), ((Ellipsis, 0), (3,)),
           ((slice(None), [0, 1]), (4, 3)), ((0,), (2, 3)), ((slice(0, 2),), (2, 2, 3)),
           (([0, 1],), (2, 2, 3)), ((slice(0, 2),), (1, 2, 3)), (([0, 1],), (1, 1, 2, 3))]
SETITEM_IDS = [f"{i}-{'x'.join(map(str, v))}" for i, v in enumerate(SETITEM)]


def _setitem_fn(index):
    def write(x, y):
        x = x.clone()
        x[index] = y
        return x
    return write


@pytest.mark.parametrize("index, vshape", SETITEM, ids=SETITEM_IDS)
def test_setitem_value_shape_eager_is_torch(index, vshape, vs_torch):
    x, y = _arrays((4, 3), vshape)

    def case(M):
        t = M.tensor(x)
        t[index] = M.tensor(y)
        return t
    vs_torch.same(case, exact_error=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("index, vshape", SETITEM, ids=SETITEM_IDS)
def test_setitem_value_shape_compiled_is_eager(index, vshape, backend):
    if backend == "numba" and vshape == (1, 1, 2, 3):
        pytest.skip("an accepted shape: the interpreter's run covers its value")
    fn = _setitem_fn(index)
    args = [aotgrad.tensor(a) for a in _arrays((4, 3), vshape)]
    _same_outcome(_outcome(aotgrad.compile(fn, backend=backend), args), _outcome(fn, args))


@pytest.mark.parametrize("requires_grad", [False, True])
def test_setitem_message_is_the_same_with_and_without_grad(requires_grad):
    x, y = (aotgrad.tensor(a, requires_grad=requires_grad) for a in _arrays((4, 3), (3, 3)))
    with pytest.raises(RuntimeError, match=r"^setitem: The expanded size of the tensor \(2\) "
                                           r"must match the existing size \(3\) at "
                                           r"non-singleton dimension 0\.  Target sizes: "
                                           r"\[2, 3\]\.  Tensor sizes: \[3, 3\]"):
        _setitem_fn(slice(0, 2))(x, y)
