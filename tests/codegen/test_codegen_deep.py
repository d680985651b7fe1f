"""codegen on programs as deep as their length: an unrolled recurrence or a long pointwise
chain is scheduled and emitted without recursing over its depth (the tests run the
scheduler and emitter under a recursion limit far below the chain's depth), no kernel grows
with the program (an accumulated gradient is split into alike pieces), and the compiled
program equals eager."""
import contextlib
import sys

import numpy as np

import aotgrad as ag
from aotgrad.codegen.emitter import emit_kernel, module_source
from aotgrad.codegen.fusion import MAX_KERNEL_INPUTS, MAX_KERNEL_NODES
from aotgrad.codegen.scheduler import Kernel, Scheduler
from aotgrad.ir.passes import cse
from aotgrad.testing import assert_close


def _rnn(T):
    def fn(x, U, W):
        h = ag.zeros(x.shape[1], U.shape[1])
        for t in range(T):
            h = ag.tanh(x[t] @ U + h @ W * 0.1)
        return h.sum()
    return fn


def _chain(depth):
    def fn(x, y):
        h = x
        for i in range(depth):
            h = ag.tanh(h) * 0.5 + y * (1.0 + 0.01 * i)
        return (h * h).sum()
    return fn


def _depth():
    f, n = sys._getframe(), 0
    while f is not None:
        f, n = f.f_back, n + 1
    return n


@contextlib.contextmanager
def _shallow_stack(frames):
    """Allow only `frames` more Python frames than the caller has (the chains below are
    several times deeper)."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(_depth() + frames)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _schedule_and_emit(graph):
    graph = cse(graph, keep_outputs=True)
    with _shallow_stack(120):
        sch = Scheduler(graph)
        steps = sch.run().steps
        helpers = set()
        kernels = [st for st in steps if isinstance(st, Kernel)]
        specs = [emit_kernel(sch, st, helpers) for st in kernels]
        module_source(specs, helpers)
    return kernels, specs


def _arrays(rng, *shapes):
    return [rng.standard_normal(s).astype(np.float32) * 0.5 for s in shapes]


def test_deep_programs_schedule_and_emit_without_recursion():
    rng = np.random.default_rng(0)
    # deep enough that the old recursive walks needed several times the frames allowed
    cases = [(_rnn(100), _arrays(rng, (100, 4, 8), (8, 8), (8, 8))),
             (_chain(120), _arrays(rng, (3, 5), (3, 5)))]
    for fn, arrays in cases:
        prog = ag.compile(fn, backend="interpret").ir(
            *[ag.tensor(a, requires_grad=True) for a in arrays])
        for which in ("forward", "backward"):
            kernels, specs = _schedule_and_emit(getattr(prog, which))
            assert max(len(k.nodes) for k in kernels) <= MAX_KERNEL_NODES, which
            assert max(len(k.inputs) for k in kernels) <= MAX_KERNEL_INPUTS, which
            # the pieces of a chain are alike: a handful of distinct kernel functions
            assert len({s.body for s in specs}) <= 12, (which, len({s.body for s in specs}))


def test_deep_pointwise_chain_compiled_equals_eager():
    rng = np.random.default_rng(1)
    fn = _chain(80)      # ~400 pointwise nodes: more than one kernel may hold
    arrays = _arrays(rng, (4, 6), (4, 6))
    eager = [ag.tensor(a, requires_grad=True) for a in arrays]
    fn(*eager).backward()
    comp = [ag.tensor(a, requires_grad=True) for a in arrays]
    loss = ag.compile(fn, fullgraph=True)(*comp)
    loss.backward()
    assert_close(loss, fn(*[ag.tensor(a) for a in arrays]), rtol=1e-5, atol=1e-6)
    for c, e in zip(comp, eager):
        assert_close(c.grad, e.grad, rtol=1e-4, atol=1e-5)
