"""Weight normalisation as a forward pre-hook (PyTorch's `nn.utils.weight_norm`): the
parameter `name` is replaced by `name_g` (its norm) and `name_v` (its direction), and
recomputed as v * (g / ||v||) before every forward.

>>> m = nn.utils.weight_norm(nn.Linear(4, 3))
>>> sorted(m.state_dict())
['bias', 'weight_g', 'weight_v']
"""
from aotgrad.nn.parameter import Parameter
from aotgrad.runtime import ops


def norm_except_dim(v, pow=2, dim=0):
    """The `pow`-norm of v over every dim but `dim`, shaped to broadcast against v (a 0-d
    norm over all of v when dim is -1, as in PyTorch)."""
    if dim == -1:
        return ops.norm(v, pow)
    dim = dim % v.ndim
    others = tuple(d for d in range(v.ndim) if d != dim)
    return ops.norm(v, pow, others, keepdim=True)


def _weight_norm(v, g, dim=0):
    return ops.mul(v, ops.div(g, norm_except_dim(v, 2, dim)))


class WeightNorm:
    def __init__(self, name, dim):
        self.name, self.dim = name, -1 if dim is None else dim

    def compute_weight(self, module):
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return _weight_norm(v, g, self.dim)

    @staticmethod
    def apply(module, name, dim):
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError(f"Cannot register two weight_norm hooks on the same "
                                   f"parameter {name}")
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        del module._parameters[name]
        module.register_parameter(name + "_g",
                                  Parameter(norm_except_dim(weight, 2, fn.dim).detach()))
        module.register_parameter(name + "_v", Parameter(weight.detach()))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module):
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.detach()))

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module, name="weight", dim=0):
    """Reparametrise `module.<name>` as g * v / ||v|| (norm over all dims but `dim`; over
    everything when dim is None). Returns the module."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module, name="weight"):
    """Undo weight_norm: `name` becomes one Parameter again, with the current value."""
    for k, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, WeightNorm) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"weight_norm of '{name}' not found in {module}")
