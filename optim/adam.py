"""Adam and AdamW (decoupled weight decay), with optional AMSGrad.

>>> model = nn.Linear(3, 2)
>>> opt = optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
"""

import numpy as np

from aotgrad.runtime import multi_tensor
from aotgrad.optim._update import (as_f64, first_step_state, fused_arrays, fused_kernels,
                                   grads_of)
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import ops
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


def adam_update(p, grad, m, v, mx, factors):
    """One parameter's Adam update in place, written with tensor ops: the per-parameter
    step runs it, and the fused step runs it compiled over flat buffers (one source).
    `factors` (Python numbers or 0-d tensors): one_minus_b1, b2, one_minus_b2, bc2_sqrt,
    eps, step_size, and "decay" (decoupled: p *= decay) or "l2" (grad += l2 * p) where
    there is weight decay; `mx` the AMSGrad maximum, or None."""
    if "decay" in factors:
        p.mul_(factors["decay"])
    elif "l2" in factors:
        grad = ops.add(grad, p.detach(), alpha=factors["l2"])
    m.add_(ops.mul(ops.sub(grad, m), factors["one_minus_b1"]))          # lerp toward grad
    v.mul_(factors["b2"]).add_(ops.mul(ops.mul(grad, factors["one_minus_b2"]), grad))
    if mx is not None:
        mx.copy_(ops.maximum(mx, v))
    denom = ops.add(ops.div(ops.sqrt(v if mx is None else mx), factors["bc2_sqrt"]),
                    factors["eps"])
    p.sub_(ops.mul(ops.div(m, denom), factors["step_size"]))


# the fused step's scalars, in the order of its scalar vector (the first: the decoupled
# decay factor or the L2 factor, whichever the flags say)
_SCALAR_NAMES = ("weight_decay", "one_minus_b1", "b2", "one_minus_b2", "bc2_sqrt", "eps",
                 "step_size")
_N_SCALARS = len(_SCALAR_NAMES)


