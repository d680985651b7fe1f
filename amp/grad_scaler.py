"""GradScaler: PyTorch's dynamic loss scaling.

`scaler.scale(loss).backward()` multiplies the loss by the scale so that small float16
gradients do not flush to zero; `scaler.step(opt)` divides the gradients back (once, also
when `unscale_` was called first) and skips the step when any of them is inf or NaN;
`scaler.update()` halves the scale after a skipped step and doubles it after
`growth_interval` good steps in a row.
"""
import math

from aotgrad.runtime import device as _device
from aotgrad.runtime.grad_mode import no_grad


class GradScaler:
    def __init__(self, device="cpu", init_scale=2.0 ** 16, growth_factor=2.0,
                 backoff_factor=0.5, growth_interval=2000, enabled=True):
        _device.check(device, "GradScaler")
        if growth_factor <= 1.0:
            raise ValueError("The growth factor must be > 1.0.")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError("The backoff factor must be < 1.0.")
        self._enabled = bool(enabled)
        self._scale = float(init_scale)
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._per_optimizer = {}   # id(optimizer) -> {"unscaled": bool, "found_inf": bool}

    def is_enabled(self):
        return self._enabled

    def get_scale(self):
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self):
        return self._growth_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def get_growth_interval(self):
        return self._growth_interval

    def scale(self, outputs):
        """`outputs` (a tensor or nested list/tuple of them) times the current scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        return outputs * self._scale

    def _state(self, optimizer):
        return self._per_optimizer.setdefault(id(optimizer), {"unscaled": False,
                                                               "found_inf": False})

    def unscale_(self, optimizer):
        """Divide this optimizer's gradients by the scale (in place), once per step."""
        if not self._enabled:
            return
        st = self._state(optimizer)
        if st["unscaled"]:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        inv = 1.0 / self._scale
        found = False
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    p.grad.mul_(inv)
                    if not bool(p.grad.isfinite().all()):
                        found = True
        st["unscaled"], st["found_inf"] = True, found

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step() unless a gradient is inf/NaN (then None, and the step is
        skipped)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        st = self._state(optimizer)
        if not st["unscaled"]:
            self.unscale_(optimizer)
        if st["found_inf"]:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if hasattr(new_scale, "item") else new_scale)
        else:
            found = any(st["found_inf"] for st in self._per_optimizer.values())
            if found:
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    grown = self._scale * self._growth_factor
                    if math.isfinite(grown):
                        self._scale = grown
                    self._growth_tracker = 0
        self._per_optimizer.clear()

    def state_dict(self):
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if not state_dict:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
