"""aotgrad.futures.Future (torch.futures' Future), without MPI."""
import pytest

import aotgrad
from aotgrad.futures import Future, collect_all, wait_all


def test_set_result_then_and_callbacks():
    f = Future()
    assert not f.done()
    with pytest.raises(RuntimeError, match="has not completed"):
        f.value()
    seen = []
    f.add_done_callback(lambda fut: seen.append(fut.value()))
    g = f.then(lambda fut: fut.value() + 1)
    assert not g.done()
    f.set_result(41)
    assert seen == [41] and f.wait() == 41
    assert g.done() and g.wait() == 42
    with pytest.raises(RuntimeError, match="already completed"):
        f.set_result(0)
    assert aotgrad.futures.Future is Future


def test_errors_travel_down_the_chain():
    f = Future()
    g = f.then(lambda fut: fut.value() * 2)
    f.set_exception(ValueError("bad"))
    with pytest.raises(ValueError, match="bad"):
        g.wait()
    with pytest.raises(TypeError, match="expected an exception"):
        Future().set_exception("not an exception")
    with pytest.raises(RuntimeError, match="nothing has called"):
        Future().wait()


def test_driven_future_and_collect_all():
    polls = []
    f = Future._driven(lambda: "v", lambda: bool(polls))
    assert not f.done()
    polls.append(1)
    assert f.done() and f.value() == "v"
    a, b = Future(), Future._driven(lambda: 2, lambda: False)
    a.set_result(1)
    both = collect_all([a, b])
    assert [x.value() for x in both.wait()] == [1, 2]
    assert wait_all([a, b]) == [1, 2]
