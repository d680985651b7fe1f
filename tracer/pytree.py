"""Flatten nested tuples/lists/dicts into leaves and a structure that rebuilds them."""
import collections


def flatten(tree):
    """-> (leaves, treedef). Containers: tuple, list, dict and their subclasses (a dict's items in
    its own order; OrderedDict and defaultdict rebuilt as such); the rest are leaves."""
    leaves = []
    return leaves, _flatten(tree, leaves)


def _flatten(x, leaves):
    if isinstance(x, (tuple, list)) and not hasattr(x, "_fields") or \
            (isinstance(x, tuple) and hasattr(x, "_fields")):
        return (type(x), tuple(_flatten(v, leaves) for v in x))
    if isinstance(x, dict):
        keys = list(x.keys())
        kind = (dict, type(x), getattr(x, "default_factory", None))
        return (kind, tuple(keys), tuple(_flatten(dict.__getitem__(x, k), leaves) for k in keys))
    leaves.append(x)
    return None


def unflatten(treedef, leaves):
    it = iter(leaves)
    return _build(treedef, it)


def _build(td, it):
    if td is None:
        return next(it)
    if isinstance(td[0], tuple):   # a dict: (dict, its type, a defaultdict's factory)
        _, typ, factory = td[0]
        items = [(k, _build(sub, it)) for k, sub in zip(td[1], td[2])]
        if typ is dict:
            return dict(items)
        if isinstance(typ, type) and issubclass(typ, collections.defaultdict):
            return typ(factory, items)
        try:
            return typ(items)
        except TypeError:
            return dict(items)
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
