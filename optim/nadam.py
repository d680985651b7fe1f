"""NAdam, Adam with Nesterov momentum (Dozat), as torch.optim.NAdam.

>>> model = nn.Linear(3, 2)
>>> opt = optim.NAdam(model.parameters(), lr=2e-3, momentum_decay=4e-3)
"""
import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.optim._update import (addcmul, as_f64, check_betas, check_nonnegative, fused_arrays,
                                   fused_kernels, grads_of, kernel_factors, lerp_by_,
                                   moment_factors, new_step, split_weight_decay)
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import multi_tensor, ops
from aotgrad.runtime.factories import tensor, zeros_like
from aotgrad.runtime.grad_mode import no_grad


def nadam_update(p, grad, m, v, factors, lerp_from_end):
    """One parameter's NAdam update in place, written with tensor ops: the per-parameter step
    runs it, and the fused step runs it compiled over flat buffers (one source). `factors`
    (Python numbers or 0-d tensors): lerp (the factor of lerp_by_ for the weight 1 - b1),
    b2, one_minus_b2, bc2 (1 - b2^t), eps, c_grad and c_avg (the gradient's and the
    average's factors), and "decay" (decoupled: p *= decay) or "l2" (grad += l2 * p) where
    there is weight decay; `lerp_from_end`: lerp_high(1 - b1)."""
    if "decay" in factors:
        p.mul_(factors["decay"])
    elif "l2" in factors:
        grad = ops.add(grad, p.detach(), alpha=factors["l2"])
    lerp_by_(m, grad, factors["lerp"], lerp_from_end)
    v.copy_(addcmul(ops.mul(v, factors["b2"]), grad, grad, factors["one_minus_b2"]))
    denom = ops.add(ops.sqrt(ops.div(v, factors["bc2"])), factors["eps"])
    p.add_(ops.div(ops.mul(grad, factors["c_grad"]), denom))
    p.add_(ops.div(ops.mul(m, factors["c_avg"]), denom))


# the fused step's scalars, in the order of its scalar vector (the first: the decoupled
# decay factor or the L2 factor, whichever the flags say)
_SCALAR_NAMES = ("weight_decay", "lerp", "b2", "one_minus_b2", "bc2", "eps", "c_grad",
                 "c_avg")


def _nadam_kernel_body(tensors, scalars, flags):
    """nadam_update over flat buffers (p, grad, exp_avg, exp_avg_sq) with its factors read
    from the scalar vector; flags = (decoupled: True/False, or None without weight decay,
    lerp_from_end, maximize)."""
    decoupled, high, maximize = flags
    p, grad, m, v = tensors
    factors = split_weight_decay(kernel_factors(scalars, _SCALAR_NAMES), decoupled)
    nadam_update(p, ops.neg(grad) if maximize else grad, m, v, factors, high)


