"""`nn.Module`: the base class of every layer and model.

Assigning a `Parameter`, a `Module` or a registered buffer to an attribute registers it:

>>> class Affine(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.w = nn.Parameter(aotgrad.ones(3))
...         self.register_buffer("count", aotgrad.zeros(()))
...     def forward(self, x):
...         return x * self.w
>>> [n for n, _ in Affine().named_parameters()]
['w']
"""
import itertools
import warnings
from collections import OrderedDict, namedtuple

from aotgrad.ir import dtypes as dt
from aotgrad.autograd.function import Function
from aotgrad.ir.core import current_builder
from aotgrad.nn.parameter import Parameter
from aotgrad.runtime import device as _device
from aotgrad.runtime import dispatch
from aotgrad.runtime.grad_mode import no_grad, state as _mode
from aotgrad.runtime.tensor import Tensor


_EXTRA_STATE_KEY = "_extra_state"
_hook_ids = itertools.count()   # one id per registered hook (the same function may be added twice)


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


def _type_name(value):
    if isinstance(value, Tensor):
        return f"aotgrad.{value.dtype.name.capitalize()}Tensor"
    return type(value).__name__


def _check_name(kind, name, module):
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {type(name).__name__}")
    if "." in name:
        raise KeyError(f"{kind} name can't contain \".\", got: {name}")
    if name == "":
        raise KeyError(f"{kind} name can't be empty string \"\"")


