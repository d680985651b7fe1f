"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay.

>>> model = nn.Linear(3, 2)
>>> opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True)
"""
import numpy as np

from aotgrad.runtime import multi_tensor
from aotgrad.optim._update import grads_of
from aotgrad.optim.optimizer import Optimizer
from aotgrad.runtime import ops
from aotgrad.runtime.kernel_library import FlatUpdate, library
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.tensor import Tensor


def sgd_update(p, d_p, buf, *, neg_lr, weight_decay, momentum, keep, nesterov):
    """One parameter's SGD update in place, written with tensor ops: the per-parameter step
    runs it, and the fused step runs it compiled over flat buffers (one source). Factors are
    Python numbers or 0-d tensors; `weight_decay`/`momentum` None where there is none;
    `keep` = 1 - dampening. Answers the momentum buffer (a clone of the gradient when `buf`
    is None: the first step)."""
    if weight_decay is not None:
        d_p = ops.add(d_p, p.detach(), alpha=weight_decay)
    if momentum is not None:
        if buf is None:
            buf = d_p.detach().clone()
        else:
            buf.mul_(momentum).add_(d_p, alpha=keep)
        d_p = ops.add(d_p, buf, alpha=momentum) if nesterov else buf
    p.add_(d_p, alpha=neg_lr)
    return buf


def _sgd_kernel_body(tensors, scalars, flags):
    """sgd_update over flat buffers (p, grad[, momentum_buffer]) with the factors
    (weight_decay, momentum, 1 - dampening, -lr) read from the scalar vector; flags =
    (weight decay, momentum, nesterov, no dampening, maximize)."""
    has_wd, has_mu, nesterov, undamped, maximize = flags
    p, grad, *buf = tensors
    sgd_update(p, ops.neg(grad) if maximize else grad, buf[0] if has_mu else None,
               neg_lr=scalars[3], weight_decay=scalars[0] if has_wd else None,
               momentum=scalars[1] if has_mu else None, keep=1 if undamped else scalars[2],
               nesterov=nesterov)


class SGD(Optimizer):
    """PyTorch's SGD: g = grad (+ wd * p); with momentum, b = mu * b + (1 - dampening) * g
    (b = g on the first step) and g = b, or g + mu * b with Nesterov; p -= lr * g
    (p += with maximize=True)."""

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0,
                 nesterov=False, *, maximize=False, foreach=None, differentiable=False,
                 fused=None):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        multi_tensor.check_flags(foreach, fused)
        # foreach (None: the multi-tensor path where it can run) and fused (the same path)
        # choose the multi-tensor step; differentiable=True keeps the per-parameter one
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))

    def step(self, closure=None):
        loss = self._closure(closure)
        with no_grad():
            for g in self.param_groups:
                pairs = list(grads_of(g))
                if not self._fused_step(g, pairs) and not self._multi_tensor_step(g, pairs):
                    for p, d_p in pairs:
                        self._one_param_step(g, p, d_p)
        return loss

    def _one_param_step(self, g, p, d_p):
        """The per-parameter path, written with tensor ops (what a traced step records)."""
        lr, mu, damp, wd = g.scalar("lr"), g["momentum"], g["dampening"], g["weight_decay"]
        state = self.state[p] if mu != 0 else None
        buf = sgd_update(p, d_p, state.get("momentum_buffer") if mu != 0 else None,
                         neg_lr=-lr, weight_decay=wd if wd != 0 else None,
                         momentum=mu if mu != 0 else None, keep=1 - damp,
                         nesterov=g["nesterov"])
        if mu != 0:
            state["momentum_buffer"] = buf

    def _fused_step(self, g, pairs):
        """The same step as one generated kernel per parameter (sgd_update compiled over
        flat buffers, runtime/kernel_library.py); False where the group must take another
        path: the first step with momentum (it makes the buffers), or the kernel is not
        compiled yet."""
        lr, mu, damp, wd = g["lr"], g["momentum"], g["dampening"], g["weight_decay"]
        if not pairs or not multi_tensor.fused_wanted(g) or not isinstance(lr, (int, float)):
            return False
        bufs = [self.state[p].get("momentum_buffer") for p, _ in pairs] if mu != 0 else []
        if any(b is None for b in bufs):
            return False
        rows = [(p, p.grad) + ((b,) if bufs else ()) for (p, _), b in
                zip(pairs, bufs or [None] * len(pairs))]
        arrays = multi_tensor.flat_arrays_of(rows)
        if arrays is None:
            return False
        flags = (wd != 0, mu != 0, bool(g["nesterov"]), damp == 0, bool(g["maximize"]))
        kernels = {}
        for row in arrays:
            dtype = row[0].dtype
            if dtype not in kernels:
                kernel = library.flat_kernel(FlatUpdate("sgd", dtype, 3 if bufs else 2, 4,
                                                        _sgd_kernel_body, flags))
                if kernel is None:
                    return False
                f = dtype.type
                kernels[dtype] = (kernel, np.array([f(wd), f(mu), f(1 - damp), f(-lr)], dtype))
        for row in arrays:
            kernel, scalars = kernels[row[0].dtype]
            kernel(row[0].size, row, scalars)
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True

    def _multi_tensor_step(self, g, pairs):
        """The same step on the numpy buffers of the whole group (optim/_foreach.py); False
        where the group must take the per-parameter path."""
        lr, mu, damp, wd = g["lr"], g["momentum"], g["dampening"], g["weight_decay"]
        if not pairs or not multi_tensor.wanted(g) or not isinstance(lr, (int, float)):
            return False
        bufs = [self.state[p].get("momentum_buffer") for p, _ in pairs] if mu != 0 else []
        rows = [(p, d_p) + ((b,) if b is not None else ()) for (p, d_p), b in
                zip(pairs, bufs or [None] * len(pairs))]
        arrays = multi_tensor.arrays_of(rows)
        if arrays is None:
            return False
        for i, (p, d_p, *buf) in enumerate(arrays):
            f = p.dtype.type
            if wd != 0:
                d_p = d_p + p * f(wd)
            if mu != 0:
                if not buf:
                    buf = np.array(d_p, copy=True)   # the first step's buffer: a clone of d_p
                    self.state[pairs[i][0]]["momentum_buffer"] = Tensor._make(buf)
                else:
                    buf = buf[0]
                    buf *= f(mu)
                    buf += d_p if damp == 0 else d_p * f(1 - damp)
                d_p = d_p + buf * f(mu) if g["nesterov"] else buf
            p += d_p * f(-lr)
        multi_tensor.written(*(t for row in rows for j, t in enumerate(row) if j != 1))
        return True
