"""The `torch.*` spellings of functional ops (`torch.conv2d`, `torch.layer_norm`,
`torch.embedding`, ...), with PyTorch's torch-level signatures, which differ from
`nn.functional`'s in places (`torch.embedding(weight, indices)`, `torch.dropout(input, p,
train)`, trailing cudnn flags), and cosine_similarity, pairwise_distance and pdist.

>>> import aotgrad
>>> aotgrad.cosine_similarity(aotgrad.tensor([[1., 0.]]), aotgrad.tensor([[1., 1.]])).shape
aotgrad.Size([1])
"""
from aotgrad.nn import functional as F
from aotgrad.nn import functional_conv as Fc
from aotgrad.nn import functional_layers as Fl
from aotgrad.runtime import elementwise_ops as ew
from aotgrad.runtime import reduction_ops as red
from aotgrad.runtime import shape_ops as so
from aotgrad.runtime.op_base import op

conv1d = Fc.conv1d
conv2d = Fc.conv2d


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    return F.layer_norm(input, normalized_shape, weight, bias, eps)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5, cudnn_enabled=True):
    return Fl.group_norm(input, num_groups, weight, bias, eps)


def batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps,
               cudnn_enabled=True):
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum,
                        eps)


def embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return F.embedding(indices, weight, None if padding_idx == -1 else padding_idx)


def dropout(input, p, train):
    return F.dropout(input, p, train)


@op("cosine_similarity")
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """x1 . x2 / max(|x1| |x2|, eps) along dim (inputs broadcast)."""
    x1, x2 = so.broadcast_tensors(x1, x2)
    dot = red.sum(ew.mul(x1, x2), dim)
    n1 = ew.sqrt(red.sum(ew.mul(x1, x1), dim))
    n2 = ew.sqrt(red.sum(ew.mul(x2, x2), dim))
    return ew.div(dot, ew.clamp(ew.mul(n1, n2), min=eps))


@op("pairwise_distance")
def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """p-norm of x1 - x2 + eps along the last dim."""
    d = ew.add(ew.sub(x1, x2), eps)
    return red.norm(d, p, -1, keepdim)


@op("pdist")
def pdist(input, p=2.0):
    """p-norm distances between the rows of a 2-D tensor, the upper triangle as one row."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    n = input.shape[0]
    rows = [so.reshape(red.norm(ew.sub(so.narrow(input, 0, i + 1, n - i - 1),
                                       so.narrow(input, 0, i, 1)), p, -1), -1)
            for i in range(n - 1)]
    if not rows:
        return so.reshape(red.sum(input, 1)[:0], 0)
    return so.cat(rows, 0)


NAMES = ("conv1d conv2d layer_norm group_norm batch_norm embedding dropout cosine_similarity "
         "pairwise_distance pdist").split()
