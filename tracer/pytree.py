"""Flatten nested tuples/lists/dicts into leaves and a structure that rebuilds them."""


def flatten(tree):
    """-> (leaves, treedef). Containers: tuple, list, dict (sorted keys); the rest are leaves."""
    leaves = []
    return leaves, _flatten(tree, leaves)


def _flatten(x, leaves):
    if isinstance(x, (tuple, list)) and not hasattr(x, "_fields") or \
            (isinstance(x, tuple) and hasattr(x, "_fields")):
        return (type(x), tuple(_flatten(v, leaves) for v in x))
    if isinstance(x, dict):
        keys = list(x.keys())
        return (dict, tuple(keys), tuple(_flatten(x[k], leaves) for k in keys))
    leaves.append(x)
    return None


def unflatten(treedef, leaves):
    it = iter(leaves)
    return _build(treedef, it)


def _build(td, it):
    if td is None:
        return next(it)
    if td[0] is dict:
        return {k: _build(sub, it) for k, sub in zip(td[1], td[2])}
    typ, subs = td
    vals = [_build(s, it) for s in subs]
    if typ in (tuple, list):
        return typ(vals)
    if hasattr(typ, "_fields"):
        return typ(*vals)
    try:
        return typ(vals)
    except TypeError:
        return tuple(vals)
