"""The multi-tensor path of the optimizers and of gradient clipping (PyTorch's `foreach`): a
step written on the tensors' numpy buffers in place, without a tensor op (dispatch, autograd
node, temporary tensor) per arithmetic step.

It computes what the per-parameter path (`foreach=False`, written with tensor ops, and the
only path a traced step takes) computes, rounding for rounding: each step below is the same
numpy operation on the same dtypes, with Python-number factors cast to the parameter dtype
first, as the op layer casts a weak scalar. tests/optim/test_optim_foreach.py checks the two
paths equal bit for bit.

`arrays_of(group, tensors)` decides: the multi-tensor path runs only where every tensor is a
concrete, writable numpy buffer of one floating dtype, nothing traces, no forward-mode level
is active and the group is not `differentiable`.
"""
import numpy as np

from aotgrad.ir.core import current_builder
from aotgrad.runtime import write_hooks
from aotgrad.runtime.forward_mode import state as forward_state


def check_flags(foreach, fused):
    """PyTorch's constructor check."""
    if foreach and fused:
        raise RuntimeError("`fused` and `foreach` cannot be `True` together.")


def wanted(group):
    """Does the group ask for (or leave open) the multi-tensor path? `foreach=False` and
    `differentiable=True` keep the per-parameter path, as in PyTorch."""
    return group.get("foreach") is not False and not group.get("differentiable", False)


def fused_wanted(group):
    """Does the group ask for (or leave open) the fused path, one generated kernel per
    parameter (runtime/kernel_library.py)? `fused=None` with `foreach=None` (the defaults)
    and `fused=True` do; `foreach=True` asks for the multi-tensor path as PyTorch's
    foreach (numpy, several passes), `foreach=False` for the per-parameter one."""
    return wanted(group) and (group.get("fused") or not group.get("foreach"))


def arrays_of(rows, free=()):
    """The numpy buffers of `rows` (one tuple of tensors per parameter: the parameter, its
    gradient, its state), or None where the multi-tensor path cannot run on them: a traced
    value, a dtype other than float32/float64, a row whose tensors differ in dtype (the
    positions in `free`, such as a float32 step count, may differ), a read-only buffer (a
    view of an expanded tensor), an active forward-mode level (tangents follow in-place
    ops through the op layer) or a watcher of in-place writes (runtime/write_hooks.py)."""
    if current_builder() is not None or forward_state.level is not None or \
            write_hooks.state.watcher is not None:
        return None
    out = []
    for row in rows:
        arrays = tuple(t._value for t in row)
        for i, a in enumerate(arrays):
            if type(a) is not np.ndarray or row[i]._sparse is not None or not a.flags.writeable or \
                    a.dtype not in _FLOATS or (i not in free and a.dtype != arrays[0].dtype):
                return None
        out.append(arrays)
    return out


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def flat_arrays_of(rows, free=()):
    """arrays_of(rows, free), each array outside `free` as its flat 1-D view (what a fused
    kernel takes), or None where arrays_of is None or an array is not C-contiguous."""
    arrays = arrays_of(rows, free)
    if arrays is None:
        return None
    out = []
    for row in arrays:
        for i, a in enumerate(row):
            if i not in free and not a.flags.c_contiguous:
                return None
        out.append(tuple(a if i in free else a.reshape(-1) for i, a in enumerate(row)))
    return out


def written(*tensors):
    """Bump the version of every tensor the step wrote in place (as an in-place op does)."""
    for t in tensors:
        t._version_counter.v += 1


def scalar(value, dtype):
    """A Python-number factor as the op layer uses it against a tensor of `dtype`."""
    return dtype.type(value)


def lerp_(x, end, weight, tmp):
    """x <- lerp(x, end, weight) in place, as optim/_update.lerp_ rounds it (the formula
    switches at weight 0.5); `tmp` is a scratch buffer of x's shape and dtype."""
    f = x.dtype.type
    np.subtract(end, x, out=tmp)
    if weight < 0.5:
        tmp *= f(weight)
        x += tmp
    else:
        tmp *= f(1.0 - weight)
        np.subtract(end, tmp, out=x)


def ema_square_(v, grad, beta, tmp):
    """v <- v * beta + (1 - beta) * grad^2 in place, as optim/_update.addcmul rounds
    `addcmul(v * beta, grad, grad, 1 - beta)`; `tmp` is a scratch buffer."""
    f = v.dtype.type
    v *= f(beta)
    if 1 - beta == 1:
        np.multiply(grad, grad, out=tmp)
    else:
        np.multiply(grad, f(1 - beta), out=tmp)
        tmp *= grad
    v += tmp


def maximum_first(x, y):
    """maximum as the op layer computes it: NaN propagates, and where x == y (0.0 and -0.0)
    the result is x."""
    return np.where(x == y, x, np.maximum(x, y))


class StepScalars:
    """The scalar factors of an optimizer step (bias corrections and the like), computed by
    the per-parameter path's own tensor ops and kept per key (the step count, the dtype), so
    that the multi-tensor path uses the same roundings and computes them once for the
    parameters that share a step count."""

    def __init__(self, fn):
        self._fn, self._memo = fn, {}

    def __call__(self, *key):
        out = self._memo.get(key)
        if out is None:
            out = self._memo[key] = tuple(
                v._value if hasattr(v, "_value") else v for v in self._fn(*key))
        return out
