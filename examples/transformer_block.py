"""A pre-LayerNorm transformer block (causal multi-head attention, GELU MLP) in a tiny
next-token model, trained for a few steps eagerly and compiled from the same weights.

The task: sequences that count upwards modulo the vocabulary size, so the next token is
predictable from the previous one through the causal attention.

    python examples/transformer_block.py [--steps 60] [--quick]
"""
import argparse
import copy
import sys
import traceback

import numpy as np

import aotgrad
from aotgrad import nn, optim
import aotgrad.nn.functional as F

try:
    from _common import Timer, can_compile, progress
except ImportError:
    from aotgrad.examples._common import Timer, can_compile, progress


class Block(nn.Module):
    """x + attn(ln1(x)) then x + mlp(ln2(x)): the pre-LN residual block of GPT-style models."""

    def __init__(self, dim, heads, dropout=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False, is_causal=True)[0]
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, vocab, dim, heads, seq_len):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(aotgrad.randn(seq_len, dim) * 0.02)
        self.block = Block(dim, heads)
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, idx):
        return self.head(self.ln(self.block(self.tok(idx) + self.pos)))


def make_batch(rng, batch, seq_len, vocab):
    start = rng.integers(0, vocab, (batch, 1))
    seq = (start + np.arange(seq_len + 1)) % vocab
    return seq[:, :-1].astype(np.int64), seq[:, 1:].astype(np.int64)


def run(model, forward, data, lr, desc, show):
    opt = optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    losses, timer = [], Timer()
    vocab = model.head.out_features
    for x, y in progress(data, desc, enabled=show):
        with timer:
            opt.zero_grad()
            logits = forward(aotgrad.tensor(x))
            loss = F.cross_entropy(logits.reshape(-1, vocab), aotgrad.tensor(y).reshape(-1))
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        losses.append(loss.item())
    return np.array(losses), timer


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=16)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    steps = args.steps or (30 if args.quick else 150)
    aotgrad.manual_seed(args.seed)
    model = TinyLM(args.vocab, args.dim, args.heads, args.seq_len)
    init_state = copy.deepcopy(model.state_dict())
    rng = np.random.default_rng(args.seed)
    data = [make_batch(rng, args.batch_size, args.seq_len, args.vocab) for _ in range(steps)]
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: embedding + pre-LN block (dim {args.dim}, {args.heads} heads, causal) + head, "
          f"{n_params} parameters; {steps} AdamW steps on batches {args.batch_size}x"
          f"{args.seq_len}")
    print(f"chance-level loss: ln({args.vocab}) = {np.log(args.vocab):.4f}")

    losses, t = run(model, model, data, args.lr, "eager", not args.no_progress)
    print(f"eager:    {t.median_ms():7.3f} ms/step | loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    result = {"eager_losses": losses, "compiled": False, "chance": float(np.log(args.vocab))}
    if args.no_compile or not can_compile():
        print("compiled: skipped" + (" (--no-compile)" if args.no_compile else
                                     " (this aotgrad has no aotgrad.compile yet)"))
        return result
    cmodel = TinyLM(args.vocab, args.dim, args.heads, args.seq_len)
    cmodel.load_state_dict(init_state)
    try:
        closses, ct = run(cmodel, aotgrad.compile(cmodel), data, args.lr, "compiled",
                          not args.no_progress)
    except Exception as e:  # report loudly: a compiler bug must not pass as a result
        traceback.print_exc()
        print(f"compiled: FAILED ({type(e).__name__}: {e})")
        result["compile_error"] = f"{type(e).__name__}: {e}"
        return result
    diff = float(np.abs(losses - closses).max())
    print(f"compiled: {ct.median_ms(skip=1):7.3f} ms/step | loss {closses[0]:.4f} -> "
          f"{closses[-1]:.4f} (first step {ct.times[0]:.2f} s)")
    print(f"largest loss difference eager vs compiled: {diff:.3e}")
    result.update(compiled=True, compiled_losses=closses, max_loss_diff=diff)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
