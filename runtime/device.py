"""Devices, as PyTorch names them: `aotgrad.device("cpu")` prints `device(type='cpu')`.

aotgrad computes on the CPU only. Device objects, strings and `device=` keywords are accepted
so that scripts written for PyTorch run unchanged; a CPU device passes, any other raises the
error a CPU-only PyTorch build raises (an AssertionError for CUDA), with a line saying why.

>>> import aotgrad
>>> aotgrad.device("cpu"), aotgrad.device("cpu", 0), aotgrad.zeros(2).device
(device(type='cpu'), device(type='cpu', index=0), device(type='cpu'))
"""
# the device types PyTorch's parser knows, in its order (its error message lists them)
KNOWN_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve",
               "fpga", "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia",
               "privateuseone")
NO_CUDA = "Torch not compiled with CUDA enabled (aotgrad runs on the CPU only; use 'cpu')"


class NoCudaError(AssertionError, RuntimeError):
    """No CUDA device: an AssertionError as in PyTorch's CPU-only build, and a RuntimeError
    (what a device error is everywhere else), so either `except` catches it."""


class device:  # noqa: N801  (torch.device's spelling)
    """A device: `type` ('cpu', 'cuda', ...) and `index` (None or an int). Equal when both
    match (`device('cpu') != device('cpu', 0)`, as in PyTorch); hashable; never equal to a
    string."""
    __slots__ = ("type", "index", "_previous")

    def __init__(self, type, index=None):  # noqa: A002
        if isinstance(type, device):
            if index is not None:
                raise TypeError("device(): a device object takes no index")
            self.type, self.index = type.type, type.index
            return
        if isinstance(type, int) and not isinstance(type, bool):  # device(0): the accelerator
            raise NoCudaError(NO_CUDA)
        if not isinstance(type, str):
            raise TypeError(f"device() received an invalid combination of arguments - got "
                            f"({_type_name(type)})")
        kind, sep, rest = type.partition(":")
        if sep:
            if index is not None:
                raise RuntimeError(f"type (string) must not include an index because index "
                                   f"was passed explicitly: {type}")
            if not rest.isdigit():
                raise RuntimeError(f"Invalid device string: '{type}'")
            index = int(rest)
        if kind not in KNOWN_TYPES:
            raise RuntimeError(f"Expected one of {', '.join(KNOWN_TYPES)} device type at start "
                               f"of device string: {type}")
        if index is not None:
            index = int(index)
            if index < 0:
                raise RuntimeError("Device index must not be negative")
        self.type, self.index = kind, index

    def __eq__(self, other):
        return isinstance(other, device) and (other.type, other.index) == (self.type, self.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __repr__(self):
        if self.index is None:
            return f"device(type='{self.type}')"
        return f"device(type='{self.type}', index={self.index})"

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __reduce__(self):
        return (device, (self.type, self.index))

    def __enter__(self):  # `with aotgrad.device("cpu"):` sets the default device inside
        self._previous = get_default_device()
        set_default_device(self)
        return self

    def __exit__(self, *exc):
        set_default_device(self._previous)


def _type_name(x):
    return type(x).__name__


CPU = device("cpu")


def check(d, what="tensor"):
    """A device argument (None, a device, 'cpu', 'cpu:0', 0, ...) -> the CPU device it names,
    or the error PyTorch's CPU build gives: AssertionError for CUDA, RuntimeError for other
    accelerators. `what` names the call in the message."""
    if d is None:
        return _default.device
    if not isinstance(d, device):
        d = device(d)
    if d.type == "cpu":
        return d
    if d.type == "cuda":
        raise NoCudaError(NO_CUDA)
    if d.type == "meta":
        raise RuntimeError(f"{what}: aotgrad has no 'meta' device (tensors without data); "
                           f"it runs on the CPU only")
    raise RuntimeError(f"PyTorch is not linked with support for {d.type} devices (aotgrad "
                       f"runs on the CPU only; use 'cpu')")


class _DefaultDevice:
    """The device factories use when none is given (`set_default_device`)."""
    __slots__ = ("device",)

    def __init__(self):
        self.device = CPU


_default = _DefaultDevice()


def set_default_device(d):
    """`aotgrad.set_default_device("cpu")` (or None). A CUDA device raises at once: PyTorch's
    CPU build accepts it and fails at the first factory call instead."""
    _default.device = CPU if d is None else check(d, "set_default_device")


def get_default_device():
    return _default.device
