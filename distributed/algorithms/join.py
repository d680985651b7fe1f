"""Join: training with uneven inputs (torch.distributed.algorithms.join).

Inside `with Join([ddp_model]):` a rank that runs out of batches leaves the loop and waits
in the context manager's exit, where it shadows the collectives that the ranks still
training run each iteration (for DDP: the gradient all-reduces, with zero gradients), so that
they do not block. Every iteration, the first joinable's forward calls
`Join.notify_join_context(self)`: an all-reduce in which the ranks still training count 1
and the joined ranks 0; when the count is 0 every rank has joined, and each joinable's
`post_hook(is_last_joiner)` runs (DDP: the parameters of the last rank to join go to all).
"""
import abc
import dataclasses

import numpy as np

from aotgrad.runtime.tensor import Tensor


class JoinHook:
    """What a joinable does while its rank has joined: `main_hook()` shadows one iteration of
    the others' collectives; `post_hook(is_last_joiner)` runs once all ranks have joined."""

    def main_hook(self):
        pass

    def post_hook(self, is_last_joiner):
        pass


class Joinable(abc.ABC):
    """A class whose collectives Join can shadow: `join_hook(**kwargs)` gives its JoinHook;
    `join_device` and `join_process_group` say where the join's all-reduces run."""

    def __init__(self):
        super().__init__()
        self._join_config = JoinConfig.construct_disabled_join_config()

    @abc.abstractmethod
    def join_hook(self, **kwargs):
        ...

    @property
    @abc.abstractmethod
    def join_device(self):
        ...

    @property
    @abc.abstractmethod
    def join_process_group(self):
        ...


@dataclasses.dataclass
class JoinConfig:
    enable: bool
    throw_on_early_termination: bool
    is_first_joinable: bool

    @staticmethod
    def construct_disabled_join_config():
        return JoinConfig(enable=False, throw_on_early_termination=False,
                          is_first_joinable=False)


def _count(pg, active, terminate):
    """All-reduce [this rank still trains, this rank asks everyone to stop] over the group."""
    from aotgrad.distributed.collectives import all_reduce
    t = Tensor._make(np.array([int(active), int(terminate)], np.int64), False)
    all_reduce(t, group=pg)
    return int(t._value[0]), int(t._value[1])


class Join:
    """Context manager for uneven inputs over `joinables` (objects with Joinable's methods;
    they must share one process group). `throw_on_early_termination=True`: once a rank runs
    out of inputs, every rank raises RuntimeError instead (at its next iteration). Keyword
    arguments go to each joinable's join_hook (DDP: `divide_by_initial_world_size`)."""

    def __init__(self, joinables, enable=True, throw_on_early_termination=False, **kwargs):
        if len(joinables) == 0:
            raise ValueError("The join context manager requires at least one joinable")
        self._joinables = list(joinables)
        self._join_hooks = [j.join_hook(**kwargs) for j in self._joinables]
        self._enable = enable
        self._throw_on_early_termination = throw_on_early_termination
        groups = {id(j.join_process_group) for j in self._joinables}
        if len(groups) > 1:
            raise ValueError("Using join context manager with multiple process groups")
        self._process_group = self._joinables[0].join_process_group
        self._set_configs()

    def _set_configs(self, enable=None):
        for i, j in enumerate(self._joinables):
            j._join_config = JoinConfig(
                enable=self._enable if enable is None else enable,
                throw_on_early_termination=self._throw_on_early_termination,
                is_first_joinable=i == 0)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if not self._enable or exc_type is not None:
            self._set_configs(enable=False)
            return False
        try:
            is_last_joiner = True
            while True:
                active, _ = _count(self._process_group, False,
                                   self._throw_on_early_termination)
                if active == 0:
                    break
                if self._throw_on_early_termination:
                    raise RuntimeError("Detected at least one rank that exhausted inputs. "
                                       "Throwing across all ranks.")
                is_last_joiner = False
                for hook in self._join_hooks:
                    hook.main_hook()
            for hook in self._join_hooks:
                hook.post_hook(is_last_joiner)
        finally:
            self._set_configs(enable=False)
        return False

    @staticmethod
    def notify_join_context(joinable):
        """Called by a joinable at each iteration, before its collectives: the first joinable
        counts this rank as still training (an all-reduce the joined ranks match). Returns
        None (the count is waited for here)."""
        config = getattr(joinable, "_join_config", None)
        if config is None or not config.enable or not config.is_first_joinable:
            return None
        _, terminate = _count(joinable.join_process_group, True, False)
        if terminate and config.throw_on_early_termination:
            raise RuntimeError("Detected at least one rank that exhausted inputs. Throwing "
                               "across all ranks.")
        return None
