"""Dropout: active in training mode, the identity after `eval()`.

>>> d = nn.Dropout(0.5).eval()
>>> d(aotgrad.ones(3))
tensor([1., 1., 1.])
"""
from aotgrad.nn import functional as F
from aotgrad.nn.module import Module


class Dropout(Module):
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zero whole channels of (N, C, L) or (C, L) with probability p (training only)."""

    def forward(self, input):
        return F.dropout1d(input, self.p, self.training, self.inplace)


class Dropout2d(Dropout):
    """Zero whole channels of (N, C, H, W) with probability p (training only)."""

    def forward(self, input):
        return F.dropout2d(input, self.p, self.training, self.inplace)
