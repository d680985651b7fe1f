"""A held-out style program: the word-level language model of PyTorch's examples
(`class TransformerModel(nn.Transformer)`, a positional encoding buffer, a causal mask, a
training step with clip_grad_norm_, generation by sampling and greedily), with only the
library module changed: eager and compiled against PyTorch from the same weights."""
import math

import numpy as np
import pytest

from torch_compare import close
from aotgrad.testing import assert_close


def _define(torch):
    nn, F = torch.nn, torch.nn.functional

    class PositionalEncoding(nn.Module):
        def __init__(self, d_model, dropout=0.1, max_len=5000):
            super().__init__()
            self.dropout = nn.Dropout(p=dropout)
            pe = torch.zeros(max_len, d_model)
            position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
            div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
            pe[:, 0::2] = torch.sin(position * div_term)
            pe[:, 1::2] = torch.cos(position * div_term)
            pe = pe.unsqueeze(0).transpose(0, 1)
            self.register_buffer('pe', pe)
        def forward(self, x):
            x = x + self.pe[:x.size(0), :]
            return self.dropout(x)
    class TransformerModel(nn.Transformer):
        def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
            super(TransformerModel, self).__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid, num_encoder_layers=nlayers)
            self.model_type = 'Transformer'
            self.src_mask = None
            self.pos_encoder = PositionalEncoding(ninp, dropout)
            self.input_emb = nn.Embedding(ntoken, ninp)
            self.ninp = ninp
            self.decoder = nn.Linear(ninp, ntoken)
            self.init_weights()
        def _generate_square_subsequent_mask(self, sz):
            return torch.log(torch.tril(torch.ones(sz,sz)))
        def init_weights(self):
            initrange = 0.1
            nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -initrange, initrange)
        def forward(self, src, has_mask=True):
            if has_mask:
                device = src.device
                if self.src_mask is None or self.src_mask.size(0) != len(src):
                    mask = self._generate_square_subsequent_mask(len(src)).to(device)
                    self.src_mask = mask
            else:
                self.src_mask = None
            src = self.input_emb(src) * math.sqrt(self.ninp)
            src = self.pos_encoder(src)
            output = self.encoder(src, mask=self.src_mask)
            output = self.decoder(output)
            return F.log_softmax(output, dim=-1)

    return TransformerModel


def _run(torch, weights, compiled):
    F = torch.nn.functional
    model = _define(torch)(50, 16, 2, 32, 2, dropout=0.0)
    if weights is None:
        return model
    model.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
    model.eval()   # nn.Transformer's own dropout (0.1) draws differ per library: off
    rng = np.random.default_rng(0)
    src = torch.tensor(rng.integers(0, 50, (7, 3)))
    target = torch.tensor(rng.integers(0, 50, 21))
    forward = torch.compile(model) if compiled else model
    out = forward(src)
    loss = F.nll_loss(out.view(-1, 50), target)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
    grads = {k: p.grad.numpy().copy() for k, p in model.named_parameters()}
    words = torch.tensor([[int(rng.integers(50))]])
    sampled = words
    with torch.no_grad():
        for _ in range(6):   # greedy: the same words in both libraries
            output = forward(words, False)
            word = output[-1].squeeze().argmax()
            words = torch.cat([words, torch.Tensor([[word]]).long()], 0)
            # the example's sampling step runs too (its draws are per library)
            weights_ = output[-1].squeeze().div(1.0).exp().cpu()
            idx = torch.multinomial(weights_, 1)[0]
            sampled = torch.cat([sampled, torch.Tensor([[idx]]).long()], 0)
    assert sampled.shape == words.shape
    return out.detach(), loss.item(), norm, grads, words.view(-1).tolist()


# (the compiled run takes ~15 s: under -m slow, for the default suite's time)
@pytest.mark.parametrize("compiled", (False, pytest.param(True, marks=pytest.mark.slow)))
def test_word_language_model_matches_torch(torch, compiled):
    import aotgrad
    torch.manual_seed(0)
    weights = {k: v.detach().numpy().copy() for k, v in _run(torch, None, False)
               .state_dict().items()}
    ref = _run(torch, weights, False)
    ours = _run(aotgrad, weights, compiled)
    close(ours[0], ref[0], "log-probabilities", atol=1e-5, rtol=1e-4)
    assert_close(ours[1], ref[1], rtol=1e-5, atol=0, equal_nan=True)
    close(ours[2], ref[2], "gradient norm", atol=1e-5, rtol=1e-4)
    for k in ref[3]:
        close(ours[3][k], ref[3][k], k, atol=1e-5, rtol=1e-3)
    assert ours[4] == ref[4]
