"""`aotgrad.jit`: there is no TorchScript. Code that asks whether it is being scripted or
traced is told no, and the decorators PyTorch code puts on helper functions (`script`,
`ignore`, `unused`, `export`) return the function unchanged, so it runs as Python (use
`aotgrad.compile` to compile it). `trace`, `save` and `load` raise."""


def is_scripting():
    return False


def is_tracing():
    return False


def _unchanged(fn=None, *args, **kwargs):
    if fn is None or not callable(fn):  # used with arguments: @jit.ignore(drop=False)
        return lambda f: f
    return fn


script = ignore = unused = export = _unchanged


def annotate(the_type, the_value):
    return the_value


def _no_torchscript(*args, **kwargs):
    raise NotImplementedError("aotgrad has no TorchScript: jit.trace/save/load are not "
                              "supported; compile with aotgrad.compile and save state_dicts")


trace = save = load = _no_torchscript
