"""Scaled sums with a product: addmm, addmv, addr, addbmm, baddbmm (beta * input + alpha *
product), addcmul, addcdiv (input + value * t1 op t2) and lerp.

As in PyTorch, beta == 0 ignores `input` (NaN and inf in it do not propagate), and the
matrix forms need one dtype for all their operands.

>>> import aotgrad
>>> from aotgrad.runtime import addmm_ops
>>> addmm_ops.addmm(aotgrad.ones(2), aotgrad.ones(2, 3), aotgrad.ones(3, 2), alpha=2).tolist()
[[7.0, 7.0], [7.0, 7.0]]
"""
from aotgrad.runtime import eager_kernels
from aotgrad.runtime import tprims as tp
from aotgrad.runtime.elementwise_ops import abs, add, div, lt, mul, sub, where
from aotgrad.runtime.linalg_ops import _check_matmul, matmul, outer
from aotgrad.runtime.op_base import _named, as_tensor_like, op
from aotgrad.runtime.tensor import Tensor
from aotgrad.runtime.composite import composite
from aotgrad.runtime.view_ops import expanded_shape
from aotgrad.runtime.sizes import hint, size_list


def _check_dims(name, **tensors):
    for what, (t, nd) in tensors.items():
        if t.ndim != nd:
            raise RuntimeError(f"{name}: {what} must be a {nd}-D tensor, got {t.ndim}-D with "
                               f"shape {size_list(t.shape)}")


def _check_dtypes(name, *tensors):
    d = tensors[0].dtype
    for t in tensors[1:]:
        if t.dtype is not d:
            raise RuntimeError(f"{name}: expected all operands to have the same dtype, got "
                               f"{d.name} and {t.dtype.name}")


def _scaled_sum(name, inp, prod, beta, alpha):
    """beta * inp + alpha * prod, with inp broadcast to prod's shape (inp ignored when beta
    is 0)."""
    inp = as_tensor_like(inp, prod.dtype)
    expanded_shape(inp, tuple(prod.shape))  # PyTorch's message: the input is expanded
    if alpha != 1:
        prod = mul(prod, alpha)
    if beta == 0:
        return prod
    return add(inp if beta == 1 else mul(inp, beta), prod)


@op("addmm", "AddmmBackward0")
@composite("AddmmBackward0", ("input", "mat1", "mat2"))
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """beta * input + alpha * (mat1 @ mat2)."""
    _check_dims("addmm", mat1=(mat1, 2), mat2=(mat2, 2))
    _check_dtypes("addmm", *(t for t in (input, mat1, mat2) if isinstance(t, Tensor)))
    if beta == 1 and alpha == 1 and isinstance(input, Tensor):
        _check_matmul(mat1, mat2)  # the eager kernel would raise numpy's message instead
        out = eager_kernels.run(eager_kernels.ADDMM, (input, mat1, mat2), _addmm_prims)
        if out is not None:
            return out
    return _addmm_prims(input, mat1, mat2, beta=beta, alpha=alpha)


def _addmm_prims(input, mat1, mat2, *, beta=1, alpha=1):
    """addmm as tensor ops (the reference of the eager kernel, and what a trace records)."""
    return _scaled_sum("addmm", input, matmul(mat1, mat2), beta, alpha)


@op("addmv", "AddmvBackward0")
@composite("AddmvBackward0", ("input", "mat", "vec"))
def addmv(input, mat, vec, *, beta=1, alpha=1):
    """beta * input + alpha * (mat @ vec)."""
    _check_dims("addmv", mat=(mat, 2), vec=(vec, 1))
    _check_dtypes("addmv", *(t for t in (input, mat, vec) if isinstance(t, Tensor)))
    return _scaled_sum("addmv", input, matmul(mat, vec), beta, alpha)


@op("addr", "AddrBackward0")
@composite("AddrBackward0", ("input", "vec1", "vec2"))
def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """beta * input + alpha * outer(vec1, vec2)."""
    _check_dims("addr", vec1=(vec1, 1), vec2=(vec2, 1))
    _check_dtypes("addr", *(t for t in (input, vec1, vec2) if isinstance(t, Tensor)))
    return _scaled_sum("addr", input, outer(vec1, vec2), beta, alpha)


