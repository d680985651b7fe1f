"""Index terms and index maps: where a kernel reads a value.

A kernel loops over a domain D. The index at which it evaluates a value of shape S is a
tuple of terms, one per dim of S: a fixed position (`Const`), an affine function of one
loop variable of D (`Dim`, optionally clamped: a padded input read at a valid index), or
the value of an integer array at another index (`Gathered`: a per-row gather/scatter
index). View prims (broadcast, transpose, slice, rev, unit reshape), pad and the row
gathers map their output's index to their input's here, so a kernel reads through them by
index arithmetic instead of copying.
"""
from dataclasses import dataclass
from typing import Optional

from aotgrad.ir.prims import unit_reshape_map


class SymbolicSizeInKernel(NotImplementedError):
    """A kernel would depend on a symbolic size in a way its text cannot take as a runtime
    argument (an order of two sizes that holds for some values only, a size as a literal):
    the program is compiled per size instead (codegen.program)."""


def _ge(a, b):
    """Is a >= b for every value of the symbols? (Integers: a >= b iff a - b + 1 > 0,
    which a SymInt answers True only when provable.)"""
    return bool(a - b + 1 > 0)


def _max(a, b):
    if _ge(a, b):
        return a
    if _ge(b, a):
        return b
    raise SymbolicSizeInKernel(f"max({a}, {b}) differs between sizes")


def _min(a, b):
    if _ge(a, b):
        return b
    if _ge(b, a):
        return a
    raise SymbolicSizeInKernel(f"min({a}, {b}) differs between sizes")


@dataclass(frozen=True, slots=True)
class Const:
    """The fixed position `value`."""
    value: int


@dataclass(frozen=True, slots=True)
class Dim:
    """scale * (loop variable of domain dim `dim`) + offset, clamped to clamp = (lo, hi)
    when set (a padded input is read at a valid index; the value there is discarded where
    the pad fills)."""
    dim: int
    scale: int = 1
    offset: int = 0
    clamp: Optional[tuple] = None

    @property
    def plain(self):
        """The loop variable itself."""
        return self.scale == 1 and self.offset == 0 and self.clamp is None

    def on(self, dim):
        """The same term over another domain dim (dims renumbered by collapsing)."""
        return Dim(dim, self.scale, self.offset, self.clamp)


@dataclass(frozen=True, slots=True)
class Gathered:
    """The value of the integer array `var` at index `index` (a per-row gather/scatter
    index), bounds-checked against `size`."""
    var: object
    index: tuple
    size: int


def view_index(node, idx):
    """Index into node.inputs[0] given the index `idx` into node's output."""
    name, p, x = node.prim.name, node.params, node.inputs[0]
    if name == "broadcast_in_dim":
        out = []
        for i, d in enumerate(p["dims"]):
            out.append(Const(0) if x.shape[i] == 1 and p["shape"][d] != 1 else idx[d])
        return tuple(out)
    if name == "transpose":
        out = [None] * x.ndim
        for j, pj in enumerate(p["perm"]):
            out[pj] = idx[j]
        return tuple(out)
    if name == "slice":
        st = p.get("strides") or (1,) * x.ndim
        return tuple(shifted(t, s, s0) for t, s0, s in zip(idx, p["start"], st))
    if name == "rev":
        out = list(idx)
        for d in p["dims"]:
            out[d] = shifted(idx[d], -1, x.shape[d] - 1)
        return tuple(out)
    if name == "reshape":
        m = unit_reshape_map(x.shape, p["shape"])
        out = [Const(0)] * x.ndim
        for di, si in enumerate(m):
            if si is not None:
                out[si] = idx[di]
        return tuple(out)
    raise AssertionError(name)


def clamped(t, lo, hi):
    """Term t clamped to [lo, hi] (within the clamp it may carry already)."""
    if isinstance(t, Const):
        return Const(_min(_max(t.value, lo), hi))
    if t.clamp is not None:
        lo, hi = _max(lo, t.clamp[0]), _min(hi, t.clamp[1])
    return Dim(t.dim, t.scale, t.offset, (lo, hi))


def shifted(t, a, b):
    """Term for a * t + b (a != 0), clamp bounds mapped along."""
    if isinstance(t, Const):
        return Const(a * t.value + b)
    if not isinstance(t, Dim):
        raise AssertionError(t)
    clamp = None
    if t.clamp is not None:
        lo, hi = a * t.clamp[0] + b, a * t.clamp[1] + b
        clamp = (lo, hi) if a > 0 else (hi, lo)   # (a clamp has lo <= hi)
    return Dim(t.dim, a * t.scale, a * t.offset + b, clamp)


def pad_index(node, idx):
    """Index into a pad's input for the output index `idx`, and the padded dims' checks:
    (input index, [(term, n)] meaning `0 <= term < n` must hold for the input value to be
    used). None when a constant index lies in the padding (the value is the fill)."""
    x, out, conds = node.inputs[0], [], []
    for t, (lo, hi, _), n in zip(idx, node.params["config"], x.shape):
        if lo == 0 and hi == 0:
            out.append(t)
            continue
        u = shifted(t, 1, -lo)
        if isinstance(u, Const):
            inside = _ge(u.value, 0) and _ge(n - 1, u.value)
            if not inside and (_ge(-1, u.value) or _ge(u.value, n)):
                return None
            if not inside:
                raise SymbolicSizeInKernel(f"whether index {u.value} lies in the padding "
                                           f"differs between sizes")
            out.append(u)
            continue
        conds.append((u, n))
        out.append(clamped(u, 0, n - 1))
    return tuple(out), conds


def gather_row_index(node, idx):
    """Index of the (rows, 1) index/src operands of a row gather/scatter at `idx`."""
    return tuple(idx[:-1]) + (Const(0),)


def gather_index(node, idx):
    """Index into a row gather's input for the output index `idx`: the last dim is the
    gathered index value."""
    x = node.inputs[0]
    return tuple(idx[:-1]) + (Gathered(node.inputs[1], gather_row_index(node, idx),
                                       x.shape[-1]),)


def identity(nd, start=0):
    return tuple(Dim(start + i) for i in range(nd))


def row_index(rowshape, shape):
    """Index of a per-row value of `shape` in a kernel whose rows have `rowshape`: the
    identity, or (when the two differ only by unit dims, e.g. a keepdim mean (R, 1) of rows
    (R,)) each dim mapped to its row dim, unit dims to 0. None when they do not match."""
    shape, rowshape = tuple(shape), tuple(rowshape)
    if shape == rowshape:
        return identity(len(shape))
    m = unit_reshape_map(rowshape, shape)
    if m is None:
        return None
    return tuple(Const(0) if si is None else Dim(si) for si in m)
