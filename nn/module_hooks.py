"""Module hooks: handles, the global full backward (pre-)hooks, and the autograd nodes that
run a module's full backward hooks on the gradients of its inputs and outputs."""
import itertools
import warnings
from collections import OrderedDict

from aotgrad.autograd.function import Function
from aotgrad.ir.core import current_builder
from aotgrad.runtime import dispatch
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor


_hook_ids = itertools.count()   # one id per registered hook (the same function may be added twice)


class _DictHandle:
    """`handle.remove()` for a hook stored in an ordered dict."""

    def __init__(self, store, key):
        self.store, self.key = store, key

    @classmethod
    def add(cls, store, hook):
        key = next(_hook_ids)
        store[key] = hook
        return cls(store, key)

    def remove(self):
        self.store.pop(self.key, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


# ---- full backward hooks -------------------------------------------------------------------
_global_backward_pre_hooks = OrderedDict()
_global_backward_hooks = OrderedDict()


def register_module_full_backward_pre_hook(hook):
    """Like `Module.register_full_backward_pre_hook`, for every module (these run before
    the module's own). Returns a handle with `remove()`."""
    return _DictHandle.add(_global_backward_pre_hooks, hook)


def register_module_full_backward_hook(hook):
    """Like `Module.register_full_backward_hook`, for every module (these run before the
    module's own). Returns a handle with `remove()`.

    >>> h = register_module_full_backward_hook(lambda m, gi, go: print(type(m).__name__))
    >>> h.remove()
    """
    return _DictHandle.add(_global_backward_hooks, hook)


class BackwardHookFunction(Function):
    """The identity, as an autograd node around a module's tensor inputs (or outputs): its
    backward runs the module's full backward hooks (or pre-hooks) on the gradients."""

    @staticmethod
    def forward(ctx, *args):
        ctx.mark_non_differentiable(*[a for a in args if not a.requires_grad])
        return args

    @staticmethod
    def backward(ctx, *grads):
        return ctx._module_hook(grads)


def _call_with_backward_hooks(module, args, kwargs):
    d = module.__dict__
    hooks = list(_global_backward_hooks.values()) + list(d.get("_backward_hooks", {}).values())
    pre = list(_global_backward_pre_hooks.values()) + \
        list(d.get("_backward_pre_hooks", {}).values())
    if not (hooks or pre):
        return module._call_forward(args, kwargs)
    if _mode.grad_enabled:
        what = f"{type(module).__name__} with full backward hooks (they run Python on every " \
            f"backward)"
        if dispatch.break_recorder is not None:
            dispatch.note_concrete(what)
        if current_builder() is not None:
            dispatch.graph_break(what, None)
    return module._call_forward(args, kwargs, _BackwardHook(module, hooks, pre))


class _BackwardHook:
    """One module call's full backward hooks: the gradients of its outputs, caught by the
    node around the outputs, wait for the node around the inputs (PyTorch's BackwardHook)."""

    def __init__(self, module, hooks, pre_hooks):
        self.module, self.hooks, self.pre_hooks = module, hooks, pre_hooks
        self.grad_outputs = None
        self.n_inputs = self.n_outputs = -1
        self.input_index = self.output_index = None

    @staticmethod
    def _wrap(args, on_grads, materialize):
        """Pass the tensors of `args` through BackwardHookFunction, whose node's backward is
        on_grads (given zeros, or None if not `materialize`, for outputs without a gradient)
        -> (new args, indices of the tensors), or (args, None) when nothing needs a gradient."""
        index = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        tensors = [args[i] for i in index]
        if not (_mode.grad_enabled and any(t.requires_grad for t in tensors)):
            return args, None
        new = BackwardHookFunction.apply(*tensors)
        node = next(t.grad_fn for t in new if t.grad_fn is not None)
        node._module_hook, node.materialize_grads = on_grads, materialize
        out = list(args)
        for i, t, old in zip(index, new, tensors):
            if t.requires_grad:  # an alias of `old`: in-place changes are refused, as PyTorch
                t._base = old if old._base is None else old._base
            out[i] = t
        return (tuple(out) if type(args) is tuple else type(args)(*out)), index

    @staticmethod
    def _pack(index, values, size):
        res = [None] * size
        for i, v in zip(index, values):
            res[i] = v
        return tuple(res)

    def setup_input_hook(self, args):
        res, self.input_index = self._wrap(args, self._on_input_grads, True)
        self.n_inputs = len(args)
        return res

    def setup_output_hook(self, out):
        single = not isinstance(out, tuple)
        outs = (out,) if single else out
        res, self.output_index = self._wrap(outs, self._on_output_grads, False)
        self.n_outputs = len(outs)
        return res[0] if single else res

    def _on_output_grads(self, grads):
        self.grad_outputs = self._pack(self.output_index, grads, self.n_outputs)
        for hook in self.pre_hooks:
            r = hook(self.module, self.grad_outputs)
            if r is None:
                continue
            if len(r) != len(self.grad_outputs):
                raise RuntimeError(f"Backward pre hook returned an invalid number of "
                                   f"grad_output, got {len(r)}, but expected "
                                   f"{len(self.grad_outputs)}")
            self.grad_outputs = tuple(r)
        local = self.grad_outputs
        if self.input_index is None:  # no input needs a gradient: the hooks run now
            warnings.warn("Full backward hook is firing when gradients are computed with "
                          "respect to module outputs since no inputs require gradients. See "
                          "the documentation of Module.register_full_backward_hook for more "
                          "details.", stacklevel=2)
            grad_inputs = (None,) * self.n_inputs
            for hook in self.hooks:
                r = hook(self.module, grad_inputs, self.grad_outputs)
                if r is not None and not (isinstance(r, tuple) and all(g is None for g in r)):
                    raise RuntimeError("Backward hook for Modules where no input requires "
                                       "gradient should always return None or None for all "
                                       "gradients.")
            self.grad_outputs = None
        return tuple(local[i] for i in self.output_index)

    def _on_input_grads(self, grads):
        if self.grad_outputs is None:
            # the gradient reached the inputs without passing through the outputs (a second
            # backward through the module's inputs, for instance): no hook runs
            return grads
        res = self._pack(self.input_index, grads, self.n_inputs)
        for hook in self.hooks:
            r = hook(self.module, res, self.grad_outputs)
            if r is None:
                continue
            if len(r) != len(res):
                raise RuntimeError(f"Backward hook returned an invalid number of grad_input, "
                                   f"got {len(r)}, but expected {len(res)}")
            res = r
        self.grad_outputs = None
        return tuple(res[i] for i in self.input_index)
