"""A post-accumulate-grad hook reached by a backward inside a compiled function (a whole
training step compiled, an optimizer-in-backward or a data-parallel all-reduce hook): the
hook must run on every call, as eagerly, so the function runs eagerly with a graph-break
warning instead of running the hook once at trace time."""
import warnings

import numpy as np
import pytest

import aotgrad as ag


def _run(compiled, backend="numba", steps=3):
    w = ag.ones(3, requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.detach().numpy().copy()))

    def step(x):
        loss = (w * x * x).sum()
        loss.backward()
        return loss

    if compiled:
        step = ag.compile(step, backend=backend)
    losses = [step(ag.full((3,), float(i + 1))).item() for i in range(steps)]
    return losses, seen, w.grad


@pytest.mark.parametrize("backend", ["interpret", "numba"])
def test_hook_runs_on_every_call_like_eager(backend):
    eager = _run(False)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        compiled = _run(True, backend)
    assert eager[0] == compiled[0]
    assert len(compiled[1]) == len(eager[1]) == 3
    for a, b in zip(compiled[1], eager[1]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(compiled[2].numpy(), eager[2].numpy())
    assert any("post-accumulate-grad hook" in str(r.message) for r in rec)


def test_hook_on_a_backward_outside_the_compiled_function_still_runs():
    w = ag.ones(3, requires_grad=True)
    seen = []
    w.register_post_accumulate_grad_hook(lambda p: seen.append(1))
    f = ag.compile(lambda x: (w * x).sum())
    for _ in range(3):
        f(ag.ones(3)).backward()
    assert seen == [1, 1, 1]
