"""Install operators and methods on Tensor from the op modules (one place, one table)."""
from aotgrad.ir import dtypes as dt
from aotgrad.runtime import ops, shape_ops
from aotgrad.runtime.ops import cast
from aotgrad.runtime.shape_ops import commit_inplace, snapshot
from aotgrad.runtime.tensor import Tensor


def _r(fn):
    return lambda self, other: fn(other, self)


def _to(self, *args, **kwargs):
    dtype = kwargs.get("dtype")
    for a in args:
        if isinstance(a, Tensor):
            dtype = a.dtype
        elif isinstance(a, dt.DType) or a is float or a is int or a is bool:
            dtype = a
    if dtype is None:
        return self
    return cast(self, dt.as_dtype(dtype))


def _inplace(fn, name):
    def method(self, *args, **kwargs):
        return commit_inplace(self, fn(snapshot(self), *args, **kwargs), name)
    method.__name__ = name
    return method


def _fill_(self, value):
    if isinstance(value, Tensor):
        new = shape_ops.expand(cast(value, self.dtype), tuple(self.shape))
    else:
        from aotgrad.runtime import tprims
        new = tprims.constant(value, self.dtype, tuple(self.shape))
    return commit_inplace(self, new, "fill_")


def _zero_(self):
    return _fill_(self, 0)


def _copy_(self, src, non_blocking=False):
    src = ops.as_tensor_like(src, self.dtype)
    return commit_inplace(self, shape_ops.expand(cast(src, self.dtype), tuple(self.shape)),
                          "copy_")


def _type_as(self, other):
    return cast(self, other.dtype)


_METHODS = {
    # arithmetic and comparison operators
    "__add__": ops.add, "__radd__": _r(ops.add), "__sub__": ops.sub, "__rsub__": _r(ops.sub),
    "__mul__": ops.mul, "__rmul__": _r(ops.mul), "__truediv__": ops.div,
    "__rtruediv__": _r(ops.div), "__floordiv__": ops.floor_divide,
    "__rfloordiv__": _r(ops.floor_divide), "__mod__": ops.remainder,
    "__rmod__": _r(ops.remainder), "__pow__": ops.pow, "__rpow__": _r(ops.pow),
    "__matmul__": ops.matmul, "__rmatmul__": _r(ops.matmul), "__neg__": ops.neg,
    "__pos__": lambda s: s, "__abs__": ops.abs, "__eq__": ops.eq, "__ne__": ops.ne,
    "__lt__": ops.lt, "__le__": ops.le, "__gt__": ops.gt, "__ge__": ops.ge,
    "__and__": ops.logical_and, "__or__": ops.logical_or, "__xor__": ops.logical_xor,
    "__invert__": ops.logical_not, "__getitem__": shape_ops.getitem,
    "__setitem__": shape_ops.setitem,
    # conversions
    "to": _to, "type_as": _type_as,
    "float": lambda s: cast(s, dt.float32), "double": lambda s: cast(s, dt.float64),
    "long": lambda s: cast(s, dt.int64), "int": lambda s: cast(s, dt.int32),
    "bool": lambda s: cast(s, dt.bool_), "half": lambda s: cast(s, dt.float32),
    "cpu": lambda s: s,
    "T": property(lambda s: shape_ops.permute(s, *reversed(range(s.ndim)))),
    "mT": property(lambda s: shape_ops.transpose(s, -2, -1)),
    "fill_": _fill_, "zero_": _zero_, "copy_": _copy_,
}
for _name in ("add sub mul div true_divide divide floor_divide remainder pow maximum minimum "
              "atan2 eq ne lt le gt ge logical_and logical_or logical_xor logical_not exp log "
              "log1p expm1 sqrt rsqrt sin cos tan tanh sigmoid erf floor ceil round reciprocal "
              "neg negative abs absolute sign square relu clamp clip where nan_to_num isnan "
              "isinf isfinite log2 log10 exp2 matmul mm bmm dot mv outer sum mean prod amax amin "
              "max min argmax argmin var std norm logsumexp softmax log_softmax cumsum all any "
              "count_nonzero").split():
    _METHODS[_name] = getattr(ops, _name)
for _name in ("reshape view view_as reshape_as flatten unflatten permute transpose swapaxes "
              "swapdims t movedim unsqueeze squeeze expand expand_as broadcast_to repeat tile "
              "clone contiguous flip roll narrow split chunk unbind select tril triu argsort sort "
              "topk gather take_along_dim index_select scatter_add masked_fill "
              "index_put_").split():
    _METHODS[_name] = getattr(shape_ops, _name)
_METHODS["where"] = lambda self, cond, other: ops.where(cond, self, other)
_METHODS["new_zeros"] = lambda self, *size, dtype=None, requires_grad=False: __import__(
    "aotgrad.runtime.factories", fromlist=["zeros"]).zeros(*size, dtype=dtype or self.dtype,
                                                           requires_grad=requires_grad)
_METHODS["new_ones"] = lambda self, *size, dtype=None, requires_grad=False: __import__(
    "aotgrad.runtime.factories", fromlist=["ones"]).ones(*size, dtype=dtype or self.dtype,
                                                         requires_grad=requires_grad)
_METHODS["new_full"] = lambda self, size, value, dtype=None: __import__(
    "aotgrad.runtime.factories", fromlist=["full"]).full(size, value, dtype=dtype or self.dtype)
_METHODS["new_tensor"] = lambda self, data, dtype=None: __import__(
    "aotgrad.runtime.factories", fromlist=["tensor"]).tensor(data, dtype=dtype or self.dtype)

# in-place variants: computed out of place, written back, version bumped
for _name in ("add sub mul div pow clamp clip neg abs exp log sqrt sigmoid tanh relu "
              "masked_fill floor ceil round sign reciprocal square t transpose unsqueeze "
              "squeeze maximum minimum").split():
    _fn = _METHODS[_name]
    _METHODS[_name + "_"] = _inplace(_fn, _name + "_")
for _op, _name in (("__iadd__", "add"), ("__isub__", "sub"), ("__imul__", "mul"),
                   ("__itruediv__", "div"), ("__ipow__", "pow")):
    _METHODS[_op] = _inplace(_METHODS[_name], _name + "_")

for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
