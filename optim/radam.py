"""RAdam, Adam with a rectified adaptive learning rate (Liu et al.), as torch.optim.RAdam.

>>> model = nn.Linear(3, 2)
>>> opt = optim.RAdam(model.parameters(), lr=1e-3)
"""
from aotgrad.optim._update import (addcmul, as_f64, check_betas, check_nonnegative,
                                   first_step_state, grads_of, lerp_)
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import ops
from aotgrad.runtime.grad_mode import no_grad


class RAdam(Optimizer):
    """m = lerp(m, g, 1 - b1), v = b2 v + (1 - b2) g^2, m_hat = m / (1 - b1^t). With
    rho_inf = 2 / (1 - b2) - 1 and rho_t = rho_inf - 2 t b2^t / (1 - b2^t): where rho_t > 5,
    p -= lr m_hat sqrt(1 - b2^t) / (sqrt(v) + eps) r_t with the rectification
    r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t)); before
    that, p -= lr m_hat (plain momentum SGD). weight_decay adds wd * p to g (L2), or with
    decoupled_weight_decay multiplies p by 1 - lr wd (RAdamW); maximize ascends.

    The rho_t > 5 choice is a `where` on tensors, so a compiled step need not specialise on
    the step count. State per parameter: "step" (float32 0-d), "exp_avg", "exp_avg_sq"."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False,
                 capturable=False, differentiable=False):
        check_nonnegative(lr=lr, eps=eps)
        check_betas(betas)
        check_nonnegative(weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, maximize=maximize,
                                      foreach=foreach, capturable=capturable,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      differentiable=differentiable))

    def step(self, closure=None):
        loss = self._closure(closure)
        with no_grad():
            for g in self.param_groups:
                lr, (b1, b2), eps, wd = g.scalar("lr"), g["betas"], g["eps"], g["weight_decay"]
                rho_inf = 2 / (1 - b2) - 1
                for p, grad in grads_of(g):
                    state = first_step_state(self.state[p], p, "exp_avg", "exp_avg_sq")
                    t = as_f64(state["step"].add_(1))
                    if wd != 0:
                        if g["decoupled_weight_decay"]:
                            p.mul_(1 - lr * wd)
                        else:
                            grad = ops.add(grad, p.detach(), alpha=wd)
                    m = lerp_(state["exp_avg"], grad, 1 - b1)
                    v = state["exp_avg_sq"]
                    v.copy_(addcmul(ops.mul(v, b2), grad, grad, 1 - b2))
                    b2_t = ops.pow(b2, t)
                    bc1 = ops.sub(1.0, ops.pow(b1, t))
                    bc2 = ops.sub(1.0, b2_t)
                    m_hat = ops.div(m, bc1.to(p.dtype))
                    rho_t = ops.sub(rho_inf, ops.div(ops.mul(ops.mul(t, 2.0), b2_t), bc2))
                    rect_sq = ops.div(
                        ops.mul(ops.mul(ops.sub(rho_t, 4.0), ops.sub(rho_t, 2.0)), rho_inf),
                        ops.mul(rho_t, (rho_inf - 4) * (rho_inf - 2)))
                    rectified = ops.gt(rho_t, 5.0)
                    # below the threshold rect_sq may be negative: its sqrt is never chosen
                    rect = ops.pow(ops.where(rectified, rect_sq, 1.0), 0.5).to(p.dtype)
                    adaptive = ops.div(ops.pow(bc2, 0.5).to(p.dtype),
                                       ops.add(ops.sqrt(v), eps))
                    step_rect = ops.mul(ops.mul(ops.mul(m_hat, lr), adaptive), rect)
                    p.sub_(ops.where(rectified, step_rect, ops.mul(m_hat, lr)))
        return loss