def _adam_kernel_body(tensors, scalars, flags):
    """adam_update over flat buffers (p, grad, exp_avg, exp_avg_sq[, max_exp_avg_sq]) with
    its factors read from the scalar vector; `flags` = (amsgrad, decoupled: True/False, or
    None without weight decay, maximize)."""
    amsgrad, decoupled, maximize = flags
    p, grad, m, v, *mx = tensors
    s = {name: scalars[i] for i, name in enumerate(_SCALAR_NAMES)}
    wd = s.pop("weight_decay")
    if decoupled is not None:
        s["decay" if decoupled else "l2"] = wd
    adam_update(p, ops.neg(grad) if maximize else grad, m, v, mx[0] if amsgrad else None, s)


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
        multi_tensor.check_flags(foreach, fused)
        # foreach (None: the multi-tensor path where it can run) and fused (the same path)
        # choose the multi-tensor step; capturable is kept in the groups like PyTorch's
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
                pairs = list(grads_of(g))
                for p, _ in pairs:
                    first_step_state(self.state[p], p, "exp_avg", "exp_avg_sq",
                                     *(["max_exp_avg_sq"] if g["amsgrad"] else []))
                if not self._fused_step(g, pairs) and not self._multi_tensor_step(g, pairs):
                    for p, grad in pairs:
                        self._one_param_step(g, p, grad)
        return loss

    def _one_param_step(self, g, p, grad):
        """The per-parameter path, written with tensor ops (what a traced step records)."""
        lr, (b1, b2), eps, wd = g.scalar("lr"), g["betas"], g["eps"], g["weight_decay"]
        state = self.state[p]
        step = state["step"]
        step.add_(1)
        # bias corrections in float64 from the float32 step count (PyTorch does them in
        # Python floats), rounded to the parameter dtype once
        t64 = as_f64(step)
        bc1 = ops.sub(1.0, ops.pow(b1, t64))
        factors = dict(one_minus_b1=1 - b1, b2=b2, one_minus_b2=1 - b2,
                       bc2_sqrt=ops.sqrt(ops.sub(1.0, ops.pow(b2, t64))).to(p.dtype), eps=eps,
                       step_size=ops.div(lr, bc1).to(p.dtype))
        if wd != 0:
            if g.get("decoupled_weight_decay", self._decoupled):
                factors["decay"] = 1 - lr * wd
            else:
                factors["l2"] = wd
        adam_update(p, grad, state["exp_avg"], state["exp_avg_sq"],
                    state["max_exp_avg_sq"] if g["amsgrad"] else None, factors)

    def _multi_tensor_step(self, g, pairs):
        """The same step on the numpy buffers of the whole group (optim/_foreach.py); False
        where the group must take the per-parameter path."""
        lr, (b1, b2), eps, wd = g["lr"], g["betas"], g["eps"], g["weight_decay"]
        if not pairs or not multi_tensor.wanted(g) or not isinstance(lr, (int, float)):
            return False
        amsgrad = g["amsgrad"]
        keys = ("step", "exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if amsgrad else ())
        rows = [(p, grad, *(self.state[p][k] for k in keys)) for p, grad in pairs]
        arrays = multi_tensor.arrays_of(rows, free=(2,))
        if arrays is None:
            return False
        decoupled = g.get("decoupled_weight_decay", self._decoupled)
        for p, grad, step, m, v, *mx in arrays:
            f = p.dtype.type
            step += np.float32(1)
            if wd != 0:
                if decoupled:
                    p *= f(1 - lr * wd)
                else:
                    grad = grad + p * f(wd)
            tmp = np.empty_like(m)                 # one scratch buffer per parameter
            np.subtract(grad, m, out=tmp)
            tmp *= f(1 - b1)
            m += tmp
            v *= f(b2)
            np.multiply(grad, f(1 - b2), out=tmp)
            tmp *= grad
            v += tmp
            t64 = step.astype(np.float64)
            bc1 = 1.0 - np.power(np.float64(b1), t64)
            bc2_sqrt = np.sqrt(1.0 - np.power(np.float64(b2), t64)).astype(p.dtype)
            if amsgrad:
                np.maximum(mx[0], v, out=mx[0])
            np.sqrt(mx[0] if amsgrad else v, out=tmp)
            tmp /= bc2_sqrt
            tmp += f(eps)
            np.divide(m, tmp, out=tmp)
            tmp *= (lr / bc1).astype(p.dtype)
            p -= tmp
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True

    def _fused_step(self, g, pairs):
        """The same step as one generated kernel per parameter (adam_update compiled over
        flat buffers, runtime/kernel_library.py); False where the group must take another
        path, or the kernel is not compiled yet."""
        lr, (b1, b2), eps, wd = g["lr"], g["betas"], g["eps"], g["weight_decay"]
        amsgrad = g["amsgrad"]
        keys = ("step", "exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if amsgrad else ())
        found = fused_arrays(self.state, g, pairs, keys, free=(2,))
        if found is None:
            return False
        rows, arrays = found
        decay = (g.get("decoupled_weight_decay", self._decoupled) if wd != 0 else None)
        flags = (amsgrad, decay, bool(g["maximize"]))
        kernels = fused_kernels("adam", arrays, 5 if amsgrad else 4, _N_SCALARS,
                                _adam_kernel_body, flags)
        if kernels is None:
            return False
        one = np.float32(1)
        memo = {}
        for (p, grad, step, m, v, *mx) in arrays:
            step += one
            f = p.dtype.type
            key = (float(step), p.dtype)
            scalars = memo.get(key)
            if scalars is None:
                t64 = step.astype(np.float64)
                bc1 = 1.0 - np.power(np.float64(b1), t64)
                scalars = memo[key] = np.array([
                    f(1 - lr * wd) if decay is True else f(wd), f(1 - b1), f(b2), f(1 - b2),
                    np.sqrt(1.0 - np.power(np.float64(b2), t64)).astype(p.dtype), f(eps),
                    (lr / bc1).astype(p.dtype)], p.dtype)
            kernels[p.dtype](p.size, [p, grad, m, v, *mx], scalars)
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True

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
