"""RNN, LSTM, GRU and their cells against PyTorch with the same weights (outputs, final
states, gradients of the inputs, initial states and every parameter; float32 and float64),
packed and padded sequences, and checks that run without PyTorch (initialisation bounds,
finite differences, compiled == eager)."""
import math
import warnings

import numpy as np
from numpy.random import default_rng as rng
import pytest

import aotgrad
from aotgrad import nn
from aotgrad.nn.utils import rnn as rnn_utils
from aotgrad.testing import assert_close

DTYPES = ["float32", "float64"]
KINDS = [("LSTM", {}), ("GRU", {}), ("RNN", {}), ("RNN", {"nonlinearity": "relu"})]


def _pair(torch, kind, *args, **kw):
    return getattr(nn, kind)(*args, **kw), getattr(torch.nn, kind)(*args, **kw)


def _state(kind, shape, seed):
    h = rng(seed).standard_normal(shape)
    return (h, rng(seed + 1).standard_normal(shape)) if kind == "LSTM" else h


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind,extra", KINDS)
@pytest.mark.parametrize("config", [dict(), dict(num_layers=2, bidirectional=True),
                                    dict(batch_first=True, bias=False),
                                    dict(num_layers=3, batch_first=True)])
def test_rnn_layers(torch, vs_torch, dtype, kind, extra, config):
    ours, theirs = _pair(torch, kind, 3, 5, **extra, **config)
    x = rng(0).standard_normal((2, 4, 3) if config.get("batch_first") else (4, 2, 3))
    vs_torch.module(ours, theirs, [x], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind,extra", KINDS[:3])
def test_rnn_initial_state_and_unbatched(torch, vs_torch, dtype, kind, extra):
    ours, theirs = _pair(torch, kind, 3, 4, num_layers=2, bidirectional=True)
    x = rng(0).standard_normal((5, 2, 3))
    if kind == "LSTM":
        h, c = _state(kind, (4, 2, 4), 3)
        call = lambda m, xs: m(xs[0], (xs[1], xs[2]))  # noqa: E731
        vs_torch.module(ours, theirs, [x, h, c], dtype, call=call)
        vs_torch.module(ours, theirs, [x[:, 0], h[:, 0], c[:, 0]], dtype, call=call)
    else:
        h = _state(kind, (4, 2, 4), 3)
        vs_torch.module(ours, theirs, [x, h], dtype)
        vs_torch.module(ours, theirs, [x[:, 0], h[:, 0]], dtype)
    vs_torch.module(ours, theirs, [x[:, 0]], dtype)  # unbatched, zero initial state


@pytest.mark.filterwarnings("ignore:LSTM with projections")
@pytest.mark.parametrize("dtype", DTYPES)
def test_lstm_proj_size(torch, vs_torch, dtype):
    ours, theirs = _pair(torch, "LSTM", 3, 6, num_layers=2, proj_size=2, bidirectional=True,
                         batch_first=True)
    assert [tuple(p.shape) for p in ours.parameters()] == \
        [tuple(p.shape) for p in theirs.parameters()]
    x = rng(0).standard_normal((2, 4, 3))
    h, c = rng(1).standard_normal((4, 2, 2)), rng(2).standard_normal((4, 2, 6))
    vs_torch.module(ours, theirs, [x, h, c], dtype, call=lambda m, xs: m(xs[0], (xs[1], xs[2])))


@pytest.mark.parametrize("kind,extra", KINDS[:3])
def test_dropout_between_layers(torch, vs_torch, kind, extra):
    """p=1 zeroes every layer's output but the last one's: deterministic, so comparable."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = _pair(torch, kind, 3, 4, num_layers=3, dropout=1.0)
    vs_torch.module(ours, theirs, [rng(0).standard_normal((4, 2, 3))], "float64")
    ours.eval(), theirs.eval()
    ours.zero_grad(), theirs.zero_grad()
    vs_torch.module(ours, theirs, [rng(1).standard_normal((4, 2, 3))], "float64", load=False)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["LSTMCell", "GRUCell", "RNNCell"])
def test_cells(torch, vs_torch, dtype, kind):
    ours, theirs = _pair(torch, kind, 3, 4)
    x = rng(0).standard_normal((2, 3))
    vs_torch.module(ours, theirs, [x], dtype)
    ours.zero_grad(), theirs.zero_grad()
    if kind == "LSTMCell":
        h, c = rng(1).standard_normal((2, 4)), rng(2).standard_normal((2, 4))
        call = lambda m, xs: m(xs[0], (xs[1], xs[2]))  # noqa: E731
        vs_torch.module(ours, theirs, [x, h, c], dtype, call=call)
        vs_torch.module(ours, theirs, [x[0], h[0], c[0]], dtype, call=call)
    else:
        h = rng(1).standard_normal((2, 4))
        vs_torch.module(ours, theirs, [x, h], dtype)
        vs_torch.module(ours, theirs, [x[0], h[0]], dtype)


def test_rnn_cell_relu_no_bias(torch, vs_torch):
    ours, theirs = _pair(torch, "RNNCell", 3, 4, bias=False, nonlinearity="relu")
    vs_torch.module(ours, theirs, [rng(0).standard_normal((2, 3))], "float64")


def test_names_order_and_repr_match_torch(torch):
    for kind, kw in [("LSTM", dict(num_layers=2, bidirectional=True, proj_size=2)),
                     ("GRU", dict(num_layers=2, batch_first=True, dropout=0.5)),
                     ("RNN", dict(nonlinearity="relu", bias=False)),
                     ("LSTMCell", {}), ("GRUCell", dict(bias=False)),
                     ("RNNCell", dict(nonlinearity="relu"))]:
        ours, theirs = _pair(torch, kind, 3, 4, **kw)
        assert list(ours.state_dict()) == list(theirs.state_dict()), kind
        assert repr(ours) == repr(theirs), kind
    lstm, tlstm = _pair(torch, "LSTM", 3, 4, 2)
    assert lstm._flat_weights_names == tlstm._flat_weights_names
    assert [[tuple(w.shape) for w in ws] for ws in lstm.all_weights] == \
        [[tuple(w.shape) for w in ws] for ws in tlstm.all_weights]
    lstm.flatten_parameters()  # accepted (a no-op)
    rnn, trnn = nn.RNN(3, 4, 2, "relu"), torch.nn.RNN(3, 4, 2, "relu")  # positional nonlinearity
    assert rnn.nonlinearity == trnn.nonlinearity == "relu"


def test_errors_match_torch(torch):
    def msg(fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the message is what is compared
            return type(e).__name__, str(e)
        return None

    for M in (aotgrad, torch):
        m = M.nn.LSTM(3, 4)
        assert msg(lambda: m(M.zeros(2, 1, 5))) == \
            ("RuntimeError", "input.size(-1) must be equal to input_size. Expected 3, got 5")
        assert msg(lambda: m(M.zeros(2, 1, 3), (M.zeros(1, 2, 4), M.zeros(1, 1, 4))))[1] in (
            "Expected hidden[0] size (1, 1, 4), got [1, 2, 4]",
            "Expected hidden size (1, 1, 4), got [1, 2, 4]")
        assert msg(lambda: M.nn.GRU(3, 4, proj_size=2)) == \
            ("ValueError", "proj_size argument is only supported for LSTM, not RNN or GRU")
        assert msg(lambda: M.nn.LSTM(3, 4, proj_size=4)) == \
            ("ValueError", "proj_size has to be smaller than hidden_size")
        assert msg(lambda: M.nn.RNN(3, 4, nonlinearity="gelu"))[0] == "ValueError"


# ---- packed and padded sequences ---------------------------------------------------------
def test_pad_sequence(torch):
    seqs = [rng(i).standard_normal((n, 2)) for i, n in enumerate((3, 5, 1))]
    for kw in (dict(), dict(batch_first=True, padding_value=-1.0),
               dict(batch_first=True, padding_side="left")):
        a = rnn_utils.pad_sequence([aotgrad.tensor(s) for s in seqs], **kw)
        b = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in seqs], **kw)
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize("kind,extra", KINDS[:3])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_packed_sequences(torch, vs_torch, kind, extra, enforce_sorted):
    lengths = [5, 3, 2] if enforce_sorted else [3, 5, 2]
    x = rng(0).standard_normal((5, 3, 3))

    def call(m, xs):
        lib = aotgrad if isinstance(m, nn.Module) else torch
        packed = lib.nn.utils.rnn.pack_padded_sequence(xs[0], lengths,
                                                       enforce_sorted=enforce_sorted)
        out, state = m(packed)
        padded, lens = lib.nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                            total_length=6)
        assert lens.tolist() == lengths
        return out.data, padded, state

    ours, theirs = _pair(torch, kind, 3, 4, num_layers=2, bidirectional=True)
    vs_torch.module(ours, theirs, [x], "float64", call=call)
    seqs = [rng(i).standard_normal((n, 3)) for i, n in enumerate(lengths)]
    a = rnn_utils.pack_sequence([aotgrad.tensor(s) for s in seqs], enforce_sorted)
    b = torch.nn.utils.rnn.pack_sequence([torch.tensor(s) for s in seqs], enforce_sorted)
    np.testing.assert_array_equal(a.data.numpy(), b.data.numpy())
    assert a.batch_sizes.tolist() == b.batch_sizes.tolist()
    back = rnn_utils.unpack_sequence(a)
    assert all(np.array_equal(u.numpy(), s) for u, s in zip(back, seqs))


# ---- without PyTorch ---------------------------------------------------------------------
def test_init_bounds_and_shapes():
    m = nn.LSTM(10, 20, num_layers=2, bidirectional=True, batch_first=True)
    bound = 1 / math.sqrt(20)
    for name, p in m.named_parameters():
        v = p.detach().numpy()
        assert np.all(np.abs(v) <= bound) and np.abs(v).max() > 0.9 * bound, name
    out, (h, c) = m(aotgrad.randn(3, 7, 10))
    assert tuple(out.shape) == (3, 7, 40) and tuple(h.shape) == tuple(c.shape) == (4, 3, 20)
    out, h = nn.GRU(4, 6)(aotgrad.randn(5, 4))
    assert tuple(out.shape) == (5, 6) and tuple(h.shape) == (1, 6)
    assert nn.GRU(4, 6, dtype=aotgrad.float64)(aotgrad.randn(2, 1, 4,
                                                             dtype=aotgrad.float64))[0].dtype \
        == aotgrad.float64


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_finite_differences_float64(kind):
    m = getattr(nn, kind)(2, 3, num_layers=2, bidirectional=True).double()
    x = rng(0).standard_normal((3, 2, 2))
    g = rng(1).standard_normal((3, 2, 6))

    def f(xv):
        return float((m(aotgrad.tensor(xv))[0].detach().numpy() * g).sum())

    xt = aotgrad.tensor(x, requires_grad=True)
    (m(xt)[0] * aotgrad.tensor(g)).sum().backward()
    num = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = 1e-6
        num[i] = (f(x + d) - f(x - d)) / 2e-6
    assert_close(xt.grad.numpy(), num, rtol=1e-6, atol=1e-8, equal_nan=True)


def _grads(m, x):
    return [p.grad.numpy().copy() for p in m.parameters()] + [x.grad.numpy().copy()]


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_compiled_matches_eager_interpret(kind):
    m = getattr(nn, kind)(3, 4, num_layers=2, bidirectional=True, batch_first=True)
    x = aotgrad.tensor(rng(0).standard_normal((2, 5, 3)).astype(np.float32),
                       requires_grad=True)

    def step(x):
        out, state = m(x)
        h = state[0] if isinstance(state, tuple) else state
        loss = (out ** 2).mean() + h.sum()
        loss.backward()
        return loss

    eager = step(x).item()
    ge = _grads(m, x)
    m.zero_grad()
    x.grad = None
    assert aotgrad.compile(step, backend="interpret")(x).item() == pytest.approx(eager,
                                                                                rel=1e-5)
    for a, b in zip(_grads(m, x), ge):
        assert_close(a, b, rtol=1e-4, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("steps", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_compiled_cell_loop_numba(steps):
    """The sine-wave predictor's pattern: an LSTMCell stepped in a Python loop, compiled
    (each unrolled step adds Numba kernels: the default run keeps one)."""
    cell, lin = nn.LSTMCell(1, 3), nn.Linear(3, 1)
    x = aotgrad.tensor(rng(0).standard_normal((2, steps)).astype(np.float32))

    def step(x):
        h = c = aotgrad.zeros(2, 3)
        outs = []
        for t in range(x.shape[1]):
            h, c = cell(x[:, t:t + 1], (h, c))
            outs.append(lin(h))
        loss = (aotgrad.cat(outs, 1) ** 2).mean()
        loss.backward()
        return loss

    params = list(cell.parameters()) + list(lin.parameters())
    eager = step(x).item()
    ge = [p.grad.numpy().copy() for p in params]
    for p in params:
        p.grad = None
    assert aotgrad.compile(step, backend="numba")(x).item() == pytest.approx(eager, rel=1e-5)
    for p, g in zip(params, ge):
        assert_close(p.grad.numpy(), g, rtol=1e-4, atol=1e-6, equal_nan=True)


def test_lstm_state_dict_round_trip():
    a, b = nn.LSTM(3, 4, 2), nn.LSTM(3, 4, 2)
    b.load_state_dict(a.state_dict())
    x = aotgrad.randn(4, 2, 3)
    np.testing.assert_array_equal(a(x)[0].detach().numpy(), b(x)[0].detach().numpy())


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_word_language_model_training_matches_torch(torch, vs_torch, kind):
    """The word-level LM's loop, small: embedding -> 2-layer recurrent net -> decoder,
    truncated BPTT with the hidden state detached between batches, gradient clipping, SGD.
    Same initial weights and data -> the same losses as PyTorch, step after step."""
    def build(lib):
        class RNNModel(lib.nn.Module):
            def __init__(self):
                super().__init__()
                self.encoder = lib.nn.Embedding(12, 6)
                self.rnn = getattr(lib.nn, kind)(6, 8, 2)
                self.decoder = lib.nn.Linear(8, 12)

            def forward(self, x, hidden):
                out, hidden = self.rnn(self.encoder(x), hidden)
                return self.decoder(out).reshape(-1, 12), hidden
        return RNNModel().double()

    ours, theirs = build(aotgrad), build(torch)
    vs_torch.load_state(ours, theirs)
    data = rng(0).integers(0, 12, (4 * 5 + 1, 3))

    def run(lib, model):
        zeros = lib.zeros(2, 3, 8, dtype=lib.float64)
        hidden = (zeros, zeros) if kind == "LSTM" else zeros
        losses = []
        for i in range(0, 20, 5):
            x = lib.tensor(data[i:i + 5])
            y = lib.tensor(data[i + 1:i + 6].reshape(-1))
            hidden = tuple(h.detach() for h in hidden) if kind == "LSTM" else hidden.detach()
            model.zero_grad()
            out, hidden = model(x, hidden)
            loss = lib.nn.functional.cross_entropy(out, y)
            loss.backward()
            lib.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            with lib.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-1.0)
            losses.append(loss.item())
        return losses

    assert_close(run(aotgrad, ours), run(torch, theirs), rtol=1e-10, atol=0, equal_nan=True)
