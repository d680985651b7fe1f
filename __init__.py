"""aotgrad: a tracing, ahead-of-time backward compiler for numerical model code.

    import aotgrad
    x = aotgrad.randn(4, 3, requires_grad=True)
    loss = (x.tanh() * 2).sum()
    loss.backward()                 # eager autograd, PyTorch semantics

    @aotgrad.compile                # same code, traced to prims, backward derived ahead of time
    def f(x):
        return (x.tanh() * 2).sum()
"""
from aotgrad.ir.dtypes import (DType, bfloat16, bool_, float16, float32, float64, int8, int16,
                               int32, int64, uint8)
from aotgrad.ir.dtypes import bool_ as bool  # noqa: A001  (aotgrad.bool, like torch.bool)
from aotgrad.ir.core import PrimError
from aotgrad.runtime import Size, Tensor
from aotgrad.runtime.factories import (Generator, arange, as_tensor, bernoulli, empty, empty_like,
                                       eye, from_numpy, full, full_like, get_rng_state,
                                       initial_seed, linspace, logspace, manual_seed,
                                       multinomial, normal, ones,
                                       ones_like, rand, rand_like, randint, randn, randn_like,
                                       randperm, scalar_tensor, seed, set_rng_state, tensor, zeros,
                                       zeros_like)
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
from aotgrad.runtime.ops import clamp_max, clamp_min
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
from aotgrad.runtime.addmm_ops import (addbmm, addcdiv, addcmul, addmm, addmv, addr, baddbmm,
                                       lerp)
from aotgrad.runtime.compare_ops import allclose, bucketize, equal, isclose, searchsorted
from aotgrad.runtime.distance_ops import cdist
from aotgrad.runtime.einsum_ops import einsum
from aotgrad.runtime.scan_ops import cummax, cummin, cumprod, logaddexp, logaddexp2, logcumsumexp
from aotgrad.runtime.special_ops import (digamma, erfc, erfinv, i0, lgamma, logit, mvlgamma,
                                         polygamma, sinc, xlogy)
from aotgrad.runtime.trig_ops import (acos, acosh, arccos, arccosh, arcsin, arcsinh, arctan,
                                      arctan2, arctanh, asin, asinh, atan, atanh, cosh, sinh)
from aotgrad.runtime.scatter_reduce_ops import scatter_reduce  # noqa: E402
from aotgrad.runtime.index_reduce_ops import index_reduce  # noqa: E402
from aotgrad import autograd  # noqa: E402
from aotgrad.runtime.elementwise_more_ops import (  # noqa: E402
    trunc, fix, frac, sgn, signbit, copysign, hypot, heaviside, fmod, float_power, deg2rad,
    rad2deg, positive, fmax, fmin, isneginf, isposinf, isreal, ldexp,
    frexp, angle, conj, real, imag,)
from aotgrad.runtime.bitwise_ops import (  # noqa: E402
    bitwise_and, bitwise_or, bitwise_xor, bitwise_not, bitwise_left_shift, bitwise_right_shift)
from aotgrad.runtime.reduction_more_ops import (  # noqa: E402
    nansum, nanmean, median, nanmedian, kthvalue, aminmax, trace, diff, dist, ravel, fliplr,
    flipud, msort, atleast_1d, atleast_2d, atleast_3d)
from aotgrad.runtime.combine_ops import (  # noqa: E402
    tensordot, inner, kron, block_diag, cartesian_prod, meshgrid, vander, hsplit, vsplit,
    dstack, column_stack, diagflat, isin, tril_indices, triu_indices, result_type,
    promote_types, can_cast)
from aotgrad.runtime.stats_ops import (chain_matmul, corrcoef, cov, cross,  # noqa: E402
                                       nanquantile, quantile)
from aotgrad.runtime.misc_more_ops import (bincount, histc, randint_like,  # noqa: E402
                                           masked_scatter, mode,
                                           renorm, select_scatter, slice_scatter, unique,
                                           unique_consecutive)
