"""The names of autograd nodes (`grad_fn.name()`), as PyTorch's: one table and one function.

A prim's node is named after the prim (`exp` -> `ExpBackward0`) unless `PRIM_NODE_NAMES`
says otherwise (the prim implements a PyTorch op of another name: `reduce_sum` -> `Sum`).
An op whose PyTorch node name is not its prim's, or depends on its arguments
(`sum()` -> SumBackward0, `sum(dim)` -> SumBackward1), names its result's node with `named`,
or through `op_base.op(name, grad_name)`, which calls it.
"""

from aotgrad.ir import prims as P

# Prim -> PyTorch's grad_fn name (without "Backward0") for the op it implements
PRIM_NODE_NAMES = {
    P.logistic: "Sigmoid", P.reduce_sum: "Sum", P.reduce_max: "Amax", P.reduce_min: "Amin",
    P.reduce_prod: "Prod", P.dot_general: "Mm", P.broadcast_in_dim: "Expand",
    P.reshape: "View", P.transpose: "Permute", P.convert_element_type: "ToCopy",
    P.concatenate: "Cat", P.rev: "Flip", P.pad: "ConstantPadNd", P.atan2: "Atan2",
    P.scatter_add: "ScatterAdd", P.logical_not: "LogicalNot"}


def prim_node_name(prim):
    """The grad_fn name of the node of Prim `prim` (prims.exp -> ExpBackward0)."""
    base = PRIM_NODE_NAMES.get(prim) or "".join(w.capitalize() for w in prim.name.split("_"))
    return base + "Backward0"


def named(out, grad_name):
    """Give `out`'s node (if it has one) PyTorch's name for the op that made it; returns out."""
    if out.grad_fn is not None:
        out.grad_fn._name = grad_name
    return out
