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
import warnings
from collections import OrderedDict

from aotgrad.ir import dtypes as dt
from aotgrad.nn.parameter import Parameter
from aotgrad.runtime import device as _device
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.tensor import Tensor
from aotgrad.nn.module_hooks import (_call_with_backward_hooks, _DictHandle,
                                     _global_backward_hooks, _global_backward_pre_hooks,
                                     _hook_ids, register_module_full_backward_hook,
                                     register_module_full_backward_pre_hook)
from aotgrad.nn.module_state import StateDictMixin


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


class Module(StateDictMixin):
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

    # ---- extra state (state_dict and load_state_dict: module_state.StateDictMixin) -------
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


__all__ = ["Module", "register_module_full_backward_hook",
           "register_module_full_backward_pre_hook"]
