"""Install operators and methods on Tensor from the op modules (one place, one table)."""
from aotgrad.ir import dtypes as dt
from aotgrad.runtime import conversion, legacy, linalg_functions, ops, shape_ops, sparse_ops
from aotgrad.runtime import tprims
from aotgrad.runtime.ops import cast
from aotgrad.runtime.scatter_reduce_ops import scatter_reduce
from aotgrad.runtime.index_reduce_ops import index_reduce
from aotgrad.runtime.shape_ops import commit_inplace, snapshot
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime import autograd_api, dispatch, layout, printing, reduction_ops, view_ops


def _r(fn):
    return lambda self, other: fn(other, self)


def _inplace(fn, name):
    def method(self, *args, **kwargs):
        return commit_inplace(self, fn(snapshot(self, *args, *kwargs.values()), *args,
                                       **kwargs), name)
    method.__name__ = name
    method.__wrapped__ = fn  # its signature is fn's (for inspect, and the tensor.pyi stub)
    return method


def _fill_(self, value):
    if isinstance(value, Tensor):
        new = shape_ops.expand(cast(value, self.dtype), tuple(self.shape))
    else:
        new = tprims.constant(value, self.dtype, tuple(self.shape))
    return commit_inplace(self, new, "fill_", replaces=True)


def _zero_(self):
    return _fill_(self, 0)


def _copy_(self, src, non_blocking=False):
    src = ops.as_tensor_like(src, self.dtype)
    return commit_inplace(self, shape_ops.expand(cast(src, self.dtype), tuple(self.shape)),
                          "copy_", replaces=True)


def _type_as(self, other):
    return cast(self, other.dtype)


_TYPE_NAMES = {dt.float32: "FloatTensor", dt.float64: "DoubleTensor", dt.int64: "LongTensor",
               dt.int32: "IntTensor", dt.bool_: "BoolTensor", dt.float16: "HalfTensor",
               dt.bfloat16: "BFloat16Tensor", dt.uint8: "ByteTensor", dt.int8: "CharTensor",
               dt.int16: "ShortTensor"}


def _type(self, dtype=None, non_blocking=False):
    """`t.type()` names the tensor type ('torch.FloatTensor'); `t.type(dtype)` casts (a dtype,
    a name such as 'torch.LongTensor', or a legacy class such as `aotgrad.LongTensor`)."""
    if dtype is None:
        return "torch." + _TYPE_NAMES[self.dtype]
    dtype = getattr(dtype, "legacy_dtype", dtype)
    if isinstance(dtype, str) and dtype.startswith("torch.cuda."):
        conversion.cuda(self)
    if isinstance(dtype, str):
        names = {"torch." + v: k for k, v in _TYPE_NAMES.items()}
        if dtype not in names:
            raise ValueError(f"invalid type: '{dtype}'")
        dtype = names[dtype]
    return cast(self, dt.as_dtype(dtype))


