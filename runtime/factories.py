"""Tensor factories and the global random generator (PyTorch names and defaults)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.ir.core import current_builder
from aotgrad.ir.symbolic import SymInt
from aotgrad.runtime import device as _device
from aotgrad.runtime.layout import like_layout
from aotgrad.runtime.op_base import python_number
from aotgrad.runtime.memory_format import preserve_format
from aotgrad.runtime import ops, shape_ops
from aotgrad.runtime.op_base import to_array as _to_array
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.op_base import op
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.value_checks import checked

# what the factories' parameters accept (PyTorch's kinds of argument)
Number = int | float | bool
SizeLike = int | Sequence[int]
DTypeLike = dt.DType | type | str | np.dtype | None
DeviceLike = _device.device | str | int | None


def _default_dtype(arr):
    if arr.dtype.kind == "f":
        return dt.float32 if arr.dtype != np.float64 or _from_python(arr) else dt.float64
    if arr.dtype.kind in "iu":
        return dt.int64
    if arr.dtype.kind == "b":
        return dt.bool_
    raise TypeError(f"can't convert data of dtype {arr.dtype} to a tensor")


def _from_python(arr):
    return getattr(arr, "_from_python", False)


def tensor(data: Any, dtype: DTypeLike = None, device: DeviceLike = None,
           requires_grad: bool = False, pin_memory: bool = False) -> Tensor:
    """Copy `data` into a new leaf tensor. `tensor([1., 2.])` is float32."""
    _device.check(device, "tensor")
    t = Tensor._make(_to_array(data, dtype), False)
    return t.requires_grad_(requires_grad) if requires_grad else t


def as_tensor(data: Any, dtype: DTypeLike = None, device: DeviceLike = None) -> Tensor:
    _device.check(device, "as_tensor")
    if isinstance(data, Tensor):
        return data if dtype is None or data.dtype is dt.as_dtype(dtype) else data.to(dtype)
    if isinstance(data, np.ndarray) and (dtype is None or data.dtype == dt.as_dtype(dtype).np):
        return from_numpy(data)
    return tensor(data, dtype)


def from_numpy(arr: np.ndarray) -> Tensor:
    """A tensor sharing memory with the numpy array."""
    dt.from_numpy(arr.dtype)
    return Tensor._make(arr, False)


def _size(size, keyword=None):
    """The shape of `zeros(2, 3)`, `zeros((2, 3))` or `zeros(size=(2, 3))`."""
    if keyword is not None:
        if size:
            raise TypeError("got the size both positionally and as the keyword size=")
        size = (keyword,)
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = size[0]
    return tuple(int(s) for s in size)


def _fill(shape, value, dtype, requires_grad):
    if any(n < 0 for n in shape):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(shape)}")
    dtype = dt.as_dtype(dtype) if dtype is not None else dt.float32
    t = tp.constant(value, dtype, shape)
    return t.requires_grad_(requires_grad) if requires_grad else t


def zeros(*sizes: int | Sequence[int], size: SizeLike | None = None, dtype: DTypeLike = None,
          device: DeviceLike = None, requires_grad: bool = False, layout: Any = None,
          pin_memory: bool = False) -> Tensor:
    _device.check(device, "zeros")
    return _fill(_size(sizes, size), 0, dtype, requires_grad)


def ones(*sizes: int | Sequence[int], size: SizeLike | None = None, dtype: DTypeLike = None,
         device: DeviceLike = None, requires_grad: bool = False, layout: Any = None,
         pin_memory: bool = False) -> Tensor:
    _device.check(device, "ones")
    return _fill(_size(sizes, size), 1, dtype, requires_grad)


def empty(*sizes: int | Sequence[int], size: SizeLike | None = None, dtype: DTypeLike = None,
          device: DeviceLike = None, requires_grad: bool = False, layout: Any = None,
          pin_memory: bool = False, memory_format: Any = None) -> Tensor:
    """Zero-filled (an uninitialised buffer in PyTorch: its values are unspecified)."""
    return zeros(*sizes, size=size, dtype=dtype, device=device, requires_grad=requires_grad)


def full(size: SizeLike, fill_value: Number, dtype: DTypeLike = None, device: DeviceLike = None,
         requires_grad: bool = False, layout: Any = None, pin_memory: bool = False) -> Tensor:
    _device.check(device, "full")
    if dtype is None:
        dtype = ops.scalar_dtype(fill_value)
    return _fill(_size((size,)), fill_value, dtype, requires_grad)


def scalar_tensor(s: Number, dtype: DTypeLike = None, device: DeviceLike = None,
                  requires_grad: bool = False, layout: Any = None,
                  pin_memory: bool = False) -> Tensor:
    """A 0-d tensor holding s, float32 unless dtype says otherwise (whatever s's type, as
    PyTorch's `scalar_tensor`)."""
    _device.check(device, "scalar_tensor")
    if isinstance(s, Tensor) or not isinstance(s, (bool, int, float, np.number, SymInt)):
        raise TypeError(f"scalar_tensor(): argument 's' must be Number, not {type(s).__name__}")
    return _fill((), python_number(s), dt.float32 if dtype is None else dtype, requires_grad)


def _like(x, out, memory_format):
    """out (a fresh tensor of x's shape) with the strides of PyTorch's `*_like(x)`: x's layout
    kept under preserve_format (the default), C order under contiguous_format (channels-last
    formats keep C order, runtime/memory_format.py)."""
    if memory_format is None or memory_format is preserve_format:
        return like_layout(x, out)
    return out


def zeros_like(x: Tensor, dtype: DTypeLike = None, requires_grad: bool = False, *,
               device: DeviceLike = None, layout: Any = None, memory_format: Any = None) -> Tensor:
    return _like(x, zeros(tuple(x.shape), dtype=dtype or x.dtype, device=device,
                          requires_grad=requires_grad), memory_format)


def ones_like(x: Tensor, dtype: DTypeLike = None, requires_grad: bool = False, *,
              device: DeviceLike = None, layout: Any = None, memory_format: Any = None) -> Tensor:
    return _like(x, ones(tuple(x.shape), dtype=dtype or x.dtype, device=device,
                         requires_grad=requires_grad), memory_format)


def empty_like(x: Tensor, dtype: DTypeLike = None, requires_grad: bool = False, *,
               device: DeviceLike = None, layout: Any = None, memory_format: Any = None) -> Tensor:
    return zeros_like(x, dtype, requires_grad, device=device, memory_format=memory_format)


def full_like(x: Tensor, fill_value: Number, dtype: DTypeLike = None, requires_grad: bool = False,
              *, device: DeviceLike = None, layout: Any = None,
              memory_format: Any = None) -> Tensor:
    return _like(x, full(tuple(x.shape), fill_value, dtype=dtype or x.dtype, device=device,
                         requires_grad=requires_grad), memory_format)


def arange(start: Number, end: Number | None = None, step: Number = 1, dtype: DTypeLike = None,
           device: DeviceLike = None, requires_grad: bool = False, layout: Any = None) -> Tensor:
    _device.check(device, "arange")
    if end is None:
        start, end = 0, start
    vals = tuple(v.item() if isinstance(v, Tensor) else v for v in (start, end, step))
    start, end, step = vals
    if any(isinstance(v, SymInt) for v in vals) and current_builder() is not None:
        return _symbolic_arange(start, end, step, dtype, requires_grad)
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    if (end - start) * step < 0:
        raise RuntimeError("arange: upper bound and lower bound inconsistent with step sign")
    if dtype is None:
        dtype = dt.float32 if any(isinstance(v, float) for v in vals) else dt.int64
    arr = np.arange(start, end, step, dtype=np.float64).astype(dt.as_dtype(dtype).np)
    return tensor(arr, requires_grad=requires_grad)


def _symbolic_arange(start, end, step, dtype, requires_grad):
    """arange with a symbolic bound while tracing (the causal mask's `arange(T)`): an iota
    of the symbolic length, scaled and shifted; integer bounds and step only."""
    if not all(isinstance(v, (int, SymInt)) for v in (start, end, step)) or step == 0:
        raise RuntimeError("arange: a symbolic size as a bound needs integer bounds and a "
                           "nonzero integer step")
    n = (end - start + step - (1 if step > 0 else -1)) // step
    if n < 0:
        n = 0
    dtype = dt.int64 if dtype is None else dt.as_dtype(dtype)
    out = tp.iota(shape=(n,), dim=0, dtype=dtype)
    if step != 1:
        out = out * step
    if not (isinstance(start, int) and start == 0):
        out = out + start
    return out.requires_grad_(requires_grad) if requires_grad else out


def linspace(start: Number, end: Number, steps: int, dtype: DTypeLike = None,
             device: DeviceLike = None, requires_grad: bool = False, layout: Any = None) -> Tensor:
    _device.check(device, "linspace")
    arr = np.linspace(start, end, steps, dtype=np.float64).astype(
        dt.as_dtype(dtype or dt.float32).np)
    return tensor(arr, requires_grad=requires_grad)


def logspace(start, end, steps, base=10.0, dtype=None, device=None, requires_grad=False,
             layout=None):
    """`base ** linspace(start, end, steps)`: `logspace(0, 2, 3)` is `[1., 10., 100.]`."""
    _device.check(device, "logspace")
    arr = np.power(float(base), np.linspace(start, end, steps, dtype=np.float64)).astype(
        dt.as_dtype(dtype or dt.float32).np)
    return tensor(arr, requires_grad=requires_grad)


def eye(n: int, m: int | None = None, dtype: DTypeLike = None, device: DeviceLike = None,
        requires_grad: bool = False, layout: Any = None) -> Tensor:
    _device.check(device, "eye")
    if n < 0 or (m is not None and m < 0):
        raise RuntimeError(f"eye: n and m must be greater or equal to 0, got {n}, {m}")
    return tensor(np.eye(n, m, dtype=dt.as_dtype(dtype or dt.float32).np),
                  requires_grad=requires_grad)


# ---- randomness ----------------------------------------------------------------------------
class _RNG:
    """The global generator. Random ops draw a fresh int64 seed from it and hand the seed to a
    stateless random prim, so a compiled program reproduces eager draws for the same seed."""

    def __init__(self):
        self.manual_seed(0)

    def manual_seed(self, seed):
        self.initial = int(seed)
        self.gen = np.random.Generator(np.random.PCG64(int(seed)))

    def next_seed(self):
        t = Tensor._make(np.array(self.gen.integers(0, 2**62), dtype=np.int64), False)
        t.__dict__["_rng_seed"] = True
        return t


default_generator = _RNG()


def manual_seed(seed):
    default_generator.manual_seed(seed)
    return default_generator


def seed():
    s = int(np.random.SeedSequence().entropy % (2**62))
    default_generator.manual_seed(s)
    return s


def initial_seed():
    return default_generator.initial


def get_rng_state():
    return tensor(np.frombuffer(repr(default_generator.gen.bit_generator.state).encode(),
                                dtype=np.uint8).astype(np.int64))


def set_rng_state(state):
    import ast
    s = ast.literal_eval(bytes(state._value.astype(np.uint8)).decode())
    default_generator.gen.bit_generator.state = s


def rand(*sizes: int | Sequence[int], size: SizeLike | None = None, dtype: DTypeLike = None,
         device: DeviceLike = None, requires_grad: bool = False,
         generator: Generator | None = None, layout: Any = None,
         pin_memory: bool = False) -> Tensor:
    _device.check(device, "rand")
    dtype = dt.as_dtype(dtype or dt.float32)
    t = tp.uniform((generator or default_generator).next_seed(), shape=_size(sizes, size),
                   dtype=dtype)
    return t.requires_grad_(requires_grad) if requires_grad else t


def randn(*sizes: int | Sequence[int], size: SizeLike | None = None, dtype: DTypeLike = None,
          device: DeviceLike = None, requires_grad: bool = False,
          generator: Generator | None = None, layout: Any = None,
          pin_memory: bool = False) -> Tensor:
    _device.check(device, "randn")
    dtype = dt.as_dtype(dtype or dt.float32)
    t = tp.normal((generator or default_generator).next_seed(), shape=_size(sizes, size),
                  dtype=dtype)
    return t.requires_grad_(requires_grad) if requires_grad else t


def rand_like(x, dtype=None, *, device=None, requires_grad=False, layout=None,
              memory_format=None):
    return _like(x, rand(tuple(x.shape), dtype=dtype or x.dtype, device=device,
                         requires_grad=requires_grad), memory_format)


def randn_like(x, dtype=None, *, device=None, requires_grad=False, layout=None,
               memory_format=None):
    return _like(x, randn(tuple(x.shape), dtype=dtype or x.dtype, device=device,
                          requires_grad=requires_grad), memory_format)


def randint(low: int, high: int | Sequence[int] | None = None, size: SizeLike | None = None,
            dtype: DTypeLike = None, device: DeviceLike = None, generator: Generator | None = None,
            requires_grad: bool = False, layout: Any = None) -> Tensor:
    _device.check(device, "randint")
    if size is None and isinstance(high, (tuple, list)):  # randint(high, size)
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    if size is None:
        raise TypeError("randint() missing 1 required positional argument: 'size'")
    u = rand(_size((size,)), dtype=dt.float64, generator=generator)
    return ops.cast(ops.floor(ops.add(ops.mul(u, float(high - low)), float(low))),
                    dt.as_dtype(dtype or dt.int64))


def randperm(n, dtype=None, device=None, generator=None, requires_grad=False, layout=None,
             pin_memory=False):
    _device.check(device, "randperm")
    idx = shape_ops.argsort(rand(n, generator=generator, dtype=dt.float64))
    return idx if dtype is None else idx.to(dtype)


def bernoulli(input, p=None, generator=None):
    """Draws 1 with probability `input` (or the scalar `p`, when given) per element."""
    u = rand(tuple(input.shape), dtype=input.dtype, generator=generator)
    prob = input if p is None else ops.as_tensor_like(float(p), input.dtype)
    return ops.cast(ops.lt(u, prob), input.dtype)


def normal(mean, std, size=None, generator=None):
    if size is not None:
        return ops.add(ops.mul(randn(_size((size,)), generator=generator), std), mean)
    shape = tuple(mean.shape) if isinstance(mean, Tensor) else tuple(std.shape)
    return ops.add(ops.mul(randn(shape, generator=generator), std), mean)


class Generator:
    """A separate generator (`aotgrad.Generator().manual_seed(0)`)."""

    def __init__(self, device="cpu"):
        self.device = _device.check(device, "Generator")
        self._rng = _RNG()

    def manual_seed(self, seed):
        self._rng.manual_seed(seed)
        return self

    def next_seed(self):
        return self._rng.next_seed()

    def initial_seed(self):
        return self._rng.initial


@op("multinomial")
def multinomial(input, num_samples, replacement=False, *, generator=None):
    """Draw `num_samples` category indices per row of the (unnormalised) probabilities
    `input`: `multinomial(tensor([0.2, 0.8]), 3, replacement=True)` is int64 of shape (3,).
    Without replacement the draws are distinct (Gumbel top-k)."""
    if input.ndim not in (1, 2):
        raise RuntimeError(f"prob_dist must be 1 or 2 dim, got {input.ndim}")
    n = input.shape[-1]
    if not replacement and num_samples > n:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples "
                           "without replacement")
    input = checked(input.detach(), RuntimeError,   # eagerly, and at run time compiled
                    "probability tensor contains either `inf`, `nan` or element < 0 (got "
                    "{value} in {type0})", low=0.0, high=float("inf"), shown=(input,))
    if isinstance(input._value, np.ndarray):   # (the sums are checked eagerly only)
        v = input._value
        if (v.reshape(-1, n).sum(-1) == 0).any():
            raise RuntimeError("invalid multinomial distribution (sum of "
                               "probabilities <= 0)")
        if not replacement and ((v.reshape(-1, n) > 0).sum(-1) < num_samples).any():
            raise RuntimeError("invalid multinomial distribution (with "
                               "replacement=False, not enough non-negative category to sample)")
    p = ops.cast(input, dt.float64)
    rows = tuple(input.shape[:-1])
    if replacement:
        cdf = ops.cumsum(ops.div(p, ops.sum(p, -1, keepdim=True)), -1)
        u = rand(rows + (num_samples, 1), dtype=dt.float64, generator=generator)
        below = ops.lt(shape_ops.unsqueeze(cdf, -2), u)
        idx = ops.sum(ops.cast(below, dt.int64), -1)
        return ops.minimum(idx, tensor(n - 1))
    u = rand(rows + (n,), dtype=dt.float64, generator=generator)
    keys = ops.sub(ops.log(p), ops.log(ops.neg(ops.log(u))))
    return shape_ops.narrow(shape_ops.argsort(keys, -1, descending=True), -1, 0, num_samples)