@op("baddbmm", "BaddbmmBackward0")
@composite("BaddbmmBackward0", ("input", "batch1", "batch2"))
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta * input + alpha * (batch1 @ batch2), per batch."""
    _check_dims("baddbmm", batch1=(batch1, 3), batch2=(batch2, 3))
    _check_dtypes("baddbmm", *(t for t in (input, batch1, batch2) if isinstance(t, Tensor)))
    if batch1.shape[0] != batch2.shape[0]:
        raise RuntimeError(f"baddbmm: batch1 and batch2 must have the same number of "
                           f"matrices, got {hint(batch1.shape[0])} and {hint(batch2.shape[0])}")
    return _scaled_sum("baddbmm", input, matmul(batch1, batch2), beta, alpha)


@op("addbmm", "AddbmmBackward0")
@composite("AddbmmBackward0", ("input", "batch1", "batch2"))
def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """beta * input + alpha * sum_b (batch1[b] @ batch2[b]): one contraction over the
    batch and inner dims."""
    _check_dims("addbmm", batch1=(batch1, 3), batch2=(batch2, 3))
    _check_dtypes("addbmm", *(t for t in (input, batch1, batch2) if isinstance(t, Tensor)))
    if batch1.shape[0] != batch2.shape[0] or batch1.shape[2] != batch2.shape[1]:
        raise RuntimeError(f"addbmm: batch1 {size_list(batch1.shape)} and batch2 "
                           f"{size_list(batch2.shape)} cannot be multiplied")
    prod = tp.dot_general(batch1, batch2, contract=((0, 2), (0, 1)))
    return _scaled_sum("addbmm", input, prod, beta, alpha)


@op("addcmul", "AddcmulBackward0")
@composite("AddcmulBackward0", ("input", "tensor1", "tensor2"))
def addcmul(input, tensor1, tensor2, *, value=1):
    """input + value * tensor1 * tensor2 (types promoted across all three)."""
    p = mul(tensor1, tensor2)
    return add(input, p if value == 1 else mul(p, value))


@op("addcdiv", "AddcdivBackward0")
@composite("AddcdivBackward0", ("input", "tensor1", "tensor2"))
def addcdiv(input, tensor1, tensor2, *, value=1):
    """input + value * tensor1 / tensor2; integer tensor1 and tensor2 are refused (PyTorch
    no longer supports their integer division here)."""
    ints = [t for t in (tensor1, tensor2) if isinstance(t, Tensor) and
            not t.dtype.is_floating_point]
    if len(ints) == 2:
        raise RuntimeError("addcdiv: integer division of tensor1 and tensor2 is not "
                           "supported; use input + value * tensor1 / tensor2 for a true "
                           "division, or trunc it for the historic integer one")
    q = div(tensor1 if value == 1 else mul(tensor1, value), tensor2)
    return add(input, q)


@op("lerp")
def lerp(input, end, weight):
    """input + weight * (end - input), computed as end - (end - input) * (1 - weight) where
    |weight| >= 0.5 (PyTorch's form, exact at weight == 1). grad_fn: LerpBackward0 for a
    number weight, LerpBackward1 for a tensor weight."""
    if isinstance(end, Tensor) and end.dtype is not input.dtype:
        raise RuntimeError(f"lerp: expected dtype {input.dtype.name} for `end` but got dtype "
                           f"{end.dtype.name}")
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"lerp: expected floating-point tensors, got {input.dtype.name}")
    diff = sub(end, input)
    if not isinstance(weight, Tensor):
        out = add(input, mul(diff, weight)) if _abs_number(weight) < 0.5 else \
            sub(end, mul(diff, 1 - weight))
        name = "LerpBackward0"
    else:
        small = lt(abs(weight), 0.5)
        out = where(small, add(input, mul(weight, diff)),
                    sub(end, mul(diff, sub(1, weight))))
        name = "LerpBackward1"
    return _named(out, name)


def _abs_number(v):
    return v if v >= 0 else -v

