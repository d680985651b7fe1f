"""Tensors saved for backward: `SavedTensor` (the value, its version at save time, and how
to rebuild the tensor when the backward reads it) and the per-thread state of
`autograd.graph.saved_tensors_hooks`."""
import threading
import weakref

import numpy as np

from aotgrad.ir.core import Var, current_builder
from aotgrad.runtime import dual_state
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.saved_hooks import SavedTensorHooks, is_number_operand
from aotgrad.runtime.tensor import Tensor


_LEGACY_TYPE = {"float32": "FloatTensor", "float64": "DoubleTensor", "int64": "LongTensor",
                "int32": "IntTensor", "bool": "BoolTensor", "uint8": "ByteTensor",
                "int8": "CharTensor", "int16": "ShortTensor"}


FREED_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved tensors "
    "after they have already been freed). Saved intermediate values of the graph are freed "
    "when you call .backward() or autograd.grad(). Specify retain_graph=True if you need to "
    "backward through the graph a second time or if you need to access saved tensors after "
    "calling backward.")


INFERENCE_SAVE_MESSAGE = (
    "Inference tensors cannot be saved for backward. Please do not use Tensors created in "
    "inference mode in computation tracked by autograd. To work around this, you can make a "
    "clone to get a normal tensor and use it in autograd, or use `aotgrad.no_grad()` instead "
    "of `aotgrad.inference_mode()`.")


DETACHED_MESSAGE = (
    "Trying to use a saved tensor that has been detached in-place, i.e. with .detach_().This "
    "is not supported, please use out-of-place `.detach()` instead")


class SavedTensorModifiedError(RuntimeError):
    """A tensor saved for the backward was modified in place after it was saved."""


REGISTER_FREED_MESSAGE = (
    "Calling register_hooks on a saved tensor after it has been freed. Saved intermediate "
    "values of the graph are freed when you call .backward() or autograd.grad(). Specify "
    "retain_graph=True if you need to backward through the graph a second time or if you "
    "need to access saved variables after calling backward.")


