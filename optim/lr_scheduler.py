"""Learning-rate schedulers: StepLR, MultiStepLR, ExponentialLR, LambdaLR, CosineAnnealingLR.

>>> sched = optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)
>>> for epoch in range(30):
...     train(...); opt.step(); sched.step()
"""
import math
import warnings
from bisect import bisect_right

from aotgrad.optim.optimizer import Optimizer


class LRScheduler:
    """Base class: `step()` advances `last_epoch` and writes each group's new "lr"."""

    _is_initial = False

    def __init__(self, optimizer, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] "
                                   f"when resuming an optimizer")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self._initial_step()

    def _initial_step(self):
        # `_is_initial` is True during the step the constructor takes: schedulers that scale
        # the current lr leave it alone then, so resuming with last_epoch=k does not move the
        # lr one step ahead (PyTorch's rule)
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self):
        raise NotImplementedError

    def _closed_form(self):
        return None

    def get_last_lr(self):
        """The learning rates the last `step()` set, one per parameter group."""
        return list(self._last_lr)

    def step(self, epoch=None):
        self._step_count += 1
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            warnings.warn("The epoch parameter in `scheduler.step()` was not necessary and is "
                          "being deprecated where possible.", UserWarning, stacklevel=2)
            self.last_epoch = epoch
            values = self._closed_form() or self.get_lr()
        for g, lr in zip(self.optimizer.param_groups, values):
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)

    def _lrs(self):
        return [g["lr"] for g in self.optimizer.param_groups]


_LRScheduler = LRScheduler


class StepLR(LRScheduler):
    """Multiply the lr by gamma every `step_size` epochs."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _closed_form(self):
        return [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the lr by gamma at each epoch in `milestones`."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return self._lrs()
        k = self.milestones.count(self.last_epoch)
        return [lr * self.gamma ** k for lr in self._lrs()]

    def _closed_form(self):
        k = bisect_right(self.milestones, self.last_epoch)
        return [b * self.gamma ** k for b in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the lr by gamma every epoch."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self._is_initial:
            return self._lrs()
        return [lr * self.gamma for lr in self._lrs()]

    def _closed_form(self):
        return [b * self.gamma ** self.last_epoch for b in self.base_lrs]


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch) (one function, or one per group)."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        n = len(optimizer.param_groups)
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != n:
                raise ValueError(f"Expected {n} lr_lambdas, but got {len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * n
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [b * f(self.last_epoch) for b, f in zip(self.base_lrs, self.lr_lambdas)]

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from the base lr to eta_min over T_max epochs (SGDR without restarts),
    computed with PyTorch's recursive form so the values agree with it step for step."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        e, T, lo = self.last_epoch, self.T_max, self.eta_min
        if e == 0 or self._is_initial:
            return self._lrs()
        if self._step_count == 1 and e > 0:
            return [lo + (b - lo) * (1 + math.cos(e * math.pi / T)) / 2 for b in self.base_lrs]
        if (e - 1 - T) % (2 * T) == 0:
            return [lr + (b - lo) * (1 - math.cos(math.pi / T)) / 2
                    for b, lr in zip(self.base_lrs, self._lrs())]
        return [(1 + math.cos(math.pi * e / T)) / (1 + math.cos(math.pi * (e - 1) / T))
                * (lr - lo) + lo for lr in self._lrs()]

    def _closed_form(self):
        return [self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch /
                                                                  self.T_max)) / 2
                for b in self.base_lrs]


__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "LambdaLR",
           "CosineAnnealingLR"]
