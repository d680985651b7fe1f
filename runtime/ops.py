"""User-level math ops: broadcasting, type promotion and decomposition into prims.

Every function here is a composition of `tprims` calls; its derivative comes from the
prims' rules. The `op` decorator names the user-level op (for IR provenance, profiler rows
and the grad_fn name PyTorch users expect, e.g. `MeanBackward0`).

This module gathers the math op families under one name (`ops.sum`, `ops.matmul`); each
family lives in its own module: `op_base` (the `op` decorator, return types, conversion
helpers), `elementwise_ops` (binary and unary ops), `linalg_ops` (the matmul family),
`reduction_ops` (reductions, softmax, cumsum).

>>> import aotgrad
>>> from aotgrad.runtime import ops
>>> ops.sum(ops.mul(aotgrad.tensor([1., 2.]), 3)).item()
9.0
"""
import builtins
import functools
import math

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import current_op, format_location
from aotgrad.runtime import elementwise_ops as _elementwise
from aotgrad.runtime import profiling
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.elementwise_ops import clamp_max, clamp_min  # noqa: F401
from aotgrad.runtime.elementwise_ops import (abs, absolute, add, add_, atan2, ceil, clamp, clip,
                                             cos, div, divide, eq, erf, exp, exp2, expm1, floor,
                                             floor_divide, ge, gt, isfinite, isinf, isnan, le,
                                             log, log10, log1p, log2, logical_and, logical_not,
                                             logical_or, logical_xor, lt, maximum, minimum, mul,
                                             mul_, nan_to_num, ne, neg, negative, pow,
                                             reciprocal, relu, remainder, round, rsqrt, rsub,
                                             sigmoid,
                                             sign, sin, sqrt, square, sub, tan, tanh,
                                             true_divide, where)
from aotgrad.runtime.index_ops import take_along_dim
from aotgrad.runtime.einsum_ops import einsum
from aotgrad.runtime.linalg_ops import bmm, dot, matmul, mm, mv, outer
from aotgrad.runtime.op_base import (ReturnType, as_tensor_like, broadcast_shapes, cast,
                                     is_weak, mark_weak, norm_dims, op, return_types,
                                     scalar_dtype)
from aotgrad.runtime.reduction_ops import (all, amax, amin, any, argmax, argmin, count_nonzero,
                                           cumsum, log_softmax, logsumexp, max, mean, min, norm,
                                           prod, softmax, std, std_mean, sum, sum_to_shape, var,
                                           var_mean)
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.view_ops import squeeze

_softplus = _elementwise._softplus  # used as ops._softplus by nn.functional

# the public names of this module, unchanged since it was split into families (the module
# imports listed first stay reachable as attributes, as they were)
__all__ = [
    "builtins", "functools", "math", "np", "dt", "current_op", "format_location", "profiling",
    "tp", "Tensor",
    # op_base
    "ReturnType", "as_tensor_like", "broadcast_shapes", "cast", "is_weak", "mark_weak",
    "norm_dims", "op", "return_types", "scalar_dtype",
    # elementwise_ops
    "abs", "absolute", "add", "add_", "atan2", "ceil", "clamp", "clamp_max", "clamp_min",
    "clip", "cos", "div", "divide",
    "eq", "erf", "exp", "exp2", "expm1", "floor", "floor_divide", "ge", "gt", "isfinite",
    "isinf", "isnan", "le", "log", "log10", "log1p", "log2", "logical_and", "logical_not",
    "logical_or", "logical_xor", "lt", "maximum", "minimum", "mul", "mul_", "nan_to_num", "ne",
    "neg", "negative", "pow", "reciprocal", "relu", "remainder", "round", "rsqrt", "rsub", "sigmoid",
    "sign", "sin", "sqrt", "square", "sub", "tan", "tanh", "true_divide", "where",
    # linalg_ops
    "bmm", "dot", "einsum", "matmul", "mm", "mv", "outer",
    # reduction_ops
    "all", "amax", "amin", "any", "argmax", "argmin", "count_nonzero", "cumsum", "log_softmax",
    "logsumexp", "max", "mean", "min", "norm", "prod", "softmax", "std", "std_mean", "sum",
    "sum_to_shape", "var", "var_mean",
    # shape ops used by the reductions
    "squeeze", "take_along_dim",
]
