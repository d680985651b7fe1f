"""The small GPT of models.py written for JAX, as the jax.jit peer of bench_models.py: the
same architecture (token and position embeddings, pre-LN blocks of causal self-attention
and an exact-erf GELU MLP, a tied output head, cross-entropy), the same seeded weights and
batches, and AdamW with PyTorch's defaults (betas 0.9/0.999, eps 1e-8, lr 3e-4, weight decay
0.1 on every parameter), the whole step (loss, gradients, update) one `jax.jit` call.

    step, params, batches = build_gpt(quick=False, steps=8)
    params, loss = step(params, *batches[0])      # params: (weights, m, v, t)
"""
import math

import numpy as np

import models


def _state_and_batches(quick, steps):
    """The weights (by parameter name, the tied head once as wte.weight) and the batches
    that models.build gives torch and aotgrad, read off an aotgrad build."""
    import aotgrad
    model, _, batches = models.build(aotgrad, "gpt", quick, steps=steps)
    state = {k: v.detach().numpy().copy() for k, v in model.named_parameters()}
    return state, [(x.numpy().astype(np.int32), y.numpy().astype(np.int32))
                   for x, y in batches]


def _layer_norm(x, w, b):
    import jax.numpy as jnp
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + 1e-5) * w + b


def _loss(p, idx, targets, cfg):
    import jax
    import jax.numpy as jnp
    B, T = idx.shape
    C, H = cfg["n_embd"], cfg["n_head"]
    x = p["wte.weight"][idx] + p["wpe.weight"][jnp.arange(T)]
    mask = jnp.tril(jnp.ones((T, T), bool))
    for i in range(cfg["n_layer"]):
        h = lambda n: p[f"h.{i}.{n}"]   # noqa: E731
        a = _layer_norm(x, h("ln_1.weight"), h("ln_1.bias"))
        qkv = a @ h("attn.c_attn.weight").T + h("attn.c_attn.bias")
        q, k, v = (t.reshape(B, T, H, C // H).transpose(0, 2, 1, 3)
                   for t in jnp.split(qkv, 3, axis=2))
        att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(C // H))
        att = jax.nn.softmax(jnp.where(mask, att, -jnp.inf), axis=-1)
        y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
        x = x + y @ h("attn.c_proj.weight").T + h("attn.c_proj.bias")
        m = _layer_norm(x, h("ln_2.weight"), h("ln_2.bias")) @ h("c_fc.weight").T + \
            h("c_fc.bias")
        x = x + jax.nn.gelu(m, approximate=False) @ h("c_proj.weight").T + h("c_proj.bias")
    logits = _layer_norm(x, p["ln_f.weight"], p["ln_f.bias"]) @ p["wte.weight"].T
    logp = jax.nn.log_softmax(logits.reshape(B * T, -1), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets.reshape(-1, 1), axis=1))


def build_gpt(quick=False, steps=4, lr=3e-4, weight_decay=0.1, betas=(0.9, 0.999),
              eps=1e-8):
    """(step, params, batches): step(params, x, y) -> (params, loss), jitted, with the
    parameters' buffers donated."""
    import jax
    import jax.numpy as jnp
    cfg = models.GPT_QUICK if quick else models.GPT_FULL
    state, batches = _state_and_batches(quick, steps)
    b1, b2 = betas

    def step(params, idx, targets):
        w, m, v, t = params
        loss, g = jax.value_and_grad(_loss)(w, idx, targets, cfg)
        t = t + 1
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        new_w, new_m, new_v = {}, {}, {}
        for k in w:
            new_m[k] = b1 * m[k] + (1 - b1) * g[k]
            new_v[k] = b2 * v[k] + (1 - b2) * g[k] * g[k]
            decayed = w[k] * (1 - lr * weight_decay)
            new_w[k] = decayed - lr * (new_m[k] / c1) / (jnp.sqrt(new_v[k] / c2) + eps)
        return (new_w, new_m, new_v, t), loss

    w = {k: jnp.asarray(a) for k, a in state.items()}
    zeros = {k: jnp.zeros_like(a) for k, a in w.items()}
    params = (w, zeros, {k: jnp.zeros_like(a) for k, a in w.items()}, jnp.float32(0))
    return jax.jit(step, donate_argnums=(0,)), params, \
        [(jnp.asarray(x), jnp.asarray(y)) for x, y in batches]
