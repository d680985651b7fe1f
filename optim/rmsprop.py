"""RMSprop (Hinton's lecture 6e) with optional momentum and centering, as torch.optim.RMSprop.

>>> model = nn.Linear(3, 2)
>>> opt = optim.RMSprop(model.parameters(), lr=1e-2, momentum=0.9, centered=True)
"""
import numpy as np

from aotgrad.optim._update import (addcdiv, addcmul, check_nonnegative, grads_of,
                                   lerp_, new_step)
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import multi_tensor, ops
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
        # foreach (None: the multi-tensor path where it can run) chooses the multi-tensor
        # step; differentiable=True keeps the per-parameter one; capturable changes nothing
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps,
                                      centered=centered, weight_decay=weight_decay,
                                      capturable=capturable, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    def step(self, closure=None):
        loss = self._closure(closure)
        with no_grad():
            for g in self.param_groups:
                pairs = list(grads_of(g))
                for p, _ in pairs:
                    self._init_state(g, p)
                if not self._multi_tensor_step(g, pairs):
                    for p, grad in pairs:
                        self._one_param_step(g, p, grad)
        return loss

    def _init_state(self, g, p):
        state = self.state[p]
        if not state:
            state["step"] = new_step()
            state["square_avg"] = zeros_like(p.detach())
            if g["momentum"] > 0:
                state["momentum_buffer"] = zeros_like(p.detach())
            if g["centered"]:
                state["grad_avg"] = zeros_like(p.detach())

    def _one_param_step(self, g, p, grad):
        """The per-parameter path, written with tensor ops (what a traced step records)."""
        lr, alpha, eps = g.scalar("lr"), g["alpha"], g["eps"]
        wd, mom, centered = g["weight_decay"], g["momentum"], g["centered"]
        state = self.state[p]
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

    def _multi_tensor_step(self, g, pairs):
        """The same step on the numpy buffers of the group (runtime/multi_tensor.py); False
        where the group must take the per-parameter path."""
        lr, alpha, eps = g["lr"], g["alpha"], g["eps"]
        wd, mom, centered = g["weight_decay"], g["momentum"], g["centered"]
        if not pairs or not multi_tensor.wanted(g) or not isinstance(lr, (int, float)):
            return False
        keys = ("step", "square_avg") + (("momentum_buffer",) if mom > 0 else ()) + \
            (("grad_avg",) if centered else ())
        rows = [(p, grad, *(self.state[p][k] for k in keys)) for p, grad in pairs]
        arrays = multi_tensor.arrays_of(rows, free=(2,))
        if arrays is None:
            return False
        for p, grad, step, sq, *rest in arrays:
            f = p.dtype.type
            step += np.float32(1)
            if wd != 0:
                grad = grad + p * f(wd)
            tmp = np.empty_like(sq)                # one scratch buffer per parameter
            multi_tensor.ema_square_(sq, grad, alpha, tmp)
            if centered:
                ga = rest[-1]
                multi_tensor.lerp_(ga, grad, 1 - alpha, tmp)
                np.multiply(ga, f(-1), out=tmp)    # addcmul(sq, ga, ga, -1)
                tmp *= ga
                tmp += sq
                np.sqrt(tmp, out=tmp)
            else:
                np.sqrt(sq, out=tmp)
            tmp += f(eps)
            if mom > 0:
                buf = rest[0]
                buf *= f(mom)                      # addcdiv(buf * mom, g, avg)
                np.divide(grad, tmp, out=tmp)
                buf += tmp
                np.multiply(buf, f(-lr), out=tmp)
                p += tmp
            else:
                upd = grad * f(-lr)
                upd /= tmp
                p += upd
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True
