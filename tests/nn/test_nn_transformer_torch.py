"""TransformerEncoderLayer, TransformerEncoder, TransformerDecoderLayer, TransformerDecoder and
Transformer against PyTorch with the same weights (dropout 0 so both are deterministic):
outputs and gradients in float32 and float64, masks, norm_first, activations, batch_first;
a subclass of nn.Transformer as a word-level language model writes it; compiled == eager."""
import math

import numpy as np
from numpy.random import default_rng as rng
import pytest

import aotgrad
from aotgrad import nn
import aotgrad.nn.functional as F
from aotgrad.testing import assert_close

DTYPES = ["float32", "float64"]
pytestmark = pytest.mark.filterwarnings("ignore:enable_nested_tensor")


def _kw(**extra):
    return dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0, **extra)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("extra", [dict(), dict(norm_first=True, activation="gelu"),
                                   dict(batch_first=True, bias=False, layer_norm_eps=1e-3)])
def test_encoder_layer(torch, vs_torch, dtype, extra):
    ours = nn.TransformerEncoderLayer(**_kw(**extra))
    theirs = torch.nn.TransformerEncoderLayer(**_kw(**extra))
    x = rng(0).standard_normal((3, 5, 8) if extra.get("batch_first") else (5, 3, 8))
    vs_torch.module(ours, theirs, [x], dtype)
    ours.zero_grad(), theirs.zero_grad()
    causal = np.triu(np.ones((5, 5), dtype=bool), 1)
    pad = np.zeros((3, 5), dtype=bool)
    pad[1, 3:] = True
    call = lambda m, xs: m(xs[0], src_mask=xs[1], src_key_padding_mask=xs[2])  # noqa: E731
    vs_torch.module(ours, theirs, [x, causal, pad], dtype, call=call)


@pytest.mark.parametrize("dtype", DTYPES)
def test_decoder_layer(torch, vs_torch, dtype):
    for extra in (dict(), dict(norm_first=True, batch_first=True)):
        ours = nn.TransformerDecoderLayer(**_kw(**extra))
        theirs = torch.nn.TransformerDecoderLayer(**_kw(**extra))
        tgt, mem = rng(0).standard_normal((4, 3, 8)), rng(1).standard_normal((6, 3, 8))
        if extra.get("batch_first"):
            tgt, mem = tgt.transpose(1, 0, 2).copy(), mem.transpose(1, 0, 2).copy()
        mask = np.triu(np.full((4, 4), -np.inf), 1)
        mpad = np.zeros((3, 6), dtype=bool)
        mpad[0, 4:] = True
        call = lambda m, xs: m(xs[0], xs[1], tgt_mask=xs[2],  # noqa: E731
                               memory_key_padding_mask=xs[3])
        vs_torch.module(ours, theirs, [tgt, mem, mask, mpad], dtype, call=call,
                grad_inputs={0, 1})


@pytest.mark.parametrize("dtype", DTYPES)
def test_encoder_and_decoder_stacks(torch, vs_torch, dtype):
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(**_kw()), 2, norm=nn.LayerNorm(8))
    tenc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(**_kw()), 2,
                                       norm=torch.nn.LayerNorm(8))
    x = rng(0).standard_normal((5, 2, 8))
    mask = np.triu(np.full((5, 5), -np.inf), 1)
    call = lambda m, xs: m(xs[0], mask=xs[1], is_causal=True)  # noqa: E731
    vs_torch.module(enc, tenc, [x, mask], dtype, call=call, grad_inputs={0})
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(**_kw()), 2)
    tdec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(**_kw()), 2)
    vs_torch.module(dec, tdec, [x[:3], x], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer(torch, vs_torch, dtype, batch_first):
    kw = dict(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1,
              dim_feedforward=12, dropout=0.0, batch_first=batch_first)
    ours, theirs = nn.Transformer(**kw), torch.nn.Transformer(**kw)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    src, tgt = rng(0).standard_normal((5, 2, 8)), rng(1).standard_normal((4, 2, 8))
    if batch_first:
        src, tgt = src.transpose(1, 0, 2).copy(), tgt.transpose(1, 0, 2).copy()
    tmask = torch.nn.Transformer.generate_square_subsequent_mask(4).numpy()
    np.testing.assert_array_equal(nn.Transformer.generate_square_subsequent_mask(4).numpy(),
                                  tmask)
    pad = np.zeros((2, 5), dtype=bool)
    pad[1, 4] = True
    call = lambda m, xs: m(xs[0], xs[1], tgt_mask=xs[2],  # noqa: E731
                           src_key_padding_mask=xs[3], memory_key_padding_mask=xs[3])
    vs_torch.module(ours, theirs, [src, tgt, tmask, pad], dtype, call=call,
            grad_inputs={0, 1})


def test_transformer_init_and_errors(torch):
    m = nn.Transformer(d_model=16, nhead=4, num_encoder_layers=1, num_decoder_layers=1,
                       dim_feedforward=32)
    w = m.encoder.layers[0].linear1.weight.detach().numpy()
    bound = math.sqrt(6 / (16 + 32))  # xavier_uniform_ on every matrix
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert m.encoder.layers[0].dropout.p == 0.1 and m.encoder.norm is not None
    for M in (aotgrad, torch):
        t = M.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1)
        with pytest.raises(RuntimeError, match="the feature number of src and tgt must be "
                                               "equal to d_model"):
            t(M.zeros(3, 2, 8), M.zeros(3, 2, 6))
        with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
            M.nn.TransformerEncoderLayer(8, 2, activation="tanh")


