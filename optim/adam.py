"""Adam and AdamW (decoupled weight decay), with optional AMSGrad.

>>> model = nn.Linear(3, 2)
>>> opt = optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
"""

from aotgrad.ir import dtypes as dt
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import ops
from aotgrad.runtime.factories import tensor, zeros_like
from aotgrad.runtime.grad_mode import no_grad


def _check(lr, betas, eps, weight_decay):
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr}")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps}")
    if not 0.0 <= betas[0] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
    if not 0.0 <= betas[1] < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay}")


class Adam(Optimizer):
    """Adam (Kingma & Ba) as in PyTorch: m = b1 m + (1-b1) g, v = b2 v + (1-b2) g^2,
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). weight_decay adds wd * p to
    the gradient (L2); AdamW decays the weights directly instead.

    State per parameter: "step" (a float32 0-d tensor, so a compiled step need not
    specialise on it), "exp_avg", "exp_avg_sq" and, with amsgrad, "max_exp_avg_sq"."""

    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False):
        _check(lr, betas, eps, weight_decay)
        # foreach/capturable/differentiable/fused are kept in the groups like PyTorch's (they
        # change nothing here)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach,
                                      capturable=capturable, differentiable=differentiable,
                                      fused=fused,
                                      decoupled_weight_decay=decoupled_weight_decay or
                                      self._decoupled))

    def step(self, closure=None):
        loss = self._closure(closure)
        with no_grad():
            for g in self.param_groups:
                lr, (b1, b2), eps = g.scalar("lr"), g["betas"], g["eps"]
                wd, amsgrad, maximize = g["weight_decay"], g["amsgrad"], g["maximize"]
                decoupled = g.get("decoupled_weight_decay", self._decoupled)
                for p in g["params"]:
                    if p.grad is None:
                        continue
                    grad = ops.neg(p.grad) if maximize else p.grad
                    state = self.state[p]
                    if not state:
                        state["step"] = tensor(0.0, dtype=dt.float32)
                        state["exp_avg"] = zeros_like(p.detach())
                        state["exp_avg_sq"] = zeros_like(p.detach())
                        if amsgrad:
                            state["max_exp_avg_sq"] = zeros_like(p.detach())
                    step, m, v = state["step"], state["exp_avg"], state["exp_avg_sq"]
                    step.add_(1)
                    if wd != 0:
                        if decoupled:
                            p.mul_(1 - lr * wd)
                        else:
                            grad = ops.add(grad, p.detach(), alpha=wd)
                    m.add_(ops.mul(ops.sub(grad, m), 1 - b1))          # lerp toward grad
                    v.mul_(b2).add_(ops.mul(ops.mul(grad, 1 - b2), grad))
                    # bias corrections in float64 from the float32 step count (PyTorch does
                    # them in Python floats), rounded to the parameter dtype once
                    t64 = step.to(dt.float64)
                    bc1 = ops.sub(1.0, ops.pow(b1, t64))
                    bc2_sqrt = ops.sqrt(ops.sub(1.0, ops.pow(b2, t64))).to(p.dtype)
                    if amsgrad:
                        mx = state["max_exp_avg_sq"]
                        mx.copy_(ops.maximum(mx, v))
                        denom = ops.add(ops.div(ops.sqrt(mx), bc2_sqrt), eps)
                    else:
                        denom = ops.add(ops.div(ops.sqrt(v), bc2_sqrt), eps)
                    step_size = ops.div(lr, bc1).to(p.dtype)
                    p.sub_(ops.mul(ops.div(m, denom), step_size))
        return loss


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * wd before the Adam update
    (weight_decay defaults to 1e-2)."""

    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False, *, maximize=False, foreach=None, capturable=False,
                 differentiable=False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize,
                         foreach=foreach, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True)
