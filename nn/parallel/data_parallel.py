"""`nn.DataParallel` and `nn.parallel.data_parallel`, as PyTorch has them on a machine
without accelerators: there is one device (the CPU), so the wrapped module runs as it is,
once, on the whole batch. Code written for `DataParallel` runs unchanged; its state dict
keys carry the `module.` prefix as in PyTorch. (Data parallelism across processes is
`DistributedDataParallel`.)"""
from aotgrad.nn.module import Module


class DataParallel(Module):
    """Wrap `module`; calling the wrapper calls the module (device_ids, output_device and
    dim are kept for code that reads them: with no accelerator there is nothing to split)."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        self.module = module
        self.device_ids = []
        self.output_device = None
        self.src_device_obj = None
        self.dim = dim

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0,
                  module_kwargs=None):
    """`module(*inputs, **module_kwargs)`: the functional form of DataParallel."""
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    return module(*inputs, **(module_kwargs or {}))
