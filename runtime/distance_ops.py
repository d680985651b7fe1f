"""Pairwise distances: cdist.

>>> import aotgrad
>>> from aotgrad.runtime import distance_ops
>>> distance_ops.cdist(aotgrad.tensor([[0., 0.]]), aotgrad.tensor([[3., 4.]])).tolist()
[[5.0]]
"""
from aotgrad.runtime.elementwise_ops import add, maximum, mul, sub
from aotgrad.runtime.sizes import hint
from aotgrad.runtime.linalg_ops import matmul
from aotgrad.runtime.op_base import op
from aotgrad.runtime.reduction_ops import _sqrt0, norm, sum
from aotgrad.runtime.view_ops import transpose, unsqueeze
from aotgrad.runtime.composite import composite

_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
          "donot_use_mm_for_euclid_dist")


@op("cdist", "CdistBackward0")
@composite("CdistBackward0", ("x1", "x2"))
def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """The p-norm distance between each row of x1 (..., P, M) and each row of x2
    (..., R, M): (..., P, R). For p == 2 and more than 25 rows (or compute_mode
    "use_mm_for_euclid_dist") it is computed from matrix products, as in PyTorch:
    sqrt(max(|a|^2 + |b|^2 - 2 a.b, 0)). Gradients are 0 where a distance is 0."""
    if compute_mode not in _MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    if x1.ndim < 2 or x2.ndim < 2:
        raise RuntimeError(f"cdist only supports at least 2D tensors, X1 got: {x1.ndim}D, "
                           f"X2 got: {x2.ndim}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: "
                           f"{hint(x1.shape[-1])} X2: {hint(x2.shape[-1])}")
    if not (x1.dtype.is_floating_point and x2.dtype.is_floating_point):
        raise RuntimeError(f"cdist only supports floating-point dtypes, X1 got: "
                           f"{x1.dtype.name}, X2 got: {x2.dtype.name}")
    if p < 0:
        raise RuntimeError(f"cdist only supports non-negative p values, got {p}")
    rows1, rows2 = x1.shape[-2], x2.shape[-2]
    use_mm = p == 2 and (compute_mode == "use_mm_for_euclid_dist" or
                         (compute_mode == _MODES[0] and (rows1 > 25 or rows2 > 25)))
    if use_mm:
        n1 = sum(mul(x1, x1), -1, keepdim=True)
        n2 = transpose(sum(mul(x2, x2), -1, keepdim=True), -2, -1)
        d2 = sub(add(n1, n2), mul(matmul(x1, transpose(x2, -2, -1)), 2.0))
        return _sqrt0(maximum(d2, 0.0))
    return norm(sub(unsqueeze(x1, -2), unsqueeze(x2, -3)), p, -1)
