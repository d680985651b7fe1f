"""`aotgrad.autocast(device_type="cpu", dtype=aotgrad.bfloat16)`: PyTorch's CPU autocast.

Inside the context, ops on PyTorch's CPU lower-precision list (matrix products, linear,
convolutions, attention) cast their floating-point tensor arguments to the autocast dtype,
and ops on its float32 list (losses, `prod`, linalg) cast 16-bit floats up to float32;
other ops run in the dtypes they are given. The casts are recorded ops, so gradients flow
back to float32 parameters in float32. The policy is one table keyed by the op name (the
`op` decorator's name), applied by the decorator to the outermost op only. 16-bit floats
run eagerly only: a compiled function that autocasts falls back to eager (a graph break).

>>> import aotgrad
>>> with aotgrad.autocast("cpu", dtype=aotgrad.bfloat16):
...     y = aotgrad.ones(2, 3) @ aotgrad.ones(3, 4)
>>> y.dtype
aotgrad.bfloat16
"""
import enum
import functools

from aotgrad.ir import dtypes as dt
from aotgrad.runtime import device as _device
from aotgrad.runtime.tensor import Tensor


class Policy(enum.Enum):
    LOWER = "lower precision"   # float inputs cast to the autocast dtype
    FLOAT32 = "float32"         # 16-bit float inputs cast to float32


_LOWER = ("matmul", "linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
          "conv_transpose2d", "conv_transpose3d", "bmm", "mm", "addmm", "baddbmm", "addbmm",
          "prelu", "scaled_dot_product_attention", "einsum", "linalg.vecdot")
_FLOAT32 = ("binary_cross_entropy", "binary_cross_entropy_with_logits", "mse_loss", "nll_loss",
            "cross_entropy", "smooth_l1_loss", "l1_loss", "huber_loss", "kl_div",
            "margin_ranking_loss", "soft_margin_loss", "hinge_embedding_loss",
            "cosine_embedding_loss", "poisson_nll_loss", "multi_margin_loss",
            "multilabel_margin_loss", "triplet_margin_loss", "ctc_loss", "prod", "cdist",
            "avg_pool3d", "max_pool3d", "adaptive_avg_pool3d", "adaptive_max_pool3d", "logdet",
            "linalg.inv", "linalg.solve", "linalg.det", "linalg.slogdet", "linalg.cholesky",
            "linalg.qr", "linalg.svd", "linalg.svdvals", "linalg.eigh", "linalg.eigvalsh",
            "linalg.pinv", "linalg.lstsq", "linalg.matrix_rank")
POLICY = {**{n: Policy.LOWER for n in _LOWER}, **{n: Policy.FLOAT32 for n in _FLOAT32}}


class _State:
    """The innermost active autocast: its dtype, or None (off)."""
    __slots__ = ("dtype",)

    def __init__(self):
        self.dtype = None


state = _State()


def cast_args(name, args, kwargs, cast):
    """The op's arguments cast by its policy (unchanged for ops not in the table), with
    `cast(tensor, dtype)` (the op layer's)."""
    policy = POLICY.get(name)
    if policy is None:
        return args, kwargs
    if policy is Policy.LOWER:
        def conv(a):
            return cast(a, state.dtype) if isinstance(a, Tensor) and \
                a.dtype.is_floating_point and a.dtype is not dt.float64 else a
    else:
        def conv(a):
            return cast(a, dt.float32) if isinstance(a, Tensor) and \
                a.dtype in dt.LOW_PRECISION else a
    return tuple(conv(a) for a in args), {k: conv(v) for k, v in kwargs.items()}


class autocast:  # noqa: N801  (torch.autocast's spelling)
    """`with autocast("cpu", dtype=aotgrad.bfloat16):` (the default dtype on the CPU, as in
    PyTorch); also a decorator. `enabled=False` turns it off inside. CUDA raises."""

    def __init__(self, device_type="cpu", dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        _device.check(device_type, "autocast")
        self.dtype = dt.bfloat16 if dtype is None else dt.as_dtype(dtype)
        if self.dtype not in dt.LOW_PRECISION:
            raise RuntimeError(f"In CPU autocast, but the target dtype is not supported. "
                               f"Disabling autocast.\nCPU Autocast only supports dtype of "
                               f"aotgrad.bfloat16, aotgrad.float16 currently (got "
                               f"{self.dtype!r})")
        self.enabled = bool(enabled)
        self.device = device_type
        self._previous = []

    def __enter__(self):
        self._previous.append(state.dtype)
        state.dtype = self.dtype if self.enabled else None
        return self

    def __exit__(self, *exc):
        state.dtype = self._previous.pop()

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device, self.dtype, self.enabled):
                return fn(*args, **kwargs)
        return wrapper


def is_autocast_enabled(device_type=None):
    return state.dtype is not None


def get_autocast_dtype(device_type="cpu"):
    return state.dtype if state.dtype is not None else dt.bfloat16
