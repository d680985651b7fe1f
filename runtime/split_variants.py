"""split_with_sizes and the unsafe splits (unsafe_split, unsafe_chunk, unsafe_split_with_sizes).

The unsafe splits return the same pieces as split/chunk, sharing memory with the input, but
not as autograd views: each piece has its own version counter and may be modified in place
(split's outputs may not, where autograd is involved: they share one node), as in PyTorch.
Their node is `UnsafeSplitBackward0` / `UnsafeSplitWithSizesBackward0`.

>>> import aotgrad
>>> a, b = aotgrad.arange(4.).unsafe_split(2)
>>> a._is_view(), b.tolist()
(False, [2.0, 3.0])
"""
from aotgrad.runtime.grad_fn_names import named
from aotgrad.runtime.join_ops import chunk, split
from aotgrad.runtime.version_counter import VersionCounter


def split_with_sizes(input, split_sizes, dim=0):
    """split at the given sizes (which must add up to the size of `dim`)."""
    return split(input, list(split_sizes), dim)


def _not_views(pieces, node_name):
    """The pieces of a split, made plain tensors (own version counter, no base) sharing the
    input's memory."""
    for p in pieces:
        base = p._base
        if base is not None:
            views = base.__dict__.get("_views")
            if views is not None:
                views.pop(id(p), None)
            for k in ("_base", "_view_made", "_creation_meta"):
                p.__dict__.pop(k, None)
        p._version_counter = VersionCounter()
        named(p, node_name)
    return pieces


def unsafe_split(tensor, split_size, dim=0):
    return _not_views(split(tensor, int(split_size), dim), "UnsafeSplitBackward0")


def unsafe_chunk(input, chunks, dim=0):
    return _not_views(chunk(input, chunks, dim), "UnsafeSplitBackward0")


def unsafe_split_with_sizes(input, split_sizes, dim=0):
    return _not_views(split(input, list(split_sizes), dim), "UnsafeSplitWithSizesBackward0")


METHODS = {"split_with_sizes": split_with_sizes, "unsafe_split": unsafe_split,
           "unsafe_chunk": unsafe_chunk, "unsafe_split_with_sizes": unsafe_split_with_sizes}
