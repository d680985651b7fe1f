"""aotgrad.export: ahead-of-time artefacts that run without aotgrad, and ONNX.

    ep = aotgrad.export(model, x)               # ExportedProgram (also aotgrad.export.export)
    print(ep)                                   # named inputs (fc1.weight, ...) and the graph
    ep.save("pkg")                              # pkg/run.py: run(*numpy arrays), numpy + numba
    ep.to_onnx("model.onnx")                    # parameters and buffers as initializers
    f = aotgrad.load_exported("pkg")            # the saved package as a callable

`train=True` exports the loss and the gradients of the parameters (and of the inputs that
require grad) as one program. Shapes are static: the package refuses inputs of other shapes
with an error naming the input.
"""
import re
import sys
import types

from aotgrad.export.program import ExportError, ExportedProgram, Input, InputKind


def export(fn_or_module, *example_args, dynamic_dims=None, train=False):
    """Capture `fn_or_module(*example_args)` as an ExportedProgram (cf. torch.export.export).

    The graph takes the example arguments' shapes and dtypes; parameters and buffers of a
    module become named inputs (`fc1.weight`) holding their current values. With
    train=True the function must return a scalar loss: the program returns the loss and the
    gradient of every parameter (and input) that requires grad.
    `dynamic_dims` (shape-generic programs) is not implemented yet."""
    if dynamic_dims is not None:
        raise NotImplementedError(
            "aotgrad.export: dynamic_dims is not supported yet: exported programs have static "
            "shapes (shape-generic programs do not exist in aotgrad yet); export once per "
            "input shape")
    from aotgrad.export.stages import capture
    from aotgrad.runtime.tensor import Tensor
    import numpy as np
    args = []
    for i, a in enumerate(example_args):
        if isinstance(a, np.ndarray):
            a = Tensor._make(np.ascontiguousarray(a), False)
        if not isinstance(a, Tensor):
            raise TypeError(f"aotgrad.export: example argument {i} is a "
                            f"{type(a).__name__}; pass tensors (or numpy arrays) only: bind "
                            f"other arguments with functools.partial")
        args.append(a)
    cap = capture(fn_or_module, args, train)
    name = re.sub(r"\W", "_", getattr(fn_or_module, "__name__", type(fn_or_module).__name__))
    return ExportedProgram(cap.graph, cap.inputs, cap.output_names, cap.single_output, train,
                           name)


def load_exported(directory):
    """A package written by ExportedProgram.save as a callable: numpy arrays (or tensors) in,
    numpy arrays out, exactly as the package's `run.py` (which it runs)."""
    from aotgrad.export.load import load_exported as _load
    return _load(directory)


class _CallableModule(types.ModuleType):
    """`aotgrad.export(...)` calls export() while `aotgrad.export.ExportedProgram` and the
    submodules stay reachable (the package and the function share PyTorch's name)."""

    def __call__(self, *args, **kwargs):
        return export(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["export", "load_exported", "ExportedProgram", "ExportError", "Input", "InputKind"]
