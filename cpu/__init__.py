"""`aotgrad.cpu`, laid out like `torch.cpu`: the one device aotgrad computes on."""
from aotgrad.cpu import amp  # noqa: F401


def is_available():
    return True


def device_count():
    return 1


def current_device():
    return "cpu"


def synchronize(device=None):
    """Nothing to wait for: CPU work is done when the call returns."""
