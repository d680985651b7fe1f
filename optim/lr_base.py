"""The base class of every scheduler in `aotgrad.optim.lr_scheduler`: `step()`, the
closed-form hook, `get_last_lr()`, state dicts, as torch.optim.lr_scheduler.LRScheduler."""
import warnings

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
        """The lrs of the epoch `last_epoch` has just moved to (subclasses define it)."""
        raise NotImplementedError

    def get_last_lr(self):
        """The learning rates the last `step()` set, one per parameter group."""
        return list(self._last_lr)

    def step(self, epoch=None):
        """Advance one epoch (or, deprecated, jump to `epoch` with the closed form)."""
        self._step_count += 1
        if epoch is not None:
            warnings.warn("The epoch parameter in `scheduler.step()` was not necessary and is "
                          "being deprecated where possible.", UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch=None):
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed = getattr(self, "_get_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        for g, lr in zip(self.optimizer.param_groups, values):
            g["lr"] = lr
        self._last_lr = self._lrs()

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)

    def _lrs(self):
        return [g["lr"] for g in self.optimizer.param_groups]


_LRScheduler = LRScheduler
