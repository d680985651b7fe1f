"""The memory layout a traced tensor would have eagerly, so that a trace applies eager mode's
stride rules (`x.t().view(-1)` raises, as eagerly: a view cannot flatten a transposed
tensor).

A traced tensor's value is an IR Var, which has no strides. A view prim applied while
tracing also runs on a *layout probe*: an int8 numpy array of the tensor's shape whose
strides (in elements) are the eager tensor's, carried on the traced tensor. A tensor without
a probe is C-contiguous (a fresh result). Probes are never read: their buffers are
`np.empty` (pages the OS maps only when touched).

A traced argument carries a probe with the argument's own strides (`argument_probe`), and
a compiled function serves a program traced for C-contiguous arguments to a call with
strided ones only when its trace read no layout at all (`probe` tells the trace's builder,
`note_layout_read`). Eager mode gives the result of a computation (not a view) the layout
its numpy kernel chooses, which can follow a strided input's: such a traced result's layout
is *uncertain*, and reading it for the user (`stride()`, `is_contiguous()`, `view`) breaks
the graph (`certain_probe`).
"""
import numpy as np

from aotgrad.ir.core import current_builder, evaluate_params
from aotgrad.ir.symbolic import hints
from aotgrad.ir.tags import Tag


def probe(t):
    """An array with t's layout: its eager array, its probe, or None (C-contiguous)."""
    v = t._value
    if isinstance(v, np.ndarray):
        return v
    note = getattr(current_builder(), "note_layout_read", None)
    if note is not None:
        note()
    return t._layout_probe


def certain_probe(t, what):
    """probe(t), for a read whose answer the user sees (`what` names it): a graph break where
    eager mode's layout of t is not known while tracing."""
    if t._layout_uncertain:
        t._concrete(f"{what} of a result computed from a strided tensor (its layout is "
                    f"eager mode's numpy kernel's choice)")
    return probe(t)


def note_result(prim, inputs, out):
    """A traced computation (not a view) `prim` made `out` from `inputs`: its layout is
    uncertain where an input's is strided or uncertain (otherwise eagerly C-contiguous),
    except a product's, which is C-contiguous eagerly whatever its operands' layouts."""
    if Tag.CONTRACTION in prim.tags:
        return
    for t in inputs:
        if t._layout_uncertain:
            out._layout_uncertain = True
            return
        p = t._layout_probe
        if p is not None and not _c_ordered(p):
            out._layout_uncertain = True
            return


def _c_ordered(p):
    """Whether array p's strides decrease from the first dim to the last (ignoring size-1
    and broadcast dims): numpy's kernels then give results C-contiguous layouts."""
    last = None
    for n, st in zip(p.shape, p.strides):
        if n > 1 and st != 0:
            if last is not None and abs(st) > last:
                return False
            last = abs(st)
    return True


def is_c_contiguous(p):
    """Whether array `p` is C-contiguous as PyTorch sees it: the strides of size-1 dims do
    not count, nor those of an array of at most one element."""
    if p.size <= 1 or p.flags.c_contiguous:
        return True
    expect = p.itemsize
    for n, st in reversed(list(zip(p.shape, p.strides))):
        if n != 1:
            if st != expect:
                return False
            expect *= n
    return True