def test_callable_activation(torch, vs_torch):
    ours = nn.TransformerEncoderLayer(**_kw(activation=nn.GELU(approximate="tanh")))
    theirs = torch.nn.TransformerEncoderLayer(**_kw(activation=torch.nn.GELU(
        approximate="tanh")))
    vs_torch.module(ours, theirs, [rng(0).standard_normal((4, 2, 8))], "float64")


class _PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=64):
        super().__init__()
        pe = np.zeros((max_len, d_model), dtype=np.float32)
        pos = np.arange(max_len)[:, None]
        div = np.exp(np.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe[:, 0::2], pe[:, 1::2] = np.sin(pos * div), np.cos(pos * div)
        self.register_buffer("pe", aotgrad.tensor(pe[:, None, :]))

    def forward(self, x):
        return x + self.pe[:x.shape[0], :]


class _TransformerLM(nn.Transformer):
    """The word-level language model's pattern: subclass nn.Transformer, keep its encoder,
    replace `decoder` by a Linear layer."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers):
        super().__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid,
                         num_encoder_layers=nlayers, dropout=0.0)
        self.src_mask = None
        self.pos_encoder = _PositionalEncoding(ninp)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)

    def forward(self, src):
        mask = aotgrad.log(aotgrad.tril(aotgrad.ones(src.shape[0], src.shape[0])))
        x = self.pos_encoder(self.input_emb(src) * math.sqrt(self.ninp))
        return F.log_softmax(self.decoder(self.encoder(x, mask=mask)), dim=-1)


def test_transformer_subclass_language_model():
    model = _TransformerLM(ntoken=11, ninp=8, nhead=2, nhid=16, nlayers=2)
    assert isinstance(model.decoder, nn.Linear)
    assert not any(k.startswith("decoder.layers") for k in model.state_dict())
    src = aotgrad.tensor(rng(0).integers(0, 11, (6, 3)))
    out = model(src)
    assert tuple(out.shape) == (6, 3, 11)
    probs = np.exp(out.detach().numpy()).sum(-1)
    assert_close(probs, np.ones_like(probs), rtol=1e-5, atol=0, equal_nan=True)
    # causal: the first position's output ignores later tokens
    src2 = aotgrad.tensor(np.concatenate([src.numpy()[:1], (src.numpy()[1:] + 1) % 11]))
    assert_close(model(src2).detach().numpy()[0], out.detach().numpy()[0], rtol=1e-5, atol=1e-6,
                 equal_nan=True)
    loss = F.nll_loss(out.reshape(-1, 11), src.reshape(-1))
    loss.backward()
    assert all(p.grad is not None for p in model.encoder.parameters())


def test_compiled_matches_eager_interpret():
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    x = aotgrad.tensor(rng(0).standard_normal((2, 5, 8)).astype(np.float32), requires_grad=True)
    mask = nn.Transformer.generate_square_subsequent_mask(5)

    def step(x):
        loss = (layer(x, src_mask=mask) ** 2).mean()
        loss.backward()
        return loss

    eager = step(x).item()
    ge = [p.grad.numpy().copy() for p in layer.parameters()] + [x.grad.numpy().copy()]
    layer.zero_grad()
    x.grad = None
    assert aotgrad.compile(step, backend="interpret")(x).item() == pytest.approx(eager,
                                                                                rel=1e-5)
    gc = [p.grad.numpy() for p in layer.parameters()] + [x.grad.numpy()]
    for a, b in zip(gc, ge):
        assert_close(a, b, rtol=1e-4, atol=1e-6, equal_nan=True)


def test_transformer_subclass_matches_torch(torch, vs_torch):
    """The subclass pattern in both libraries, same weights: same log-probabilities and
    gradients (training mode, dropout 0)."""
    def build(lib):
        class LM(lib.nn.Transformer):
            def __init__(self):
                super().__init__(d_model=8, nhead=2, dim_feedforward=16, num_encoder_layers=2,
                                 dropout=0.0)
                self.input_emb = lib.nn.Embedding(11, 8)
                self.decoder = lib.nn.Linear(8, 11)

            def forward(self, src):
                mask = lib.log(lib.tril(lib.ones(src.shape[0], src.shape[0],
                                                 dtype=lib.float64)))
                x = self.encoder(self.input_emb(src), mask=mask)
                return lib.nn.functional.log_softmax(self.decoder(x), dim=-1)
        return LM()

    src = rng(0).integers(0, 11, (6, 3))
    vs_torch.module(build(aotgrad), build(torch), [src], "float64")
