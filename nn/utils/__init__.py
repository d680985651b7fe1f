"""nn.utils: gradient clipping and flattening parameters to a vector.

>>> model = nn.Linear(3, 2)
>>> model(aotgrad.randn(4, 3)).sum().backward()
>>> total = nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
"""
import math

import numpy as np

from aotgrad.runtime import multi_tensor, ops, shape_ops
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.tensor import Tensor


def _params(parameters):
    return [parameters] if isinstance(parameters, Tensor) else list(parameters)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Scale all gradients so that their joint norm is at most max_norm; returns the norm
    before clipping (a 0-d tensor), as PyTorch: each gradient's norm_type-norm in its own
    dtype, the total the norm of those norms (promoted to a common dtype), then every gradient
    times min(max_norm / (total + 1e-6), 1) cast to its dtype.

    Eagerly each gradient's norm comes from one function (_array_norm: a sum of squares in a
    fixed order for the 2-norm) whichever path runs, so the paths agree bit for bit: the
    per-parameter path (foreach=False) scales with a tensor op per gradient, the default
    (foreach=None or True) scales the buffers in place. A traced call records the ops."""
    grads = [p.grad for p in _params(parameters) if p.grad is not None]
    from aotgrad.runtime.factories import tensor
    if not grads:
        return tensor(0.0)
    norm_type = float(norm_type)
    rows = multi_tensor.arrays_of([(g,) for g in grads])
    # (NaN/inf products without numpy's warnings, as PyTorch)
    with no_grad(), np.errstate(all="ignore"):
        if rows is None:           # traced (or not numpy buffers): the tensor ops
            return _clip_by_ops(grads, max_norm, norm_type, error_if_nonfinite)
        arrays = [r[0] for r in rows]
        norms = [_array_norm(a, norm_type) for a in arrays]
        total = _array_norm(np.stack(norms), norm_type)
        if error_if_nonfinite and not np.isfinite(total):
            _nonfinite(norm_type)
        f = total.dtype.type
        coef = np.minimum(f(max_norm) / (total + f(1e-6)), f(1.0))
        if foreach is False:
            for g in grads:
                g.mul_(Tensor._make(coef.astype(g._value.dtype)))
        else:
            for a in arrays:
                c = coef.astype(a.dtype)
                if c != 1:         # (times exactly 1 leaves every value as it is)
                    np.multiply(a, c, out=a)
            multi_tensor.written(*grads)
    return Tensor._make(total)


def _array_norm(a, p):
    """The p-norm of all of array `a`'s elements as a 0-d array of its dtype, its elements
    taken in C order (a sum of squares for p = 2, one BLAS dot product of the flat buffer);
    the norms of an empty array: 0 (inf for p = -inf)."""
    flat = np.ascontiguousarray(a).reshape(-1)
    f = a.dtype.type
    if p == 2.0:
        return np.sqrt(np.asarray(np.dot(flat, flat), a.dtype))
    if p == 1.0:
        return np.asarray(np.add.reduce(np.abs(flat)), a.dtype)
    if math.isinf(p):
        ext = np.maximum if p > 0 else np.minimum
        return np.asarray(ext.reduce(np.abs(flat), initial=f(0 if p > 0 else np.inf)), a.dtype)
    if p == 0.0:
        return np.asarray(np.count_nonzero(flat), a.dtype)
    s = np.add.reduce(np.power(np.abs(flat), f(p)))   # (|x| = 0 with p < 0: inf)
    return np.asarray(np.power(s, f(1.0 / p)), a.dtype)


def _clip_by_ops(grads, max_norm, norm_type, error_if_nonfinite):
    if math.isinf(norm_type):
        reduce = ops.amax if norm_type > 0 else ops.amin
        norms = [reduce(ops.abs(g)) for g in grads]
        total = norms[0] if len(norms) == 1 else reduce(shape_ops.stack(norms))
    else:
        norms = [ops.norm(g, norm_type) for g in grads]
        total = ops.norm(shape_ops.stack(norms), norm_type)
    if error_if_nonfinite and not bool(ops.isfinite(total)):
        _nonfinite(norm_type)
    coef = ops.clamp(ops.div(float(max_norm), ops.add(total, 1e-6)), max=1.0)
    for g in grads:
        g.mul_(coef.to(g.dtype))
    return total


def _nonfinite(norm_type):
    raise RuntimeError(f"The total norm of order {norm_type} for gradients from "
                       f"`parameters` is non-finite, so it cannot be clipped. To disable "
                       f"this error and scale the gradients by the non-finite norm "
                       f"anyway, set `error_if_nonfinite=False`")


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient to [-clip_value, clip_value] in place."""
    grads = [p.grad for p in _params(parameters) if p.grad is not None]
    rows = multi_tensor.arrays_of([(g,) for g in grads]) if grads and foreach is not False \
        and not math.isnan(clip_value) else None
    if rows is not None:  # the multi-tensor path: clamp on the buffers (of any float dtypes)
        for a, in rows:
            f = a.dtype.type
            # (np.clip keeps NaN and, where a value equals a bound, the value: -0.0 stays)
            np.clip(a, f(-clip_value), f(clip_value), out=a)
        multi_tensor.written(*grads)
        return
    with no_grad():
        for g in grads:
            g.clamp_(-clip_value, clip_value)


def parameters_to_vector(parameters):
    return shape_ops.cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    off = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[off:off + n].reshape(tuple(p.shape)))
            off += n


# the submodules PyTorch has under nn.utils (imported last: they import nn's layers)
from aotgrad.nn.utils import parametrizations, parametrize, rnn  # noqa: E402,F401
from aotgrad.nn.utils.weight_norm import remove_weight_norm, weight_norm  # noqa: E402,F401
