"""assert_close: closeness of tensors, arrays, numbers and nested sequences, with default
tolerances chosen by dtype (the same table as torch.testing.assert_close)."""
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

# dtype -> (rtol, atol) when the caller gives neither; integer and bool dtypes compare exactly
DEFAULT_TOLERANCES = {
    np.dtype(np.float16): (1e-3, 1e-5),
    np.dtype(np.float32): (1.3e-6, 1e-5),
    np.dtype(np.float64): (1e-7, 1e-7),
    np.dtype(np.complex64): (1.3e-6, 1e-5),
    np.dtype(np.complex128): (1e-7, 1e-7),
}


def default_tolerances(*dtypes):
    """(rtol, atol) for comparing values of these dtypes: the loosest of their defaults."""
    tols = [DEFAULT_TOLERANCES.get(np.dtype(d), (0.0, 0.0)) for d in dtypes]
    return max(t[0] for t in tols), max(t[1] for t in tols)


@dataclass
class Mismatch:
    """How two arrays of one shape differ (see `mismatch`)."""
    n_bad: int
    n_total: int
    max_abs: float
    abs_index: tuple
    max_rel: float
    rel_index: tuple
    rtol: float
    atol: float

    def describe(self):
        pct = 100.0 * self.n_bad / max(self.n_total, 1)
        return (f"Mismatched elements: {self.n_bad} / {self.n_total} ({pct:.1f}%)\n"
                f"Greatest absolute difference: {self.max_abs:.6g} at index {self.abs_index} "
                f"(up to {self.atol:g} allowed)\n"
                f"Greatest relative difference: {self.max_rel:.6g} at index {self.rel_index} "
                f"(up to {self.rtol:g} allowed)")


