"""RAdam, Adam with a rectified adaptive learning rate (Liu et al.), as torch.optim.RAdam.

>>> model = nn.Linear(3, 2)
>>> opt = optim.RAdam(model.parameters(), lr=1e-3)
"""
import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.optim._update import (addcmul, as_f64, check_betas, check_nonnegative,
                                   first_step_state, grads_of, lerp_, weight_decay)
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import multi_tensor, ops
from aotgrad.runtime.factories import tensor
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
                pairs = list(grads_of(g))
                for p, _ in pairs:
                    first_step_state(self.state[p], p, "exp_avg", "exp_avg_sq")
                if not self._multi_tensor_step(g, pairs):
                    for p, grad in pairs:
                        self._one_param_step(g, p, grad)
        return loss

    @staticmethod
    def _scalars(step, b1, b2, dtype):
        """At `step` (float32 0-d): 1 - b1^t and the rectification r_t in `dtype`, whether
        rho_t > 5 (a bool 0-d tensor), and sqrt(1 - b2^t) in `dtype`."""
        t = as_f64(step)
        rho_inf = 2 / (1 - b2) - 1
        b2_t = ops.pow(b2, t)
        bc1 = ops.sub(1.0, ops.pow(b1, t))
        bc2 = ops.sub(1.0, b2_t)
        rho_t = ops.sub(rho_inf, ops.div(ops.mul(ops.mul(t, 2.0), b2_t), bc2))
        rect_sq = ops.div(
            ops.mul(ops.mul(ops.sub(rho_t, 4.0), ops.sub(rho_t, 2.0)), rho_inf),
            ops.mul(rho_t, (rho_inf - 4) * (rho_inf - 2)))
        rectified = ops.gt(rho_t, 5.0)
        # below the threshold rect_sq may be negative: its sqrt is never chosen
        rect = ops.pow(ops.where(rectified, rect_sq, 1.0), 0.5).to(dtype)
        return bc1.to(dtype), rect, rectified, ops.pow(bc2, 0.5).to(dtype)

    def _one_param_step(self, g, p, grad):
        """The per-parameter path, written with tensor ops (what a traced step records)."""
        lr, (b1, b2), eps, wd = g.scalar("lr"), g["betas"], g["eps"], g["weight_decay"]
        state = self.state[p]
        step = state["step"].add_(1)
        grad = weight_decay(p, grad, lr, wd, g["decoupled_weight_decay"])
        m = lerp_(state["exp_avg"], grad, 1 - b1)
        v = state["exp_avg_sq"]
        v.copy_(addcmul(ops.mul(v, b2), grad, grad, 1 - b2))
        bc1, rect, rectified, bc2_sqrt = self._scalars(step, b1, b2, p.dtype)
        m_hat = ops.div(m, bc1)
        adaptive = ops.div(bc2_sqrt, ops.add(ops.sqrt(v), eps))
        step_rect = ops.mul(ops.mul(ops.mul(m_hat, lr), adaptive), rect)
        p.sub_(ops.where(rectified, step_rect, ops.mul(m_hat, lr)))

    def _multi_tensor_step(self, g, pairs):
        """The same step on the numpy buffers of the group (runtime/multi_tensor.py); False
        where the group must take the per-parameter path."""
        lr, (b1, b2), eps, wd = g["lr"], g["betas"], g["eps"], g["weight_decay"]
        if not pairs or not multi_tensor.wanted(g) or not isinstance(lr, (int, float)):
            return False
        keys = ("step", "exp_avg", "exp_avg_sq")
        rows = [(p, grad, *(self.state[p][k] for k in keys)) for p, grad in pairs]
        arrays = multi_tensor.arrays_of(rows, free=(2,))
        if arrays is None:
            return False
        factors = multi_tensor.StepScalars(lambda t, dtype: self._scalars(
            tensor(t, dtype=dt.float32), b1, b2, dt.from_numpy(dtype)))
        for p, grad, step, m, v in arrays:
            f = p.dtype.type
            step += np.float32(1)
            if wd != 0:
                if g["decoupled_weight_decay"]:
                    p *= f(1 - lr * wd)
                else:
                    grad = grad + p * f(wd)
            tmp = np.empty_like(m)                 # one scratch buffer per parameter
            multi_tensor.lerp_(m, grad, 1 - b1, tmp)
            multi_tensor.ema_square_(v, grad, b2, tmp)
            bc1, rect, rectified, bc2_sqrt = factors(float(step), p.dtype)
            m_hat = np.divide(m, bc1)
            m_hat *= f(lr)
            if rectified:
                np.sqrt(v, out=tmp)
                tmp += f(eps)
                np.divide(bc2_sqrt, tmp, out=tmp)
                m_hat *= tmp
                m_hat *= rect
            p -= m_hat
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True
