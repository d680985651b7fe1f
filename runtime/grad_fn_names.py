"""The names of autograd nodes (`grad_fn.name()`), as PyTorch's: one table and one function.

A prim's node is named after the prim (`exp` -> `ExpBackward0`) unless `PRIM_NODE_NAMES`
says otherwise (the prim implements a PyTorch op of another name: `reduce_sum` -> `Sum`).
An op whose PyTorch node name is not its prim's, or depends on its arguments
(`sum()` -> SumBackward0, `sum(dim)` -> SumBackward1), names its result's node with `named`,
or through `op_base.op(name, grad_name)`, which calls it.
"""

# prim -> PyTorch's grad_fn name (without "Backward0") for the op it implements
PRIM_NODE_NAMES = {
    "logistic": "Sigmoid", "reduce_sum": "Sum", "reduce_max": "Amax", "reduce_min": "Amin",
    "reduce_prod": "Prod", "dot_general": "Mm", "broadcast_in_dim": "Expand",
    "reshape": "View", "transpose": "Permute", "convert_element_type": "ToCopy",
    "concatenate": "Cat", "rev": "Flip", "pad": "ConstantPadNd", "atan2": "Atan2",
    "scatter_add": "ScatterAdd", "logical_not": "LogicalNot"}


def prim_node_name(prim):
    """The grad_fn name of prim `prim`'s node (`exp` -> ExpBackward0)."""
    base = PRIM_NODE_NAMES.get(prim, "".join(w.capitalize() for w in prim.split("_")))
    return base + "Backward0"


def named(out, grad_name):
    """Give `out`'s node (if it has one) PyTorch's name for the op that made it; returns out."""
    if out.grad_fn is not None:
        out.grad_fn._name = grad_name
    return out
