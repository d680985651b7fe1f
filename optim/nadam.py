"""NAdam, Adam with Nesterov momentum (Dozat), as torch.optim.NAdam.

>>> model = nn.Linear(3, 2)
>>> opt = optim.NAdam(model.parameters(), lr=2e-3, momentum_decay=4e-3)
"""
import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.optim._update import (addcmul, as_f64, check_betas, check_nonnegative, grads_of,
                                   lerp_, new_step, weight_decay)
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import multi_tensor, ops
from aotgrad.runtime.factories import tensor, zeros_like
from aotgrad.runtime.grad_mode import no_grad


class NAdam(Optimizer):
    """At step t, mu_t = b1 (1 - 0.96^(t psi) / 2) with psi = momentum_decay, and
    P_t = mu_1 ... mu_t (state "mu_product"); m = lerp(m, g, 1 - b1),
    v = b2 v + (1 - b2) g^2, d = sqrt(v / (1 - b2^t)) + eps and
    p -= lr (1 - mu_t) / (1 - P_t) g / d + lr mu_{t+1} / (1 - P_t mu_{t+1}) m / d.
    weight_decay adds wd * p to g (L2), or with decoupled_weight_decay multiplies p by
    1 - lr wd (NAdamW); maximize ascends.

    State per parameter: "step" and "mu_product" (float32 0-d tensors, as PyTorch keeps them:
    the product is rounded to float32 at each step, whatever the parameter's dtype, until a
    loaded state dict casts it to the parameter's dtype, as PyTorch's loading does),
    "exp_avg", "exp_avg_sq"."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, foreach=None,
                 maximize=False, capturable=False, differentiable=False):
        check_nonnegative(lr=lr, eps=eps)
        check_betas(betas)
        check_nonnegative(weight_decay=weight_decay, momentum_decay=momentum_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach,
                                      capturable=capturable, differentiable=differentiable))

    def step(self, closure=None):
        loss = self._closure(closure)
        with no_grad():
            for g in self.param_groups:
                pairs = list(grads_of(g))
                for p, _ in pairs:
                    state = self.state[p]
                    if not state:
                        state["step"] = new_step()
                        state["mu_product"] = tensor(1.0, dtype=dt.float32)
                        state["exp_avg"] = zeros_like(p.detach())
                        state["exp_avg_sq"] = zeros_like(p.detach())
                if not self._multi_tensor_step(g, pairs):
                    for p, grad in pairs:
                        self._one_param_step(g, p, grad)
        return loss

    @staticmethod
    def _scalars(step, mu_product, lr, b1, b2, psi, dtype):
        """At `step` (float32 0-d, already counted): multiply `mu_product` by mu_t in place
        and return (1 - b2^t, the gradient's factor, the average's factor) in `dtype`."""
        t = as_f64(step)
        bc2 = ops.sub(1.0, ops.pow(b2, t)).to(dtype)
        mu = ops.mul(ops.sub(1.0, ops.mul(ops.pow(0.96, ops.mul(t, psi)), 0.5)), b1)
        mu_next = ops.mul(ops.sub(1.0, ops.mul(
            ops.pow(0.96, ops.mul(ops.add(t, 1.0), psi)), 0.5)), b1)
        mu_product.mul_(mu.to(mu_product.dtype))
        prod = mu_product.to(dt.float64)
        c_grad = ops.div(ops.mul(-lr, ops.sub(1.0, mu)), ops.sub(1.0, prod))
        c_avg = ops.div(ops.mul(-lr, mu_next), ops.sub(1.0, ops.mul(prod, mu_next)))
        return bc2, c_grad.to(dtype), c_avg.to(dtype)

    def _one_param_step(self, g, p, grad):
        """The per-parameter path, written with tensor ops (what a traced step records)."""
        lr, (b1, b2), eps, wd = g.scalar("lr"), g["betas"], g["eps"], g["weight_decay"]
        state = self.state[p]
        step = state["step"].add_(1)
        grad = weight_decay(p, grad, lr, wd, g["decoupled_weight_decay"])
        bc2, c_grad, c_avg = self._scalars(step, state["mu_product"], lr, b1, b2,
                                           g["momentum_decay"], p.dtype)
        m = lerp_(state["exp_avg"], grad, 1 - b1)
        v = state["exp_avg_sq"]
        v.copy_(addcmul(ops.mul(v, b2), grad, grad, 1 - b2))
        denom = ops.add(ops.sqrt(ops.div(v, bc2)), eps)
        p.add_(ops.div(ops.mul(grad, c_grad), denom))
        p.add_(ops.div(ops.mul(m, c_avg), denom))

    def _multi_tensor_step(self, g, pairs):
        """The same step on the numpy buffers of the group (runtime/multi_tensor.py); False
        where the group must take the per-parameter path."""
        lr, (b1, b2), eps, wd = g["lr"], g["betas"], g["eps"], g["weight_decay"]
        if not pairs or not multi_tensor.wanted(g) or not isinstance(lr, (int, float)):
            return False
        keys = ("step", "mu_product", "exp_avg", "exp_avg_sq")
        rows = [(p, grad, *(self.state[p][k] for k in keys)) for p, grad in pairs]
        arrays = multi_tensor.arrays_of(rows, free=(2, 3))
        if arrays is None:
            return False

        def scalars(t, prod, prod_dtype, dtype):
            mu_product = tensor(prod, dtype=dt.from_numpy(prod_dtype))
            out = self._scalars(tensor(t, dtype=dt.float32), mu_product, lr, b1, b2,
                                g["momentum_decay"], dt.from_numpy(dtype))
            return (mu_product,) + out
        factors = multi_tensor.StepScalars(scalars)
        for p, grad, step, mu_product, m, v in arrays:
            f = p.dtype.type
            step += np.float32(1)
            if wd != 0:
                if g["decoupled_weight_decay"]:
                    p *= f(1 - lr * wd)
                else:
                    grad = grad + p * f(wd)
            new_prod, bc2, c_grad, c_avg = factors(float(step), float(mu_product),
                                                   mu_product.dtype, p.dtype)
            mu_product[...] = new_prod
            tmp = np.empty_like(m)                 # one scratch buffer per parameter
            multi_tensor.lerp_(m, grad, 1 - b1, tmp)
            multi_tensor.ema_square_(v, grad, b2, tmp)
            denom = np.empty_like(v)
            np.divide(v, bc2, out=denom)
            np.sqrt(denom, out=denom)
            denom += f(eps)
            np.multiply(grad, c_grad, out=tmp)
            tmp /= denom
            p += tmp
            np.multiply(m, c_avg, out=tmp)
            tmp /= denom
            p += tmp
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True
