"""`autograd.Function`: user-defined forward and backward, as in `torch.autograd.Function`.

>>> class Exp(aotgrad.autograd.Function):
...     @staticmethod
...     def forward(ctx, x):
...         y = x.exp()
...         ctx.save_for_backward(y)
...         return y
...     @staticmethod
...     def backward(ctx, grad):
...         y, = ctx.saved_tensors
...         return grad * y
>>> y = Exp.apply(aotgrad.ones(2, requires_grad=True)); y.grad_fn.name()
'ExpBackward'

The forward runs under `no_grad` on the given tensors (so it works on eager and traced
tensors alike); `apply` then attaches one graph node, an instance of the generated class
`<Name>Backward`, which is also the `ctx` the forward and backward receive. The backward
gets Tensors and runs under the engine's grad mode, so a backward written with tensor ops
is itself differentiable (`create_graph=True`).
"""
import contextlib
import functools
import inspect

import numpy as np

from aotgrad.autograd import function_dirty
from aotgrad.autograd.forward_ad_function import set_output_tangents
from aotgrad.ir.core import Aval
from aotgrad.runtime import forward_mode, profiling, view_meta
from aotgrad.runtime.engine import FREED_MESSAGE, Node, SavedTensor, _node_of
from aotgrad.runtime.saved_tensors import UNDEFINED_SAVED
from aotgrad.runtime.grad_mode import no_grad, state as _mode
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.view_ops import track_view

__all__ = ["Function", "FunctionCtx", "BackwardCFunction", "InplaceFunction",
           "once_differentiable"]


