"""A list or dict passed to a compiled function reaches it rebuilt around the traced
tensors: an item the function stores in it, replaces or removes must reach the caller's
container as eagerly, so the call runs eagerly (a graph break that names the argument), or
fullgraph=True raises that reason. Reading the containers, and in-place ops on the tensors
they hold, stay compiled."""
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.tracer.trace import GraphBreakError


def _x():
    return ag.tensor(np.linspace(-1, 2, 6, dtype=np.float32).reshape(2, 3), requires_grad=True)


def _stores(x, state):
    state["last"] = x * 2
    return (x.exp() * 2).sum()


def _appends(x, *, log):
    log.append(x.sum())
    return (x * x).sum()


def _replaces(x, pair):
    pair[0] = pair[0] + x
    return (pair[0] * pair[1]).sum()


def _removes(x, cfg):
    scale = cfg.pop("scale")
    return (x * scale).sum()


CASES = {
    "dict item stored": (_stores, lambda: ((_x(), {}), {}), "argument 1 (a dict)"),
    "list appended (keyword)": (_appends, lambda: ((_x(),), {"log": []}),
                                "argument 'log' (a list)"),
    "list item replaced": (_replaces, lambda: ((_x(), [ag.ones(2, 3), ag.full((2, 3), 3.0)]), {}),
                           "argument 1 (a list)"),
    "dict item removed": (_removes, lambda: ((_x(), {"scale": 2.5}), {}), "argument 1 (a dict)"),
}


def _containers(args, kwargs):
    return [a for a in list(args) + list(kwargs.values()) if isinstance(a, (list, dict))]


def _plain(c):
    items = c.items() if isinstance(c, dict) else enumerate(c)
    return {k: v.detach().numpy() if isinstance(v, ag.Tensor) else v for k, v in items}


@pytest.mark.parametrize("case", list(CASES))
def test_a_changed_argument_container_runs_eagerly_with_eagers_results(case):
    fn, make, _ = CASES[case]
    compiled = ag.compile(fn)
    for _ in range(2):
        (ea, ek), (ca, ck) = make(), make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lc = compiled(*ca, **ck)
        le = fn(*ea, **ek)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-6)
        le.backward()
        lc.backward()
        np.testing.assert_allclose(ca[0].grad.numpy(), ea[0].grad.numpy(), rtol=1e-6)
        for ce, cc in zip(_containers(ea, ek), _containers(ca, ck)):
            pe, pc = _plain(ce), _plain(cc)
            assert pc.keys() == pe.keys()
            for k in pe:
                np.testing.assert_allclose(pc[k], pe[k], rtol=1e-6)


@pytest.mark.parametrize("case", list(CASES))
def test_fullgraph_names_the_changed_argument(case):
    fn, make, name = CASES[case]
    args, kwargs = make()
    with pytest.raises(GraphBreakError, match=f"{name.replace('(', '.').replace(')', '.')} had "
                                              f"an item stored, replaced or removed"):
        ag.compile(fn, fullgraph=True)(*args, **kwargs)


def test_reading_containers_and_in_place_writes_to_their_tensors_stay_compiled():
    def fn(x, params, cfg):
        params["w"].mul_(cfg["decay"])          # the tensor changes, not the container
        cfg["decay"] = cfg["decay"]             # written back with the value it had
        return (x @ params["w"]).sum()

    w_e, w_c = ag.ones(3, 2), ag.ones(3, 2)
    compiled = ag.compile(fn, fullgraph=True)
    for _ in range(2):
        le = fn(_x(), {"w": w_e}, {"decay": 0.5})
        lc = compiled(_x(), {"w": w_c}, {"decay": 0.5})
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-6)
        np.testing.assert_allclose(w_c.numpy(), w_e.numpy())


def test_dict_subclasses_reach_the_function_as_themselves():
    import collections

    def fn(x, d):
        kind = 2.0 if isinstance(d, collections.OrderedDict) else \
            4.0 if isinstance(d, collections.defaultdict) else 3.0
        return (x * d["w"]).sum() * kind

    compiled = ag.compile(fn, fullgraph=True)
    for make in [dict, collections.OrderedDict, lambda **kw: collections.defaultdict(list, **kw)]:
        le, lc = fn(_x(), make(w=ag.full((2, 3), 1.5))), compiled(_x(), make(w=ag.full((2, 3), 1.5)))
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-6)


def test_ordered_dict_reordered_and_defaultdict_filled_as_eagerly():
    import collections

    def reorders(x, d):
        d.move_to_end("a")
        return x.sum() * d["b"]

    def fills(x, d):
        return x.sum() * (len(d["missing"]) + 1)

    for fn, make in [(reorders, lambda: collections.OrderedDict(a=1.0, b=2.0)),
                     (fills, lambda: collections.defaultdict(list))]:
        de, dc = make(), make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lc = ag.compile(fn)(_x(), dc)
        le = fn(_x(), de)
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-6)
        assert list(dc.items()) == list(de.items()) and type(dc) is type(de)


def test_a_new_defaultdict_factory_per_call_reuses_the_program():
    import collections

    def fn(x, d):
        return (x * d["w"]).sum()

    compiled = ag.compile(fn, fullgraph=True)
    for k in range(3):
        d = collections.defaultdict(lambda: 0.0, w=ag.full((2, 3), float(k + 1)))
        np.testing.assert_allclose(compiled(_x(), d).item(), fn(_x(), d).item(), atol=1e-6)
    assert compiled.n_traces == 1
