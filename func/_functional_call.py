"""functional_call and stack_module_state, as torch.func: a module called with tensors in
place of its parameters and buffers (so that grad, vmap and jacrev can take them as
arguments), and the parameters of several copies of a module stacked for vmap (ensembles).
"""
import contextlib

from aotgrad.runtime.tensor import Tensor

__all__ = ["functional_call", "stack_module_state"]


def _owner(module, name):
    *path, attr = name.split(".")
    m = module
    for p in path:
        m = getattr(m, p)
    return m, attr


def _with_tied(module, values):
    """values, plus an entry for every name tied to a given one (the same tensor in the
    module under several names stands for all of them)."""
    by_id = {}
    for names_of in (module.named_parameters(remove_duplicate=False),
                     module.named_buffers(remove_duplicate=False)):
        for n, t in names_of:
            by_id.setdefault(id(t), []).append(n)
    extra = {}
    for names in by_id.values():
        given = [n for n in names if n in values]
        if given and len(names) > 1:
            for n in names:
                if n not in values:
                    extra[n] = values[given[0]]
                elif values[n] is not values[given[0]]:
                    raise ValueError(f"functional_call got multiple values for keys "
                                     f"{given}, which are tied. Consider using "
                                     f"tie_weights=False")
    return {**values, **extra}


@contextlib.contextmanager
def _swapped(module, values):
    """module with the given tensors in the parameter/buffer slots their names say."""
    saved = []
    try:
        for name, value in values.items():
            m, attr = _owner(module, name)
            for slot in ("_parameters", "_buffers"):
                d = m.__dict__[slot]
                if attr in d:
                    saved.append((d, attr, d[attr]))
                    d[attr] = value
                    break
            else:
                saved.append((m.__dict__, attr, m.__dict__.get(attr, _ABSENT)))
                m.__dict__[attr] = value
        yield
    finally:
        for d, attr, old in reversed(saved):
            if old is _ABSENT:
                d.pop(attr, None)
            else:
                d[attr] = old


_ABSENT = object()


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                    tie_weights=True, strict=False):
    """module(*args, **kwargs) with the named tensors of `parameter_and_buffer_dicts` (a
    dict, or a tuple of dicts) in place of its parameters and buffers, as
    torch.func.functional_call. The module itself is left as it was.

    >>> import aotgrad
    >>> from aotgrad.func import functional_call
    >>> m = aotgrad.nn.Linear(2, 1, bias=False)
    >>> functional_call(m, {"weight": aotgrad.ones(1, 2)}, (aotgrad.tensor([[1., 2.]]),))
    tensor([[3.]])
    """
    if isinstance(parameter_and_buffer_dicts, dict):
        values = dict(parameter_and_buffer_dicts)
    elif isinstance(parameter_and_buffer_dicts, (tuple, list)):
        values = {}
        for d in parameter_and_buffer_dicts:
            for k, v in d.items():
                if k in values:
                    raise ValueError(f"{k} appeared in multiple dictionaries; behavior of "
                                     f"functional call is ambiguous")
                values[k] = v
    else:
        raise ValueError(f"Expected parameter_and_buffer_dicts to be a dict, or a list/tuple "
                         f"of dicts, but got {type(parameter_and_buffer_dicts)}")
    if tie_weights:
        values = _with_tied(module, values)
    if strict:
        expected = {n for n, _ in module.named_parameters(remove_duplicate=False)} | \
            {n for n, _ in module.named_buffers(remove_duplicate=False)}
        missing, unexpected = sorted(expected - set(values)), sorted(set(values) - expected)
        if missing or unexpected:
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}: "
                               f"missing key(s): {missing}, unexpected key(s): {unexpected}")
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    with _swapped(module, values):
        return module(*args, **(kwargs or {}))


def stack_module_state(models):
    """(params, buffers): each a dict from name to the tensors of all `models` stacked along
    a new leading dim, as torch.func.stack_module_state (the parameters are new leaves that
    require grad where the models' do)."""
    from aotgrad.runtime.join_ops import stack
    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if not (all(m.training for m in models) or not any(m.training for m in models)):
        raise RuntimeError("stack_module_state: Expected all models to have the same training/"
                           "eval mode.")
    kinds = {type(m) for m in models}
    if len(kinds) != 1:
        raise RuntimeError("stack_module_state: Expected all models to be of the same class.")

    def stacked(named):
        out = {}
        for name, first in named(models[0]):
            ts = [dict(named(m))[name] for m in models]
            s = stack([t.detach() for t in ts])
            out[name] = s.requires_grad_(first.requires_grad) if isinstance(first, Tensor) and \
                first.dtype.is_floating_point else s
        return out
    return (stacked(lambda m: m.named_parameters()), stacked(lambda m: m.named_buffers()))
