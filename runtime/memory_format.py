"""Memory formats and layouts, PyTorch's names: `aotgrad.contiguous_format`,
`preserve_format`, `channels_last`, `channels_last_3d` (accepted by `contiguous`, `clone`,
`to`, `empty_like`, ...) and the layouts `aotgrad.strided` and `aotgrad.sparse_coo`.

aotgrad's eager buffers are numpy arrays in C order, and compiled programs assume it, so a
channels-last request is validated (rank 4, or 5 for `channels_last_3d`, as PyTorch
checks) and the tensor keeps its C-order layout: values and results are the same, only
`stride()` differs from PyTorch's.
"""


class memory_format:  # noqa: N801  (torch.memory_format's spelling)
    __slots__ = ("name", "rank")

    def __init__(self, name, rank=None):
        self.name, self.rank = name, rank

    def __repr__(self):
        return f"aotgrad.{self.name}"

    def __reduce__(self):
        return self.name


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last", 4)
channels_last_3d = memory_format("channels_last_3d", 5)


def check(t, fmt, what):
    """Validate a `memory_format=` argument of `what` for tensor `t`."""
    if fmt is None:
        return
    if not isinstance(fmt, memory_format):
        raise TypeError(f"{what}: memory_format must be an aotgrad memory format (e.g. "
                        f"aotgrad.contiguous_format), got {type(fmt).__name__}")
    if fmt.rank is not None and t.ndim != fmt.rank:
        raise RuntimeError(f"required rank {fmt.rank} tensor to use {fmt.name} format")


class layout:  # noqa: N801  (torch.layout's spelling)
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"aotgrad.{self.name}"

    def __reduce__(self):
        return self.name


strided = layout("strided")
sparse_coo = layout("sparse_coo")
