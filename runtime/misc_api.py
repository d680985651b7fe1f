"""Small top-level names PyTorch scripts use: the math constants (`aotgrad.inf`, `nan`, `pi`,
`e`, `newaxis`), `is_tensor`, `numel`, `is_floating_point`, `is_complex`, `is_nonzero` and
the default dtype.

>>> import aotgrad
>>> aotgrad.is_tensor(aotgrad.ones(2)), aotgrad.numel(aotgrad.ones(2, 3)), aotgrad.pi
(True, 6, 3.141592653589793)
"""
import math

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.tensor import Tensor

inf = math.inf
nan = math.nan
pi = math.pi
e = math.e
newaxis = None


def is_tensor(obj):
    return isinstance(obj, Tensor)


def _tensor_arg(fn, x):
    if not isinstance(x, Tensor):
        raise TypeError(f"{fn}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(x).__name__}")
    return x


def numel(input):  # noqa: A002
    return _tensor_arg("numel", input).numel()


def is_floating_point(input):  # noqa: A002
    return _tensor_arg("is_floating_point", input).is_floating_point()


def is_complex(input):  # noqa: A002
    """False: aotgrad has no complex dtypes."""
    _tensor_arg("is_complex", input)
    return False


def is_inference(input):  # noqa: A002
    """Whether `input` is an inference tensor (made inside `inference_mode`)."""
    return _tensor_arg("is_inference", input).is_inference()


def is_nonzero(input):  # noqa: A002
    x = _tensor_arg("is_nonzero", input)
    if x.numel() != 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous" if
                           x.numel() else "Boolean value of Tensor with no values is ambiguous")
    return bool(x)


def typename(obj):
    """'torch.FloatTensor' for a tensor (PyTorch's legacy type names), else the qualified name
    of the object's class ('int', 'aotgrad.nn.linear.Linear')."""
    if isinstance(obj, Tensor):
        return obj.type()
    cls = type(obj)
    module = "" if cls.__module__ in ("builtins", "__builtin__", None) else cls.__module__ + "."
    return module + cls.__qualname__


def get_default_dtype():
    """float32: the dtype of `tensor([1.5])`, `zeros(2)`, `randn(2)` and new parameters."""
    return dt.float32


def set_default_dtype(d):
    """Only float32 (the default) is supported: aotgrad's factories, modules and Python
    scalars are float32 throughout. Pass `dtype=aotgrad.float64` to factories and call
    `module.double()` for float64 models."""
    d = dt.as_dtype(d)
    if not d.is_floating_point:
        raise TypeError(f"only floating-point types are supported as the default type "
                        f"(got {d.name})")
    if d is not dt.float32:
        raise NotImplementedError(
            f"set_default_dtype({d!r}): aotgrad's default dtype is fixed at float32; pass "
            f"dtype={d!r} to factories and call module.to({d!r}) instead")
