"""Tensor methods about where a tensor lives and how it converts: `to` with PyTorch's three
overloads, `cpu`/`cuda`, `pin_memory`, `__format__`, and the layout/device predicates
(`is_cuda`, `is_sparse`, `get_device`, ...). Installed on Tensor by runtime/methods.py.

>>> import aotgrad
>>> x = aotgrad.ones(2)
>>> x.to("cpu") is x, x.to("cpu", aotgrad.float64).dtype, f"{x.sum():.3f}"
(True, aotgrad.float64, '2.000')
"""
from aotgrad.ir import dtypes as dt
from aotgrad.runtime import device as _device
from aotgrad.runtime import memory_format as _mf
from aotgrad.runtime.op_base import cast
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.view_ops import clone

_OVERLOADS = (
    " * (aotgrad.device device = None, aotgrad.dtype dtype = None, bool non_blocking = False, "
    "bool copy = False, *, memory_format memory_format = None)\n"
    " * (aotgrad.dtype dtype, bool non_blocking = False, bool copy = False, *, "
    "memory_format memory_format = None)\n"
    " * (Tensor tensor, bool non_blocking = False, bool copy = False, *, "
    "memory_format memory_format = None)")


def _is_dtype(a):
    return isinstance(a, dt.DType) or a in (float, int, bool)


def _is_device(a):
    return isinstance(a, (_device.device, str)) or (isinstance(a, int) and
                                                     not isinstance(a, bool))


def _bad_to(args, kwargs):
    got = ", ".join([type(a).__name__ for a in args] +
                    [f"{k}={type(v).__name__}" for k, v in kwargs.items()])
    return TypeError(f"to() received an invalid combination of arguments - got ({got}), but "
                     f"expected one of:\n{_OVERLOADS}")


def _parse_to(args, kwargs):
    """(device, dtype, non_blocking, copy, memory_format) of a `Tensor.to` call."""
    args = list(args)
    device = dtype = None
    if args and isinstance(args[0], Tensor):       # to(other, non_blocking, copy)
        other = args.pop(0)
        device, dtype = other.device, other.dtype
        if "device" in kwargs or "dtype" in kwargs:
            raise _bad_to([other] + args, kwargs)
    elif args and _is_dtype(args[0]):               # to(dtype, non_blocking, copy)
        dtype = args.pop(0)
        if "dtype" in kwargs or "device" in kwargs:
            raise _bad_to([dtype] + args, kwargs)
    elif args and (args[0] is None or _is_device(args[0])):  # to(device, dtype, ...)
        device = args.pop(0)
        if "device" in kwargs:
            raise _bad_to([device] + args, kwargs)
        if args and (args[0] is None or _is_dtype(args[0])):
            dtype = args.pop(0)
    rest = dict(zip(("non_blocking", "copy"), args))
    if len(args) > 2 or any(not isinstance(v, bool) for v in rest.values()) or \
            set(rest) & set(kwargs):
        raise _bad_to(args, kwargs)
    unknown = set(kwargs) - {"device", "dtype", "non_blocking", "copy", "memory_format"}
    if unknown:
        raise TypeError(f"to() got an unexpected keyword argument '{sorted(unknown)[0]}'")
    kw = {**rest, **kwargs}
    device = kw.get("device", device)
    dtype = kw.get("dtype", dtype)
    return (device, dtype, bool(kw.get("non_blocking", False)), bool(kw.get("copy", False)),
            kw.get("memory_format"))


def to(self, *args, **kwargs):
    """`x.to(dtype)`, `x.to(device[, dtype])`, `x.to(other)` and their keywords; returns `x`
    itself when nothing changes and `copy=False`, like PyTorch. Devices other than the CPU
    raise (see runtime/device.py)."""
    device, dtype, _non_blocking, copy, memory_format = _parse_to(args, kwargs)
    _device.check(device, "Tensor.to")
    _mf.check(self, memory_format, "Tensor.to")
    out = self if dtype is None else cast(self, dt.as_dtype(dtype))
    if copy and out is self:
        out = clone(self)
    return out


def cpu(self, memory_format=None):
    _mf.check(self, memory_format, "Tensor.cpu")
    return self


def cuda(self, device=None, non_blocking=False, memory_format=None):
    raise _device.NoCudaError(_device.NO_CUDA)


def pin_memory(self, device=None):
    """The tensor itself: its data is host memory already and there is no accelerator to
    copy it to (PyTorch's CPU-only build raises here; aotgrad lets such scripts run)."""
    _device.check(device, "Tensor.pin_memory")
    return self


def is_pinned(self, device=None):
    return False


def get_device(self):
    """-1: the CPU (PyTorch's convention)."""
    return -1


def format_tensor(self, spec):
    """`f"{loss:.4f}"`: a 0-d tensor formats its Python number, as in PyTorch; other
    tensors take only the empty format spec (their repr)."""
    if self.ndim == 0:
        return self.item().__format__(spec)
    if spec:
        raise TypeError("unsupported format string passed to Tensor.__format__")
    return str(self)


def is_complex(self):
    """False: aotgrad has no complex dtypes."""
    return False


PROPERTIES = {
    "is_cuda": False, "is_cpu": True, "is_meta": False, "is_quantized": False,
    "is_mkldnn": False, "is_mps": False, "is_xla": False, "is_nested": False,
}
