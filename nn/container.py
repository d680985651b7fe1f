"""Containers: Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict.

>>> net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
>>> len(net), type(net[1]).__name__
(3, 'ReLU')
"""
import operator
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from aotgrad.nn.module import Module
from aotgrad.nn.parameter import Parameter
from aotgrad.runtime.tensor import Tensor


def _index(idx, n, name):
    idx = operator.index(idx)
    if not -n <= idx < n:
        raise IndexError(f"index {idx} is out of range for {name} of length {n}")
    return idx % n


class Sequential(Module):
    """Chain modules: `Sequential(a, b)(x) == b(a(x))`; also takes an OrderedDict of names."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, m in args[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return Sequential(OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[_index(idx, len(self), "Sequential")]

    def __setitem__(self, idx, module):
        key = list(self._modules)[_index(idx, len(self), "Sequential")]
        setattr(self, key, module)

    def __delitem__(self, idx):
        keys = list(self._modules)
        for k in (keys[idx] if isinstance(idx, slice) else
                  [keys[_index(idx, len(self), "Sequential")]]):
            del self._modules[k]
        # renumber so indices stay contiguous, like PyTorch
        self.__dict__["_modules"] = OrderedDict(
            (str(i), m) for i, m in enumerate(self._modules.values()))

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __add__(self, other):
        if not isinstance(other, Sequential):
            raise ValueError(f"add operator supports only objects of Sequential class, but "
                             f"{type(other)} is given.")
        return Sequential(*list(self), *list(other))

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        """Insert before position `index` (list semantics: -1 is before the last module)."""
        if not isinstance(module, Module):
            raise AssertionError(f"module should be of type: {Module}")
        n = len(self)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        mods = list(self._modules.values())
        mods.insert(index if index >= 0 else index + n, module)
        self.__dict__["_modules"] = OrderedDict((str(i), m) for i, m in enumerate(mods))
        return self

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input


class ModuleList(Module):
    """A list of modules whose parameters the parent module sees."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ModuleList(list(self._modules.values())[idx])
        return self._modules[str(_index(idx, len(self), "ModuleList"))]

    def __setitem__(self, idx, module):
        self.add_module(str(_index(idx, len(self), "ModuleList")), module)

    def __delitem__(self, idx):
        mods = list(self._modules.values())
        del mods[idx]
        self.__dict__["_modules"] = {str(i): m for i, m in enumerate(mods)}

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        return ModuleList(list(self) + list(other))

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        if isinstance(modules, Module) and not isinstance(modules, (ModuleList, Sequential)):
            raise TypeError(f"ModuleList.extend should be called with an iterable, but got "
                            f"{type(modules).__name__}")
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        mods = list(self._modules.values())
        mods.insert(index, module)
        self.__dict__["_modules"] = {str(i): m for i, m in enumerate(mods)}

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList is a container and has no forward; iterate over it")


class ModuleDict(Module):
    """A dict of modules (insertion ordered) whose parameters the parent module sees."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def clear(self):
        self._modules.clear()

    def update(self, modules):
        items = modules.items() if hasattr(modules, "items") else modules
        for k, m in items:
            self[k] = m

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleDict is a container and has no forward")


class ParameterList(Module):
    """A list of Parameters registered as "0", "1", ...; plain tensors are wrapped in
    Parameters.

    >>> pl = nn.ParameterList([aotgrad.zeros(2)]).extend([aotgrad.ones(3)])
    >>> [tuple(p.shape) for p in pl]
    [(2,), (3,)]
    """

    def __init__(self, values=None):
        super().__init__()
        for v in values or ():
            self.append(v)

    @staticmethod
    def _wrap(value):
        return value if isinstance(value, Parameter) else Parameter(value)

    def append(self, value):
        self.register_parameter(str(len(self)), self._wrap(value))
        return self

    def extend(self, values):
        if isinstance(values, Parameter) or not hasattr(values, "__iter__"):
            raise TypeError(f"ParameterList.extend should be called with an iterable, but got "
                            f"{type(values).__name__}")
        for v in values:
            self.append(v)
        return self

    def __iadd__(self, values):
        return self.extend(values)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList(list(self)[idx])
        return self._parameters[str(_index(idx, len(self), "ParameterList"))]

    def __setitem__(self, idx, value):
        self.register_parameter(str(_index(idx, len(self), "ParameterList")), self._wrap(value))

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())

    def __dir__(self):
        return [k for k in super().__dir__() if not k.isdigit()]

    def extra_repr(self):
        return "\n".join(f"  ({i}): Parameter containing: [{p.dtype!r} of size "
                         f"{'x'.join(map(str, p.shape))}]" for i, p in enumerate(self))


_TENSOR_TYPES = {"float32": "FloatTensor", "float64": "DoubleTensor", "int32": "IntTensor",
                 "int64": "LongTensor", "bool": "BoolTensor"}


def _typename(t):
    """PyTorch's legacy type name of a tensor, as `torch.typename` gives it: aotgrad.FloatTensor."""
    return "aotgrad." + _TENSOR_TYPES.get(t.dtype.name, t.dtype.name.capitalize() + "Tensor")