class NAdam(Optimizer):
    """At step t, mu_t = b1 (1 - 0.96^(t psi) / 2) with psi = momentum_decay, and
    P_t = mu_1 ... mu_t (state "mu_product"); m = lerp(m, g, 1 - b1),
    v = b2 v + (1 - b2) g^2, d = sqrt(v / (1 - b2^t)) + eps and
    p -= lr (1 - mu_t) / (1 - P_t) g / d + lr mu_{t+1} / (1 - P_t mu_{t+1}) m / d.
    weight_decay adds wd * p to g (L2), or with decoupled_weight_decay multiplies p by
    1 - lr wd (NAdamW); maximize ascends.

    State per parameter: "step" and "mu_product" (float32 0-d tensors, as PyTorch keeps them:
    the product is rounded to float32 at each step, whatever the parameter's dtype, until a
    loaded state dict casts it to the parameter's dtype, as PyTorch's loading does),
    "exp_avg", "exp_avg_sq"."""

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, foreach=None,
                 maximize=False, capturable=False, differentiable=False):
        check_nonnegative(lr=lr, eps=eps)
        check_betas(betas)
        check_nonnegative(weight_decay=weight_decay, momentum_decay=momentum_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, momentum_decay=momentum_decay,
                                      decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach,
                                      capturable=capturable, differentiable=differentiable))

    def step(self, closure=None):
        loss = self._closure(closure)
        with no_grad():
            for g in self.param_groups:
                pairs = list(grads_of(g))
                for p, _ in pairs:
                    state = self.state[p]
                    if not state:
                        state["step"] = new_step()
                        state["mu_product"] = tensor(1.0, dtype=dt.float32)
                        state["exp_avg"] = zeros_like(p.detach())
                        state["exp_avg_sq"] = zeros_like(p.detach())
                if not self._fused_step(g, pairs) and not self._multi_tensor_step(g, pairs):
                    for p, grad in pairs:
                        self._one_param_step(g, p, grad)
        return loss

    @staticmethod
    def _scalars(step, mu_product, lr, b1, b2, psi, dtype):
        """At `step` (float32 0-d, already counted): multiply `mu_product` by mu_t in place
        and return (1 - b2^t, the gradient's factor, the average's factor) in `dtype`."""
        t = as_f64(step)
        bc2 = ops.sub(1.0, ops.pow(b2, t)).to(dtype)
        mu = ops.mul(ops.sub(1.0, ops.mul(ops.pow(0.96, ops.mul(t, psi)), 0.5)), b1)
        mu_next = ops.mul(ops.sub(1.0, ops.mul(
            ops.pow(0.96, ops.mul(ops.add(t, 1.0), psi)), 0.5)), b1)
        mu_product.mul_(mu.to(mu_product.dtype))
        prod = mu_product.to(dt.float64)
        c_grad = ops.div(ops.mul(-lr, ops.sub(1.0, mu)), ops.sub(1.0, prod))
        c_avg = ops.div(ops.mul(-lr, mu_next), ops.sub(1.0, ops.mul(prod, mu_next)))
        return bc2, c_grad.to(dtype), c_avg.to(dtype)

    def _one_param_step(self, g, p, grad):
        """The per-parameter path, written with tensor ops (what a traced step records)."""
        lr, (b1, b2), eps, wd = g.scalar("lr"), g["betas"], g["eps"], g["weight_decay"]
        state = self.state[p]
        step = state["step"].add_(1)
        factors, high = moment_factors(lr, b1, b2, eps, wd, g["decoupled_weight_decay"])
        factors["bc2"], factors["c_grad"], factors["c_avg"] = self._scalars(
            step, state["mu_product"], lr, b1, b2, g["momentum_decay"], p.dtype)
        nadam_update(p, grad, state["exp_avg"], state["exp_avg_sq"], factors, high)

    def _multi_tensor_step(self, g, pairs):
        """The same step on the numpy buffers of the group (runtime/multi_tensor.py); False
        where the group must take the per-parameter path."""
        lr, (b1, b2), eps, wd = g["lr"], g["betas"], g["eps"], g["weight_decay"]
        if not pairs or not multi_tensor.wanted(g) or not isinstance(lr, (int, float)):
            return False
        keys = ("step", "mu_product", "exp_avg", "exp_avg_sq")
        rows = [(p, grad, *(self.state[p][k] for k in keys)) for p, grad in pairs]
        arrays = multi_tensor.arrays_of(rows, free=(2, 3))
        if arrays is None:
            return False

        def scalars(t, prod, prod_dtype, dtype):
            mu_product = tensor(prod, dtype=dt.from_numpy(prod_dtype))
            out = self._scalars(tensor(t, dtype=dt.float32), mu_product, lr, b1, b2,
                                g["momentum_decay"], dt.from_numpy(dtype))
            return (mu_product,) + out
        factors = multi_tensor.StepScalars(scalars)
        for p, grad, step, mu_product, m, v in arrays:
            f = p.dtype.type
            step += np.float32(1)
            if wd != 0:
                if g["decoupled_weight_decay"]:
                    p *= f(1 - lr * wd)
                else:
                    grad = grad + p * f(wd)
            new_prod, bc2, c_grad, c_avg = factors(float(step), float(mu_product),
                                                   mu_product.dtype, p.dtype)
            mu_product[...] = new_prod
            tmp = np.empty_like(m)                 # one scratch buffer per parameter
            multi_tensor.lerp_(m, grad, 1 - b1, tmp)
            multi_tensor.ema_square_(v, grad, b2, tmp)
            denom = np.empty_like(v)
            np.divide(v, bc2, out=denom)
            np.sqrt(denom, out=denom)
            denom += f(eps)
            np.multiply(grad, c_grad, out=tmp)
            tmp /= denom
            p += tmp
            np.multiply(m, c_avg, out=tmp)
            tmp /= denom
            p += tmp
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True

    def _fused_step(self, g, pairs):
        """The same step as one generated kernel per parameter (nadam_update compiled over
        flat buffers, runtime/kernel_library.py); False where the group must take another
        path, or the kernel is not compiled yet."""
        lr, (b1, b2), eps, wd = g["lr"], g["betas"], g["eps"], g["weight_decay"]
        keys = ("step", "mu_product", "exp_avg", "exp_avg_sq")
        found = fused_arrays(self.state, g, pairs, keys, free=(2, 3))
        if found is None:
            return False
        rows, arrays = found
        decoupled = bool(g["decoupled_weight_decay"]) if wd != 0 else None
        constant, high = moment_factors(lr, b1, b2, eps, wd, decoupled)
        kernels = fused_kernels("nadam", arrays, 4, len(_SCALAR_NAMES), _nadam_kernel_body,
                                (decoupled, high, bool(g["maximize"])))
        if kernels is None:
            return False
        head = [constant.get("decay", constant.get("l2", 0))] + \
            [constant[k] for k in ("lerp", "b2", "one_minus_b2")]

        def scalars(t, prod, prod_dtype, dtype):
            # the new product and the scalar vector at step t, by the per-parameter path's
            # own ops
            mu_product = tensor(prod, dtype=dt.from_numpy(prod_dtype))
            bc2, c_grad, c_avg = self._scalars(tensor(t, dtype=dt.float32), mu_product, lr,
                                               b1, b2, g["momentum_decay"],
                                               dt.from_numpy(dtype))
            return mu_product._value, np.array(
                head + [bc2._value, eps, c_grad._value, c_avg._value], dtype)
        factors = multi_tensor.StepScalars(scalars)
        one = np.float32(1)
        for p, grad, step, mu_product, m, v in arrays:
            step += one
            new_prod, vector = factors(float(step), float(mu_product), mu_product.dtype,
                                       p.dtype)
            mu_product[...] = new_prod
            kernels[p.dtype](p.size, [p, grad, m, v], vector)
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True
