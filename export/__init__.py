"""aotgrad.export: ahead-of-time artefacts that run without aotgrad, and ONNX.

    ep = aotgrad.export(model, x)               # ExportedProgram (also aotgrad.export.export)
    print(ep)                                   # named inputs (fc1.weight, ...) and the graph
    ep.save("pkg")                              # pkg/run.py: run(*numpy arrays), numpy + numba
    ep.to_onnx("model.onnx")                    # parameters and buffers as initializers
    f = aotgrad.load_exported("pkg")            # the saved package as a callable

`train=True` exports the loss and the gradients of the parameters (and of the inputs that
require grad) as one program. Shapes are static unless `dynamic_dims` names dims to keep
symbolic (`f32[s0,784]`): the package then serves every size of those dims that satisfies the
relations the program relies on (its guards), and refuses others with an error naming the
input, the dim and the relation.
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

    `dynamic_dims`: the dims of the example arguments traced as symbols (as
    compile(dynamic=True) does): a dict {argument index or name: dim or list of dims}, or a
    sequence with one entry (None, a dim or a list of dims) per example argument; a dict
    {dim: name} in place of the dims names them (the ONNX dim_param, as torch.onnx's
    dynamic_axes), else the symbol's name (`s0`) is used. A dim the
    program needs as a number (a reshape factor, a size matched against a parameter's) is
    pinned by a guard; sizes 0 and 1 are never symbolic."""
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
    symbolic_dims, labels = _symbolic_dims(fn_or_module, args, dynamic_dims)
    cap = capture(fn_or_module, args, train, symbolic_dims)
    name = re.sub(r"\W", "_", getattr(fn_or_module, "__name__", type(fn_or_module).__name__))
    return ExportedProgram(cap.graph, cap.inputs, cap.output_names, cap.single_output, train,
                           name, cap.shape_env, cap.symbol_dims,
                           {s: labels[(i, d)] for i, d, s in cap.symbol_dims if (i, d) in labels})


def _symbolic_dims(fn, args, dynamic_dims):
    """dynamic_dims as {argument index: sorted dims of size >= 2}, and {(argument index,
    dim): name} of the dims given names; with clear errors."""
    if not dynamic_dims:
        return {}, {}
    if isinstance(dynamic_dims, dict):
        items = list(dynamic_dims.items())
        if any(isinstance(k, str) for k, _ in items):
            from aotgrad.export.stages import _unwrap
            from aotgrad.tracer.arg_names import leaf_names
            f = _unwrap(fn)
            names = leaf_names(f.forward if hasattr(f, "named_parameters") else f,
                               tuple(args), {})
            index = {n: i for i, n in enumerate(names)}
            for k, _ in items:
                if isinstance(k, str) and k not in index:
                    raise ValueError(f"aotgrad.export: dynamic_dims names {k!r}, which is not "
                                     f"an argument (arguments: {', '.join(names)})")
            items = [(index[k] if isinstance(k, str) else k, d) for k, d in items]
    elif isinstance(dynamic_dims, (list, tuple)):
        if len(dynamic_dims) != len(args):
            raise ValueError(f"aotgrad.export: dynamic_dims has {len(dynamic_dims)} entries "
                             f"for {len(args)} example arguments")
        items = list(enumerate(dynamic_dims))
    else:
        raise TypeError(f"aotgrad.export: dynamic_dims must be a dict or a sequence, got "
                        f"{type(dynamic_dims).__name__}")
    out, labels = {}, {}
    for i, dims in items:
        if not isinstance(i, int) or not 0 <= i < len(args):
            raise ValueError(f"aotgrad.export: dynamic_dims refers to argument {i!r}; there "
                             f"are {len(args)} example arguments")
        if dims is None:
            continue
        shape = tuple(args[i].shape)
        if isinstance(dims, str) or not isinstance(dims, (int, list, tuple, dict)):
            raise TypeError(f"aotgrad.export: dynamic_dims for argument {i} is {dims!r}; give a "
                            f"dim, a list of dims, or {{dim: name}} (the name labels the "
                            f"ONNX dim_param)")
        if isinstance(dims, dict):
            for d, label in dims.items():
                if isinstance(label, str) and isinstance(d, int) and -len(shape) <= d < len(shape):
                    labels[(i, d % len(shape))] = label
        for d in ([dims] if isinstance(dims, int) else list(dims)):
            if not isinstance(d, int) or isinstance(d, bool) or not -len(shape) <= d < len(shape):
                raise IndexError(f"aotgrad.export: dynamic_dims: dim {d!r} out of range for "
                                 f"argument {i} of shape {shape}")
            d %= len(shape)
            if shape[d] < 2:
                raise ValueError(f"aotgrad.export: dynamic_dims: dim {d} of argument {i} has "
                                 f"size {shape[d]} in the example; sizes 0 and 1 are "
                                 f"specialised, never symbolic: give an example of size >= 2")
            out.setdefault(i, set()).add(d)
    return {i: tuple(sorted(d)) for i, d in out.items()}, labels


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