class Module:
    """Base class for all neural-network modules (PyTorch's `nn.Module` contract)."""

    training: bool
    _version = 1

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments; "
                            f"Module.__init__ takes none")
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = {}
        d["_buffers"] = {}
        d["_non_persistent_buffers_set"] = set()
        d["_modules"] = {}
        d["_forward_pre_hooks"] = OrderedDict()
        d["_forward_hooks"] = OrderedDict()
        d["_hooks_with_kwargs"] = set()     # ids of hooks registered with with_kwargs=True
        d["_hooks_always_called"] = set()   # ids of forward hooks with always_call=True
        d["_backward_pre_hooks"] = OrderedDict()
        d["_backward_hooks"] = OrderedDict()

    # ---- calling -------------------------------------------------------------------------
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"Module [{type(self).__name__}] is missing the required "
                                  f"\"forward\" function")

    def __call__(self, *args, **kwargs):
        d = self.__dict__
        if d.get("_backward_hooks") or d.get("_backward_pre_hooks") or \
                _global_backward_hooks or _global_backward_pre_hooks:
            return _call_with_backward_hooks(self, args, kwargs)
        return self._call_forward(args, kwargs)

    def _call_forward(self, args, kwargs, bw_hook=None):
        """Forward pre-hooks, forward (its tensor arguments wrapped for full backward hooks
        when `bw_hook` is given), forward hooks."""
        with_kwargs = self.__dict__.get("_hooks_with_kwargs", ())
        for key, hook in list(self._forward_pre_hooks.items()):
            if key in with_kwargs:
                res = hook(self, args, kwargs)
                if res is not None:
                    if not (isinstance(res, tuple) and len(res) == 2):
                        raise RuntimeError(f"forward pre-hook must return None or a tuple of "
                                           f"(new_args, new_kwargs), but got {res}.")
                    args, kwargs = res
            else:
                res = hook(self, args)
                if res is not None:
                    args = res if isinstance(res, tuple) else (res,)
        if bw_hook is not None:
            args = bw_hook.setup_input_hook(args)
        try:
            out = self.forward(*args, **kwargs)
        except Exception:
            always = self.__dict__.get("_hooks_always_called", ())
            for key, hook in list(self._forward_hooks.items()):
                if key in always:
                    try:
                        self._run_forward_hook(key, hook, args, kwargs, None, with_kwargs)
                    except Exception:
                        pass
            raise
        for key, hook in list(self._forward_hooks.items()):
            res = self._run_forward_hook(key, hook, args, kwargs, out, with_kwargs)
            if res is not None:
                out = res
        if bw_hook is not None:
            if not isinstance(out, (Tensor, tuple)):
                warnings.warn(f"For backward hooks to be called, module output should be a "
                              f"Tensor or a tuple of Tensors but received {type(out)}",
                              stacklevel=3)
            out = bw_hook.setup_output_hook(out)
        return out

    def _run_forward_hook(self, key, hook, args, kwargs, out, with_kwargs):
        if key in with_kwargs:
            return hook(self, args, kwargs, out)
        return hook(self, args, out)

    def _add_hook(self, store, hook, prepend, with_kwargs, always_call=False):
        key = next(_hook_ids)
        store[key] = hook
        if prepend:
            store.move_to_end(key, last=False)
        if with_kwargs:
            self.__dict__.setdefault("_hooks_with_kwargs", set()).add(key)
        if always_call:
            self.__dict__.setdefault("_hooks_always_called", set()).add(key)
        return _DictHandle(store, key)

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """hook(module, grad_output) -> None or a new grad_output, run when the gradients
        with respect to the module's outputs are known (before those of its inputs).
        `grad_output` is a tuple with one entry per output (None where an output is not a
        Tensor or got no gradient). Global pre-hooks
        (`nn.modules.module.register_module_full_backward_pre_hook`) run first.

        >>> model = nn.Linear(3, 2)
        >>> h = model.register_full_backward_pre_hook(lambda m, go: (go[0] * 2,))
        >>> h.remove()
        """
        return self._add_hook(self._backward_pre_hooks, hook, prepend, False)

    def register_full_backward_hook(self, hook, prepend=False):
        """hook(module, grad_input, grad_output) -> None or a new grad_input, run when the
        gradients with respect to the module's positional tensor inputs are computed.
        `grad_input` has one entry per positional argument (None for non-Tensor arguments);
        `grad_output` one per output. If no input requires grad, the hook runs with the
        output gradients (and a warning), and must return None. For this the module's
        forward receives, and its caller gets, aliases of the tensors (as in PyTorch):
        modifying them in place is an error. Global hooks
        (`nn.modules.module.register_module_full_backward_hook`) run first.

        >>> model = nn.Linear(3, 2)
        >>> x = aotgrad.randn(4, 3, requires_grad=True)
        >>> seen = []
        >>> h = model.register_full_backward_hook(lambda m, gi, go: seen.append(gi[0].shape))
        >>> model(x).sum().backward(); h.remove()
        >>> seen
        [aotgrad.Size([4, 3])]
        """
        return self._add_hook(self._backward_hooks, hook, prepend, False)

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """hook(module, args) -> None or new args, run before `forward` (with
        `with_kwargs=True`: hook(module, args, kwargs) -> None or (args, kwargs)).
        `prepend=True` runs it before the hooks already registered.

        >>> model = nn.Linear(3, 2)
        >>> h = model.register_forward_pre_hook(lambda m, args: print(args[0].shape))
        >>> h.remove()
        """
        return self._add_hook(self._forward_pre_hooks, hook, prepend, with_kwargs)

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False,
                              always_call=False):
        """hook(module, args, output) -> None or a new output, run after `forward` (with
        `with_kwargs=True`: hook(module, args, kwargs, output)). With `always_call=True` it
        also runs (output None) when forward raises."""
        return self._add_hook(self._forward_hooks, hook, prepend, with_kwargs, always_call)

    # ---- registration ----------------------------------------------------------------------
    def _require_init(self, what):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"cannot assign {what} before Module.__init__() call")

    def register_parameter(self, name, param):
        """Register `param` (a Parameter or None) under `name`."""
        self._require_init("parameter")
        _check_name("parameter", name, self)
        if hasattr(self, name) and name not in self._parameters:
            raise KeyError(f"attribute '{name}' already exists")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{_type_name(param)}' object to parameter '{name}' "
                            f"(aotgrad.nn.Parameter or None required)")
        if param is not None and param.grad_fn is not None:
            raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model "
                             f"parameters must be created explicitly.")
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """Register a tensor that is state but not a parameter (e.g. BatchNorm's running mean).
        Non-persistent buffers are left out of `state_dict`."""
        self._require_init("buffer")
        _check_name("buffer", name, self)
        if hasattr(self, name) and name not in self._buffers:
            raise KeyError(f"attribute '{name}' already exists")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{_type_name(tensor)}' object to buffer '{name}' "
                            f"(aotgrad Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name, module):
        """Register a child module (or None) under `name`."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._require_init("module")
        _check_name("module", name, self)
        if hasattr(self, name) and name not in self._modules:
            raise KeyError(f"attribute '{name}' already exists")
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name, value):
        d = self.__dict__
        params, modules, buffers = d.get("_parameters"), d.get("_modules"), d.get("_buffers")

        def drop(*dicts):
            for x in dicts:
                if x is not None and name in x:
                    del x[name]
            d.pop(name, None)

        if isinstance(value, Parameter):
            self._require_init("parameters")
            drop(modules, buffers)
            self._non_persistent_buffers_set.discard(name)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_type_name(value)}' as parameter '{name}' "
                                f"(aotgrad.nn.Parameter or None expected)")
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            self._require_init("module")
            drop(params, buffers)
            self._non_persistent_buffers_set.discard(name)
            modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{_type_name(value)}' as child module '{name}' "
                                f"(aotgrad.nn.Module or None expected)")
            modules[name] = value
        elif buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{_type_name(value)}' as buffer '{name}' "
                                f"(aotgrad Tensor or None expected)")
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        for key in ("_parameters", "_buffers", "_modules"):
            store = d.get(key)
            if store is not None and name in store:
                return store[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for key in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(key, {}):
                del self.__dict__[key][name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))

    # ---- traversal -----------------------------------------------------------------------
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """Yield (qualified name, module) for this module and every descendant, once each."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, prefix + ("." if prefix else "") + name,
                                       remove_duplicate)

    def modules(self, remove_duplicate=True):
        for _, m in self.named_modules(remove_duplicate=remove_duplicate):
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, get, prefix, recurse, remove_duplicate):
        seen = set()
        mods = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) \
            if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for k, v in get(m):
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                if remove_duplicate:
                    seen.add(id(v))
                yield mprefix + ("." if mprefix else "") + k, v

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """Yield (qualified name, Parameter); a parameter shared by two modules comes once."""
        yield from self._named_members(lambda m: m._parameters.items(), prefix, recurse,
                                       remove_duplicate)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        yield from self._named_members(lambda m: m._buffers.items(), prefix, recurse,
                                       remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def get_submodule(self, target):
        """`model.get_submodule("encoder.0")`: the module at a dotted path."""
        if target == "":
            return self
        mod = self
        for item in target.split("."):
            if item not in mod.__dict__.get("_modules", {}):
                raise AttributeError(f"{type(mod).__name__} has no attribute `{item}`")
            mod = mod._modules[item]
        return mod

    def get_parameter(self, target):
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._parameters:
            raise AttributeError(f"{type(mod).__name__} has no parameter `{name}`")
        return mod._parameters[name]

    def get_buffer(self, target):
        mod_path, _, name = target.rpartition(".")
        mod = self.get_submodule(mod_path)
        if name not in mod._buffers:
            raise AttributeError(f"{type(mod).__name__} has no buffer `{name}`")
        return mod._buffers[name]

    # ---- modes and bulk changes ------------------------------------------------------------
    def train(self, mode=True):
        """Set training mode on this module and its descendants (Dropout, BatchNorm care).
        It does not switch autograd off: that is `aotgrad.no_grad()`."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            m.__dict__["training"] = mode
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        """Reset the gradients of all parameters (to None by default, like PyTorch)."""
        for p in self.parameters():
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                g = p.grad.detach()
                with no_grad():
                    g.zero_()
                p.grad = g

    def apply(self, fn):
        """Call fn(m) on every descendant, children first, then on self; returns self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def _apply_to_tensors(self, convert):
        with no_grad():
            for m in self.modules():
                for store in (m._parameters, m._buffers):
                    for k, t in store.items():
                        if t is None:
                            continue
                        new = convert(t)
                        if new is not t and new.dtype is not t.dtype:
                            t.data = new
                            if t._grad is not None:
                                t._grad = convert(t._grad)
        return self

    def to(self, *args, **kwargs):
        """`module.to(aotgrad.float64)`: cast floating-point parameters and buffers in place
        (they stay the same Parameter objects). Devices other than "cpu" are rejected."""
        dtype = kwargs.get("dtype")
        for a in list(args) + [kwargs.get("device")]:
            if isinstance(a, dt.DType) or a is float:
                dtype = a
            elif isinstance(a, Tensor):
                dtype = a.dtype
            elif a is not None and not isinstance(a, bool):
                _device.check(a, "Module.to")
        if dtype is None:
            return self
        dtype = dt.as_dtype(dtype)
        if not dtype.is_floating_point:
            raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got desired "
                            f"dtype={dtype.name}")
        return self._apply_to_tensors(
            lambda t: t.detach().to(dtype) if t.dtype.is_floating_point else t)

    def float(self):
        return self.to(dt.float32)

    def double(self):
        return self.to(dt.float64)

    def half(self):
        return self.to(dt.float16)

    def bfloat16(self):
        return self.to(dt.bfloat16)

    def cpu(self):
        return self

    def cuda(self, device=None):
        raise _device.NoCudaError(_device.NO_CUDA)

    def type(self, dst_type):
        return self.to(dst_type)

    # ---- state dict ------------------------------------------------------------------------
    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """An OrderedDict of parameters and persistent buffers by qualified name. The tensors
        share storage with the module's (detached unless `keep_vars=True`)."""
        if args:  # the positional (destination, prefix, keep_vars) form
            destination, prefix, keep_vars = (list(args) + [prefix, keep_vars])[:3] \
                if len(args) < 3 else args[:3]
        if destination is None:
            destination = OrderedDict()
        for name, p in self._parameters.items():
            if p is not None:
                destination[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent_buffers_set:
                destination[prefix + name] = b if keep_vars else b.detach()
        if self._has_extra_state():
            destination[prefix + _EXTRA_STATE_KEY] = self.get_extra_state()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(destination=destination, prefix=prefix + name + ".",
                             keep_vars=keep_vars)
        return destination

    def get_extra_state(self):
        """Override (with `set_extra_state`) to save non-tensor state in `state_dict` under
        the key "_extra_state".

        >>> class Counter(nn.Module):
        ...     def get_extra_state(self): return {"seen": self.seen}
        ...     def set_extra_state(self, state): self.seen = state["seen"]
        """
        raise RuntimeError("Reached a code path in Module.get_extra_state() that should never "
                           "be called.")

    def set_extra_state(self, state):
        """Restore what `get_extra_state` returned; called by `load_state_dict`."""
        raise RuntimeError("Reached a code path in Module.set_extra_state() that should never "
                           "be called.")

    def _has_extra_state(self):
        return type(self).get_extra_state is not Module.get_extra_state

    def _extra_state_modules(self):
        """{state_dict key: module} for the modules that override get_extra_state."""
        return {prefix + ("." if prefix else "") + _EXTRA_STATE_KEY: m
                for prefix, m in self.named_modules(remove_duplicate=False)
                if m._has_extra_state()}

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy tensors from `state_dict` into this module's parameters and buffers.

        With `strict=True` (the default) missing and unexpected keys are errors; a shape
        mismatch is always an error. Returns (missing_keys, unexpected_keys)."""
        if not hasattr(state_dict, "keys"):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        own = self.state_dict(keep_vars=True)
        extra = self._extra_state_modules()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        if strict:  # PyTorch lists missing keys first, then unexpected ones
            if missing:
                errors.append("Missing key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in missing) + ". ")
            if unexpected:
                errors.append("Unexpected key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in unexpected) + ". ")
        pending = []
        for k, target in own.items():
            if k not in state_dict or k in extra:
                continue
            src = state_dict[k]
            if not isinstance(src, Tensor):
                try:
                    from aotgrad.runtime.factories import tensor
                    src = tensor(src)
                except Exception:
                    errors.append(f'While copying the parameter named "{k}", expected '
                                  f'aotgrad.Tensor or Tensor-like object from checkpoint but '
                                  f'received {type(src)}')
                    continue
            if tuple(src.shape) != tuple(target.shape):
                errors.append(f"size mismatch for {k}: copying a param with shape "
                              f"{src.shape} from checkpoint, the shape in current model is "
                              f"{target.shape}.")
                continue
            pending.append((k, target, src))
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                               + "\n\t".join(errors))
        for k, m in extra.items():
            if k in state_dict:
                m.set_extra_state(state_dict[k])
        with no_grad():
            for k, target, src in pending:
                if assign:
                    mod_path, _, name = k.rpartition(".")
                    mod = self.get_submodule(mod_path)
                    if name in mod._parameters:
                        setattr(mod, name, src if isinstance(src, Parameter) else
                                Parameter(src, target.requires_grad))
                    else:
                        mod._buffers[name] = src
                else:
                    target.copy_(src.detach())
        return _IncompatibleKeys(missing, unexpected)

    # ---- printing --------------------------------------------------------------------------
    def extra_repr(self):
        """Override to add a one-line description inside `Name(...)`."""
        return ""

    def _get_name(self):
        return type(self).__name__

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({name}): " + repr(m).replace("\n", "\n  ")
                       for name, m in self._modules.items()]
        lines = extra_lines + child_lines
        if not lines:
            return f"{self._get_name()}()"
        if len(extra_lines) == 1 and not child_lines:
            return f"{self._get_name()}({extra_lines[0]})"
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


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


__all__ = ["Module", "register_module_full_backward_hook",
           "register_module_full_backward_pre_hook"]
