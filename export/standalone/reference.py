"""numpy implementations of the prims a saved package runs as reference steps (the code
generator's kernels run the rest). Same semantics as aotgrad's IR reference prims (a test
compares them prim by prim); numpy only. `IMPLS[prim name](*arrays, **params)`."""
import math

import numpy as np


def dot_general(a, b, contract, batch=((), ())):
    (lc, rc), (lb, rb) = contract, batch
    af = [i for i in range(a.ndim) if i not in lc and i not in lb]
    bf = [i for i in range(b.ndim) if i not in rc and i not in rb]
    at = np.transpose(a, list(lb) + af + list(lc))
    bt = np.transpose(b, list(rb) + list(rc) + bf)
    bsh = [a.shape[i] for i in lb]
    afs, bfs = [a.shape[i] for i in af], [b.shape[i] for i in bf]
    k = math.prod(a.shape[i] for i in lc)
    out = np.matmul(at.reshape(bsh + [math.prod(afs), k]),
                    bt.reshape(bsh + [k, math.prod(bfs)]))
    return out.reshape(bsh + afs + bfs).astype(a.dtype, copy=False)


def gather(x, idx, dim):
    x = x[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(idx.shape))]
    return np.take_along_axis(x, idx, axis=dim)


def scatter_add(x, idx, src, dim):
    out = x.copy()
    full = list(np.indices(idx.shape, sparse=True))
    full[dim] = idx
    np.add.at(out, tuple(full), src)
    return out


def pad(x, config, value=0.0):
    shape = [lo + hi + n + max(0, n - 1) * it for (lo, hi, it), n in zip(config, x.shape)]
    out = np.full(shape, value, dtype=x.dtype)
    out[tuple(slice(lo, lo + (n - 1) * (it + 1) + 1 if n else lo, it + 1)
              for (lo, hi, it), n in zip(config, x.shape))] = x
    return out


def _reduce(fn):
    def impl(x, dims):
        return np.asarray(fn(x, axis=tuple(dims))).astype(x.dtype, copy=False)
    return impl


def broadcast_in_dim(x, shape, dims):
    return np.broadcast_to(x.reshape([x.shape[dims.index(d)] if d in dims else 1
                                      for d in range(len(shape))]), shape)


def slice_(x, start, limit, strides=None):
    strides = strides or (1,) * x.ndim
    return x[tuple(slice(s, l, st) for s, l, st in zip(start, limit, strides))]


def iota(shape, dim, dtype):
    return np.broadcast_to(np.arange(shape[dim], dtype=dtype).reshape(
        [shape[dim] if i == dim else 1 for i in range(len(shape))]), shape).copy()


def argsort(x, dim, descending=False):
    idx = np.argsort(x, axis=dim, kind="stable").astype(np.int64)
    return np.flip(idx, dim).copy() if descending else idx


def cumprod(x, dim):
    with np.errstate(all="ignore"):   # inf * 0 is NaN silently, as in PyTorch
        return np.cumprod(x, axis=dim, dtype=x.dtype)


def logcumsumexp(x, dim):
    with np.errstate(all="ignore"):
        return np.logaddexp.accumulate(x, axis=dim, dtype=x.dtype)


def _cumarg(largest):
    def impl(x, dim):
        """Index of the running max (min) along dim: the last occurrence of the extreme so
        far, or of the last NaN so far (a log-depth scan over (value, index) pairs)."""
        val = np.moveaxis(x, dim, -1).copy()
        n = val.shape[-1]
        idx = np.broadcast_to(np.arange(n, dtype=np.int64), val.shape).copy()
        k = 1
        while k < n:
            v1, i1, v2, i2 = val[..., :-k], idx[..., :-k], val[..., k:], idx[..., k:]
            take = ((v2 >= v1) if largest else (v2 <= v1)) | (v2 != v2)
            val[..., k:], idx[..., k:] = np.where(take, v2, v1), np.where(take, i2, i1)
            k *= 2
        return np.ascontiguousarray(np.moveaxis(idx, -1, dim))
    return impl


def searchsorted(seq, values, right):
    """The first index i of each value's row of seq with seq[i] >= value (> with right), by
    a binary search that places NaN last (PyTorch's)."""
    m = seq.shape[-1]
    s2 = seq.reshape(-1, m)
    v2 = values.reshape(s2.shape[0], -1) if seq.ndim > 1 else values.reshape(1, -1)
    lo = np.zeros(v2.shape, np.int64)
    hi = np.full(v2.shape, m, np.int64)
    with np.errstate(invalid="ignore"):
        while True:
            active = lo < hi
            if not active.any():
                break
            mid = (lo + hi) // 2
            mv = np.take_along_axis(s2, np.minimum(mid, m - 1), axis=1)
            right_of = ~(mv > v2) if right else ~(mv >= v2)
            lo = np.where(active & right_of, mid + 1, lo)
            hi = np.where(active & ~right_of, mid, hi)
    return lo.reshape(values.shape)


IMPLS = {
    "cumprod": cumprod,
    "logcumsumexp": logcumsumexp,
    "cumargmax": _cumarg(True),
    "cumargmin": _cumarg(False),
    "searchsorted": searchsorted,
    "dot_general": dot_general,
    "gather": gather,
    "scatter_add": scatter_add,
    "pad": pad,
    "concatenate": lambda *xs, dim: np.concatenate(xs, axis=dim),
    "rev": lambda x, dims: np.flip(x, tuple(dims)).copy(),
    "reduce_sum": _reduce(np.sum),
    "reduce_max": _reduce(np.max),
    "reduce_min": _reduce(np.min),
    "reduce_prod": _reduce(np.prod),
    "argmax": lambda x, dim: np.argmax(x, axis=dim).astype(np.int64),
    "argmin": lambda x, dim: np.argmin(x, axis=dim).astype(np.int64),
    "cumsum": lambda x, dim: np.cumsum(x, axis=dim, dtype=x.dtype),
    "argsort": argsort,
    "broadcast_in_dim": broadcast_in_dim,
    "reshape": lambda x, shape: x.reshape(shape),
    "transpose": lambda x, perm: np.transpose(x, perm),
    "slice": slice_,
    "convert_element_type": lambda x, dtype: x.astype(dtype),
    "iota": iota,
    "full": lambda shape, value, dtype: np.full(shape, value, dtype=dtype),
}