class FunctionCtx:
    """The `ctx` of a custom Function: what forward records for backward."""

    def save_for_backward(self, *tensors):
        """Save tensors (or None) for backward; read them back with `ctx.saved_tensors`.
        They are checked against in-place modification like the inputs of built-in ops."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument {i} "
                                f"is of type {type(t).__name__}")
        self._to_save = tensors

    def mark_dirty(self, *tensors):
        """Declare input tensors that forward modified in place (they must be returned)."""
        self._dirty = tensors

    def mark_non_differentiable(self, *tensors):
        """Declare outputs that are not differentiable (indices, masks): they do not require
        grad and backward receives a zero (or None) gradient for them."""
        self._non_differentiable = tensors

    def set_materialize_grads(self, value):
        """With False, backward receives None instead of zeros for outputs that got no
        gradient."""
        self.materialize_grads = bool(value)

    def save_for_forward(self, *tensors):
        """Save tensors (or None) for `jvp`, which reads them as `ctx.saved_tensors`."""
        for i, t in enumerate(tensors):
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_forward expects all arguments to be tensors; but "
                                f"got {type(t).__name__} at position {i}")
        self._saved_for_forward = tensors

    @property
    def saved_variables(self):
        """The old name of `saved_tensors` (deprecated, as in PyTorch)."""
        import warnings
        warnings.warn("'saved_variables' is deprecated; use 'saved_tensors'", DeprecationWarning,
                      stacklevel=2)
        return self.saved_tensors

    @property
    def saved_tensors(self):
        if getattr(self, "_in_jvp", False):  # jvp reads what save_for_forward saved
            return tuple(getattr(self, "_saved_for_forward", ()))
        clear = getattr(getattr(self, "_forward_cls", None), "clear_saved_tensors_on_access",
                        False)
        if clear and getattr(self, "_cleared_on_access", False):
            raise RuntimeError(CLEARED_ON_ACCESS_MESSAGE)
        saved = self._saved_or_raise()
        out = tuple(s.unpack(self) if s is not None else None for s in saved)
        if clear:
            self._cleared_on_access = True
            self._release()
        return out

    @property
    def _raw_saved_tensors(self):
        """The SavedTensor objects behind `saved_tensors` (to set hooks on one of them)."""
        return tuple(UNDEFINED_SAVED if s is None else s for s in self._saved_or_raise())

    def _saved_or_raise(self):
        saved = getattr(self, "_saved", None)
        if saved is None:
            if getattr(self, "_to_save", None) is not None:
                raise RuntimeError("saved_tensors can only be read in backward, after forward "
                                   "returned")
            return ()
        if getattr(self, "_saved_released", False) and saved:
            raise RuntimeError(FREED_MESSAGE)
        return saved


CLEARED_ON_ACCESS_MESSAGE = (
    "saved_tensors can only be accessed once when clear_saved_tensors_on_access=True is set on "
    "the autograd.Function. Either access saved_tensors only once, or set "
    "clear_saved_tensors_on_access=False.")


class BackwardCFunction(FunctionCtx, Node):
    """Base of the generated `<Name>Backward` node classes; an instance is a Function's ctx."""
    _none_in_none_out = False  # backward runs on materialized zeros, as in PyTorch
    _forward_cls = None
    _name = "BackwardCFunction"
    runs_without_grads = True  # backward() sees zeros (or None without materialize_grads)

    def __init__(self, inputs):
        tensors = [a if isinstance(a, Tensor) else None for a in inputs]
        nexts = [_node_of(t) if t is not None and t.requires_grad else (None, 0)
                 for t in tensors]
        super().__init__(nexts, [Aval(t.shape, t.dtype) if t is not None else None
                                 for t in tensors], [])
        self.needs_input_grad = tuple(t is not None and t.requires_grad for t in tensors)
        self._is_tensor_input = tuple(t is not None for t in tensors)
        self.materialize_grads = True
        self._to_save = None
        self._saved = None
        self._dirty = ()
        self._non_differentiable = ()

    def name(self):
        return type(self)._name

    # with False, a non-differentiable output's missing gradient stays None even when
    # materialize_grads is on (PyTorch's ctx._materialize_non_diff_grads)
    _materialize_non_diff_grads = True
    _non_diff_outputs = frozenset()  # indices of the outputs marked non-differentiable

    def _materialize(self, grads):
        from aotgrad.runtime import tprims
        keep_none = () if self._materialize_non_diff_grads else self._non_diff_outputs
        return [g if g is not None or a is None or i in keep_none
                else tprims.zeros(a.shape, a.dtype)
                for i, (g, a) in enumerate(zip(grads, self._out_avals))]

    def _backward(self, grads):
        cls = self._forward_cls
        backward = cls.backward
        if cls.vjp is not Function.vjp:  # PyTorch accepts `vjp` as the name of the backward
            if backward is not Function.backward:
                raise RuntimeError("Implementing both 'backward' and 'vjp' for a custom "
                                   "Function is not allowed. You should only implement one of "
                                   "them.")
            backward = cls.vjp
        result = backward(self, *grads)
        if not isinstance(result, tuple):
            result = (result,)
        n = len(self.next_functions)
        if len(result) > n and all(r is None for r in result[n:]):
            result = result[:n]
        if len(result) != n:
            raise RuntimeError(f"function {self.name()} returned an incorrect number of "
                               f"gradients (expected {n}, got {len(result)})")
        for i, (g, is_tensor) in enumerate(zip(result, self._is_tensor_input)):
            if g is None:
                continue
            if not is_tensor:
                raise RuntimeError(f"function {self.name()} returned a gradient different than "
                                   f"None at position {i + 1}, but the corresponding forward "
                                   f"input was not a Variable")
            if not isinstance(g, Tensor):
                raise RuntimeError(f"expected Variable or None (got {type(g).__name__})")
        return list(result)

    def _release(self):
        for s in self._saved or ():
            if s is not None:
                s.release()
        self._saved_released = True


class _FunctionMeta(type):
    """Gives every Function subclass its own node class, named `<Name>Backward`."""

    def __init__(cls, name, bases, attrs):
        backward_cls = type(f"{name}Backward", (BackwardCFunction,),
                            {"_forward_cls": cls, "_name": f"{name}Backward",
                             "__module__": cls.__module__})
        cls._backward_cls = backward_cls
        super().__init__(name, bases, attrs)


FunctionMeta = _FunctionMeta  # (PyTorch's public name of the metaclass)


