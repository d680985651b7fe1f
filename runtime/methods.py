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
        return commit_inplace(self, fn(snapshot(self, *args, *kwargs.values()), *args,
                                       **kwargs), name)
    method.__name__ = name
    return method


def _fill_(self, value):
    if isinstance(value, Tensor):
        new = shape_ops.expand(cast(value, self.dtype), tuple(self.shape))
    else:
        from aotgrad.runtime import tprims
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
               dt.int32: "IntTensor", dt.bool_: "BoolTensor"}


def _type(self, dtype=None, non_blocking=False):
    """`t.type()` names the tensor type ('torch.FloatTensor'); `t.type(dtype)` casts."""
    if dtype is None:
        return "torch." + _TYPE_NAMES[self.dtype]
    if isinstance(dtype, str):
        names = {"torch." + v: k for k, v in _TYPE_NAMES.items()}
        if dtype not in names:
            raise ValueError(f"invalid type: '{dtype}'")
        dtype = names[dtype]
    return cast(self, dt.as_dtype(dtype))


def _stride(self, dim=None):
    """Strides in elements, of the eager buffer (contiguous strides for a traced value)."""
    v = self._value
    if hasattr(v, "strides"):
        st = tuple(s // v.itemsize for s in v.strides)
    else:
        st, acc = [], 1
        for n in reversed(tuple(self.shape)):
            st.insert(0, acc)
            acc *= max(n, 1)
        st = tuple(st)
    return st if dim is None else st[shape_ops._dim(dim, self.ndim)]


def _bitwise(name, logical):
    def method(self, other):
        for t in (self, other):
            d = t.dtype if isinstance(t, Tensor) else ops.scalar_dtype(t)
            if d is not dt.bool_:
                raise TypeError(f"{name}: bitwise operators are only supported on bool tensors "
                                f"here (got {d.name}); there is no integer bitwise op")
        return logical(self, other)
    method.__name__ = name
    return method


_METHODS = {
    # arithmetic and comparison operators
    "__add__": ops.add, "__radd__": _r(ops.add), "__sub__": ops.sub, "__rsub__": ops.rsub,
    "__mul__": ops.mul, "__rmul__": _r(ops.mul), "__truediv__": ops.div,
    "__rtruediv__": _r(ops.div), "__floordiv__": ops.floor_divide,
    "__rfloordiv__": _r(ops.floor_divide), "__mod__": ops.remainder,
    "__rmod__": _r(ops.remainder), "__pow__": ops.pow, "__rpow__": _r(ops.pow),
    "__matmul__": ops.matmul, "__rmatmul__": _r(ops.matmul), "__neg__": ops.neg,
    "__pos__": lambda s: s, "__abs__": ops.abs, "__eq__": ops.eq, "__ne__": ops.ne,
    "__lt__": ops.lt, "__le__": ops.le, "__gt__": ops.gt, "__ge__": ops.ge,
    "__and__": _bitwise("__and__", ops.logical_and),
    "__or__": _bitwise("__or__", ops.logical_or),
    "__xor__": _bitwise("__xor__", ops.logical_xor),
    "__rand__": _bitwise("__rand__", _r(ops.logical_and)),
    "__ror__": _bitwise("__ror__", _r(ops.logical_or)),
    "__rxor__": _bitwise("__rxor__", _r(ops.logical_xor)),
    "__invert__": lambda s: _bitwise("__invert__", lambda a, b: ops.logical_not(a))(s, True),
    "__getitem__": shape_ops.getitem,
    "__setitem__": shape_ops.setitem,
    # conversions
    "to": _to, "type_as": _type_as, "type": _type, "stride": _stride,
    "is_contiguous": shape_ops.is_contiguous, "ndimension": lambda s: s.ndim,
    "nelement": lambda s: s.numel(),
    "float": lambda s: cast(s, dt.float32), "double": lambda s: cast(s, dt.float64),
    "long": lambda s: cast(s, dt.int64), "int": lambda s: cast(s, dt.int32),
    "bool": lambda s: cast(s, dt.bool_), "half": lambda s: cast(s, dt.float32),
    "cpu": lambda s: s,
    "T": property(lambda s: shape_ops.permute(s, *reversed(range(s.ndim)))),
    "mT": property(lambda s: shape_ops.transpose(s, -2, -1)),
    "mH": property(lambda s: shape_ops.transpose(s, -2, -1)),  # real dtypes only
    "H": property(lambda s: shape_ops.t(s)),
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
              "index_put_ diagonal diag diag_embed unfold tensor_split rot90 repeat_interleave "
              "scatter index_add index_copy index_fill masked_select take nonzero "
              "argwhere").split():
    _METHODS[_name] = getattr(shape_ops, _name)
_METHODS["where"] = lambda self, cond, other: ops.where(cond, self, other)
_METHODS["new_zeros"] = lambda self, *size, dtype=None, requires_grad=False: __import__(
    "aotgrad.runtime.factories", fromlist=["zeros"]).zeros(*size, dtype=dtype or self.dtype,
                                                           requires_grad=requires_grad)
_METHODS["new_ones"] = lambda self, *size, dtype=None, requires_grad=False: __import__(
    "aotgrad.runtime.factories", fromlist=["ones"]).ones(*size, dtype=dtype or self.dtype,
                                                         requires_grad=requires_grad)
_METHODS["new_empty"] = _METHODS["new_zeros"]
_METHODS["new_full"] = lambda self, size, value, dtype=None: __import__(
    "aotgrad.runtime.factories", fromlist=["full"]).full(size, value, dtype=dtype or self.dtype)
_METHODS["new_tensor"] = lambda self, data, dtype=None: __import__(
    "aotgrad.runtime.factories", fromlist=["tensor"]).tensor(data, dtype=dtype or self.dtype)

# in-place variants: computed out of place, written back, version bumped
for _name in ("add sub mul div pow clamp clip neg abs exp log sqrt sigmoid tanh relu "
              "masked_fill floor ceil round sign reciprocal square t transpose unsqueeze "
              "squeeze maximum minimum scatter scatter_add index_add index_copy "
              "index_fill").split():
    _fn = _METHODS[_name]
    _METHODS[_name + "_"] = _inplace(_fn, _name + "_")
for _op, _name in (("__iadd__", "add"), ("__isub__", "sub"), ("__imul__", "mul"),
                   ("__itruediv__", "div"), ("__ipow__", "pow"),
                   ("__ifloordiv__", "floor_divide"), ("__imod__", "remainder"),
                   ("__iand__", "__and__"), ("__ior__", "__or__"), ("__ixor__", "__xor__")):
    _METHODS[_op] = _inplace(_METHODS[_name], _name + "_")

for _name, _fn in _METHODS.items():
    setattr(Tensor, _name, _fn)
