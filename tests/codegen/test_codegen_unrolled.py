"""codegen on unrolled loops: the steps of an unrolled recurrence share their kernels
(structurally identical kernels emit one source, whatever slice of a stacked tensor each
step reads), the generated source grows linearly with the steps, and the compiled program
equals eager."""
import pytest

import aotgrad as ag
from aotgrad import nn
from aotgrad.codegen.emitter import emit_kernel, module_source
from aotgrad.codegen.fusion import MAX_KERNEL_NODES
from aotgrad.codegen.scheduler import Kernel, Scheduler
from aotgrad.ir.passes import cse
from aotgrad.testing import compare_with_eager


def _cell_loop(cell):
    def fn(x):
        hc = None
        for t in range(x.shape[0]):
            hc = cell(x[t], hc)
        return hc[0].square().sum() + hc[1].sum()
    return fn


def _lstm_loss(lstm):
    def fn(x):
        out, (h, c) = lstm(x)
        return out.square().sum() + h.sum() + c.sum()
    return fn


def _emitted(fn, x):
    """Per graph of fn's compiled program (scheduled and emitted, not compiled): the
    kernels, the distinct kernel functions, the source length and the largest kernel."""
    prog = ag.compile(fn, backend="interpret").ir(x)
    out = {}
    for which in ("forward", "backward"):
        sch = Scheduler(cse(getattr(prog, which), keep_outputs=True))
        steps = sch.run().steps
        helpers = set()
        specs = [emit_kernel(sch, st, helpers) for st in steps if isinstance(st, Kernel)]
        src = module_source(specs, helpers)
        out[which] = dict(kernels=len(specs), distinct=len({s.name for s in specs}),
                          chars=len(src),
                          largest=max(len(st.nodes) for st in steps if isinstance(st, Kernel)))
    return out


def test_unrolled_cell_steps_share_kernels():
    ag.manual_seed(0)
    cell = nn.LSTMCell(3, 4)
    short, long = (_emitted(_cell_loop(cell), ag.randn(n, 2, 3)) for n in (8, 24))
    for which in ("forward", "backward"):
        s, lg = short[which], long[which]
        assert lg["kernels"] >= 2.5 * s["kernels"]   # the program grew with the steps ...
        # ... but hardly its kernel functions: the new steps reuse the short loop's ones
        assert lg["distinct"] <= s["distinct"] + 6, (which, s, lg)
        # no step recomputes the earlier steps' states: the source grows linearly
        assert lg["chars"] <= 4 * s["chars"], (which, s, lg)
        assert lg["largest"] <= MAX_KERNEL_NODES


def test_unrolled_lstm_distinct_kernels_do_not_grow():
    ag.manual_seed(0)
    lstm = nn.LSTM(3, 4, num_layers=2)
    short, long = (_emitted(_lstm_loss(lstm), ag.randn(n, 2, 3)) for n in (6, 16))
    for which in ("forward", "backward"):
        s, lg = short[which], long[which]
        assert lg["kernels"] >= 2 * s["kernels"]
        assert lg["distinct"] <= s["distinct"] + 3, (which, s, lg)
        assert lg["chars"] <= 3 * s["chars"], (which, s, lg)


def test_kernels_differing_in_slice_offset_share_source():
    # h = tanh(x[t] + h @ w): one kernel per step (the product separates them), each
    # reading another row block of x; the offset is an argument, so they are one function
    def fn(x, w):
        h = ag.zeros(x.shape[1], w.shape[0])
        for t in range(x.shape[0]):
            h = ag.tanh(x[t] + h @ w)
        return h
    ag.manual_seed(0)
    x, w = ag.randn(6, 3, 7), ag.randn(7, 7)
    prog = ag.compile(fn, backend="interpret").ir(x, w)
    assert not prog.has_backward
    sch = Scheduler(cse(prog.inference, keep_outputs=True))
    steps = sch.run().steps
    helpers = set()
    specs = [emit_kernel(sch, st, helpers) for st in steps if isinstance(st, Kernel)]
    module_source(specs, helpers)
    assert len(specs) >= 6
    assert len({s.name for s in specs}) <= 3      # step 0 reads row 0 at a literal 0


def test_unrolled_cell_compiled_equals_eager():
    ag.manual_seed(0)
    cell = nn.LSTMCell(3, 4)
    compare_with_eager(_cell_loop(cell), ag.randn(3, 2, 3, requires_grad=True),
                       params=list(cell.parameters()))


@pytest.mark.slow
def test_unrolled_lstm_compiled_equals_eager():
    ag.manual_seed(0)
    lstm = nn.LSTM(3, 4, num_layers=2)
    compare_with_eager(_lstm_loss(lstm), ag.randn(5, 2, 3, requires_grad=True),
                       params=list(lstm.parameters()))


def _scheduling_work(fn, x, monkeypatch):
    """The operands the scheduler's expression walks visit and the steps its searches for
    paths between kernels visit, scheduling fn's forward and backward."""
    from aotgrad.codegen import fusion
    count = [0]
    operand_indices = Scheduler.operand_indices
    search = fusion._search

    def counted_operands(self, n, ix):
        count[0] += 1
        return operand_indices(self, n, ix)

    def counted_search(*args):
        inner = search(*args)
        while True:
            try:
                next(inner)
            except StopIteration as end:
                return end.value
            count[0] += 1
            yield
    monkeypatch.setattr(Scheduler, "operand_indices", counted_operands)
    monkeypatch.setattr(fusion, "_search", counted_search)
    prog = ag.compile(fn, backend="interpret").ir(x)
    for which in ("forward", "backward"):
        Scheduler(cse(getattr(prog, which), keep_outputs=True)).run()
    monkeypatch.undo()
    return count[0]


def test_scheduling_an_unrolled_cell_grows_linearly_with_its_steps(monkeypatch):
    # the cell state's chain (c_t = f_t * c_{t-1} + ...) runs through every step, and the
    # backward recomputes forward values far from the steps that read them: neither the
    # walks of the first round nor the checks of the merges may cross the whole loop for
    # each step (a 999-step LSTM did not finish scheduling)
    ag.manual_seed(0)
    cell = nn.LSTMCell(3, 4)
    short, long = (_scheduling_work(_cell_loop(cell), ag.randn(n, 2, 3), monkeypatch)
                   for n in (30, 90))
    assert long <= 4.5 * short, (short, long)


def test_a_cells_gate_gradients_are_not_evaluated_across_their_concatenation():
    # the backward of an LSTM cell concatenates its four gates' gradients (pads added);
    # a kernel over the concatenation would evaluate each gate's expression, tanh and all,
    # at every column and keep a quarter: such values are stored first
    from aotgrad.codegen.index import Dim
    ag.manual_seed(0)
    cell = nn.LSTMCell(3, 8)
    prog = ag.compile(_cell_loop(cell), backend="interpret").ir(ag.randn(5, 5, 3))
    sch = Scheduler(cse(prog.backward, keep_outputs=True))
    steps = sch.run().steps
    wasted = [(sch.prod[v], kt.domain) for kt in steps if isinstance(kt, Kernel)
              for v, ixs in kt.node_index.items()
              if sch.prod[v].prim.name in ("tanh", "logistic")
              and any(isinstance(t, Dim) and t.clamp is not None for ix in ixs for t in ix)]
    assert not wasted, wasted
