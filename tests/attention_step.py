"""A small attention-like training step for comparing a compiled step with eager: a
linear layer, a layer norm and a tanh GELU, softmax attention of the sequence with itself
(causally masked or not), a linear head and a cross-entropy, over a batch of 2 sequences.
The codegen tests run it on one tier or another (numpy blocks, the row machine, native row
programs) and compare its loss and gradients with eager's."""
import numpy as np

import aotgrad

# what the attention weights are applied to: h itself, or an activation of it
VALUES = {None: lambda h: h, "gelu": lambda h: aotgrad.nn.functional.gelu(h),
          "silu": lambda h: aotgrad.nn.functional.silu(h)}


def attention_step(seq, width, hidden, classes, seed, masked=True, value=None):
    """(loss_fn, grads): `loss_fn(w1, w2)` the step's loss for weights of shapes
    (hidden, width) and (classes, hidden); `grads(fn)` runs `fn` (loss_fn, or it
    compiled) on fresh leaves of the step's weights and returns [loss, dw1, dw2]."""
    F = aotgrad.nn.functional
    rng = np.random.default_rng(seed)
    x = aotgrad.tensor(rng.standard_normal((2, seq, width)).astype(np.float32))
    labels = aotgrad.tensor(rng.integers(0, classes, (2, seq)))
    w1 = rng.standard_normal((hidden, width)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((classes, hidden)).astype(np.float32) * 0.3
    mask = aotgrad.tensor(np.tril(np.ones((seq, seq), bool)))
    values = VALUES[value]

    def loss_fn(w1, w2):
        h = F.gelu(F.layer_norm(x @ w1.T, (hidden,)), approximate="tanh")
        a = h @ h.transpose(1, 2)
        if masked:
            a = a.masked_fill(~mask, float("-inf"))
        s = F.softmax(a, dim=-1) @ values(h)
        return F.cross_entropy((s @ w2.T).reshape(2 * seq, classes),
                               labels.reshape(2 * seq))

    def grads(fn):
        ps = [aotgrad.tensor(w1, requires_grad=True), aotgrad.tensor(w2, requires_grad=True)]
        loss = fn(*ps)
        loss.backward()
        return [loss.detach().numpy()] + [p.grad.numpy() for p in ps]
    return loss_fn, grads
