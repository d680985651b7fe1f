"""Two programs written in the ordinary PyTorch style, for the whole-program benchmarks
(bench_models.py): a small GPT (token and position embeddings, pre-LN blocks of causal
self-attention and a GELU MLP, a tied output head, cross-entropy, AdamW) and LeNet (two
convolutions with max pooling, three linear layers, SGD with momentum).

`build(M, name, quick)` makes (model, optimizer, batches) for the library M (aotgrad or
torch): the same seeded weights and data on both, so loss curves can be compared."""
import math

import numpy as np

GPT_FULL = dict(vocab=512, block=128, n_embd=256, n_head=4, n_layer=4, batch=8)
GPT_QUICK = dict(vocab=64, block=16, n_embd=32, n_head=2, n_layer=2, batch=2)
LENET_FULL = dict(batch=16)
LENET_QUICK = dict(batch=4)


def gpt_classes(M):
    nn, F = M.nn, M.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self, n_embd, n_head, block):
            super().__init__()
            self.n_head = n_head
            self.c_attn = nn.Linear(n_embd, 3 * n_embd)
            self.c_proj = nn.Linear(n_embd, n_embd)
            self.register_buffer("mask", M.tril(M.ones(block, block)).view(1, 1, block, block))

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(C, dim=2)
            q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class Block(nn.Module):
        def __init__(self, n_embd, n_head, block):
            super().__init__()
            self.ln_1 = nn.LayerNorm(n_embd)
            self.attn = CausalSelfAttention(n_embd, n_head, block)
            self.ln_2 = nn.LayerNorm(n_embd)
            self.c_fc = nn.Linear(n_embd, 4 * n_embd)
            self.c_proj = nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))

    class GPT(nn.Module):
        def __init__(self, vocab, block, n_embd, n_head, n_layer):
            super().__init__()
            self.wte = nn.Embedding(vocab, n_embd)
            self.wpe = nn.Embedding(block, n_embd)
            self.h = nn.ModuleList([Block(n_embd, n_head, block) for _ in range(n_layer)])
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.lm_head.weight = self.wte.weight          # tied

        def forward(self, idx, targets):
            B, T = idx.size()
            pos = M.arange(0, T, dtype=M.long)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return GPT


def lenet_class(M):
    nn, F = M.nn, M.nn.functional

    class LeNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 6, 5)
            self.conv2 = nn.Conv2d(6, 16, 5)
            self.fc1 = nn.Linear(16 * 5 * 5, 120)
            self.fc2 = nn.Linear(120, 84)
            self.fc3 = nn.Linear(84, 10)

        def forward(self, x, y):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            x = x.flatten(1)
            x = F.relu(self.fc1(x))
            x = F.relu(self.fc2(x))
            return F.cross_entropy(self.fc3(x), y)

    return LeNet


def _seeded_weights(model, seed):
    """The same weights on every library: each parameter (tied ones once) drawn from a seeded
    numpy generator, scaled like PyTorch's default init bound (1/sqrt(fan_in))."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, p in model.named_parameters():
        shape = tuple(p.shape)
        fan_in = shape[1] * int(np.prod(shape[2:])) if len(shape) > 1 else shape[0]
        a = rng.uniform(-1, 1, shape) / math.sqrt(fan_in)
        if "ln" in name:
            a = np.ones(shape) if name.endswith("weight") else np.zeros(shape)
        state[name] = a.astype(np.float32)
    return state


def _load(M, model, state):
    with M.no_grad():
        for name, p in model.named_parameters():
            p.copy_(M.tensor(state[name]))


def build(M, name, quick=False, steps=4):
    """(model, optimizer, batches): `steps` batches of seeded data."""
    M.manual_seed(0)
    rng = np.random.default_rng(1)
    if name == "gpt":
        cfg = GPT_QUICK if quick else GPT_FULL
        model = gpt_classes(M)(cfg["vocab"], cfg["block"], cfg["n_embd"], cfg["n_head"],
                               cfg["n_layer"])
        opt = M.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
        shape = (cfg["batch"], cfg["block"])
        batches = [(M.tensor(rng.integers(0, cfg["vocab"], shape)),
                    M.tensor(rng.integers(0, cfg["vocab"], shape))) for _ in range(steps)]
    elif name == "lenet":
        cfg = LENET_QUICK if quick else LENET_FULL
        model = lenet_class(M)()
        opt = M.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        batches = [(M.tensor(rng.standard_normal((cfg["batch"], 1, 32, 32)).astype(np.float32)),
                    M.tensor(rng.integers(0, 10, cfg["batch"]))) for _ in range(steps)]
    else:
        raise ValueError(f"unknown model {name!r}")
    _load(M, model, _seeded_weights(model, 2))
    return model, opt, batches
