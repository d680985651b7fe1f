"""The six benchmark workloads of issue 6: sizes, seeded inputs, model code and cost models.

Each workload is one loss function written once against the PyTorch-style API (it runs
unchanged on `aotgrad` and on `torch`, whose APIs match) and once with `jax.numpy`. Inputs
are float32 numpy arrays made from a fixed seed, so every system sees the same numbers.

    wl = WORKLOADS["W1"]
    arrays = wl.inputs(quick=False)          # {name: np.ndarray}
    loss = wl.fn(aotgrad, *tensors)          # tensors in wl.names order

Cost models (`bytes_moved`, `matmul_flops`) are lower bounds for a forward call followed
by a separate backward call: each input read once by the forward, inputs read again and
input gradients written once by the backward (intermediates assumed to stay in cache or
be recomputed). They feed the roofline line, not any correctness check.
"""
import math

import numpy as np

F32 = 4  # bytes per float32


class Workload:
    """A named loss function with its inputs and cost model.

    `params` maps each input name to (shape_full, shape_quick, kind) with kind one of
    "normal" (standard normal), ("uniform", fan_in) (PyTorch's Linear init bound 1/sqrt(fan_in)),
    "ones", "zeros", ("labels", classes_full, classes_quick). `grad` lists the inputs that
    require grad."""

    def __init__(self, key, title, fn, jax_fn, params, grad, bytes_moved, matmul_flops, seed):
        self.key, self.title, self.fn, self.jax_fn = key, title, fn, jax_fn
        self.params, self.grad, self.seed = params, grad, seed
        self._bytes, self._flops = bytes_moved, matmul_flops
        self.names = list(params)

    def shapes(self, quick):
        return {n: (p[1] if quick else p[0]) for n, p in self.params.items()}

    def inputs(self, quick=False):
        rng = np.random.default_rng(self.seed)
        out = {}
        for name, (full, small, kind) in self.params.items():
            shape = small if quick else full
            if kind == "normal":
                a = rng.standard_normal(shape, dtype=np.float32)
            elif kind == "ones":
                a = np.ones(shape, np.float32)
            elif kind == "zeros":
                a = np.zeros(shape, np.float32)
            elif kind[0] == "uniform":
                fan_in = shape[-1] if kind[1] is None else kind[1]
                bound = 1.0 / math.sqrt(fan_in)
                a = rng.uniform(-bound, bound, shape).astype(np.float32)
            elif kind[0] == "labels":
                classes = kind[2] if quick else kind[1]
                a = rng.integers(0, classes, shape).astype(np.int64)
            else:
                raise ValueError(f"workload {self.key}: unknown input kind {kind!r}")
            out[name] = a
        return out

    def bytes_moved(self, quick=False):
        return self._bytes(self.shapes(quick))

    def matmul_flops(self, quick=False):
        return self._flops(self.shapes(quick))


# ---- W1: pointwise chain + sum -------------------------------------------------------------
def w1(T, x):
    return (T.tanh(1.5 * x + 0.5) * T.sigmoid(x) + 0.1 * T.exp(-x * x)).sum()


def w1_jax(x):
    import jax.numpy as jnp
    import jax
    return jnp.sum(jnp.tanh(1.5 * x + 0.5) * jax.nn.sigmoid(x) + 0.1 * jnp.exp(-x * x))


def _w1_bytes(s):
    n = s["x"][0]
    return 3 * n * F32  # fwd reads x; bwd reads x, writes dx


# ---- W2: MLP 784-1024-1024-10, ReLU, cross-entropy -----------------------------------------
def w2(T, x, labels, w1, b1, w2, b2, w3, b3):
    F = T.nn.functional
    h = F.relu(F.linear(x, w1, b1))
    h = F.relu(F.linear(h, w2, b2))
    return F.cross_entropy(F.linear(h, w3, b3), labels)


