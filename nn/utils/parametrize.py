"""Parametrizations (PyTorch's `nn.utils.parametrize`): `module.<name>` becomes a property
computed by a chain of modules from the stored originals, which live in
`module.parametrizations[name].original` (or `original0`, `original1`, ... when the first
parametrization's right_inverse returns several tensors), so state_dict keys read
`parametrizations.weight.original0` as in PyTorch.

>>> class Symmetric(nn.Module):
...     def forward(self, x): return x.triu() + x.triu(1).mT
>>> m = register_parametrization(nn.Linear(3, 3), "weight", Symmetric())
>>> bool((m.weight == m.weight.T).all())
True
"""
from contextlib import contextmanager

from aotgrad.nn.container import ModuleDict, ModuleList
from aotgrad.nn.module import Module
from aotgrad.nn.parameter import Parameter
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.tensor import Tensor


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order, and its originals."""

    def __init__(self, modules, original, unsafe=False):
        if len(modules) == 0:
            raise ValueError("ParametrizationList requires one or more modules.")
        super().__init__(modules)
        self.unsafe = unsafe
        new = original
        with no_grad():
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    new = module.right_inverse(new)
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        grad = original.requires_grad
        if self.is_tensor:
            value = original if new is original else new.detach()
            self.original = value if isinstance(value, Parameter) else \
                Parameter(value, requires_grad=grad)
        else:
            for i, t in enumerate(new):
                self.register_parameter(f"original{i}",
                                        Parameter(t.detach(), requires_grad=grad))

    def right_inverse(self, value):
        """Store `value` (what the parametrized tensor should become) in the originals."""
        with no_grad():
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    value = module.right_inverse(value)
            if self.is_tensor:
                self.original.copy_(value)
            else:
                for i, t in enumerate(value):
                    getattr(self, f"original{i}").copy_(t)

    def forward(self):
        if self.is_tensor:
            x = self[0](self.original)
        else:
            x = self[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for module in list(self)[1:]:
            x = module(x)
        return x


def _inject_new_class(module):
    cls = module.__class__
    module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), {})


def _inject_property(module, tensor_name):
    def get_parametrized(self):
        return self.parametrizations[tensor_name]()

    def set_original(self, value):
        self.parametrizations[tensor_name].right_inverse(value)

    setattr(module.__class__, tensor_name, property(get_parametrized, set_original))


def is_parametrized(module, tensor_name=None):
    parametrizations = module.__dict__.get("_modules", {}).get("parametrizations")
    if parametrizations is None or not isinstance(parametrizations, ModuleDict):
        return False
    return len(parametrizations) > 0 if tensor_name is None else \
        tensor_name in parametrizations


def register_parametrization(module, tensor_name, parametrization, *, unsafe=False):
    """Make `module.<tensor_name>` the output of `parametrization` applied to the stored
    original (a parameter or buffer of the module). Returns the module."""
    if not isinstance(parametrization, Module):
        raise TypeError(f"parametrization must be an nn.Module, got "
                        f"{type(parametrization).__name__}")
    if is_parametrized(module, tensor_name):
        module.parametrizations[tensor_name].append(parametrization)
        return module
    if tensor_name not in module._parameters and tensor_name not in module._buffers:
        raise ValueError(f"Module '{module}' does not have a parameter, a buffer, or a "
                         f"parametrized element with name '{tensor_name}'")
    original = getattr(module, tensor_name)
    parametrizations = ParametrizationList([parametrization], original, unsafe=unsafe)
    delattr(module, tensor_name)
    if not is_parametrized(module):
        _inject_new_class(module)
        module.parametrizations = ModuleDict()
    _inject_property(module, tensor_name)
    module.parametrizations[tensor_name] = parametrizations
    return module


def remove_parametrizations(module, tensor_name, leave_parametrized=True):
    """Undo register_parametrization: `tensor_name` becomes a plain Parameter again, holding
    the parametrized value (leave_parametrized=True) or the original."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    plist = module.parametrizations[tensor_name]
    if leave_parametrized:
        with no_grad():
            value = getattr(module, tensor_name).detach()
    elif plist.is_tensor:
        value = plist.original.detach()
    else:
        raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor "
                         "that is parametrized in terms of a sequence of tensors.")
    delattr(module.__class__, tensor_name)
    del module.parametrizations[tensor_name]
    module.register_parameter(tensor_name, Parameter(value))
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = module.__class__.__bases__[0]
    return module


@contextmanager
def cached():
    """Accepted for PyTorch compatibility; parametrized tensors are recomputed on access."""
    yield
