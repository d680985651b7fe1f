"""`optim.Optimizer`: parameter groups, per-parameter state, zero_grad and state dicts.

Subclasses implement `step`; updates run under no_grad with in-place tensor ops
(`p.add_`, `mul_`, ...), so they work on any Tensor, eager or traced.

>>> model = nn.Linear(3, 2)
>>> opt = aotgrad.optim.SGD(model.parameters(), lr=0.1)
>>> loss = model(aotgrad.randn(4, 3)).pow(2).mean()
>>> opt.zero_grad(); loss.backward(); opt.step()
"""
import copy
from collections import defaultdict

import numpy as np

from aotgrad.ir.core import current_builder
from aotgrad.runtime import multi_tensor
from aotgrad.runtime.grad_mode import no_grad
from aotgrad.runtime.ops import mark_weak
from aotgrad.runtime.tensor import Tensor


class _RequiredParameter:
    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


class ParamGroup(dict):
    """A parameter group. `group.scalar("lr")` is the Python number eagerly; inside a compiled
    function it is a weakly typed 0-d tensor that mirrors the dict entry, so a scheduler
    changing `group["lr"]` between calls is seen by the compiled step (no stale constant)."""

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        mirror = self.__dict__.get("_mirrors", {}).get(key)
        if mirror is not None:
            mirror._value[...] = value

    def scalar(self, key):
        value = self[key]
        if current_builder() is None or isinstance(value, bool) or \
                not isinstance(value, (int, float)):
            return value
        mirrors = self.__dict__.setdefault("_mirrors", {})
        if key not in mirrors:
            mirrors[key] = mark_weak(Tensor._make(np.array(float(value))))
        return mirrors[key]


class Optimizer:
    """Base class. `params` is an iterable of tensors or of dicts (parameter groups) with
    per-group options overriding `defaults`."""

    def __init__(self, params, defaults):
        self.defaults = defaults
        self.state = defaultdict(dict)
        self.param_groups = []
        if isinstance(params, Tensor):
            raise TypeError(f"params argument given to the optimizer should be an iterable of "
                            f"Tensors or dicts, but got {type(params).__name__}")
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, param_group):
        """Add a group ({"params": [...], "lr": ...}); missing options take the defaults."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, "
                            "but the ordering of tensors in sets will change between runs. "
                            "Please use a list instead.")
        else:
            params = list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is "
                                f"{type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        group = ParamGroup(param_group)
        group["params"] = params
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required "
                                 f"optimization parameter {name}")
            group.setdefault(name, default)
        if len({id(p) for p in params}) != len(params):
            import warnings
            warnings.warn("optimizer contains a parameter group with duplicate parameters; in "
                          "future, this will cause an error", stacklevel=3)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none=True):
        """Reset gradients: to None (default) or to zeros in place."""
        eager = current_builder() is None
        for g in self.param_groups:
            in_place = eager and not set_to_none and multi_tensor.wanted(g)
            for p in g["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                elif in_place and p.grad.grad_fn is None and \
                        multi_tensor.arrays_of([(p.grad,)]) is not None:
                    p.grad._value.fill(0)   # the multi-tensor path: zero_ on the buffer
                    multi_tensor.written(p.grad)
                else:
                    grad = p.grad.detach()
                    with no_grad():
                        grad.zero_()
                    p.grad = grad

    def step(self, closure=None):
        raise NotImplementedError

    def _closure(self, closure):
        if closure is None:
            return None
        from aotgrad.runtime.grad_mode import enable_grad
        with enable_grad():
            return closure()

    # ---- state dicts -------------------------------------------------------------------------
    def state_dict(self):
        """{"state": {index: {...}}, "param_groups": [{..., "params": [indices]}]}; parameters
        are numbered in group order, as in PyTorch. The state tensors are references."""
        index, groups, n = {}, [], 0
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            ids = []
            for p in g["params"]:
                if id(p) not in index:
                    index[id(p)] = n
                    n += 1
                ids.append(index[id(p)])
            packed["params"] = ids
            groups.append(packed)
        state = {index[id(p)]: s for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Restore hyper-parameters and state saved by `state_dict` (deep-copied)."""
        state_dict = copy.deepcopy(state_dict)
        groups, saved = self.param_groups, state_dict["param_groups"]
        if len(groups) != len(saved):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for g, s in zip(groups, saved):
            if len(g["params"]) != len(s["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't "
                                 "match the size of optimizer's group")
        id_map = {}
        for g, s in zip(groups, saved):
            for i, p in zip(s["params"], g["params"]):
                id_map[i] = p
        self.state = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k not in id_map:
                continue
            p = id_map[k]
            self.state[p] = {key: self._cast_state(p, key, val) for key, val in v.items()}
        for g, s in zip(groups, saved):
            params = g["params"]
            g.clear()
            g.update({k: v for k, v in s.items() if k != "params"})
            g["params"] = params

    @staticmethod
    def _cast_state(p, key, value):
        if isinstance(value, Tensor) and key != "step" and value.dtype.is_floating_point:
            return value.to(p.dtype)
        return value

    def __getstate__(self):
        return self.__dict__

    def __repr__(self):
        lines = [type(self).__name__ + " ("]
        for i, g in enumerate(self.param_groups):
            if i:
                lines.append("")  # PyTorch leaves a blank line between groups
            lines.append(f"Parameter Group {i}")
            for k in sorted(g):
                if k != "params":
                    lines.append(f"    {k}: {g[k]}")
        lines.append(")")
        return "\n".join(lines)
