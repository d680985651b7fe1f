"""`aotgrad.sparse`: PyTorch's sparse functions on sparse COO tensors with dense storage (see
aotgrad.runtime.sparse_ops for what that means for memory, results and gradients)."""
from aotgrad.runtime.sparse_ops import DoubleTensor, FloatTensor, LongTensor, mm, spmm
from aotgrad.runtime.sparse_ops import sparse_log_softmax as log_softmax
from aotgrad.runtime.sparse_ops import sparse_softmax as softmax
from aotgrad.runtime.sparse_ops import sparse_sum as sum  # noqa: A001


def addmm(mat, mat1, mat2, *, beta=1.0, alpha=1.0):
    """`beta * mat + alpha * (mat1 @ mat2)` for a sparse `mat1` (PyTorch's sparse.addmm)."""
    from aotgrad.runtime import ops
    from aotgrad.runtime.sparse_ops import to_dense
    return ops.add(ops.mul(to_dense(mat), beta), ops.mul(mm(mat1, mat2), alpha))


__all__ = ["mm", "spmm", "sum", "addmm", "softmax", "log_softmax", "FloatTensor",
           "DoubleTensor", "LongTensor"]
