"""Helpers of the PyTorch comparisons. The eager-engine ones (test_engine_torch*.py): each
case is a function of the library module M (aotgrad or torch); `_same` runs it on both and
compares the results, or the error class and text. The conformance ones
(test_conformance_torch*.py): seeded inputs (`rn`), `_close` and `_same_text`."""
import re
import warnings

import numpy as np

import aotgrad
import aotgrad as ag
from aotgrad import nn
from aotgrad.testing import assert_close


def _val(r):
    """A comparable, library-free form of a result (tensors -> numpy arrays of their dtype;
    compared by `_match`)."""
    if r is None or isinstance(r, (bool, int, float, str)):
        return r
    if isinstance(r, (tuple, list)):
        return [_val(x) for x in r]
    if isinstance(r, dict):
        return {k: _val(v) for k, v in r.items()}
    if hasattr(r, "detach"):
        return np.array(r.detach().numpy(), copy=True)
    return repr(r)


def _match(ours, ref, path="result"):
    """Assert that two `_val` results agree: arrays by assert_close (dtype, shape, the
    dtype's default tolerances, NaN == NaN), everything else by ==."""
    if isinstance(ours, np.ndarray) or isinstance(ref, np.ndarray):
        assert isinstance(ours, np.ndarray) and isinstance(ref, np.ndarray), \
            f"{path}: {ours!r} vs {ref!r}"
        assert_close(ours, ref, equal_nan=True, msg=f"{path}: ")
    elif isinstance(ours, (list, tuple)) and isinstance(ref, (list, tuple)):
        assert len(ours) == len(ref), f"{path}: {len(ours)} items vs {len(ref)}: {ours} vs {ref}"
        for i, (a, b) in enumerate(zip(ours, ref)):
            _match(a, b, f"{path}[{i}]")
    elif isinstance(ours, dict) and isinstance(ref, dict):
        assert ours.keys() == ref.keys(), f"{path}: keys {list(ours)} vs {list(ref)}"
        for k in ref:
            _match(ours[k], ref[k], f"{path}[{k!r}]")
    elif isinstance(ours, str) and isinstance(ref, str):  # messages: without our user line
        assert _USER_LINE.sub("", ours) == ref, f"{path}: {ours!r} vs {ref!r}"
    else:
        nan = isinstance(ours, float) and isinstance(ref, float) and ours != ours and ref != ref
        assert nan or ours == ref, f"{path}: {ours!r} vs {ref!r}"


def _outcome(fn, M):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ("ok", _val(fn(M)))
    except Exception as e:  # the error class and its first line, library names unified
        msg = str(e).replace("torch.", "aotgrad.").split("\n")[0]
        return ("err", type(e).__name__ if isinstance(e, (ValueError, TypeError))
                else "RuntimeError", msg)


def _same(fn, torch, exact_error=False):
    ours, ref = _outcome(fn, ag), _outcome(fn, torch)
    assert ours[0] == ref[0], (ours, ref)
    if ours[0] == "ok":
        _match(ours[1], ref[1])
    else:
        assert ours[1] == ref[1], (ours, ref)
        if exact_error:  # ours may add detail after PyTorch's text, or name the op before it
            ours_msg = re.sub(r"^[\w.]+: ", "", ours[2])
            assert ours_msg.startswith(ref[2]) or ref[2].startswith(ours_msg), (ours, ref)


def _L(M, *v):
    return M.tensor(list(v), requires_grad=True)


def rn(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _np(t):
    return np.asarray(t.detach().numpy()) if hasattr(t, "detach") else np.asarray(t)


def _close(a, b, what, atol=2e-5, rtol=1e-4):
    if a is None or b is None:
        assert a is None and b is None, f"{what}: {a} vs {b}"
        return
    assert_close(_np(a), _np(b), rtol=rtol, atol=atol, equal_nan=True, msg=f"{what}: ")


# the user's line aotgrad appends to an error: ` (at file.py:12: `source`)`
_USER_LINE = re.compile(r" \(at [^\s:]+:\d+: `.*`\)")


def _same_text(ours, theirs):
    """Messages compared with the library names taken out, and without the user's line that
    aotgrad appends to an error (` (at file.py:12: `source`)`)."""
    ours = _USER_LINE.sub("", ours)
    return ours.replace("aotgrad", "LIB") == theirs.replace("torch", "LIB")


def _both(torch, fn):
    return fn(aotgrad, nn), fn(torch, torch.nn)


def _err(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the message is what is compared
        # the public class a PyTorch user catches: the runtime's internal subclasses (the
        # engine's SavedTensorModifiedError) count as their builtin base (RuntimeError)
        public = next(c for c in type(e).__mro__ if not c.__module__.startswith("aotgrad.runtime"))
        return f"{public.__name__}: {e}"
    return None