class SavedTensor:
    """A tensor saved for backward: its value, its version at save time, and how to rebuild it.
    A saved input is given back as the very tensor that was saved (while nothing changed it);
    outputs of the saving node are stored without their grad_fn, to avoid a reference cycle,
    and come back as new tensors. `grad_fn._raw_saved_<name>` and `ctx._raw_saved_tensors`
    show these objects (PyTorch's `autograd.SavedTensor`); only the engine makes them."""
    __slots__ = ("value", "counter", "version", "grad_fn", "output_nr", "requires_grad",
                 "is_output", "leaf", "op_name", "hooks", "ref", "sparse", "tangent",
                 "original")

    def __init__(self, t=None, is_output=False, op_name=None):
        if t is None:
            raise RuntimeError("Trying to create a SavedTensor object from Python is "
                               "forbidden.")
        if t._inference and not _mode.inference:
            raise RuntimeError(INFERENCE_SAVE_MESSAGE)
        value, counter, requires_grad = t._value, t._version_counter, t.requires_grad
        self.value, self.counter, self.version = value, counter, counter.v
        self.requires_grad, self.is_output, self.op_name = requires_grad, is_output, op_name
        grad_fn = None if is_output else t.grad_fn
        self.grad_fn = grad_fn
        self.output_nr = t._output_nr
        # an output is saved while its node is being made (grad_fn not yet set): never a leaf
        self.leaf = t if (not is_output and grad_fn is None and requires_grad) else None
        # a saved input comes back as itself (PyTorch: no needless unwrapping); not while
        # tracing, where a kept proxy would outlive its trace
        traced = type(value) is not np.ndarray and isinstance(value, Var)
        self.original = None if is_output or traced else t
        self.hooks = None
        self.ref = weakref.ref(t)  # to name its current grad_fn if it is modified in place
        self.sparse = t._sparse  # a sparse COO tensor's indices (sparse_ops)
        # forward-mode AD through a backward (forward-over-reverse) needs the saved tensor's
        # tangent: a rebuilt tensor gets it back (while the same dual level is on: its list
        # of dual tensors identifies it)
        tangent = dual_state.tangent_of(t) if dual_state.state.level is not None else None
        self.tangent = None if tangent is None else (tangent, dual_state.state.duals)
        if traced:  # traced: a reshape of it may be a view eagerly
            t._traced_saved = True
        if saved_hooks.stack and not is_number_operand(t):  # saved_tensors_hooks: keep what
            # pack returns (a Python number operand is never packed, as in PyTorch)
            saved_hooks.stack[-1]._pack_saved(self, t)  # sets .hooks and .value

    def register_hooks(self, pack_hook, unpack_hook):
        """`grad_fn._raw_saved_<name>.register_hooks(pack, unpack)`: pack the saved value now
        and unpack it whenever the backward reads it (as a `saved_tensors_hooks` pair would
        have done for this one saved tensor)."""
        if not callable(pack_hook) or not callable(unpack_hook):
            raise TypeError("Expected pack_hook and unpack_hook to be callable")
        if self.hooks is not None:
            raise RuntimeError("Calling register_hooks on a saved tensor whose hooks have "
                               "already been set. Hint: only one pair of hooks is allowed at a "
                               "time.")
        if self.value is None:
            raise RuntimeError(REGISTER_FREED_MESSAGE)
        t = self.leaf if self.leaf is not None else \
            self.original if self.original is not None else Tensor._make(self.value, False)
        SavedTensorHooks(pack_hook, unpack_hook)._pack_saved(self, t)

    @property
    def data(self):
        """What is stored: the object the pack hook returned, the saved input itself, or (a
        saved output) a tensor of its value without history."""
        if self.value is None:
            raise RuntimeError(FREED_MESSAGE)
        if self.hooks is not None:
            return self.hooks[1]
        if self.original is not None:
            return self.original
        return Tensor._make(self.value, False)

    @property
    def unpack_hook(self):
        """The unpack hook that reads this tensor back (None without hooks)."""
        return None if self.hooks is None else self.hooks[0].unpack_hook

    def unpack(self, node):
        if self.value is None:
            raise RuntimeError(FREED_MESSAGE)
        if self.hooks is not None:
            return self.hooks[0]._unpack_saved(self, node)
        if self.counter.v != self.version:
            self._raise_modified(node)
        if self.leaf is not None:
            return self.leaf
        original = self.original
        if original is not None and original.grad_fn is None and self.grad_fn is not None:
            raise RuntimeError(DETACHED_MESSAGE)
        # (not while a trace derives a backward: there the saved value, not the tensor that
        # may have changed since, is what the program must read)
        if original is not None and self.tangent is None and original.grad_fn is self.grad_fn \
                and current_builder() is None:
            return original
        t = Tensor._make(self.value, self.requires_grad)
        t.grad_fn = node if self.is_output else self.grad_fn
        t._output_nr = self.output_nr
        t._version_counter = self.counter
        if self.sparse is not None:
            t._sparse = self.sparse
        if self.tangent is not None and self.tangent[1] is dual_state.state.duals and \
                dual_state.state.level is not None:
            dual_state.set_tangent(t, self.tangent[0])
        return t

    def _raise_modified(self, node):
        shape = "x".join(map(str, getattr(self.value, "shape", ())))
        dtype = self.value.dtype
        dtype = getattr(dtype, "name", None) or str(dtype)
        t = self.ref()
        # an output saved by its own op is named by that op (PyTorch keeps no link to the
        # tensor); a saved input by the tensor's current grad_fn (the in-place op's)
        fn = node if self.is_output else (t.grad_fn if t is not None else self.grad_fn)
        which = ""
        if fn is not None:  # PyTorch names the forward op: "output 0 of Mul"
            name = fn.name()
            base = name.rsplit("Backward", 1)[0] if "Backward" in name else name
            which = f", which is output {self.output_nr} of {base or name},"
        raise SavedTensorModifiedError(
            f"one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [aotgrad.{_LEGACY_TYPE.get(dtype, dtype)} [{shape}]]{which} "
            f"is at version {self.counter.v}; expected version {self.version} instead. Hint: "
            f"enable anomaly detection to find the operation that failed to compute its "
            f"gradient, with aotgrad.autograd.set_detect_anomaly(True, check_nan=False).")

    def release(self):
        self.value = None
        self.leaf = None
        self.hooks = None
        self.original = None


class UndefinedSavedTensor:
    """A None that a node saved, as `_raw_saved_<name>` shows it: it reads back as None and
    takes no hooks."""
    data = unpack_hook = None

    def register_hooks(self, pack_hook, unpack_hook):
        raise RuntimeError("Calling register_hooks on a saved tensor with value None is "
                           "forbidden")

    def unpack(self, node):
        return None


UNDEFINED_SAVED = UndefinedSavedTensor()


class _SavedTensorsHooks(threading.local):
    """The active `autograd.graph.saved_tensors_hooks` contexts (innermost last; they run
    the hooks) and the message `disable_saved_tensors_hooks` set (None: enabled), per thread."""

    def __init__(self):
        self.stack = []
        self.disabled_message = None


saved_hooks = _SavedTensorsHooks()
