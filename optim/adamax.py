"""Adamax, Adam's infinity-norm variant (Kingma & Ba, section 7), as torch.optim.Adamax.

>>> model = nn.Linear(3, 2)
>>> opt = optim.Adamax(model.parameters(), lr=2e-3)
"""
from aotgrad.optim._update import (as_f64, check_betas, check_nonnegative, first_step_state,
                                   grads_of, lerp_)
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import ops
from aotgrad.runtime.grad_mode import no_grad


class Adamax(Optimizer):
    """m = lerp(m, g, 1 - b1); u = max(b2 u, |g| + eps); p -= lr / (1 - b1^t) * m / u.
    weight_decay adds wd * p to g first; maximize ascends.

    State per parameter: "step" (float32 0-d), "exp_avg", "exp_inf"."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach=None, *, maximize=False, differentiable=False, capturable=False):
        check_nonnegative(lr=lr, eps=eps)
        check_betas(betas)
        check_nonnegative(weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    def step(self, closure=None):
        loss = self._closure(closure)
        with no_grad():
            for g in self.param_groups:
                lr, (b1, b2), eps, wd = g.scalar("lr"), g["betas"], g["eps"], g["weight_decay"]
                for p, grad in grads_of(g):
                    state = first_step_state(self.state[p], p, "exp_avg", "exp_inf")
                    step = state["step"].add_(1)
                    if wd != 0:
                        grad = ops.add(grad, p.detach(), alpha=wd)
                    m = lerp_(state["exp_avg"], grad, 1 - b1)
                    u = state["exp_inf"]
                    u.copy_(ops.maximum(ops.mul(u, b2), ops.add(ops.abs(grad), eps)))
                    clr = ops.div(lr, ops.sub(1.0, ops.pow(b1, as_f64(step)))).to(p.dtype)
                    p.add_(ops.div(ops.mul(m, -clr), u))
        return loss
