"""`aotgrad.cuda`, as a CPU-only PyTorch build has it: no CUDA device is ever available.

Queries answer as PyTorch's do without CUDA (`is_available()` is False, `device_count()` 0,
seeding and `empty_cache()` do nothing); calls that need a device raise PyTorch's
AssertionError, with a line saying that aotgrad runs on the CPU.
"""
from aotgrad.runtime.device import NO_CUDA, NoCudaError


def is_available():
    return False


def device_count():
    return 0


def is_initialized():
    return False


def is_bf16_supported(including_emulation=True):
    return False


def _no_device(*args, **kwargs):
    raise NoCudaError(NO_CUDA)


init = current_device = set_device = synchronize = get_device_name = _no_device
get_device_properties = get_device_capability = _no_device


def manual_seed(seed):
    """Does nothing: there is no CUDA generator (PyTorch ignores it silently too)."""


def manual_seed_all(seed):
    """Does nothing: there is no CUDA generator."""


def seed():
    """Does nothing: there is no CUDA generator."""


def seed_all():
    """Does nothing: there is no CUDA generator."""


def empty_cache():
    """Does nothing: there is no CUDA memory."""


def memory_allocated(device=None):
    return 0


max_memory_allocated = memory_reserved = max_memory_reserved = memory_allocated


def reset_peak_memory_stats(device=None):
    """Does nothing: there is no CUDA memory."""