def w2_jax(x, labels, w1, b1, w2, b2, w3, b3):
    import jax
    import jax.numpy as jnp
    h = jax.nn.relu(x @ w1.T + b1)
    h = jax.nn.relu(h @ w2.T + b2)
    logp = jax.nn.log_softmax(h @ w3.T + b3, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def _mlp_dims(s):
    return [s["w1"][1], s["w1"][0], s["w2"][0], s["w3"][0]]


def _w2_flops(s):
    b = s["x"][0]
    d = _mlp_dims(s)
    fwd = sum(2 * b * d[i] * d[i + 1] for i in range(3))
    dx = sum(2 * b * d[i] * d[i + 1] for i in range(1, 3))  # x itself needs no grad
    return 2 * fwd + dx  # fwd, dW (= fwd), dX of layers 2 and 3


def _w2_bytes(s):
    b = s["x"][0]
    d = _mlp_dims(s)
    p = sum(d[i] * d[i + 1] + d[i + 1] for i in range(3))
    acts = b * sum(d[1:])
    return (3 * p + 2 * b * d[0] + 2 * acts) * F32  # params r,r,w(grad); x r,r; acts w,r


# ---- W3: x + gelu_tanh(layernorm(x) * g + b), loss sum(y^2) ---------------------------------
def w3(T, x, g, b):
    F = T.nn.functional
    y = x + F.gelu(F.layer_norm(x, (x.shape[-1],), g, b), approximate="tanh")
    return (y * y).sum()


def _ln_jax(x, g, b, eps=1e-5):
    import jax.numpy as jnp
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) * (1.0 / jnp.sqrt(var + eps)) * g + b


def w3_jax(x, g, b):
    import jax
    import jax.numpy as jnp
    y = x + jax.nn.gelu(_ln_jax(x, g, b), approximate=True)
    return jnp.sum(y * y)


def _w3_bytes(s):
    m, d = s["x"]
    return (3 * m * d + 6 * d) * F32  # x r (fwd), x r + dx w (bwd); g, b small


# ---- W4: pre-LN transformer block, causal -----------------------------------------------
W4_HEADS = 4