from aotgrad.runtime.matrix_exp_ops import matrix_exp  # noqa: E402

from aotgrad._version import __version__  # noqa: E402  (one place: pyproject reads it)
float = float32  # noqa: A001  (aotgrad.float, like torch.float)
double = float64
half = float16
long = int64
int = int32  # noqa: A001
short = int16
from aotgrad.compiler import compile, explain, mark_dynamic, mark_static  # noqa: E402,A001
from aotgrad.tracer import GraphBreakError  # noqa: E402
from aotgrad import nn, optim  # noqa: E402
from aotgrad.nn.torch_names import (  # noqa: E402
    conv1d, conv2d, layer_norm, group_norm, batch_norm, embedding, dropout, cosine_similarity,
    pairwise_distance, pdist)
from aotgrad import serialization  # noqa: E402
from aotgrad.serialization import load, save  # noqa: E402
from aotgrad import utils  # noqa: E402
from aotgrad import special  # noqa: E402
from aotgrad.runtime.device import device, get_default_device, set_default_device  # noqa: E402
from aotgrad.runtime.memory_format import (channels_last, channels_last_3d,  # noqa: E402
                                    contiguous_format, layout, memory_format, preserve_format,
                                    sparse_coo, strided)
from aotgrad.runtime.legacy import (CharTensor, ShortTensor)  # noqa: E402
from aotgrad.runtime.printing import get_printoptions, set_printoptions  # noqa: E402
from aotgrad.runtime.number_ops import gcd, lcm, nextafter  # noqa: E402
from aotgrad.runtime.strided_ops import (as_strided, diagonal_scatter,  # noqa: E402
                                         empty_strided)
from aotgrad.runtime.split_variants import (split_with_sizes, unsafe_chunk,  # noqa: E402
                                             unsafe_split, unsafe_split_with_sizes)
from aotgrad.runtime.random_fill_ops import poisson  # noqa: E402
from aotgrad.runtime.legacy import (BFloat16Tensor, BoolTensor, ByteTensor,  # noqa: E402
                                    DoubleTensor, FloatTensor, HalfTensor, IntTensor,
                                    LongTensor)
from aotgrad.runtime.autocast import (autocast, get_autocast_dtype,  # noqa: E402
                                      is_autocast_enabled)
from aotgrad.runtime.misc_api import (e, get_default_dtype, inf, is_complex,  # noqa: E402
                                      is_floating_point, is_inference, is_nonzero, is_tensor, nan,
                                      newaxis,
                                      numel, pi, set_default_dtype, typename)
from aotgrad.runtime.sparse_ops import sparse_coo_tensor, spmm  # noqa: E402
from aotgrad.runtime.foreach_ops import FUNCTIONS as _FOREACH  # noqa: E402
globals().update(_FOREACH)  # _foreach_add, _foreach_exp_, ... (runtime/foreach_ops.py)
from aotgrad.runtime.linalg_functions import (cholesky_solve, det, inverse,  # noqa: E402
                                              logdet, matrix_power, pinverse, slogdet)
from aotgrad.runtime.linalg_functions import cholesky_legacy as cholesky  # noqa: E402
from aotgrad.runtime.linalg_functions import qr_legacy as qr, svd_legacy as svd  # noqa: E402
from aotgrad import accelerator, amp, backends, cpu, cuda, jit, linalg, sparse  # noqa: E402
dtype = DType
# aotgrad.export(...) (a callable module) and aotgrad.onnx.export(...): light modules that load
# numba and onnx on use; aotgrad.onnx lives in export/ (see export/onnx_api.py for why)
from aotgrad import export  # noqa: E402
from aotgrad.export import load_exported, onnx_api as onnx  # noqa: E402
import sys as _sys  # noqa: E402
_sys.modules.setdefault("aotgrad.onnx", onnx)
from aotgrad.utils import log as _log  # noqa: E402

