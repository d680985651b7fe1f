"""Flatten nested tuples/lists/dicts into leaves and a structure that rebuilds them."""
import collections
import dataclasses


@dataclasses.dataclass(frozen=True)
class DictKind:
    """A dict's tree node: its type, and a defaultdict's factory. The factory is not compared:
    the trace of a function that calls it inserts a key, which is a graph break, so a
    program never depends on it (and a new lambda per call must not miss the guard)."""
    type: type
    factory: object = dataclasses.field(default=None, compare=False)


_PLAIN_DICT = DictKind(dict)   # (one object: a call's keyword arguments are flattened each call)


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
        kind = _PLAIN_DICT if type(x) is dict else \
            DictKind(type(x), getattr(x, "default_factory", None))
        return (kind, tuple(keys), tuple(_flatten(dict.__getitem__(x, k), leaves) for k in keys))
    leaves.append(x)
    return None


def unflatten(treedef, leaves):
    it = iter(leaves)
    return _build(treedef, it)


def _build(td, it):
    if td is None:
        return next(it)
    if isinstance(td[0], DictKind):
        typ = td[0].type
        items = [(k, _build(sub, it)) for k, sub in zip(td[1], td[2])]
        if typ is dict:
            return dict(items)
        if issubclass(typ, collections.defaultdict):
            return typ(td[0].factory, items)
        try:
            return typ(items)
        except (TypeError, ValueError):   # a subclass made otherwise: its items as a dict
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