def w4(T, x, ln1_g, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_g, ln2_b, w_fc, b_fc, w_pr, b_pr):
    F = T.nn.functional
    bsz, t, d = x.shape
    h = W4_HEADS
    a = F.layer_norm(x, (d,), ln1_g, ln1_b)
    qkv = F.linear(a, w_qkv, b_qkv).reshape(bsz, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
    q, k, v = T.unbind(qkv, 0)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + F.linear(o.transpose(1, 2).reshape(bsz, t, d), w_o, b_o)
    m = F.gelu(F.linear(F.layer_norm(x, (d,), ln2_g, ln2_b), w_fc, b_fc), approximate="tanh")
    y = x + F.linear(m, w_pr, b_pr)
    return (y * y).mean()


def w4_jax(x, ln1_g, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_g, ln2_b, w_fc, b_fc, w_pr, b_pr):
    import jax
    import jax.numpy as jnp
    bsz, t, d = x.shape
    h = W4_HEADS
    a = _ln_jax(x, ln1_g, ln1_b)
    qkv = (a @ w_qkv.T + b_qkv).reshape(bsz, t, 3, h, d // h).transpose(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    s = (q @ jnp.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(d // h))
    mask = jnp.tril(jnp.ones((t, t), bool))
    p = jax.nn.softmax(jnp.where(mask, s, -jnp.inf), axis=-1)
    o = (p @ v).transpose(0, 2, 1, 3).reshape(bsz, t, d)
    x = x + o @ w_o.T + b_o
    m = jax.nn.gelu(_ln_jax(x, ln2_g, ln2_b) @ w_fc.T + b_fc, approximate=True)
    y = x + m @ w_pr.T + b_pr
    return jnp.mean(y * y)


def _w4_flops(s):
    bsz, t, d = s["x"]
    f = s["w_fc"][0]
    tokens = bsz * t
    linear = 2 * tokens * d * (3 * d + d + 2 * f)
    attn = 2 * 2 * bsz * t * t * d  # q k^T and p v, dense (the causal half is not skipped)
    return 3 * (linear + attn)  # fwd; bwd = dX + dW (twice the forward)


def _w4_bytes(s):
    bsz, t, d = s["x"]
    f = s["w_fc"][0]
    p = 4 * d + 3 * d * d + 3 * d + d * d + d + 2 * d * f + f + d
    return (3 * p + 3 * bsz * t * d) * F32


# ---- W5: MLP 8-16-1 on batch 4 (per-call overhead) ----------------------------------------
def w5(T, x, y, w1, b1, w2, b2):
    F = T.nn.functional
    return F.mse_loss(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), y)


def w5_jax(x, y, w1, b1, w2, b2):
    import jax
    import jax.numpy as jnp
    return jnp.mean(jnp.square(jax.nn.relu(x @ w1.T + b1) @ w2.T + b2 - y))


def _w5_flops(s):
    b = s["x"][0]
    d0, d1, d2 = s["w1"][1], s["w1"][0], s["w2"][0]
    return 3 * 2 * b * d1 * (d0 + d2)


def _w5_bytes(s):
    b = s["x"][0]
    d0, d1, d2 = s["w1"][1], s["w1"][0], s["w2"][0]
    return (3 * (d1 * d0 + d1 + d2 * d1 + d2) + b * (d0 + d2)) * F32


# ---- W6: softmax cross-entropy on (4096, 1000) ----------------------------------------------
def w6(T, logits, labels):
    return T.nn.functional.cross_entropy(logits, labels)


def w6_jax(logits, labels):
    import jax
    import jax.numpy as jnp
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def _w6_bytes(s):
    n, c = s["logits"]
    return 3 * n * c * F32 + 2 * n * 8


def _zero(s):
    return 0


_U = ("uniform", None)
WORKLOADS = {w.key: w for w in [
    Workload("W1", "sum(tanh(1.5x+.5)*sigmoid(x)+.1exp(-x^2)), 4M", w1, w1_jax,
             {"x": ((1 << 22,), (1 << 16,), "normal")}, ["x"], _w1_bytes, _zero, 1),
    Workload("W2", "MLP 784-1024-1024-10 b256 ReLU CE", w2, w2_jax,
             {"x": ((256, 784), (16, 784), "normal"),
              "labels": ((256,), (16,), ("labels", 10, 10)),
              "w1": ((1024, 784), (64, 784), _U), "b1": ((1024,), (64,), ("uniform", 784)),
              "w2": ((1024, 1024), (64, 64), _U), "b2": ((1024,), (64,), ("uniform", 1024)),
              "w3": ((10, 1024), (10, 64), _U), "b3": ((10,), (10,), ("uniform", 1024))},
             ["w1", "b1", "w2", "b2", "w3", "b3"], _w2_bytes, _w2_flops, 2),
    Workload("W3", "x+gelu_tanh(LN(x)*g+b) (8192,1024) sum(y^2)", w3, w3_jax,
             {"x": ((8192, 1024), (256, 128), "normal"),
              "g": ((1024,), (128,), "ones"), "b": ((1024,), (128,), "zeros")},
             ["x", "g", "b"], _w3_bytes, _zero, 3),
    Workload("W4", "pre-LN block b8 T128 d256 h4 mlp1024 causal", w4, w4_jax,
             {"x": ((8, 128, 256), (2, 16, 32), "normal"),
              "ln1_g": ((256,), (32,), "ones"), "ln1_b": ((256,), (32,), "zeros"),
              "w_qkv": ((768, 256), (96, 32), _U), "b_qkv": ((768,), (96,), ("uniform", 256)),
              "w_o": ((256, 256), (32, 32), _U), "b_o": ((256,), (32,), ("uniform", 256)),
              "ln2_g": ((256,), (32,), "ones"), "ln2_b": ((256,), (32,), "zeros"),
              "w_fc": ((1024, 256), (128, 32), _U), "b_fc": ((1024,), (128,), ("uniform", 256)),
              "w_pr": ((256, 1024), (32, 128), _U), "b_pr": ((256,), (32,), ("uniform", 1024))},
             ["x", "ln1_g", "ln1_b", "w_qkv", "b_qkv", "w_o", "b_o", "ln2_g", "ln2_b", "w_fc",
              "b_fc", "w_pr", "b_pr"], _w4_bytes, _w4_flops, 4),
    Workload("W5", "MLP 8-16-1 batch 4 MSE (per-call overhead)", w5, w5_jax,
             {"x": ((4, 8), (4, 8), "normal"), "y": ((4, 1), (4, 1), "normal"),
              "w1": ((16, 8), (16, 8), _U), "b1": ((16,), (16,), ("uniform", 8)),
              "w2": ((1, 16), (1, 16), _U), "b2": ((1,), (1,), ("uniform", 16))},
             ["w1", "b1", "w2", "b2"], _w5_bytes, _w5_flops, 5),
    Workload("W6", "softmax cross-entropy (4096,1000)", w6, w6_jax,
             {"logits": ((4096, 1000), (256, 100), "normal"),
              "labels": ((4096,), (256,), ("labels", 1000, 100))},
             ["logits"], _w6_bytes, _zero, 6),
]}
