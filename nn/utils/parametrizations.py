"""Parametrizations built on `nn.utils.parametrize` (PyTorch's
`nn.utils.parametrizations`): weight_norm.

>>> m = nn.utils.parametrizations.weight_norm(nn.Linear(4, 3))
>>> sorted(m.state_dict())
['bias', 'parametrizations.weight.original0', 'parametrizations.weight.original1']
"""
from aotgrad.nn.module import Module
from aotgrad.nn.utils import parametrize
from aotgrad.nn.utils.weight_norm import _weight_norm, norm_except_dim


class _WeightNorm(Module):
    def __init__(self, dim=0):
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g, weight_v):
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module, name="weight", dim=0):
    """`module.<name>` = g * v / ||v||, with g stored as original0 and v as original1."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module
