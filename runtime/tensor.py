"""Tensor: an n-d array on numpy with PyTorch's autograd surface.

>>> x = aotgrad.tensor([1., 2.], requires_grad=True)
>>> (x * x).sum().backward(); x.grad
tensor([2., 4.])

`_value` is a numpy array in eager mode, or an IR `Var` while tracing; every op goes
through `runtime.dispatch.apply`, which binds the prim and records the autograd node.
Operators and most methods, and the methods that need the layers above Tensor, are installed
by runtime/methods.py (runtime/tensor.pyi declares them for IDEs and type checkers).
"""
import math
import operator
import weakref

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.sizes import size_list
from aotgrad.ir.core import Var, format_location
from aotgrad.runtime.sizes import type_str
from aotgrad.runtime.storage import expose as _expose
from aotgrad.ir.core import current_builder as _current_builder
from aotgrad.runtime import dual_state as _dual_state
from aotgrad.runtime.device import CPU as _CPU
from aotgrad.runtime.autograd_node import AccumulateGrad, RemovableHandle
from aotgrad.runtime.grad_accumulation import note_grad_write
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.version_counter import VersionCounter
from aotgrad.runtime.view_meta import CreationMeta


_NP_DTYPES = {d.np: d for d in dt.ALL}
_new = object.__new__


