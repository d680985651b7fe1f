"""RMSprop (Hinton's lecture 6e) with optional momentum and centering, as torch.optim.RMSprop.

>>> model = nn.Linear(3, 2)
>>> opt = optim.RMSprop(model.parameters(), lr=1e-2, momentum=0.9, centered=True)
"""
from aotgrad.optim._update import (addcdiv, addcmul, check_nonnegative, grads_of, lerp_,
                                   new_step)
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import ops
from aotgrad.runtime.factories import zeros_like
from aotgrad.runtime.grad_mode import no_grad


class RMSprop(Optimizer):
    """v = alpha v + (1 - alpha) g^2; with centered, ga = lerp(ga, g, 1 - alpha) and the
    denominator is sqrt(v - ga^2) + eps, else sqrt(v) + eps; with momentum,
    b = momentum b + g / denom and p -= lr b, else p -= lr g / denom. weight_decay adds
    wd * p to g first; maximize ascends.

    State per parameter: "step" (float32 0-d), "square_avg", and "momentum_buffer" (momentum
    > 0) and "grad_avg" (centered), as in PyTorch."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, capturable=False, foreach=None, maximize=False,
                 differentiable=False):
        check_nonnegative(lr=lr, eps=eps, momentum=momentum, weight_decay=weight_decay,
                          alpha=alpha)
        # capturable/foreach/differentiable are kept in the groups like PyTorch's; aotgrad has
        # one implementation, so they change nothing
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps,
                                      centered=centered, weight_decay=weight_decay,
                                      capturable=capturable, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    def step(self, closure=None):
        loss = self._closure(closure)
        with no_grad():
            for g in self.param_groups:
                lr, alpha, eps = g.scalar("lr"), g["alpha"], g["eps"]
                wd, mom, centered = g["weight_decay"], g["momentum"], g["centered"]
                for p, grad in grads_of(g):
                    state = self.state[p]
                    if not state:
                        state["step"] = new_step()
                        state["square_avg"] = zeros_like(p.detach())
                        if mom > 0:
                            state["momentum_buffer"] = zeros_like(p.detach())
                        if centered:
                            state["grad_avg"] = zeros_like(p.detach())
                    state["step"].add_(1)
                    if wd != 0:
                        grad = ops.add(grad, p.detach(), alpha=wd)
                    sq = state["square_avg"]
                    sq.copy_(addcmul(ops.mul(sq, alpha), grad, grad, 1 - alpha))
                    if centered:
                        ga = lerp_(state["grad_avg"], grad, 1 - alpha)
                        avg = ops.sqrt(addcmul(sq, ga, ga, -1))
                    else:
                        avg = ops.sqrt(sq)
                    avg = ops.add(avg, eps)
                    if mom > 0:
                        buf = state["momentum_buffer"]
                        buf.copy_(addcdiv(ops.mul(buf, mom), grad, avg))
                        p.add_(buf, alpha=-lr)
                    else:
                        p.add_(ops.div(ops.mul(grad, -lr), avg))
        return loss

