"""Module's state dict: saving parameters, persistent buffers and extra state by qualified
name, and loading them back (strict key checks, shape checks, `assign`)."""
from collections import OrderedDict, namedtuple

from aotgrad.nn.parameter import Parameter
from aotgrad.runtime.factories import tensor
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.tensor import Tensor


_EXTRA_STATE_KEY = "_extra_state"


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()

    __str__ = __repr__


class StateDictMixin:
    """Module's state_dict/load_state_dict (Module inherits them; they use its traversal)."""

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
