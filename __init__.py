"""aotgrad: a tracing, ahead-of-time backward compiler for numerical model code.

    import aotgrad
    x = aotgrad.randn(4, 3, requires_grad=True)
    loss = (x.tanh() * 2).sum()
    loss.backward()                 # eager autograd, PyTorch semantics

    @aotgrad.compile                # same code, traced to prims, backward derived ahead of time
    def f(x):
        return (x.tanh() * 2).sum()
"""
from aotgrad.ir.dtypes import DType, bool_, float32, float64, int32, int64
from aotgrad.ir.dtypes import bool_ as bool  # noqa: A001  (aotgrad.bool, like torch.bool)
from aotgrad.ir.core import PrimError
from aotgrad.runtime import Size, Tensor
from aotgrad.runtime.factories import (Generator, arange, as_tensor, bernoulli, empty, empty_like,
                                       eye, from_numpy, full, full_like, get_rng_state,
                                       initial_seed, linspace, logspace, manual_seed,
                                       multinomial, normal, ones,
                                       ones_like, rand, rand_like, randint, randn, randn_like,
                                       randperm, seed, set_rng_state, tensor, zeros, zeros_like)
from aotgrad.runtime.grad_mode import (enable_grad, inference_mode, is_grad_enabled,
                                       is_inference_mode_enabled, no_grad, set_grad_enabled)
from aotgrad.runtime.grad_mode import is_anomaly_check_nan_enabled, is_anomaly_enabled
from aotgrad.runtime.ops import (abs, absolute, add, all, amax, amin, any, argmax, argmin, atan2,
                                 bmm, ceil, clamp, clip, cos, count_nonzero, cumsum, div, divide,
                                 dot, eq, erf, exp, exp2, expm1, floor, floor_divide, ge, gt,
                                 isfinite, isinf, isnan, le, log, log1p, log2, log10, log_softmax,
                                 logical_and, logical_not, logical_or, logical_xor, logsumexp, lt,
                                 matmul, max, maximum, mean, min, minimum, mm, mul, mv, nan_to_num,
                                 ne, neg, negative, norm, outer, pow, prod, reciprocal, relu,
                                 remainder, round, rsqrt, sigmoid, sign, sin, softmax, sqrt,
                                 square, std, std_mean, sub, sum, tan, tanh, true_divide, var,
                                 var_mean, where)
from aotgrad.runtime.ops import sub as subtract, mul as multiply  # noqa: F401
from aotgrad.runtime.shape_ops import (argsort, broadcast_tensors, broadcast_to, cat, chunk,
                                       clone, concat, concatenate, flatten, flip, gather, hstack,
                                       index_select, masked_fill, movedim, narrow, permute,
                                       repeat, reshape, roll, scatter_add, select, sort, split,
                                       squeeze, stack, swapaxes, t, take_along_dim, tile, topk,
                                       transpose, tril, triu, unbind, unflatten, unsqueeze,
                                       vstack)
from aotgrad.runtime.shape_ops import (argwhere, diag, diag_embed, diagonal, index_add,
                                       index_copy, index_fill, masked_select, nonzero,
                                       repeat_interleave, rot90, scatter, take, tensor_split)
from aotgrad.runtime.shape_ops import one_hot as _one_hot  # noqa: F401  (nn.functional.one_hot)
from aotgrad.runtime.scatter_reduce_ops import scatter_reduce  # noqa: E402
from aotgrad import autograd  # noqa: E402

__version__ = "0.1.0"
float = float32  # noqa: A001  (aotgrad.float, like torch.float)
double = float64
long = int64
int = int32  # noqa: A001
from aotgrad.compiler import compile, explain  # noqa: E402,A001
from aotgrad.tracer import GraphBreakError  # noqa: E402
from aotgrad import nn, optim  # noqa: E402
from aotgrad import serialization  # noqa: E402
from aotgrad.serialization import load, save  # noqa: E402
from aotgrad import utils  # noqa: E402
from aotgrad.codegen import cache_clear, cache_info  # noqa: E402