class Function(metaclass=_FunctionMeta):
    """Base class for custom differentiable operations: subclass it, write static
    `forward(ctx, *args)` and `backward(ctx, *grad_outputs)`, call `Fn.apply(*args)`.

    `backward` gets one gradient per forward output and returns one per forward input
    (None for non-tensor inputs and inputs that need no gradient).
    """

    def __init__(self, *args, **kwargs):
        import warnings
        warnings.warn(f"{type(self)} should not be instantiated. Methods on autograd functions "
                      f"are all static, so you should invoke them on the class itself.",
                      DeprecationWarning, stacklevel=2)

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is "
                           "deprecated. Please use new-style autograd function with static "
                           "forward method. (Example: call `MyFunction.apply(x)`, with "
                           "`forward` and `backward` defined as @staticmethod.)")

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward mode "
                                  "AD.")

    @staticmethod
    def vjp(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward mode "
                                  "AD.")

    # True: ctx.saved_tensors frees what was saved as it is read (once, in backward)
    clear_saved_tensors_on_access = False

    # for vmap: True asks for the batching rule to be derived from forward; False (PyTorch's
    # default) means the class gives one as its `vmap` staticmethod
    generate_vmap_rule = False

    @staticmethod
    def vmap(info, in_dims, *args):
        raise NotImplementedError("To use autograd.Function with vmap, you must either override "
                                  "the vmap staticmethod or set generate_vmap_rule=True.")

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError("You must implement the jvp function for custom "
                                  "autograd.Function to use it with forward mode AD.")

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run forward and record a `<Name>Backward` node for the tensor outputs."""
        has_setup = cls.setup_context is not Function.setup_context
        if has_setup or kwargs:
            args = _bind(cls.forward, has_setup, args, kwargs)
            kwargs = {}
        ctx = cls._backward_cls(args)
        record = _mode.grad_enabled and any(ctx.needs_input_grad)
        tangents = _input_tangents(args)
        with no_grad(), _tangents_suspended(tangents is not None):
            if profiling._profilers:
                with profiling.record(cls.__name__, kind="op"):
                    raw = _call_forward(cls, ctx, args, has_setup)
            else:
                raw = _call_forward(cls, ctx, args, has_setup)
        is_tuple = isinstance(raw, tuple)
        raw_outputs = raw if is_tuple else (raw,)
        outputs = _wrap_outputs(ctx, args, raw_outputs, record)
        if tangents is not None:
            _set_output_tangents(cls, ctx, args, tangents, raw_outputs, outputs)
        return outputs if is_tuple else outputs[0]


def _input_tangents(args):
    """The forward-mode tangents of the tensor arguments (None if no argument has one)."""
    if forward_mode.state.level is None or forward_mode.state.suspended:
        return None
    tangents = [forward_mode.tangent_of(a) if isinstance(a, Tensor) else None for a in args]
    return tangents if any(t is not None for t in tangents) else None


@contextlib.contextmanager
def _tangents_suspended(on):
    """The forward of a Function given dual tensors runs without tangents: its `jvp` gives
    the outputs' tangents, as in PyTorch."""
    prev = forward_mode.state.suspended
    forward_mode.state.suspended = prev or on
    try:
        yield
    finally:
        forward_mode.state.suspended = prev


def _set_output_tangents(cls, ctx, args, tangents, raw_outputs, outputs):
    if cls.jvp is Function.jvp:
        raise RuntimeError(f"You must implement the jvp function for custom autograd.Function "
                           f"to use it with forward mode AD ({cls.__name__} was given a dual "
                           f"tensor).")
    set_output_tangents(cls, ctx, args, tangents, raw_outputs, outputs)


def _bind(forward, has_setup, args, kwargs):
    """Positional arguments of forward, defaults filled in (how PyTorch binds kwargs)."""
    sig = inspect.signature(forward)
    if not has_setup:  # forward(ctx, *args): bind with a placeholder ctx
        bound = sig.bind(None, *args, **kwargs)
        bound.apply_defaults()
        return tuple(bound.args[1:])
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    return tuple(bound.args)


def _call_forward(cls, ctx, args, has_setup):
    if has_setup:
        out = cls.forward(*args)
        cls.setup_context(ctx, args, out)
        return out
    return cls.forward(ctx, *args)