class ParameterDict(Module):
    """An insertion-ordered dict of Parameters, each registered under its (string) key, so
    `named_parameters()` and `state_dict()` use the keys as names. A plain Tensor stored in
    it becomes a Parameter; other objects are kept as plain attributes. A plain dict given to
    the constructor or `update` is added in sorted key order (an OrderedDict, a
    ParameterDict or a sequence of pairs keeps its order), as in PyTorch.

    >>> pd = nn.ParameterDict({"b": aotgrad.zeros(2), "a": aotgrad.ones(3)})
    >>> list(pd.keys()), type(pd["a"]).__name__
    (['a', 'b'], 'Parameter')
    >>> sorted(pd.state_dict())
    ['a', 'b']
    """

    def __init__(self, parameters=None):
        super().__init__()
        self._keys = {}
        if parameters is not None:
            self.update(parameters)

    @staticmethod
    def _key_to_attr(key):
        if not isinstance(key, str):
            raise TypeError(f"Index given to ParameterDict cannot be used as a key as it is not "
                            f"a string (type is '{type(key).__name__}'). Open an issue on "
                            f"github if you need non-string keys.")
        return key

    def __getitem__(self, key):
        attr = self._key_to_attr(key)
        if key not in self._keys:   # PyTorch looks the key up as an attribute
            raise AttributeError(f"'ParameterDict' object has no attribute '{key}'")
        return getattr(self, attr)

    def __setitem__(self, key, value):
        attr = self._key_to_attr(key)
        if isinstance(value, Tensor) and not isinstance(value, Parameter):
            value = Parameter(value)
        setattr(self, attr, value)  # registers a Parameter; checks the name like PyTorch
        self._keys[key] = None

    def __delitem__(self, key):
        if key not in self._keys:
            raise KeyError(key)
        del self._keys[key]
        delattr(self, self._key_to_attr(key))

    def __len__(self):
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __reversed__(self):
        return reversed(list(self._keys))

    def __contains__(self, key):
        return key in self._keys

    def copy(self):
        """A new ParameterDict holding the same Parameter objects (not copies of them)."""
        return ParameterDict(OrderedDict((k, self[k]) for k in self._keys))

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def clear(self):
        for k in list(self._keys):
            del self[k]

    def pop(self, key):
        v = self[key]
        del self[key]
        return v

    def popitem(self):
        """Remove and return the last (key, value) pair inserted."""
        if not self._keys:
            raise KeyError("popitem(): dictionary is empty")
        k = next(reversed(self._keys))
        return k, self.pop(k)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def fromkeys(self, keys, default=None):
        """A new ParameterDict with `keys`, each holding `default`."""
        return ParameterDict((k, default) for k in keys)

    def keys(self):
        return self._keys.keys()

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def values(self):
        return (self[k] for k in self._keys)

    def update(self, parameters):
        """Add or overwrite entries from a mapping or an iterable of (key, value) pairs."""
        if not isinstance(parameters, Iterable):
            raise TypeError(f"ParametersDict.update should be called with an iterable of "
                            f"key/value pairs, but got {type(parameters).__name__}")
        if isinstance(parameters, (OrderedDict, ParameterDict)):
            for k, v in parameters.items():
                self[k] = v
        elif isinstance(parameters, Mapping):
            for k, v in sorted(parameters.items()):
                self[k] = v
        else:
            for j, pair in enumerate(parameters):
                if not isinstance(pair, Iterable):
                    raise TypeError(f"ParameterDict update sequence element #{j} should be "
                                    f"Iterable; is {type(pair).__name__}")
                if len(pair) != 2:
                    raise ValueError(f"ParameterDict update sequence element #{j} has length "
                                     f"{len(pair)}; 2 is required")
                self[pair[0]] = pair[1]

    def __or__(self, other):
        out = self.copy()
        out.update(other)
        return out

    def __ror__(self, other):
        out = other.copy()
        out.update(self)
        return out

    def __ior__(self, other):
        self.update(other)
        return self

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterDict should not be called.")

    def extra_repr(self):
        lines = []
        for k, p in self.items():
            if isinstance(p, Tensor):
                kind = "Parameter" if isinstance(p, Parameter) else "Tensor"
                lines.append(f"  ({k}): {kind} containing: [{_typename(p)} of size "
                             f"{'x'.join(map(str, p.shape))}]")
            else:
                lines.append(f"  ({k}): Object of type: {type(p).__name__}")
        return "\n".join(lines)
