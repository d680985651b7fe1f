"""Adagrad (Duchi et al.) with learning-rate decay, as torch.optim.Adagrad.

>>> model = nn.Linear(3, 2)
>>> opt = optim.Adagrad(model.parameters(), lr=1e-2, lr_decay=1e-4)
"""
from aotgrad.optim._update import as_f64, check_nonnegative, grads_of, new_step
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import ops
from aotgrad.runtime.factories import full_like
from aotgrad.runtime.grad_mode import no_grad


class Adagrad(Optimizer):
    """s += g^2; p -= clr g / (sqrt(s) + eps) with clr = lr / (1 + (t - 1) lr_decay) at step t.
    weight_decay adds wd * p to g first; maximize ascends.

    State per parameter, made by the constructor as PyTorch does (a state dict taken before
    the first step already holds it): "step" (float32 0-d) and "sum" (filled with
    initial_accumulator_value)."""

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
                 eps=1e-10, foreach=None, *, maximize=False, differentiable=False, fused=None):
        check_nonnegative(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                          initial_accumulator_value=initial_accumulator_value, eps=eps)
        # foreach/differentiable/fused are kept in the groups like PyTorch's (no effect here)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps,
                                      weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      foreach=foreach, maximize=maximize,
                                      differentiable=differentiable, fused=fused))
        for g in self.param_groups:
            for p in g["params"]:
                self._init_state(p, g)

    def _init_state(self, p, group):
        state = self.state[p]
        if not state:
            state["step"] = new_step()
            state["sum"] = full_like(p.detach(), group["initial_accumulator_value"])
        return state

    def step(self, closure=None):
        loss = self._closure(closure)
        with no_grad():
            for g in self.param_groups:
                lr, lr_decay, eps, wd = g.scalar("lr"), g["lr_decay"], g["eps"], \
                    g["weight_decay"]
                for p, grad in grads_of(g):
                    state = self._init_state(p, g)
                    step = state["step"].add_(1)
                    if wd != 0:
                        grad = ops.add(grad, p.detach(), alpha=wd)
                    decay = ops.add(ops.mul(ops.sub(as_f64(step), 1.0), lr_decay), 1.0)
                    clr = ops.div(lr, decay).to(p.dtype)
                    s = state["sum"].add_(ops.mul(grad, grad))
                    std = ops.add(ops.sqrt(s), eps)
                    p.add_(ops.div(ops.mul(grad, -clr), std))
        return loss
