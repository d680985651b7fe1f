"""`aotgrad.accelerator`: aotgrad runs on the CPU, which PyTorch does not count as an
accelerator, so none is ever available (`current_accelerator()` is None, `device_count()`
0). Calls that need one raise PyTorch's RuntimeError."""

_NONE = ("Cannot access accelerator device when none is available. (aotgrad runs on the "
         "CPU only)")


def is_available():
    return False


def current_accelerator(check_available=False):
    return None


def device_count():
    return 0


def _none(*args, **kwargs):
    raise RuntimeError(_NONE)


current_device_index = current_device_idx = set_device_index = set_device_idx = _none
synchronize = current_stream = set_stream = _none


def empty_cache():
    """Does nothing: there is no accelerator memory."""