def mismatch(actual, expected, rtol, atol, equal_nan=False):
    """None when every element of `actual` is within atol + rtol * |expected| of `expected`
    (equal infinities match; NaN matches NaN only with equal_nan), else a Mismatch. The two
    arrays must have one shape."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.dtype == np.bool_ or e.dtype == np.bool_ or (a.dtype.kind in "iu" and
                                                      e.dtype.kind in "iu"):
        close = a == e
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        ref = np.abs(e.astype(np.float64))
    else:
        ct = np.result_type(a.dtype, e.dtype, np.float64)
        a64, e64 = a.astype(ct), e.astype(ct)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(a64 - e64)
            ref = np.abs(e64)
            close = (a64 == e64) | (np.isfinite(diff) & (diff <= atol + rtol * ref))
            if equal_nan:
                close |= np.isnan(a64) & np.isnan(e64)
        diff = np.where(np.isnan(diff) & ~close, np.inf, diff)  # NaN against a number
    if close.all():
        return None
    diff = np.where(close, 0.0, diff).astype(np.float64) if diff.size else diff
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(close, 0.0, diff / ref)
    rel = np.where(np.isnan(rel), np.inf, rel)
    ia = np.unravel_index(int(np.argmax(diff)), a.shape) if a.ndim else ()
    ir = np.unravel_index(int(np.argmax(rel)), a.shape) if a.ndim else ()
    return Mismatch(int((~close).sum()), int(close.size), float(diff[ia]), tuple(map(int, ia)),
                    float(rel[ir]), tuple(map(int, ir)), rtol, atol)


def _array(x):
    """(numpy array, whether its dtype is its own) for a tensor-like, or None for others.
    Python numbers and lists of them take their dtype from the other side (weakly typed)."""
    from aotgrad.runtime.tensor import Tensor
    if isinstance(x, Tensor):
        return np.asarray(x._value), True
    if isinstance(x, (np.ndarray, np.generic)):
        return np.asarray(x), True
    if hasattr(x, "detach") and hasattr(x, "numpy"):  # a torch tensor
        return np.asarray(x.detach().cpu().numpy()), True
    if isinstance(x, (bool, int, float, complex)):
        return np.asarray(x), False
    return None


def _is_sequence(x):
    return isinstance(x, (list, tuple))


def assert_close(actual, expected, rtol=None, atol=None, *, equal_nan=False, check_dtype=True,
                 msg=""):
    """Assert that `actual` and `expected` are close, as torch.testing.assert_close does.

    Each may be an aotgrad (or torch) tensor, a numpy array, a Python number, or a list,
    tuple or dict of those (compared entry by entry). Shapes must be equal (no broadcasting).
    With check_dtype (the default) arrays and tensors must have the same dtype: float64 against
    float32 fails. Python numbers and lists of numbers are compared in the other side's dtype.
    Elements are close when |actual - expected| <= atol + rtol * |expected|; infinities must
    be equal, and NaN equals NaN only with equal_nan=True. Without rtol/atol (give both or
    neither) the tolerances come from the dtype: float32 1.3e-6 / 1e-5, float64 1e-7 / 1e-7,
    float16 1e-3 / 1e-5, integers and bool exact (DEFAULT_TOLERANCES).

    The error names the path into nested inputs, the number of mismatched elements, and the
    largest absolute and relative differences with their indices."""
    if (rtol is None) != (atol is None):
        raise ValueError(f"assert_close: give both rtol and atol or neither "
                         f"(got rtol={rtol}, atol={atol})")
    _compare(actual, expected, rtol, atol, equal_nan, check_dtype, msg, "")


def _fail(msg, path, text):
    where = f"at {path}: " if path else ""
    raise AssertionError(f"{msg}{where}{text}")


def _compare(actual, expected, rtol, atol, equal_nan, check_dtype, msg, path):
    if isinstance(actual, Mapping) or isinstance(expected, Mapping):
        if not (isinstance(actual, Mapping) and isinstance(expected, Mapping)):
            other = expected if isinstance(actual, Mapping) else actual
            _fail(msg, path, f"a mapping against a {type(other).__name__}")
        if set(actual) != set(expected):
            _fail(msg, path, f"keys differ: {sorted(map(repr, actual))} vs "
                             f"{sorted(map(repr, expected))}")
        for k in expected:
            _compare(actual[k], expected[k], rtol, atol, equal_nan, check_dtype, msg,
                     f"{path}[{k!r}]")
        return
    pa, pe = _array(actual), _array(expected)
    if _is_sequence(actual) and _is_sequence(expected):
        if len(actual) != len(expected):
            _fail(msg, path, f"sequence lengths differ: {len(actual)} vs {len(expected)}")
        for i, (x, y) in enumerate(zip(actual, expected)):
            _compare(x, y, rtol, atol, equal_nan, check_dtype, msg, f"{path}[{i}]")
        return
    if pa is None and _is_sequence(actual):
        pa = np.asarray(actual), False
    if pe is None and _is_sequence(expected):
        pe = np.asarray(expected), False
    if pa is None or pe is None:
        bad = actual if pa is None else expected
        raise TypeError(f"{msg}assert_close: cannot compare a {type(bad).__name__}"
                        + (f" at {path}" if path else ""))
    (a, a_typed), (e, e_typed) = pa, pe
    if a_typed and not e_typed:
        e = e.astype(a.dtype) if e.dtype.kind in "biuf" and a.dtype.kind in "fc" else e
    elif e_typed and not a_typed:
        a = a.astype(e.dtype) if a.dtype.kind in "biuf" and e.dtype.kind in "fc" else a
    elif not a_typed and not e_typed and check_dtype and \
            type(actual) is not type(expected) and not _is_sequence(actual):
        _fail(msg, path, f"the types do not match: {type(actual).__name__} != "
                         f"{type(expected).__name__}")
    if a.shape != e.shape:
        _fail(msg, path, f"the shapes do not match: {a.shape} != {e.shape}")
    if check_dtype and a_typed and e_typed and a.dtype != e.dtype:
        _fail(msg, path, f"the dtypes do not match: {a.dtype} != {e.dtype}")
    r, t = (rtol, atol) if rtol is not None else default_tolerances(a.dtype, e.dtype)
    m = mismatch(a, e, r, t, equal_nan)
    if m is not None:
        what = "Scalars are" if a.ndim == 0 else "Tensor-likes are"
        _fail(msg, path, f"{what} not close!\n\n{m.describe()}")
