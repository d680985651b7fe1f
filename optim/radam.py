"""RAdam, Adam with a rectified adaptive learning rate (Liu et al.), as torch.optim.RAdam.

>>> model = nn.Linear(3, 2)
>>> opt = optim.RAdam(model.parameters(), lr=1e-3)
"""
import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.optim._update import (addcmul, as_f64, check_betas, check_nonnegative,
                                   first_step_state, fused_arrays, fused_kernels, grads_of,
                                   kernel_factors, lerp_by_, moment_factors, split_weight_decay)
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import multi_tensor, ops
from aotgrad.runtime.factories import tensor
from aotgrad.runtime.grad_mode import no_grad


def radam_update(p, grad, m, v, factors, lerp_from_end):
    """One parameter's RAdam update in place, written with tensor ops: the per-parameter step
    runs it, and the fused step runs it compiled over flat buffers (one source). `factors`
    (Python numbers or 0-d tensors): lerp (the factor of lerp_by_ for the weight 1 - b1),
    b2, one_minus_b2, lr, eps, and at this step bc1, bc2_sqrt, rect and rectified (a bool
    0-d tensor: rho_t > 5), and "decay" (decoupled: p *= decay) or "l2" (grad += l2 * p)
    where there is weight decay; `lerp_from_end`: lerp_high(1 - b1)."""
    if "decay" in factors:
        p.mul_(factors["decay"])
    elif "l2" in factors:
        grad = ops.add(grad, p.detach(), alpha=factors["l2"])
    lerp_by_(m, grad, factors["lerp"], lerp_from_end)
    v.copy_(addcmul(ops.mul(v, factors["b2"]), grad, grad, factors["one_minus_b2"]))
    lr = factors["lr"]
    m_hat = ops.div(m, factors["bc1"])
    adaptive = ops.div(factors["bc2_sqrt"], ops.add(ops.sqrt(v), factors["eps"]))
    step_rect = ops.mul(ops.mul(ops.mul(m_hat, lr), adaptive), factors["rect"])
    p.sub_(ops.where(factors["rectified"], step_rect, ops.mul(m_hat, lr)))


# the fused step's scalars, in the order of its scalar vector (the first: the decoupled
# decay factor or the L2 factor, whichever the flags say; "rectified" 1 or 0)
_SCALAR_NAMES = ("weight_decay", "lerp", "b2", "one_minus_b2", "lr", "eps", "bc1",
                 "bc2_sqrt", "rect", "rectified")


def _radam_kernel_body(tensors, scalars, flags):
    """radam_update over flat buffers (p, grad, exp_avg, exp_avg_sq) with its factors read
    from the scalar vector; flags = (decoupled: True/False, or None without weight decay,
    lerp_from_end, maximize)."""
    decoupled, high, maximize = flags
    p, grad, m, v = tensors
    factors = split_weight_decay(kernel_factors(scalars, _SCALAR_NAMES), decoupled)
    factors["rectified"] = ops.gt(factors["rectified"], 0.5)
    radam_update(p, ops.neg(grad) if maximize else grad, m, v, factors, high)


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
                if not self._fused_step(g, pairs) and not self._multi_tensor_step(g, pairs):
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
        factors, high = moment_factors(lr, b1, b2, eps, wd, g["decoupled_weight_decay"])
        (factors["bc1"], factors["rect"], factors["rectified"],
         factors["bc2_sqrt"]) = self._scalars(step, b1, b2, p.dtype)
        radam_update(p, grad, state["exp_avg"], state["exp_avg_sq"], factors, high)

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

    def _fused_step(self, g, pairs):
        """The same step as one generated kernel per parameter (radam_update compiled over
        flat buffers, runtime/kernel_library.py); False where the group must take another
        path, or the kernel is not compiled yet."""
        lr, (b1, b2), eps, wd = g["lr"], g["betas"], g["eps"], g["weight_decay"]
        found = fused_arrays(self.state, g, pairs, ("step", "exp_avg", "exp_avg_sq"), free=(2,))
        if found is None:
            return False
        rows, arrays = found
        decoupled = bool(g["decoupled_weight_decay"]) if wd != 0 else None
        constant, high = moment_factors(lr, b1, b2, eps, wd, decoupled)
        kernels = fused_kernels("radam", arrays, 4, len(_SCALAR_NAMES), _radam_kernel_body,
                                (decoupled, high, bool(g["maximize"])))
        if kernels is None:
            return False
        head = [constant.get("decay", constant.get("l2", 0))] + \
            [constant[k] for k in ("lerp", "b2", "one_minus_b2", "lr", "eps")]

        def scalars(t, dtype):
            # the scalar vector at step t, by the per-parameter path's own ops
            bc1, rect, rectified, bc2_sqrt = self._scalars(tensor(t, dtype=dt.float32), b1,
                                                           b2, dt.from_numpy(dtype))
            return (np.array(head + [bc1._value, bc2_sqrt._value, rect._value,
                                     1 if bool(rectified._value) else 0], dtype),)
        factors = multi_tensor.StepScalars(scalars)
        one = np.float32(1)
        for p, grad, step, m, v in arrays:
            step += one
            kernels[p.dtype](p.size, [p, grad, m, v], factors(float(step), p.dtype)[0])
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True