def _stride(self, dim=None):
    """Strides in elements, of the eager buffer (traced: of the layout eager mode gives it,
    its layout probe; contiguous strides without one)."""
    v = layout.certain_probe(self, "stride()")
    if v is None and hasattr(self._value, "strides"):
        v = self._value
    if v is not None:
        st = tuple(s // v.itemsize for s in v.strides)
    else:
        st, acc = [], 1
        for n in reversed(tuple(self.shape)):
            st.insert(0, acc)
            acc *= max(n, 1)
        st = tuple(st)
    return st if dim is None else st[shape_ops._dim(dim, self.ndim)]


def _repr(self):
    return sparse_ops.sparse_repr(self) if "_sparse" in self.__dict__ else \
        printing.tensor_repr(self)


_METHODS = {
    # Tensor's own methods that need the layers above it (the one place they are wired)
    "__init__": legacy.tensor_init, "backward": autograd_api.tensor_backward,
    "detach": view_ops.detach, "_concrete": dispatch.concrete,
    "_zeros": staticmethod(tprims.zeros), "_sum_to_shape": reduction_ops.sum_to_shape,
    "__repr__": _repr, "__str__": _repr,
    # arithmetic and comparison operators
    "__add__": ops.add, "__radd__": _r(ops.add), "__sub__": ops.sub, "__rsub__": ops.rsub,
    "__mul__": ops.mul, "__rmul__": _r(ops.mul), "__truediv__": ops.div,
    "__rtruediv__": _r(ops.div), "__floordiv__": ops.floor_divide,
    "__rfloordiv__": _r(ops.floor_divide), "__mod__": ops.remainder,
    "__rmod__": _r(ops.remainder), "__pow__": ops.pow, "__rpow__": _r(ops.pow),
    "__matmul__": ops.matmul, "__rmatmul__": _r(ops.matmul), "__neg__": ops.neg,
    "__pos__": lambda s: s, "__abs__": ops.abs, "__eq__": ops.eq, "__ne__": ops.ne,
    "__lt__": ops.lt, "__le__": ops.le, "__gt__": ops.gt, "__ge__": ops.ge,
    "__getitem__": shape_ops.getitem,
    "__setitem__": shape_ops.setitem,
    # conversions
    "to": conversion.to, "type_as": _type_as, "type": _type, "stride": _stride,
    "is_contiguous": shape_ops.is_contiguous, "ndimension": lambda s: s.ndim,
    "nelement": lambda s: s.numel(),
    "float": lambda s: cast(s, dt.float32), "double": lambda s: cast(s, dt.float64),
    "long": lambda s: cast(s, dt.int64), "int": lambda s: cast(s, dt.int32),
    "bool": lambda s: cast(s, dt.bool_), "half": lambda s: cast(s, dt.float16),
    "bfloat16": lambda s: cast(s, dt.bfloat16), "byte": lambda s: cast(s, dt.uint8),
    "char": lambda s: cast(s, dt.int8), "short": lambda s: cast(s, dt.int16),
    "cpu": conversion.cpu, "cuda": conversion.cuda, "pin_memory": conversion.pin_memory,
    "is_pinned": conversion.is_pinned, "get_device": conversion.get_device,
    "is_complex": conversion.is_complex, "__format__": conversion.format_tensor,
    "T": property(lambda s: shape_ops.permute(s, *reversed(range(s.ndim)))),
    "mT": property(lambda s: shape_ops.transpose(s, -2, -1)),
    "mH": property(lambda s: shape_ops.transpose(s, -2, -1)),  # real dtypes only
    "H": property(lambda s: shape_ops.t(s)),
    "fill_": _fill_, "zero_": _zero_, "copy_": _copy_,
}
for _name in ("add sub mul div true_divide divide floor_divide remainder pow maximum minimum "
              "atan2 eq ne lt le gt ge logical_and logical_or logical_xor logical_not exp log "
              "log1p expm1 sqrt rsqrt sin cos tan tanh sigmoid erf floor ceil round reciprocal "
              "neg negative abs absolute sign square relu clamp clamp_min clamp_max clip where "
              "nan_to_num isnan "
              "isinf isfinite log2 log10 exp2 matmul mm bmm dot mv outer sum mean prod amax amin "
              "max min argmax argmin var std norm logsumexp softmax log_softmax cumsum all any "
              "count_nonzero").split():
    _METHODS[_name] = getattr(ops, _name)
for _name in ("reshape view view_as reshape_as flatten unflatten permute transpose swapaxes "
              "swapdims t movedim unsqueeze squeeze expand expand_as broadcast_to repeat tile "
              "clone contiguous flip roll narrow split chunk unbind select tril triu argsort sort "
              "topk gather take_along_dim index_select scatter_add masked_fill "
              "index_put_ diagonal diag diag_embed unfold tensor_split rot90 repeat_interleave "
              "scatter index_add index_copy index_fill masked_select take nonzero "
              "argwhere").split():
    _METHODS[_name] = getattr(shape_ops, _name)
_METHODS["where"] = lambda self, cond, other: ops.where(cond, self, other)

# ops of the newer op modules (einsum, addmm family, scans, trig, special, comparisons)
from aotgrad.runtime import (addmm_ops, compare_ops, scan_ops, special_ops,  # noqa: E402
                             tensor_new, trig_ops)
for _mod, _names in ((addmm_ops, "addmm addmv addr addbmm baddbmm addcmul addcdiv lerp"),
                     (scan_ops, "cumprod cummax cummin logcumsumexp logaddexp logaddexp2"),
                     (trig_ops, "sinh cosh asinh acosh atanh asin acos atan arcsin arccos "
                                "arctan arcsinh arccosh arctanh arctan2"),
                     (special_ops, "erfc erfinv lgamma digamma logit xlogy sinc i0"),
                     (compare_ops, "isclose allclose equal"),
                     (tensor_new, "new_zeros new_ones new_full new_empty new_tensor new")):
    for _name in _names.split():
        _METHODS[_name] = getattr(_mod, _name)
_METHODS["polygamma"] = lambda self, n: special_ops.polygamma(n, self)
_METHODS["mvlgamma"] = lambda self, p: special_ops.multigammaln(self, p)
_METHODS["arctan2"] = ops.atan2
del _mod, _names
_METHODS["scatter_reduce"] = scatter_reduce
_METHODS["index_reduce"] = index_reduce

# in-place variants: computed out of place, written back, version bumped
for _name in ("add sub mul div pow clamp clamp_min clamp_max clip neg abs exp log sqrt sigmoid "
              "tanh relu "
              "masked_fill floor ceil round sign reciprocal square maximum minimum scatter "
              "scatter_add index_add index_copy "
              "index_fill addmm addmv addr addbmm baddbmm addcmul addcdiv lerp cumprod atan2 "
              "sinh cosh asinh acosh atanh asin acos atan arcsin arccos arctan "
              "arcsinh arccosh arctanh arctan2 erfc erfinv lgamma digamma logit xlogy sinc "
              "polygamma i0 mvlgamma scatter_reduce index_reduce sin cos tan rsqrt log1p "
              "expm1 log2 log10 erf eq ne lt le gt ge logical_and logical_or logical_xor "
              "logical_not").split():
    _fn = _METHODS[_name]
    _METHODS[_name + "_"] = _inplace(_fn, _name + "_")
# in-place views: the tensor takes the view's shape, value and history
from aotgrad.runtime.inplace_view_ops import inplace_view  # noqa: E402
for _name in ("t", "transpose", "unsqueeze", "squeeze", "swapdims", "swapaxes"):
    if _name in _METHODS:
        _METHODS[_name + "_"] = inplace_view(_METHODS[_name], _name + "_")
for _op, _name in (("__iadd__", "add"), ("__isub__", "sub"), ("__imul__", "mul"),
                   ("__itruediv__", "div"), ("__ipow__", "pow"),
                   ("__ifloordiv__", "floor_divide"), ("__imod__", "remainder")):
    _METHODS[_op] = _inplace(_METHODS[_name], _name + "_")

_METHODS.update(sparse_ops.METHODS)
_METHODS.update({  # the linalg methods PyTorch's Tensor has
    "det": linalg_functions.det, "logdet": linalg_functions.logdet,
    "slogdet": linalg_functions.slogdet, "inverse": linalg_functions.inverse,
    "pinverse": linalg_functions.pinverse, "cholesky": linalg_functions.cholesky_legacy,
    "svd": linalg_functions.svd_legacy, "qr": linalg_functions.qr_legacy,
    "matrix_power": linalg_functions.matrix_power})
for _name, _value in conversion.PROPERTIES.items():
    _METHODS[_name] = property(lambda s, v=_value: v)
_METHODS.update(legacy.PROPERTIES)

# more elementwise ops and the in-place random fills
from aotgrad.runtime import elementwise_more_ops, random_fill_ops  # noqa: E402
for _name in elementwise_more_ops.METHOD_NAMES:
    _METHODS[_name] = getattr(elementwise_more_ops, _name)
for _name in elementwise_more_ops.INPLACE_NAMES:
    _METHODS[_name + "_"] = _inplace(_METHODS[_name], _name + "_")
_METHODS["real"] = property(elementwise_more_ops.real)
from aotgrad.runtime import bitwise_ops, number_ops, strided_ops  # noqa: E402
_METHODS.update(bitwise_ops.METHODS)
_METHODS.update(strided_ops.METHODS)
from aotgrad.runtime import split_variants  # noqa: E402
_METHODS.update(split_variants.METHODS)
_METHODS.update(number_ops.METHODS)
for _name in number_ops.METHODS:
    _METHODS[_name + "_"] = _inplace(_METHODS[_name], _name + "_")
for _name, _base in bitwise_ops.INPLACE.items():
    _METHODS[_name] = _inplace(_METHODS[_base], _base + "_")
_METHODS["imag"] = property(elementwise_more_ops.imag)
_METHODS.update(random_fill_ops.METHODS)
from aotgrad.runtime import (combine_ops, misc_more_ops, reduction_more_ops,  # noqa: E402
                             stats_ops)
for _mod in (reduction_more_ops, combine_ops, stats_ops, misc_more_ops):
    for _name in _mod.METHOD_NAMES:
        _METHODS[_name] = getattr(_mod, _name)
from aotgrad.runtime.matrix_exp_ops import matrix_exp  # noqa: E402
_METHODS["matrix_exp"] = matrix_exp
from aotgrad.runtime import storage  # noqa: E402
_METHODS.update(storage.METHODS)
for _name in misc_more_ops.INPLACE_NAMES:
    _METHODS[_name + "_"] = _inplace(_METHODS[_name], _name + "_")

for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
