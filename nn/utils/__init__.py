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
    before clipping (a 0-d tensor)."""
    grads = [p.grad for p in _params(parameters) if p.grad is not None]
    from aotgrad.runtime.factories import tensor
    if not grads:
        return tensor(0.0)
    norm_type = float(norm_type)
    arrays = multi_tensor.arrays_of([grads]) if foreach is not False and norm_type == 2.0 \
        else None
    with no_grad():
        if arrays is not None:
            total = _total_2norm_in_place(arrays[0], max_norm, error_if_nonfinite)
            multi_tensor.written(*grads)
            return Tensor._make(total)
        if math.isinf(norm_type):
            norms = [ops.amax(ops.abs(g)) for g in grads]
            total = norms[0] if len(norms) == 1 else ops.amax(shape_ops.stack(norms))
        else:
            norms = [ops.norm(g, norm_type) for g in grads]
            total = ops.norm(shape_ops.stack(norms), norm_type)
        if error_if_nonfinite and not bool(ops.isfinite(total)):
            _nonfinite(norm_type)
        coef = ops.clamp(ops.div(float(max_norm), ops.add(total, 1e-6)), max=1.0)
        for g in grads:
            g.mul_(coef.to(g.dtype))
    return total


def _total_2norm_in_place(grads, max_norm, error_if_nonfinite):
    """The multi-tensor path of clip_grad_norm_ (2-norm, one dtype): the op path's numpy
    steps (sqrt of the sum of squares per gradient, then of the stacked norms) on the buffers,
    so that the two paths agree bit for bit. The squares go to one scratch buffer reused for
    every gradient (a fresh temporary per gradient cost as much as the sum); a factor of
    exactly 1 (the norm within max_norm) leaves the gradients as they are, as multiplying
    by it would."""
    f = grads[0].dtype.type
    scratch = np.empty(max(g.size for g in grads), grads[0].dtype)

    def norm(a):
        sq = np.multiply(a, a, out=scratch[:a.size].reshape(a.shape)) \
            if a.dtype == scratch.dtype else np.multiply(a, a)
        return np.sqrt(np.sum(sq, axis=tuple(range(a.ndim))).astype(a.dtype))

    total = norm(np.stack([norm(g) for g in grads]))
    if error_if_nonfinite and not np.isfinite(total):
        _nonfinite(2.0)
    coef = np.minimum(f(max_norm) / (total + f(1e-6)), f(1.0))
    if coef != 1:
        for g in grads:
            g *= coef
    return np.asarray(total)


def _nonfinite(norm_type):
    raise RuntimeError(f"The total norm of order {norm_type} for gradients from "
                       f"`parameters` is non-finite, so it cannot be clipped. To disable "
                       f"this error and scale the gradients by the non-finite norm "
                       f"anyway, set `error_if_nonfinite=False`")


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient to [-clip_value, clip_value] in place."""
    grads = [p.grad for p in _params(parameters) if p.grad is not None]
    arrays = multi_tensor.arrays_of([grads]) if grads and foreach is not False and \
        not math.isnan(clip_value) else None
    if arrays is not None:  # the multi-tensor path: clamp on the buffers
        f = arrays[0][0].dtype.type
        lo, hi = f(-clip_value), f(clip_value)
        for a in arrays[0]:
            # (np.clip keeps NaN and, where a value equals a bound, the value: -0.0 stays)
            np.clip(a, lo, hi, out=a)
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
