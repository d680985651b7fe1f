"""RMSprop (Hinton's lecture 6e) with optional momentum and centering, as torch.optim.RMSprop.

>>> model = nn.Linear(3, 2)
>>> opt = optim.RMSprop(model.parameters(), lr=1e-2, momentum=0.9, centered=True)
"""
import numpy as np

from aotgrad.optim._update import (addcdiv, addcmul, check_nonnegative, fused_arrays,
                                   fused_kernels, grads_of, kernel_factors, lerp_by_, lerp_high,
                                   new_step)
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import multi_tensor, ops
from aotgrad.runtime.factories import zeros_like
from aotgrad.runtime.grad_mode import no_grad


def rmsprop_update(p, grad, sq, buf, ga, factors, lerp_from_end):
    """One parameter's RMSprop update in place, written with tensor ops: the per-parameter
    step runs it, and the fused step runs it compiled over flat buffers (one source).
    `factors` (Python numbers or 0-d tensors): alpha, one_minus_alpha, eps, neg_lr, "l2"
    where there is weight decay, "momentum" where `buf` (the momentum buffer) is given and
    "lerp" (the factor of lerp_by_) where `ga` (the centered gradient average) is given;
    `lerp_from_end`: lerp_high(1 - alpha)."""
    if "l2" in factors:
        grad = ops.add(grad, p.detach(), alpha=factors["l2"])
    sq.copy_(addcmul(ops.mul(sq, factors["alpha"]), grad, grad, factors["one_minus_alpha"]))
    if ga is not None:
        lerp_by_(ga, grad, factors["lerp"], lerp_from_end)
        avg = ops.sqrt(addcmul(sq, ga, ga, -1))
    else:
        avg = ops.sqrt(sq)
    avg = ops.add(avg, factors["eps"])
    if buf is not None:
        buf.copy_(addcdiv(ops.mul(buf, factors["momentum"]), grad, avg))
        p.add_(buf, alpha=factors["neg_lr"])
    else:
        p.add_(ops.div(ops.mul(grad, factors["neg_lr"]), avg))


def _factors(lr, alpha, eps, wd, mom, centered):
    """rmsprop_update's factors as Python numbers (lr: a number or a 0-d tensor), and
    lerp_from_end."""
    high = lerp_high(1 - alpha)
    factors = dict(alpha=alpha, one_minus_alpha=1 - alpha, eps=eps, neg_lr=-lr)
    if wd != 0:
        factors["l2"] = wd
    if mom > 0:
        factors["momentum"] = mom
    if centered:
        factors["lerp"] = 1.0 - (1 - alpha) if high else 1 - alpha
    return factors, high


# the fused step's scalars, in the order of its scalar vector (unused ones are zero)
_SCALAR_NAMES = ("l2", "alpha", "one_minus_alpha", "lerp", "eps", "momentum", "neg_lr")


def _rmsprop_kernel_body(tensors, scalars, flags):
    """rmsprop_update over flat buffers (p, grad, square_avg[, momentum_buffer][, grad_avg])
    with its factors read from the scalar vector; flags = (weight decay, momentum, centered,
    lerp_from_end, maximize)."""
    has_wd, has_mom, centered, high, maximize = flags
    p, grad, sq, *rest = tensors
    factors = kernel_factors(scalars, _SCALAR_NAMES,
                             dict(l2=has_wd, momentum=has_mom, lerp=centered))
    rmsprop_update(p, ops.neg(grad) if maximize else grad, sq,
                   rest[0] if has_mom else None, rest[-1] if centered else None, factors, high)


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
        # foreach=None takes the fused kernel where it can run (runtime/multi_tensor.py's
        # fused_wanted), foreach=True numpy's multi-tensor step; foreach=False and
        # differentiable=True keep the per-parameter one; capturable changes nothing
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
                if not self._fused_step(g, pairs) and not self._multi_tensor_step(g, pairs):
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
        factors, high = _factors(lr, alpha, eps, wd, mom, centered)
        rmsprop_update(p, grad, state["square_avg"],
                       state["momentum_buffer"] if mom > 0 else None,
                       state["grad_avg"] if centered else None, factors, high)

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

    def _fused_step(self, g, pairs):
        """The same step as one generated kernel per parameter (rmsprop_update compiled over
        flat buffers, runtime/kernel_library.py); False where the group must take another
        path, or the kernel is not compiled yet."""
        lr, alpha, eps = g["lr"], g["alpha"], g["eps"]
        wd, mom, centered = g["weight_decay"], g["momentum"], g["centered"]
        keys = ("step", "square_avg") + (("momentum_buffer",) if mom > 0 else ()) + \
            (("grad_avg",) if centered else ())
        found = fused_arrays(self.state, g, pairs, keys, free=(2,))
        if found is None:
            return False
        rows, arrays = found
        factors, high = _factors(lr, alpha, eps, wd, mom, centered)
        flags = (wd != 0, mom > 0, bool(centered), high, bool(g["maximize"]))
        n_arrays = 3 + (mom > 0) + bool(centered)
        kernels = fused_kernels("rmsprop", arrays, n_arrays, len(_SCALAR_NAMES),
                                _rmsprop_kernel_body, flags)
        if kernels is None:
            return False
        scalars = {dtype: np.array([factors.get(name, 0) for name in _SCALAR_NAMES], dtype)
                   for dtype in kernels}
        one = np.float32(1)
        for p, grad, step, *rest in arrays:
            step += one
            kernels[p.dtype](p.size, [p, grad, *rest], scalars[p.dtype])
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True