def _wrap_outputs(ctx, inputs, outputs, record):
    """Attach the node to the outputs (history, aliases of returned inputs, dirty inputs,
    non-differentiable outputs), then turn `save_for_backward` into SavedTensors."""
    input_ids = {id(a) for a in inputs if isinstance(a, Tensor)}
    dirty = {id(t) for t in ctx._dirty}
    non_diff = {id(t) for t in ctx._non_differentiable}
    function_dirty.check_dirty(ctx._dirty, input_ids, outputs)
    wrapped, avals = [], []
    for i, o in enumerate(outputs):
        if not isinstance(o, Tensor):
            wrapped.append(o)
            avals.append(None)
            continue
        avals.append(Aval(o.shape, o.dtype))
        modified = id(o) in dirty and id(o) in input_ids
        if id(o) in dirty:
            if record or _mode.grad_enabled and o._base is not None and o._base.requires_grad:
                function_dirty.check_recordable(o, len(outputs))
        differentiable = id(outputs[i]) not in non_diff and o.dtype.is_floating_point
        if id(o) in input_ids and id(o) not in dirty:
            # a returned input: a new tensor with this history, a view of the input (a
            # detached alias where it requires grad and gets no history, as in PyTorch)
            o = _alias(o, view=record and differentiable or not o.requires_grad)
        if not modified:  # a view returned by the Function keeps the Function's backward
            view_meta.set_kind(o, view_meta.CreationMeta.IN_CUSTOM_FUNCTION)
        if record and differentiable and modified and function_dirty.rebases(o):
            function_dirty.rebase(o, ctx, i)
        elif record and differentiable:
            o.grad_fn, o._output_nr, o.requires_grad = ctx, i, True
            o._retains_grad = False
        elif id(outputs[i]) in dirty and record:
            o.grad_fn, o.requires_grad = None, False
        wrapped.append(o)
    ctx._out_avals = avals
    if non_diff:
        ctx._non_diff_outputs = frozenset(i for i, o in enumerate(outputs) if id(o) in non_diff)
    if ctx._to_save is not None:
        outs = {id(o) for o in wrapped if isinstance(o, Tensor)} if record else set()
        ctx._saved = [None if t is None else SavedTensor(t, is_output=id(t) in outs)
                      for t in ctx._to_save]
        ctx._to_save = ()  # the SavedTensors hold them now (and may drop them)
    else:
        ctx._saved = []
    return tuple(wrapped)


def _alias(t, view=False):
    """A new tensor sharing t's storage and version counter; with `view`, eagerly a view of t
    (an input a Function returns as-is, as PyTorch's)."""
    a = Tensor._make(t._value, False)
    a._version_counter = t._version_counter
    if view and isinstance(t._value, np.ndarray):
        a._base = t if t._base is None else t._base
        track_view(a, a._base)
    return a


class InplaceFunction(Function):
    """A Function with an `inplace` flag, kept for old code (as in PyTorch); new code
    subclasses Function."""

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace


# ---- once_differentiable ---------------------------------------------------------------------
class Error(Node):
    """A node that raises when differentiated: marks the output of a once_differentiable
    backward that ran with create_graph=True (named as PyTorch's)."""
    _name = "Error"

    def __init__(self, msg, grads):
        super().__init__([_node_of(g) if isinstance(g, Tensor) and g.requires_grad
                          else (None, 0) for g in grads],
                         [Aval(g.shape, g.dtype) if isinstance(g, Tensor) else None
                          for g in grads], [])
        self.msg = msg

    def _backward(self, grads):
        raise RuntimeError(self.msg)


def once_differentiable(fn):
    """Decorate a Function's backward that is not itself differentiable: it runs under
    no_grad, and differentiating its result (double backward) raises a clear error."""
    @functools.wraps(fn)
    def wrapper(ctx, *grads):
        with no_grad():
            outputs = fn(ctx, *grads)
        if not _mode.grad_enabled:
            return outputs
        if not any(isinstance(g, Tensor) and g.requires_grad for g in grads):
            return outputs
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        node = Error("trying to differentiate twice a function that was marked with "
                            "@once_differentiable", grads)
        node._out_avals = [Aval(o.shape, o.dtype) if isinstance(o, Tensor) else None
                           for o in outs]
        res = []
        for i, o in enumerate(outs):
            if isinstance(o, Tensor) and o.dtype.is_floating_point:
                o = _alias(o)
                o.grad_fn, o._output_nr, o.requires_grad = node, i, True
            res.append(o)
        return res[0] if single else tuple(res)
    return wrapper
