"""The memory layout a traced tensor would have eagerly, so that a trace applies eager mode's
stride rules (`x.t().view(-1)` raises, as eagerly: a view cannot flatten a transposed
tensor).

A traced tensor's value is an IR Var, which has no strides. A view prim applied while
tracing also runs on a *layout probe*: an int8 numpy array of the tensor's shape whose
strides (in elements) are the eager tensor's, carried on the traced tensor. A tensor without
a probe is C-contiguous (a fresh result). Probes are never read: their buffers are
`np.empty` (pages the OS maps only when touched).
"""
import numpy as np

from aotgrad.ir.core import evaluate_params
from aotgrad.ir.symbolic import hints

def probe(t):
    """An array with t's layout: its eager array, its probe, or None (C-contiguous)."""
    v = t._value
    if isinstance(v, np.ndarray):
        return v
    return t._layout_probe


def propagate(prim, params, x, out):
    """Give `out` (traced, made by view prim `prim` from x) the layout eager mode gives it."""
    p = probe(x)
    if p is None:
        if prim.name == "reshape":   # contiguous in, contiguous out
            return
        p = np.empty(hints(x.shape), np.int8)  # (strides only: a symbolic size's hint)
    r = prim.impl(p, **evaluate_params(params, None))
    if not r.flags.c_contiguous or r.size <= 1 or np.may_share_memory(r, p):
        out._layout_probe = r


def mark_fresh(t):
    """t (traced) is a new C-contiguous value eagerly (a copy), whatever it was made from."""
    t.__dict__.pop("_layout_probe", None)


def is_view_of(out, x):
    """Would eager mode's result `out` of a reshape of x share x's memory (a view)?"""
    po, px = probe(out), probe(x)
    if po is None and px is None:
        return True   # both fresh and contiguous: a reshape is a view
    if po is None or px is None:   # a reshape whose result got no probe copied x
        return px is None
    return po.size <= 1 or np.may_share_memory(po, px)
