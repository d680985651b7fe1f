"""In-place view ops (`t_`, `transpose_`, `swapdims_`, `swapaxes_`, `squeeze_`, `unsqueeze_`):
they change the tensor's shape and strides, not its elements, so they cannot go through the
write-back of the elementwise in-place ops (which keeps the shape). The tensor takes the view's
value and history and its version is bumped, as in PyTorch."""
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.inplace_ops import _inplace_guard, _set_history
from aotgrad.runtime.write_hooks import before_write


def inplace_view(view_fn, name):
    """The method `name` that makes `self` the view `view_fn(self, *args)` of itself."""
    def method(self, *args, **kwargs):
        _inplace_guard(self, name)
        out = view_fn(self, *args, **kwargs)
        # eagerly a numpy view of the old value (the elements stay shared with other views);
        # traced, the traced value of the new shape
        before_write(self)
        self._value = out._value
        self._version_counter.v += 1
        if out.requires_grad and _mode.grad_enabled and out.grad_fn is not None:
            _set_history(self, out)
        return self
    method.__name__ = name
    method.__wrapped__ = view_fn  # its signature is view_fn's (for inspect, and tensor.pyi)
    return method
