"""Readable names of a call's flattened inputs, for guard, alias and recompile messages."""
import inspect


def leaf_names(fn, args, kwargs):
    """Per leaf of `flatten((tuple(args), dict(kwargs)))`: the parameter's name (`x`), with the
    path inside a container (`batch[0]`, `cfg['w']`); `argument 2` where fn has no signature
    to read."""
    params = []
    try:
        sig = inspect.signature(fn)
        for p in sig.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                params.append(p.name)
            elif p.kind is p.VAR_POSITIONAL:
                star = p.name
                break
        else:
            star = None
    except (TypeError, ValueError):
        star = None
    names = []
    for i, a in enumerate(args):
        if i < len(params):
            base = params[i]
        elif star is not None:
            base = f"{star}[{i - len(params)}]"
        else:
            base = f"argument {i}"
        _walk(a, base, names)
    for k, v in kwargs.items():
        _walk(v, k, names)
    return names


def _walk(x, path, names):
    # mirrors pytree.flatten's order: tuples/lists (namedtuples too) by position, dicts by key
    if isinstance(x, (tuple, list)):
        for i, v in enumerate(x):
            _walk(v, f"{path}[{i}]", names)
    elif isinstance(x, dict):
        for k, v in x.items():
            _walk(v, f"{path}[{k!r}]", names)
    else:
        names.append(path)