class Tensor:
    __slots__ = ("_value", "_requires_grad", "grad_fn", "_grad", "_version_counter",
                 "_output_nr", "_inference", "__weakref__", "__dict__")
    __array_priority__ = 1000  # numpy defers `ndarray + tensor` to us
    # Rarely set attributes: a class-level default here, an instance attribute (in __dict__)
    # once set, so that _make stays cheap. Each is read by the modules named.
    # autograd (runtime/autograd_node.py, backward*.py, grad_accumulation.py):
    _hooks = ()            # Tensor.register_hook hooks of a leaf
    _post_acc_hooks = ()   # register_post_accumulate_grad_hook hooks of a leaf
    _accumulator = None    # weakref to the leaf's AccumulateGrad node (_grad_accumulator)
    _retains_grad = False  # retain_grad() was called on this non-leaf
    _fresh = False         # a compiled backward's output no one else holds: accumulate_grad
    #                        may keep it as .grad without a copy (grad_accumulation.fresh)
    # `_grad_dtype`, set only by the grad_dtype setter (None: keep any dtype); its absence
    # means the tensor's own dtype, so it has no class default (`"_grad_dtype" in __dict__`)
    # views (runtime/view_ops.py, inplace_ops.py):
    _base = None           # the tensor this one is a view of (the root of a chain of views)
    _view_made = False     # made by a view op: an in-place op on it may rebase its root
    _creation_meta = CreationMeta.DEFAULT  # how the view was made (runtime/view_meta.py):
    #                        an in-place op on some kinds of views is an error
    _views = None          # on a root: id -> weakref of its views made under grad mode
    # tracing (runtime/view_ops.py, layout.py, dispatch.py, inplace_ops.py, tracer/):
    _traced_root = None    # weakref to the traced tensor this alias (view, detach) shares
    _traced_views = None   # on that root: its traced aliases (a WeakValueDictionary)
    _traced_saved = False  # saved for backward while tracing: a view of it is a view eagerly
    _views_saved = False   # a traced view of such a tensor: writing it in place breaks
    _layout_probe = None   # an int8 array with the eager layout of a traced view (layout.py)
    _layout_uncertain = False  # traced: computed from a strided tensor (layout.py)
    _rng_seed = False      # a seed drawn from the default generator (factories, tracer)
    # type promotion (runtime/op_base.py):
    _weak_scalar = False   # a 0-d tensor standing for a Python number (op_base.mark_weak)
    # forward-mode AD (runtime/forward_mode.py): `_fw_tangent`, the tangent at the active dual
    # level, read as `__dict__.get(forward_mode.TANGENT)` (no class default: popped per level)
    # sparse tensors (runtime/sparse_ops.py, saved_tensors.py):
    _sparse = None         # a sparse COO tensor's SparseInfo; read as `"_sparse" in __dict__`

    @classmethod
    def _make(cls, value, requires_grad=False):
        t = _new(cls)
        t._value = value
        t._requires_grad = requires_grad
        t.grad_fn = None
        t._grad = None
        t._version_counter = VersionCounter()
        t._output_nr = 0
        t._inference = _mode.inference
        return t

    # __init__ (PyTorch's legacy constructor) is installed by runtime/methods.py from
    # runtime/legacy.py

    @staticmethod
    def _init_from(t, value, requires_grad):
        new = Tensor._make(value, False)
        for k in Tensor.__slots__[:-2]:
            if hasattr(new, k):  # slots that _make leaves unset stay unset
                object.__setattr__(t, k, getattr(new, k))
        t.requires_grad_(requires_grad)

    # ---- metadata -----------------------------------------------------------------------
    @property
    def shape(self):
        return Size(self._value.shape)

    def size(self, dim=None):
        return self.shape if dim is None else self._value.shape[dim]

    @property
    def dtype(self):
        v = self._value
        d = _NP_DTYPES.get(v.dtype)  # a numpy dtype, or an aotgrad DType for a traced Var
        return d if d is not None else (v.dtype if isinstance(v, Var) else dt.from_numpy(v.dtype))

    @property
    def ndim(self):
        return len(self._value.shape)

    def dim(self):
        return self.ndim

    def numel(self):
        return math.prod(self._value.shape)

    nelement = numel

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._value.shape[0]

    @property
    def is_leaf(self):
        return self.grad_fn is None

    @property
    def _version(self):
        """How many in-place writes this tensor's storage has seen (an int, like PyTorch's);
        shared with its views and detached aliases through `_version_counter`. Inference
        tensors have none to show, as in PyTorch."""
        if self._inference:
            raise RuntimeError("Inference tensors do not track version counter.")
        return self._version_counter.v

    @property
    def output_nr(self):
        return self._output_nr

    @property
    def device(self):
        return _CPU

    def is_floating_point(self):
        return self.dtype.is_floating_point

    def is_inference(self):
        return self._inference

    def _is_view(self):
        """Whether this tensor is a view of another (`_base` is set), as PyTorch's (a view of an
        inference tensor is not reported as one: runtime/inference_views.py)."""
        if isinstance(self._value, Var):  # (views of traced values, and arguments that
            # are views, have no `_base` inside a trace)
            self._concrete("Tensor._is_view() inside a compiled function")
        return self._base is not None and not self._inference

    def element_size(self):
        return self.dtype.itemsize

    @property
    def data(self):
        """A tensor sharing storage that autograd does not track (like PyTorch's .data): unlike
        detach(), in-place changes through it do not bump this tensor's version counter, so
        they are not caught by the saved-tensor check."""
        t = self.detach()
        if _current_builder() is None:
            t._version_counter = VersionCounter()
        return t

    @data.setter
    def data(self, other):
        if not isinstance(other, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got "
                            f"{type(other).__name__}")
        if self.requires_grad and not other.dtype.is_floating_point:
            raise RuntimeError("data set to a tensor that requires gradients must be floating "
                               "point or complex dtype")
        self._value = other._value

    @data.deleter
    def data(self):
        # PyTorch raises. (No __delattr__ on Tensor for the other attributes: defining one
        # routes every attribute write through Python, which made each new tensor slower.)
        raise RuntimeError("cannot delete the tensor's 'data' attribute")

    @property
    def _is_traced(self):
        return isinstance(self._value, Var)

    # ---- autograd -----------------------------------------------------------------------
    @property
    def grad(self):
        if self.grad_fn is not None and not self._retains_grad and self._grad is None:
            import warnings
            warnings.warn("The .grad attribute of a Tensor that is not a leaf Tensor is being "
                          "accessed. Its .grad attribute won't be populated during "
                          "autograd.backward(). If you indeed want the .grad field to be "
                          "populated for a non-leaf Tensor, use .retain_grad() on the non-leaf "
                          "Tensor.", UserWarning, stacklevel=2)
        return self._grad

    @grad.setter
    def grad(self, g):
        if _current_builder() is not None:
            note_grad_write(self)
        if g is not None:
            if not isinstance(g, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got "
                                f"{type(g).__name__}")
            if g is self:  # the gradient would accumulate into the tensor itself
                raise RuntimeError("can't assign Variable as its own grad")
            if tuple(g.shape) != tuple(self.shape):
                raise RuntimeError(f"assigned grad has data of a different size: got "
                                   f"{size_list(g.shape)}, expected {size_list(self.shape)}")
            grad_dtype = self.__dict__.get("_grad_dtype", self.dtype)
            if grad_dtype is not None and g.dtype is not grad_dtype:
                if "_grad_dtype" in self.__dict__:
                    raise RuntimeError(
                        f"attempting to assign a gradient with dtype '{g.dtype.name}' to a "
                        f"tensor with grad_dtype '{grad_dtype.name}'. The gradient must match "
                        f"the tensor's grad_dtype (defaults to the tensor's dtype).")
                raise RuntimeError(f"assigned grad has data of a different type: got "
                                   f"{g.dtype.name}, expected {self.dtype.name}")
        self._grad = g

    @grad.deleter
    def grad(self):
        self.grad = None

    @property
    def grad_dtype(self):
        """The dtype the gradients accumulated into this leaf's `.grad` are cast to (the
        tensor's dtype unless set; None: any dtype is kept)."""
        if self.grad_fn is not None:
            raise RuntimeError("grad_dtype can only be accessed on leaf tensors.")
        return self.__dict__.get("_grad_dtype", self.dtype)

    @grad_dtype.setter
    def grad_dtype(self, dtype):
        if self.grad_fn is not None:
            raise RuntimeError("grad_dtype can only be set on leaf tensors.")
        g = self._grad
        if dtype is not None and g is not None and g.dtype is not dtype:
            raise RuntimeError(f"Cannot set grad_dtype to '{dtype.name}' because there is "
                               f"already a gradient with dtype '{g.dtype.name}'. Please clear "
                               f"the gradient (.grad = None) before changing grad_dtype, or "
                               f"ensure the new grad_dtype matches the existing gradient's "
                               f"dtype.")
        self.__dict__["_grad_dtype"] = dtype

    def _set_requires_grad(self, requires_grad):
        # (setting it to True on an integer tensor is PyTorch's error; the op layer writes
        # the flag through here too, so it checks only that)
        if requires_grad and not (type(self._value) is np.ndarray and
                                  self._value.dtype.kind == "f") and \
                not self.dtype.is_floating_point:
            raise RuntimeError(f"only Tensors of floating point dtype can require gradients "
                               f"(got {type_str(self)}, dtype {self.dtype.name})"
                               f"{format_location()}")
        self._requires_grad = requires_grad

    def _delete_requires_grad(self):
        raise RuntimeError("cannot delete the tensor's 'requires_grad' attribute")

    # read at C speed (a slot read through attrgetter); written and deleted with checks
    requires_grad = property(operator.attrgetter("_requires_grad"), _set_requires_grad,
                             _delete_requires_grad, "Whether autograd records operations on "
                             "this tensor (only floating-point tensors can require grad).")

    def requires_grad_(self, requires_grad=True):
        if not self.is_leaf:
            if not requires_grad:
                raise RuntimeError("you can only change requires_grad flags of leaf variables. "
                                   "If you want to use a computed variable in a subgraph that "
                                   "doesn't require differentiation use var_no_grad = "
                                   "var.detach().")
            return self
        if requires_grad and self._inference and not _mode.inference:
            raise RuntimeError("Setting requires_grad=True on inference tensor outside "
                               "InferenceMode is not allowed.")
        if requires_grad and not self.dtype.is_floating_point:
            raise RuntimeError(f"requires_grad: only Tensors of floating point dtype can "
                               f"require gradients (got {type_str(self)}, dtype "
                               f"{self.dtype.name}){format_location()}")
        self.requires_grad = bool(requires_grad)
        return self

    # ---- what the autograd engine asks of a tensor (the engine imports no Tensor) --------
    @staticmethod
    def _plain(value):
        """A tensor of `value` outside the autograd graph (a gradient, a saved value)."""
        return Tensor._make(value, False)

    # `_zeros(shape, dtype)` (zeros standing for a missing gradient) and
    # `_sum_to_shape(shape)` (a gradient summed over the dimensions broadcasting added) need
    # the op layer: runtime/methods.py installs them

    def _grad_accumulator(self):
        node = self._accumulator() if self._accumulator is not None else None
        if node is None:
            node = AccumulateGrad(self)
            self._accumulator = weakref.ref(node)
        return node

    def retain_grad(self):
        if self.grad_fn is None:
            if not self.requires_grad:
                raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
            return
        self.grad_fn._set_retain_grad(self._output_nr, weakref.ref(self))
        self._retains_grad = True

    @property
    def retains_grad(self):
        return self._retains_grad

    def register_hook(self, hook):
        """hook(grad) -> Tensor or None, called when this tensor's gradient is computed.
        Returns a handle with `remove()`."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is None:
            if not self._hooks:
                self._hooks = []
            self._hooks.append(hook)
            return RemovableHandle(self._hooks, hook)
        hooks = self.grad_fn._tensor_hooks(self._output_nr)
        hooks.append(hook)
        return RemovableHandle(hooks, hook)

    def register_post_accumulate_grad_hook(self, hook):
        """hook(tensor) after the gradient was accumulated into this leaf's .grad."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                               "tensors")
        if not self._post_acc_hooks:
            self._post_acc_hooks = []
        self._post_acc_hooks.append(hook)
        return RemovableHandle(self._post_acc_hooks, hook)

    # backward, detach, _concrete and __repr__ need the layers above Tensor (the engine's
    # upper half, views, dispatch, printing): runtime/methods.py installs them

    def detach_(self):
        if self._base is not None and self._base.requires_grad:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        self.grad_fn = None
        self.requires_grad = False
        _dual_state.set_tangent(self, None)  # its forward-mode tangent goes too, as in PyTorch
        return self

    # ---- conversion ---------------------------------------------------------------------
    def numpy(self, *, force=False):
        if self.requires_grad and not force and _mode.grad_enabled:  # (as PyTorch: allowed
            # under no_grad)
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                               "tensor.detach().numpy() instead.")
        v = self._concrete("Tensor.numpy()")
        return _expose(v) if isinstance(v, np.ndarray) else v

    def item(self):
        v = self._concrete("Tensor.item()")
        if v.size != 1:
            raise RuntimeError(f"a Tensor with {v.size} elements cannot be converted to Scalar")
        return v.reshape(()).item()

    def tolist(self):
        return self._concrete("Tensor.tolist()").tolist()

    def __array__(self, dtype=None, copy=None):
        if self.requires_grad and _mode.grad_enabled:  # like PyTorch: np.asarray(t) is
            # t.numpy()
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                               "tensor.detach().numpy() instead.")
        v = self._concrete("np.asarray(Tensor)")
        if dtype is not None:
            return v.astype(dtype)
        return _expose(v) if isinstance(v, np.ndarray) else v

    def __bool__(self):
        v = self._concrete("bool(Tensor) (Python control flow on a tensor value)")
        if v.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(v.reshape(()))

    def _scalar(self):
        """The one element, for float()/int() (PyTorch's ValueError for more)."""
        if self.numel() != 1:
            raise ValueError("only one element tensors can be converted to Python scalars")
        return self.item()

    def __float__(self):
        return float(self._scalar())

    def __int__(self):
        return int(self._scalar())

    def __index__(self):
        if self.dtype.is_floating_point or self.dtype is dt.bool_:
            raise TypeError("only integer tensors of a single element can be converted to an "
                            "index")
        return int(self.item())

    def __hash__(self):
        return id(self)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __reduce_ex__(self, proto):
        return (_rebuild, (np.array(self._concrete("pickle")), self.requires_grad))

    def __deepcopy__(self, memo):
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) "
                               "support the deepcopy protocol at the moment")
        t = type(self).__new__(type(self))
        Tensor._init_from(t, np.array(self._value, copy=True), self.requires_grad)
        if self._grad is not None:
            t._grad = Tensor._make(np.array(self._grad._value, copy=True))
        for k, v in self.__dict__.items():
            if k not in ("_hooks", "_post_acc_hooks", "_accumulator", "_base"):
                t.__dict__[k] = v
        memo[id(self)] = t
        return t


def _rebuild(value, requires_grad):
    t = Tensor._make(value, False)
    t.requires_grad_(requires_grad)
    return t


class Size(tuple):
    """torch.Size: a tuple that prints as `aotgrad.Size([2, 3])`."""

    def __repr__(self):
        return f"aotgrad.Size({list(self)})"

    def numel(self):
        return int(np.prod(self, dtype=np.int64))

