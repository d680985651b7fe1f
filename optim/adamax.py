"""Adamax, Adam's infinity-norm variant (Kingma & Ba, section 7), as torch.optim.Adamax.

>>> model = nn.Linear(3, 2)
>>> opt = optim.Adamax(model.parameters(), lr=2e-3)
"""
import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.optim._update import (as_f64, check_betas, check_nonnegative, first_step_state,
                                   fused_arrays, fused_kernels, grads_of, kernel_factors, lerp_by_,
                                   lerp_high)
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import multi_tensor, ops
from aotgrad.runtime.factories import tensor
from aotgrad.runtime.grad_mode import no_grad


def adamax_update(p, grad, m, u, factors, lerp_from_end):
    """One parameter's Adamax update in place, written with tensor ops: the per-parameter
    step runs it, and the fused step runs it compiled over flat buffers (one source).
    `factors` (Python numbers or 0-d tensors): lerp (the factor of lerp_by_ for the weight
    1 - b1), b2, eps, neg_clr (-lr / (1 - b1^t)), and "l2" where there is weight decay;
    `lerp_from_end`: lerp_high(1 - b1)."""
    if "l2" in factors:
        grad = ops.add(grad, p.detach(), alpha=factors["l2"])
    lerp_by_(m, grad, factors["lerp"], lerp_from_end)
    u.copy_(ops.maximum(ops.mul(u, factors["b2"]), ops.add(ops.abs(grad), factors["eps"])))
    p.add_(ops.div(ops.mul(m, factors["neg_clr"]), u))


def _lerp(b1):
    """(lerp_by_'s factor, lerp_from_end) for the weight 1 - b1, as _update.lerp_ picks."""
    high = lerp_high(1 - b1)
    return (1.0 - (1 - b1) if high else 1 - b1), high


# the fused step's scalars, in the order of its scalar vector
_SCALAR_NAMES = ("l2", "lerp", "b2", "eps", "neg_clr")


def _adamax_kernel_body(tensors, scalars, flags):
    """adamax_update over flat buffers (p, grad, exp_avg, exp_inf) with its factors read
    from the scalar vector; flags = (weight decay, lerp_from_end, maximize)."""
    has_wd, high, maximize = flags
    p, grad, m, u = tensors
    adamax_update(p, ops.neg(grad) if maximize else grad, m, u,
                  kernel_factors(scalars, _SCALAR_NAMES, dict(l2=has_wd)), high)


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
                pairs = list(grads_of(g))
                for p, _ in pairs:
                    first_step_state(self.state[p], p, "exp_avg", "exp_inf")
                if not self._fused_step(g, pairs) and not self._multi_tensor_step(g, pairs):
                    for p, grad in pairs:
                        self._one_param_step(g, p, grad)
        return loss

    @staticmethod
    def _neg_clr(step, lr, b1, dtype):
        """-lr / (1 - b1^t) at `step` (float32 0-d), in the parameter dtype."""
        return ops.neg(ops.div(lr, ops.sub(1.0, ops.pow(b1, as_f64(step)))).to(dtype))

    def _one_param_step(self, g, p, grad):
        """The per-parameter path, written with tensor ops (what a traced step records)."""
        lr, (b1, b2), eps, wd = g.scalar("lr"), g["betas"], g["eps"], g["weight_decay"]
        state = self.state[p]
        step = state["step"].add_(1)
        factor, high = _lerp(b1)
        factors = dict(lerp=factor, b2=b2, eps=eps, neg_clr=self._neg_clr(step, lr, b1, p.dtype))
        if wd != 0:
            factors["l2"] = wd
        adamax_update(p, grad, state["exp_avg"], state["exp_inf"], factors, high)

    def _multi_tensor_step(self, g, pairs):
        """The same step on the numpy buffers of the group (runtime/multi_tensor.py); False
        where the group must take the per-parameter path."""
        lr, (b1, b2), eps, wd = g["lr"], g["betas"], g["eps"], g["weight_decay"]
        if not pairs or not multi_tensor.wanted(g) or not isinstance(lr, (int, float)):
            return False
        keys = ("step", "exp_avg", "exp_inf")
        rows = [(p, grad, *(self.state[p][k] for k in keys)) for p, grad in pairs]
        arrays = multi_tensor.arrays_of(rows, free=(2,))
        if arrays is None:
            return False
        neg_clr = multi_tensor.StepScalars(lambda t, dtype: (self._neg_clr(
            tensor(t, dtype=dt.float32), lr, b1, dt.from_numpy(dtype)),))
        for p, grad, step, m, u in arrays:
            f = p.dtype.type
            step += np.float32(1)
            if wd != 0:
                grad = grad + p * f(wd)
            tmp = np.empty_like(m)                 # one scratch buffer per parameter
            multi_tensor.lerp_(m, grad, 1 - b1, tmp)
            u *= f(b2)
            np.abs(grad, out=tmp)
            tmp += f(eps)
            u[...] = multi_tensor.maximum_first(u, tmp)
            np.multiply(m, neg_clr(float(step), p.dtype)[0], out=tmp)
            tmp /= u
            p += tmp
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True

    def _fused_step(self, g, pairs):
        """The same step as one generated kernel per parameter (adamax_update compiled over
        flat buffers, runtime/kernel_library.py); False where the group must take another
        path, or the kernel is not compiled yet."""
        lr, (b1, b2), eps, wd = g["lr"], g["betas"], g["eps"], g["weight_decay"]
        found = fused_arrays(self.state, g, pairs, ("step", "exp_avg", "exp_inf"), free=(2,))
        if found is None:
            return False
        rows, arrays = found
        factor, high = _lerp(b1)
        kernels = fused_kernels("adamax", arrays, 4, len(_SCALAR_NAMES), _adamax_kernel_body,
                                (wd != 0, high, bool(g["maximize"])))
        if kernels is None:
            return False
        # the scalar vector per (step count, dtype), neg_clr rounded by the per-parameter
        # path's own ops
        scalars = multi_tensor.StepScalars(lambda t, dtype: (np.array(
            [wd, factor, b2, eps, self._neg_clr(tensor(t, dtype=dt.float32), lr, b1,
                                                dt.from_numpy(dtype))._value], dtype),))
        one = np.float32(1)
        for p, grad, step, m, u in arrays:
            step += one
            kernels[p.dtype](p.size, [p, grad, m, u], scalars(float(step), p.dtype)[0])
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True