_log.configure()  # AOTGRAD_LOG=info|debug|...: the aotgrad logger's level, on stderr


# The public names (`from aotgrad import *`). Not the dtype aliases `bool`, `float` and `int`,
# which would shadow Python's builtins there: reach them as aotgrad.float and so on.
__all__ = [
    "autograd", "nn", "optim", "serialization", "utils", "DType", "bool_", "float32",
    "float64", "int32", "int64", "PrimError", "Size", "Tensor", "Generator", "arange",
    "as_tensor", "bernoulli", "empty", "empty_like", "eye", "from_numpy", "full", "full_like",
    "get_rng_state", "initial_seed", "linspace", "logspace", "manual_seed", "multinomial",
    "normal", "ones", "ones_like", "rand", "rand_like", "randint", "randn", "randn_like",
    "randperm", "scalar_tensor", "seed", "set_rng_state", "tensor", "zeros", "zeros_like",
    "enable_grad",
    "inference_mode", "is_grad_enabled", "is_inference_mode_enabled", "no_grad",
    "set_grad_enabled", "is_anomaly_check_nan_enabled", "is_anomaly_enabled", "abs",
    "absolute", "add", "all", "amax", "amin", "any", "argmax", "argmin", "atan2", "bmm",
    "ceil", "clamp", "clamp_max", "clamp_min",
    "clip", "cos", "count_nonzero", "cumsum", "div", "divide", "dot", "eq",
    "erf", "exp", "exp2", "expm1", "floor", "floor_divide", "ge", "gt", "isfinite", "isinf",
    "isnan", "le", "log", "log1p", "log2", "log10", "log_softmax", "logical_and",
    "logical_not", "logical_or", "logical_xor", "logsumexp", "lt", "matmul", "max", "maximum",
    "mean", "min", "minimum", "mm", "mul", "mv", "nan_to_num", "ne", "neg", "negative", "norm",
    "outer", "pow", "prod", "reciprocal", "relu", "remainder", "round", "rsqrt", "sigmoid",
    "sign", "sin", "softmax", "sqrt", "square", "std", "std_mean", "sub", "sum", "tan", "tanh",
    "true_divide", "var", "var_mean", "where", "subtract", "multiply", "argsort",
    "broadcast_tensors", "broadcast_to", "cat", "chunk", "clone", "concat", "concatenate",
    "flatten", "flip", "gather", "hstack", "index_select", "masked_fill", "movedim", "narrow",
    "permute", "repeat", "reshape", "roll", "scatter_add", "select", "sort", "split",
    "squeeze", "stack", "swapaxes", "t", "take_along_dim", "tile", "topk", "transpose", "tril",
    "triu", "unbind", "unflatten", "unsqueeze", "vstack", "argwhere", "diag", "diag_embed",
    "diagonal", "index_add", "index_copy", "index_fill", "masked_select", "nonzero",
    "repeat_interleave", "rot90", "scatter", "take", "tensor_split", "double", "long",
    "compile", "explain", "mark_dynamic", "mark_static", "GraphBreakError", "load", "save", "cache_clear", "cache_info",
    "BFloat16Tensor", "BoolTensor", "ByteTensor", "DoubleTensor", "FloatTensor",
    "HalfTensor", "IntTensor", "LongTensor", "acos", "acosh", "addbmm", "addcdiv",
    "addcmul", "addmm", "addmv", "addr", "allclose", "arccos", "arccosh", "arcsin",
    "arcsinh", "arctan", "arctan2", "arctanh", "asin", "asinh", "atan", "atanh", "autocast",
    "baddbmm", "bfloat16", "bucketize", "cdist", "channels_last", "channels_last_3d",
    "cholesky", "cholesky_solve", "contiguous_format", "cosh", "cummax", "cummin",
    "cumprod", "det", "device", "digamma", "dtype", "e", "einsum", "equal", "erfc",
    "erfinv", "float16", "get_autocast_dtype", "get_default_device", "get_default_dtype",
    "half", "i0", "inf", "inverse", "is_autocast_enabled", "is_complex",
    "is_floating_point", "is_inference", "is_nonzero", "is_tensor", "isclose", "layout", "lerp",
    "lgamma",
    "logaddexp", "logaddexp2", "logcumsumexp", "logdet", "logit", "matrix_power",
    "memory_format", "mvlgamma", "nan", "newaxis", "numel", "pi", "pinverse", "polygamma",
    "preserve_format", "qr", "searchsorted", "set_default_device", "set_default_dtype",
    "sinc", "sinh", "slogdet", "sparse_coo", "sparse_coo_tensor", "spmm", "strided", "svd",
    "typename", "xlogy", "special", "linalg", "sparse", "accelerator", "amp", "backends",
    "cpu", "cuda", "jit", "set_num_threads", "get_num_threads", "set_num_interop_threads",
    "get_num_interop_threads",
    "scatter_reduce", "index_reduce", "distributed", "func", "futures",
    "export", "onnx", "load_exported",
    "trunc", "fix", "frac", "sgn", "signbit", "copysign", "hypot", "heaviside", "fmod",
    "float_power", "deg2rad", "rad2deg", "positive", "fmax", "fmin", "isneginf", "isposinf",
    "isreal", "ldexp", "frexp", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
    "bitwise_left_shift", "bitwise_right_shift", "int8", "int16", "uint8", "short",
    "CharTensor", "ShortTensor", "get_printoptions", "set_printoptions",
    "gcd", "lcm", "nextafter", "as_strided", "diagonal_scatter", "poisson",
    "angle", "conj", "real", "imag", "nansum", "nanmean", "median", "nanmedian", "kthvalue",
    "aminmax", "trace", "diff", "dist", "ravel", "fliplr", "flipud", "msort", "atleast_1d",
    "atleast_2d", "atleast_3d", "conv1d", "conv2d", "layer_norm", "group_norm", "batch_norm",
    "embedding", "dropout", "cosine_similarity", "pairwise_distance", "pdist", "tensordot",
    "inner", "kron", "block_diag", "cartesian_prod", "meshgrid", "vander", "hsplit", "vsplit",
    "dstack", "column_stack", "diagflat", "isin", "tril_indices", "triu_indices", "result_type",
    "promote_types", "can_cast", "quantile", "nanquantile", "cov", "corrcoef", "cross",
    "chain_matmul", "randint_like", "slice_scatter", "select_scatter", "renorm", "histc",
    "bincount", "unique", "unique_consecutive", "masked_scatter", "mode", "matrix_exp",
    "split_with_sizes", "empty_strided", "unsafe_split", "unsafe_chunk",
    "unsafe_split_with_sizes",
]


_THREAD_FUNCTIONS = ("set_num_threads", "get_num_threads", "set_num_interop_threads",
                     "get_num_interop_threads")


def __getattr__(name):
    # The compile cache's functions come from codegen, which loads numba: imported on first
    # use, so that `import aotgrad` and eager code do not pay for numba.
    if name in ("cache_clear", "cache_info", "codegen"):
        import importlib
        codegen = importlib.import_module("aotgrad.codegen")
        return codegen if name == "codegen" else getattr(codegen, name)
    if name in ("distributed", "futures"):  # collectives on MPI: loaded on first use
        import importlib
        return importlib.import_module(f"aotgrad.{name}")
    if name == "func":  # aotgrad.func, imported on first use (import aotgrad stays light)
        import importlib
        return importlib.import_module("aotgrad.func")
    if name in _THREAD_FUNCTIONS:  # numba's and the BLAS's pools: loaded on first use too
        import importlib
        return getattr(importlib.import_module("aotgrad.codegen.threads"), name)
    raise AttributeError(f"module 'aotgrad' has no attribute {name!r}")
