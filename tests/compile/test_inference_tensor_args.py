"""Inference tensors passed to a compiled function: the checks eager makes, compiled makes
(an inference tensor saved for backward raises), and a program traced for normal tensors is
not reused for inference tensors (the guard key holds the flag). Also the advice of the
recompile warning fits what changed."""
import warnings

import pytest

import aotgrad as ag

BACKENDS = ["interpret", "numba"]


def _inference_ones(n):
    with ag.inference_mode():
        return ag.ones(n)


def _saves_x(x, w):
    return (x * w).sum()   # the backward of the product needs x


def _saves_nothing_of_x(x, w):
    return (x + w).sum()


def _outcome(fn, *args):
    try:
        out = fn(*args)
        out.backward()
        return "ok", float(out), args[1].grad.numpy().tolist()
    except RuntimeError as e:
        return "error", str(e).split(" (at ")[0]
    finally:
        args[1].grad = None


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_saves_x, _saves_nothing_of_x])
def test_compiled_matches_eager_for_inference_arguments(backend, fn):
    cf = ag.compile(fn, backend=backend)
    w = ag.ones(3, requires_grad=True)
    # first a normal tensor (the program traced for it must not serve the inference tensor)
    for x in (ag.ones(3), _inference_ones(3), ag.ones(3)):
        assert _outcome(cf, x, w) == _outcome(fn, x, w)


def test_saving_an_inference_tensor_raises_eagers_error():
    cf = ag.compile(_saves_x, backend="interpret")
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        cf(_inference_ones(3), ag.ones(3, requires_grad=True))


@pytest.mark.parametrize("backend", BACKENDS)
def test_inside_inference_mode_both_kinds_run(backend):
    cf = ag.compile(_saves_x, backend=backend)
    w = ag.ones(3, requires_grad=True)
    with ag.inference_mode():
        for x in (ag.ones(3) * 2, _inference_ones(3) * 2):
            out = cf(x, w)
            assert float(out) == float(_saves_x(x, w)) == 6.0
            assert out.is_inference() and not out.requires_grad


def test_recompile_advice_fits_a_dtype_change():
    cf = ag.compile(lambda x: x * 2, backend="interpret")
    cf(ag.ones(3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cf(ag.ones(3, dtype=ag.float64))
    text = " ".join(str(w.message) for w in caught)
    assert "changed dtype" in text
    assert "this size" not in text and "dynamic=True" not in text
    assert "cache_size_limit" in text