def argument_probe(array, shape):
    """A probe of `shape` (an argument's sizes: its hints where symbolic) with the element
    strides of numpy `array`, the argument's value."""
    item = array.itemsize
    strides = tuple(st // item for st in array.strides)
    lo = sum(st * (n - 1) for n, st in zip(shape, strides) if st < 0 and n > 0)
    hi = sum(st * (n - 1) for n, st in zip(shape, strides) if st > 0 and n > 0)
    buf = np.empty(hi - lo + 1, np.int8)
    return np.lib.stride_tricks.as_strided(buf[-lo:], shape=tuple(shape), strides=strides)


def propagate(prim, params, x, out):
    """Give `out` (traced, made by view prim `prim` from x) the layout eager mode gives it."""
    v = x._value   # (x's probe as bookkeeping, not a read of its layout)
    p = v if isinstance(v, np.ndarray) else x._layout_probe
    if p is None:
        if prim.name == "reshape":   # contiguous in, contiguous out
            return
        p = np.empty(hints(x.shape), np.int8)  # (strides only: a symbolic size's hint)
    r = prim.impl(p, **evaluate_params(params, None))
    if not r.flags.c_contiguous or r.size <= 1 or np.may_share_memory(r, p):
        out._layout_probe = r
    if x._layout_uncertain:   # a view of an uncertain layout is uncertain
        out._layout_uncertain = True


def mark_fresh(t):
    """t (traced) is a new C-contiguous value eagerly (a copy), whatever it was made from."""
    t.__dict__.pop("_layout_probe", None)
    t.__dict__.pop("_layout_uncertain", None)


def is_view_of(out, x):
    """Would eager mode's result `out` of a reshape of x share x's memory (a view)?"""
    po, px = probe(out), probe(x)
    if po is None and px is None:
        return True   # both fresh and contiguous: a reshape is a view
    if po is None or px is None:   # a reshape whose result got no probe copied x
        return px is None
    return po.size <= 1 or np.may_share_memory(po, px)


# ---- PyTorch's preserve_format (empty_like, zeros_like, ..., clone) ----------------------
def _non_overlapping_and_dense(shape, strides):
    """PyTorch's is_non_overlapping_and_dense: the elements fill a block exactly, in some
    order of the dims (size-0/1 dims do not count)."""
    if len(shape) == 1:
        return shape[0] < 2 or strides[0] == 1
    perm = sorted(range(len(shape)), key=lambda d: (shape[d] < 2, strides[d] if shape[d] >= 2
                                                    else 0))
    need = 1
    for d in perm:
        if shape[d] < 2:
            return True
        if strides[d] != need:
            return False
        need *= shape[d]
    return True


def _dense_strides_keeping_order(shape, strides):
    """PyTorch's infer_dense_strides: dense strides in the dims' order of x's strides (a
    stable insertion sort, innermost first; a dim of stride 0 keeps its place; equal strides
    put the smaller size inside)."""
    def order(a, b):
        sa, sb = strides[a], strides[b]
        if sa == 0 or sb == 0:
            return 0
        if sa != sb:
            return -1 if sa < sb else 1
        return 1 if shape[a] > shape[b] else 0
    perm = list(range(len(shape)))[::-1]
    for i in range(1, len(perm)):
        j = i
        for k in range(i - 1, -1, -1):
            c = order(perm[k], perm[j])
            if c > 0:
                perm[k], perm[j] = perm[j], perm[k]
                j = k
            elif c < 0:
                break
    out, step = [0] * len(shape), 1
    for d in perm:
        out[d] = step
        if shape[d] > 1:
            step *= shape[d]
    return tuple(out)


def preserved_strides(shape, strides):
    """The element strides of PyTorch's `empty_like(x)` (memory_format=preserve_format, also
    zeros_like, full_like, randn_like, clone, ...) for x of `shape` and element `strides`:
    x's own where x is non-overlapping and dense, else dense strides in x's order; None where
    that is C-contiguous (the plain result)."""
    shape, strides = tuple(shape), tuple(strides)
    out = strides if _non_overlapping_and_dense(shape, strides) else \
        _dense_strides_keeping_order(shape, strides)
    c, step = [], 1
    for n in reversed(shape):
        c.append(step)
        step *= n
    return None if out == tuple(reversed(c)) else out


def strided_empty(shape, strides, dtype):
    """An uninitialised numpy array of `shape` with element `strides` (dense ones)."""
    numel = 1 + sum((n - 1) * st for n, st in zip(shape, strides)) if all(shape) else 0
    buf = np.empty(numel, dtype)
    return np.lib.stride_tricks.as_strided(buf, shape=tuple(shape),
                                           strides=tuple(st * buf.itemsize for st in strides))


def like_layout(x, out):
    """`out`, a fresh C-contiguous tensor of x's shape made by a `*_like(x)` factory or a
    clone of x, given the layout PyTorch's preserve_format gives it: x's strides where x is
    dense, else dense strides in x's dims' order. Eagerly its array is laid out so; while
    tracing it gets the matching layout probe (uncertain where x's is)."""
    v = x._value
    if isinstance(v, np.ndarray):
        if v.flags.c_contiguous and v.ndim <= 1 or not isinstance(out._value, np.ndarray):
            return out
        st = preserved_strides(v.shape, tuple(s // v.itemsize for s in v.strides))
        if st is not None:
            a = strided_empty(v.shape, st, out._value.dtype)
            a[...] = out._value
            out._value = a
        return out
    if x._layout_uncertain:
        out._layout_uncertain = True
    p = x._layout_probe
    if p is not None:
        st = preserved_strides(p.shape, tuple(s // p.itemsize for s in p.strides))
        if st is not None:
            out._layout_probe = strided_empty(p.shape, st, np.int8)
    return out
