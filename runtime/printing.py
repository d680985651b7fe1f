"""PyTorch-style tensor printing: `tensor([ 8.,  9., 10.], grad_fn=<AddBackward0>)`.

The layout follows PyTorch's defaults (precision 4, threshold 1000, 3 edge items, line width
80): one width for every element, integer mode (`8.`) when all finite values are whole,
scientific mode when the magnitudes span more than 1000x or leave [1e-4, 1e8].

>>> aotgrad.tensor([[1., -2.], [3., 4.]])
tensor([[ 1., -2.],
        [ 3.,  4.]])
"""
import contextlib
import dataclasses
import math

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import current_builder
from aotgrad.runtime.dual_state import tangent_of
from aotgrad.runtime.graph_breaks import graph_break


@dataclasses.dataclass
class PrintOptions:
    """What `set_printoptions` sets (PyTorch's names and defaults); sci_mode None is
    automatic, True/False force scientific or fixed notation."""
    precision: int = 4
    threshold: float = 1000
    edgeitems: int = 3
    linewidth: int = 80
    sci_mode: bool | None = None


_PROFILES = {"default": PrintOptions(), "short": PrintOptions(precision=2, edgeitems=2),
             "full": PrintOptions(threshold=math.inf)}
options = PrintOptions()  # the process's current options, changed by set_printoptions only


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None):
    """PyTorch's `set_printoptions`: a profile ('default', 'short', 'full') first, then each
    given value; sci_mode is always set (None: automatic)."""
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"set_printoptions: unknown profile {profile!r}; expected one of "
                             f"{', '.join(_PROFILES)}")
        base = _PROFILES[profile]
        options.precision, options.threshold = base.precision, base.threshold
        options.edgeitems, options.linewidth = base.edgeitems, base.linewidth
    for name, value in (("precision", precision), ("threshold", threshold),
                        ("edgeitems", edgeitems), ("linewidth", linewidth)):
        if value is not None:
            setattr(options, name, value)
    options.sci_mode = sci_mode


def get_printoptions():
    """The current print options as a dict (PyTorch's `get_printoptions`)."""
    return dataclasses.asdict(options)


@contextlib.contextmanager
def printoptions(**kwargs):
    """Set print options inside a `with` block, restoring the previous ones after."""
    old = dataclasses.replace(options)
    set_printoptions(**kwargs)
    try:
        yield
    finally:
        for f in dataclasses.fields(options):
            setattr(options, f.name, getattr(old, f.name))


class _Formatter:
    """Chooses one element format and width for a whole array."""

    def __init__(self, a):
        self.floating = a.dtype.kind == "f"
        self.int_mode, self.sci_mode, self.width = True, False, 1
        flat = a.reshape(-1)
        if not self.floating:
            for v in flat.tolist():
                self.width = max(self.width, len(str(v)))
            return
        vals = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
        if vals.size == 0:
            return
        absv = np.abs(vals)
        lo, hi = absv.min(), absv.max()
        self.int_mode = bool(np.all(vals == np.ceil(vals)))
        p, forced = options.precision, options.sci_mode
        if self.int_mode:
            if (hi / lo > 1000.0 or hi > 1.0e8) if forced is None else forced:
                self.sci_mode = True
                self.width = max(len(f"{v:.{p}e}") for v in vals.tolist())
            else:
                self.width = max(len(f"{v:.0f}") + 1 for v in vals.tolist())
        elif (hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4) if forced is None else forced:
            self.sci_mode = True
            self.width = max(len(f"{v:.{p}e}") for v in vals.tolist())
        else:
            self.width = max(len(f"{v:.{p}f}") for v in vals.tolist())

    def format(self, v):
        if self.floating:
            if self.sci_mode:
                s = f"{v:{self.width}.{options.precision}e}"
            elif self.int_mode:
                s = f"{v:.0f}"
                if not (math.isinf(v) or math.isnan(v)):
                    s += "."
            else:
                s = f"{v:.{options.precision}f}"
        else:
            s = str(v)
        return " " * (self.width - len(s)) + s


def _summary(a):
    """The elements shown when summarising (the edges of every dim), for the formatter."""
    if a.ndim == 0:
        return a
    k = options.edgeitems
    if a.shape[0] > 2 * k:
        parts = [_summary(x) for x in list(a[:k]) + list(a[-k:])]
    else:
        parts = [_summary(x) for x in a]
    return np.concatenate([np.atleast_1d(p).reshape(-1) for p in parts]) if parts else a


def _vector(a, indent, summarize, fmt):
    per_line = max(1, int(math.floor((options.linewidth - indent) / (fmt.width + 2))))
    if summarize and a.shape[0] > 2 * options.edgeitems:
        data = [fmt.format(v) for v in a[:options.edgeitems].tolist()] + [" ..."] + \
            [fmt.format(v) for v in a[-options.edgeitems:].tolist()]
    else:
        data = [fmt.format(v) for v in a.tolist()]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(a, indent, summarize, fmt):
    if a.ndim == 0:
        return fmt.format(a.item())
    if a.ndim == 1:
        return _vector(a, indent, summarize, fmt)
    if summarize and a.shape[0] > 2 * options.edgeitems:
        rows = [_nested(a[i], indent + 1, summarize, fmt) for i in range(options.edgeitems)] + \
            ["..."] + [_nested(a[i], indent + 1, summarize, fmt)
                       for i in range(a.shape[0] - options.edgeitems, a.shape[0])]
    else:
        rows = [_nested(a[i], indent + 1, summarize, fmt) for i in range(a.shape[0])]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(rows) + "]"


def format_array(a, indent=7):
    """The bracketed body of a tensor's repr (PyTorch's layout)."""
    if a.size == 0:
        return "[]"
    if a.dtype == dt.bfloat16.np:  # numpy's extension type: print its values as floats
        a = a.astype(np.float32)
    summarize = a.size > options.threshold
    fmt = _Formatter(_summary(a) if summarize else a)
    return _nested(a, indent, summarize, fmt)


def _with_suffixes(body, suffixes, indent):
    out = [body]
    last = len(body) - body.rfind("\n") + 1
    for s in suffixes:
        if last + len(s) + 2 > options.linewidth:
            out.append(",\n" + " " * indent + s)
            last = indent + len(s)
        else:
            out.append(", " + s)
            last += len(s) + 2
    return "".join(out) + ")"


def tensor_repr(t):
    v = t._value
    if not isinstance(v, np.ndarray):  # traced
        if current_builder() is not None:  # printing a value inside a compiled function
            graph_break("printing a tensor value", t)
        return f"TracedTensor({v.name}: {v.dtype.short}[{','.join(map(str, v.shape))}])"
    prefix = "tensor("
    suffixes = []
    dtype = t.dtype
    if v.size == 0:
        if v.ndim != 1:
            suffixes.append(f"size={tuple(v.shape)}")
        if dtype is not dt.float32:
            suffixes.append(f"dtype={dtype!r}")
        body = "[]"
    else:
        if dtype not in (dt.float32, dt.int64, dt.bool_):
            suffixes.append(f"dtype={dtype!r}")
        body = format_array(v, len(prefix))
    if t.grad_fn is not None:
        suffixes.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    tangent = tangent_of(t)
    if tangent is not None:  # a dual tensor prints its tangent, as PyTorch's
        suffixes.append("tangent=" + tensor_repr(tangent).replace("\n", "\n" + " " * 8))
    return _with_suffixes(prefix + body, suffixes, len(prefix))
