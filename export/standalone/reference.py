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


IMPLS = {
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
