"""aotgrad.onnx: PyTorch's `torch.onnx.export` for aotgrad models, built on
`aotgrad.export(...).to_onnx(...)`. (This module is registered under that name by aotgrad's
__init__: a folder named `onnx` at the package root would shadow the onnx package wherever
the checkout's root is on sys.path, as with `python -m pytest` run there.) Needs the onnx
package (`pip install -e ".[export]"`).

    aotgrad.onnx.export(model, (x,), "model.onnx", input_names=["x"], output_names=["logits"])

Shapes are the example arguments' except the dims `dynamic_axes` names, which the ONNX graph
takes as dim_params.
"""

import enum


class TrainingMode(enum.IntEnum):
    """torch.onnx.TrainingMode: the module mode the graph is exported in."""
    EVAL = 0
    PRESERVE = 1
    TRAINING = 2


def export(model, args, f, export_params=True, verbose=False, training=None,
           input_names=None, output_names=None, opset_version=None, dynamic_axes=None,
           do_constant_folding=True, **kwargs):
    """Export `model(*args)` to the ONNX file `f` (a path or a binary file object).

    `args`: a tensor or a tuple of tensors. Parameters and buffers become initializers
    (`export_params=False` is not supported: the ONNX graph needs their values).
    `dynamic_axes`: {input or output name: [dims] or {dim: dim_param name}} as in
    torch.onnx.export: those input dims are traced symbolic (the graph reads them off the
    inputs' shapes); the outputs' dims follow from the inputs' (an output's entry is
    accepted and needs nothing more). Returns the ONNX ModelProto (torch.onnx.export
    returns None or an ONNXProgram)."""
    from aotgrad.export import export as _export
    if not export_params:
        raise NotImplementedError("aotgrad.onnx.export: export_params=False is not "
                                  "supported: parameters are always written as initializers")
    if kwargs:
        raise TypeError(f"aotgrad.onnx.export: unsupported arguments {sorted(kwargs)}")
    if not isinstance(args, (tuple, list)):
        args = (args,)
    mode = TrainingMode(training) if training is not None else TrainingMode.EVAL
    was_training = getattr(model, "training", None)
    if mode is not TrainingMode.PRESERVE and was_training is not None:
        model.train(mode is TrainingMode.TRAINING)   # PyTorch's default exports eval mode
    try:
        ep = _export(model, *args, dynamic_dims=_dynamic_dims(
            model, args, dynamic_axes, input_names, output_names))
    finally:
        if was_training is not None:
            model.train(was_training)
    model_proto = ep.to_onnx(f, opset=opset_version or 17, input_names=input_names,
                             output_names=output_names)
    if verbose:   # asked for: the exported program, as torch.onnx.export prints its graph
        import sys
        sys.stdout.write(f"{ep}\n")
    return model_proto


def _dynamic_dims(model, args, dynamic_axes, input_names, output_names):
    """torch.onnx's dynamic_axes (keyed by input and output names) as export's dynamic_dims
    (keyed by argument index)."""
    if not dynamic_axes:
        return None
    if input_names:
        names = list(input_names)
    else:
        from aotgrad.tracer.arg_names import leaf_names
        fn = model.forward if hasattr(model, "named_parameters") else model
        names = leaf_names(fn, tuple(args), {})
    out = {}
    for key, axes in dynamic_axes.items():
        if key in names[:len(args)]:
            out[names.index(key)] = axes
        elif key not in (output_names or ()) and not str(key).startswith("output"):
            raise ValueError(f"aotgrad.onnx.export: dynamic_axes names {key!r}, which is "
                             f"neither an input ({', '.join(names[:len(args)])}) nor an "
                             f"output")
    return out or None


__all__ = ["export", "TrainingMode"]
