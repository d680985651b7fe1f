"""A trace's collections walk only the objects it made (tracer/heap.py): what the function
stored is still found, what died in a cycle is not mistaken for stored (also when the cycle
holds an object from before the trace), and the process's gc state is left as it was."""
import gc
import weakref

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.tracer.heap import TraceHeap
from aotgrad.tracer.trace import trace


class _Cycle:
    """An object in a reference cycle with itself: only a collection frees it."""

    def __init__(self, value=None):
        self.me, self.value = self, value


def _x():
    return ag.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True)


def test_a_tensor_stored_outside_is_an_escape_and_one_dead_in_a_cycle_is_not():
    store = {}

    def stores(x):
        store["y"] = x * 2
        return (x + 1).sum()

    def drops(x):
        _Cycle(x * 2)   # dead once made: freed by the trace's collection
        return (x + 1).sum()

    assert trace(stores, (_x(),), {}).escaped
    assert not trace(drops, (_x(),), {}).escaped


def test_collect_frees_what_the_trace_made_and_collect_all_what_was_there_before():
    old = _Cycle()
    old_ref = weakref.ref(old)
    with TraceHeap() as heap:
        new = _Cycle()
        new_ref = weakref.ref(new)
        del old, new                # both now garbage, each in its own cycle
        heap.collect()
        assert new_ref() is None    # made during the trace: walked
        assert old_ref() is not None  # frozen with the heap from before the trace
        heap.collect_all()
        assert old_ref() is None


def test_compiled_results_with_escapes_and_cycles_equal_eager():
    def make(state):
        def step(x):
            _Cycle(x * 3)
            state["last"] = x * 2
            return (x.exp() * 2).sum()
        return step

    se, sc = {}, {}
    step, compiled = make(se), ag.compile(make(sc))
    for _ in range(3):
        xe, xc = _x(), _x()
        le, lc = step(xe), compiled(xc)
        le.backward()
        lc.backward()
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-6)
        np.testing.assert_allclose(xc.grad.numpy(), xe.grad.numpy(), rtol=1e-6)
        np.testing.assert_allclose(sc["last"].detach().numpy(), se["last"].detach().numpy())


@pytest.mark.parametrize("breaks", [False, True])
def test_the_gc_freeze_is_undone_after_a_trace_and_a_freeze_of_the_process_kept(breaks):
    def fn(x):
        if breaks:
            raise ValueError("the function fails while tracing")
        return (x * 2).sum()

    def run():
        if breaks:
            with pytest.raises(ValueError, match="fails while tracing"):
                trace(fn, (_x(),), {})
        else:
            trace(fn, (_x(),), {})

    assert gc.get_freeze_count() == 0
    run()
    assert gc.get_freeze_count() == 0
    gc.freeze()   # a process that froze its heap (a server before it forks)
    try:
        frozen = gc.get_freeze_count()
        run()
        # not unfrozen, nor frozen again (a count can only fall, as frozen objects are freed)
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
