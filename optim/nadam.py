"""NAdam, Adam with Nesterov momentum (Dozat), as torch.optim.NAdam.

>>> model = nn.Linear(3, 2)
>>> opt = optim.NAdam(model.parameters(), lr=2e-3, momentum_decay=4e-3)
"""
from aotgrad.ir import dtypes as dt
from aotgrad.optim._update import (addcmul, as_f64, check_betas, check_nonnegative, grads_of,
                                   lerp_, new_step)
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import ops
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
                lr, (b1, b2), eps, wd = g.scalar("lr"), g["betas"], g["eps"], g["weight_decay"]
                psi = g["momentum_decay"]
                for p, grad in grads_of(g):
                    state = self.state[p]
                    if not state:
                        state["step"] = new_step()
                        state["mu_product"] = tensor(1.0, dtype=dt.float32)
                        state["exp_avg"] = zeros_like(p.detach())
                        state["exp_avg_sq"] = zeros_like(p.detach())
                    t = as_f64(state["step"].add_(1))
                    bc2 = ops.sub(1.0, ops.pow(b2, t)).to(p.dtype)
                    if wd != 0:
                        if g["decoupled_weight_decay"]:
                            p.mul_(1 - lr * wd)
                        else:
                            grad = ops.add(grad, p.detach(), alpha=wd)
                    mu = ops.mul(ops.sub(1.0, ops.mul(ops.pow(0.96, ops.mul(t, psi)), 0.5)), b1)
                    mu_next = ops.mul(ops.sub(1.0, ops.mul(
                        ops.pow(0.96, ops.mul(ops.add(t, 1.0), psi)), 0.5)), b1)
                    mu_product = state["mu_product"]
                    mu_product.mul_(mu.to(mu_product.dtype))
                    prod = mu_product.to(dt.float64)
                    m = lerp_(state["exp_avg"], grad, 1 - b1)
                    v = state["exp_avg_sq"]
                    v.copy_(addcmul(ops.mul(v, b2), grad, grad, 1 - b2))
                    denom = ops.add(ops.sqrt(ops.div(v, bc2)), eps)
                    c_grad = ops.div(ops.mul(-lr, ops.sub(1.0, mu)), ops.sub(1.0, prod))
                    c_avg = ops.div(ops.mul(-lr, mu_next),
                                    ops.sub(1.0, ops.mul(prod, mu_next)))
                    p.add_(ops.div(ops.mul(grad, c_grad.to(p.dtype)), denom))
                    p.add_(ops.div(ops.mul(m, c_avg.to(p.dtype)), denom))
        return loss
