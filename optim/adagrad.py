"""Adagrad (Duchi et al.) with learning-rate decay, as torch.optim.Adagrad.

>>> model = nn.Linear(3, 2)
>>> opt = optim.Adagrad(model.parameters(), lr=1e-2, lr_decay=1e-4)
"""
import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.optim._update import (as_f64, check_nonnegative, fused_arrays, fused_kernels,
                                   grads_of, kernel_factors, new_step)
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import multi_tensor, ops
from aotgrad.runtime.factories import full_like, tensor
from aotgrad.runtime.grad_mode import no_grad


def adagrad_update(p, grad, acc, factors):
    """One parameter's Adagrad update in place, written with tensor ops: the per-parameter
    step runs it, and the fused step runs it compiled over flat buffers (one source).
    `factors` (Python numbers or 0-d tensors): eps, neg_clr (minus the decayed learning
    rate), and "l2" where there is weight decay."""
    if "l2" in factors:
        grad = ops.add(grad, p.detach(), alpha=factors["l2"])
    acc.add_(ops.mul(grad, grad))
    std = ops.add(ops.sqrt(acc), factors["eps"])
    p.add_(ops.div(ops.mul(grad, factors["neg_clr"]), std))


# the fused step's scalars, in the order of its scalar vector
_SCALAR_NAMES = ("l2", "eps", "neg_clr")


def _adagrad_kernel_body(tensors, scalars, flags):
    """adagrad_update over flat buffers (p, grad, sum) with its factors read from the scalar
    vector; flags = (weight decay, maximize)."""
    has_wd, maximize = flags
    p, grad, acc = tensors
    factors = kernel_factors(scalars, _SCALAR_NAMES, dict(l2=has_wd))
    adagrad_update(p, ops.neg(grad) if maximize else grad, acc, factors)


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
        multi_tensor.check_flags(foreach, fused)
        # foreach=None and fused=True take the fused kernel where it can run, foreach=True
        # numpy's multi-tensor step; foreach=False and differentiable=True keep the
        # per-parameter one
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
                pairs = list(grads_of(g))
                for p, _ in pairs:
                    self._init_state(p, g)
                if not self._fused_step(g, pairs) and not self._multi_tensor_step(g, pairs):
                    for p, grad in pairs:
                        self._one_param_step(g, p, grad)
        return loss

    @staticmethod
    def _clr(step, lr, lr_decay, dtype):
        """The decayed learning rate at `step` (float32 0-d), in the parameter dtype."""
        decay = ops.add(ops.mul(ops.sub(as_f64(step), 1.0), lr_decay), 1.0)
        return ops.div(lr, decay).to(dtype)

    def _one_param_step(self, g, p, grad):
        """The per-parameter path, written with tensor ops (what a traced step records)."""
        lr, lr_decay, eps, wd = g.scalar("lr"), g["lr_decay"], g["eps"], g["weight_decay"]
        state = self.state[p]
        step = state["step"].add_(1)
        factors = dict(eps=eps, neg_clr=ops.neg(self._clr(step, lr, lr_decay, p.dtype)))
        if wd != 0:
            factors["l2"] = wd
        adagrad_update(p, grad, state["sum"], factors)

    def _multi_tensor_step(self, g, pairs):
        """The same step on the numpy buffers of the group (runtime/multi_tensor.py); False
        where the group must take the per-parameter path."""
        lr, lr_decay, eps, wd = g["lr"], g["lr_decay"], g["eps"], g["weight_decay"]
        if not pairs or not multi_tensor.wanted(g) or not isinstance(lr, (int, float)):
            return False
        rows = [(p, grad, self.state[p]["step"], self.state[p]["sum"]) for p, grad in pairs]
        arrays = multi_tensor.arrays_of(rows, free=(2,))
        if arrays is None:
            return False
        neg_clr = multi_tensor.StepScalars(lambda t, dtype: (ops.neg(self._clr(
            tensor(t, dtype=dt.float32), lr, lr_decay, dt.from_numpy(dtype))),))
        for p, grad, step, acc in arrays:
            f = p.dtype.type
            step += np.float32(1)
            if wd != 0:
                grad = grad + p * f(wd)
            tmp = np.empty_like(acc)               # one scratch buffer per parameter
            np.multiply(grad, grad, out=tmp)
            acc += tmp
            np.sqrt(acc, out=tmp)
            tmp += f(eps)
            upd = grad * neg_clr(float(step), p.dtype)[0]
            upd /= tmp
            p += upd
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True

    def _fused_step(self, g, pairs):
        """The same step as one generated kernel per parameter (adagrad_update compiled over
        flat buffers, runtime/kernel_library.py); False where the group must take another
        path, or the kernel is not compiled yet."""
        lr, lr_decay, eps, wd = g["lr"], g["lr_decay"], g["eps"], g["weight_decay"]
        found = fused_arrays(self.state, g, pairs, ("step", "sum"), free=(2,))
        if found is None:
            return False
        rows, arrays = found
        flags = (wd != 0, bool(g["maximize"]))
        kernels = fused_kernels("adagrad", arrays, 3, len(_SCALAR_NAMES), _adagrad_kernel_body,
                                flags)
        if kernels is None:
            return False
        # the scalar vector per (step count, dtype), neg_clr rounded by the per-parameter
        # path's own ops
        scalars = multi_tensor.StepScalars(lambda t, dtype: (np.array(
            [wd, eps, ops.neg(self._clr(tensor(t, dtype=dt.float32), lr, lr_decay,
                                        dt.from_numpy(dtype)))._value], dtype),))
        one = np.float32(1)
        for p, grad, step, acc in arrays:
            step += one
            kernels[p.dtype](p.size, [p, grad, acc], scalars(float(step), p.dtype)[0])
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True
