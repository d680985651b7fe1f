"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay.

>>> model = nn.Linear(3, 2)
>>> opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
"""
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import ops
from aotgrad.runtime.grad_mode import no_grad


class SGD(Optimizer):
    """PyTorch's SGD: g = grad (+ wd * p); with momentum, b = mu * b + (1 - dampening) * g
    (b = g on the first step) and g = b, or g + mu * b with Nesterov; p -= lr * g
    (p += with maximize=True)."""

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False,
                 fused=None):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        # foreach/differentiable/fused are kept in the groups (state dicts and reprs match
        # PyTorch's); aotgrad has one implementation, so they change nothing
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))

    def step(self, closure=None):
        loss = self._closure(closure)
        with no_grad():
            for g in self.param_groups:
                lr, mu, damp = g.scalar("lr"), g["momentum"], g["dampening"]
                wd, nesterov, maximize = g["weight_decay"], g["nesterov"], g["maximize"]
                for p in g["params"]:
                    if p.grad is None:
                        continue
                    d_p = ops.neg(p.grad) if maximize else p.grad
                    if wd != 0:
                        d_p = ops.add(d_p, p.detach(), alpha=wd)
                    if mu != 0:
                        state = self.state[p]
                        buf = state.get("momentum_buffer")
                        if buf is None:
                            buf = state["momentum_buffer"] = d_p.detach().clone()
                        else:
                            buf.mul_(mu).add_(d_p, alpha=1 - damp)
                        d_p = ops.add(d_p, buf, alpha=mu) if nesterov else buf
                    p.add_(d_p, alpha=-lr)
        return loss
