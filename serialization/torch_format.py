"""Reading a checkpoint written by `torch.save` without PyTorch installed.

Supported: the zip format of `torch.save` (PyTorch 1.6 and later; `archive/data.pkl` with
one `archive/data/<key>` entry per storage, little-endian) holding CPU tensors of the dtypes
aotgrad has (float32, float64, int32, int64, bool; a storage of another type is read, and
turning it into a tensor raises aotgrad's unsupported-dtype error) and `nn.Parameter`s,
inside dicts, OrderedDicts (a module's `state_dict()` with its `_metadata`), lists, tuples,
sets, numbers, strings, None and `torch.Size`/`torch.dtype` values: a model's or an
optimizer's `state_dict()`, or a dict of them. Tensors come back as aotgrad tensors (copies;
the same tensor saved twice loads as one object), Parameters as `nn.Parameter`.

The pickle is read by a restricted unpickler: it builds only the globals above
(`collections.OrderedDict`, `torch._utils._rebuild_tensor_v2`, `_rebuild_parameter`,
`_rebuild_parameter_with_state`, the typed storages `torch.FloatStorage` ... and
`torch.Size`, `torch.<dtype>`), plus those allowed by `add_safe_globals`, and refuses any
other global with an error naming it. `weights_only=False` does not change that for PyTorch
files (their other globals would need PyTorch itself).

Not supported: the legacy non-zip format (before 1.6), big-endian files, sparse, quantized,
nested or complex tensors, tensor subclasses, and `torch.save(model)` of whole modules.
"""
import io
import pickle
from collections import OrderedDict

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.tensor import Size, Tensor
from aotgrad.serialization import safe_globals

_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "LongStorage": np.int64, "IntStorage": np.int32, "ShortStorage": np.int16,
    "CharStorage": np.int8, "ByteStorage": np.uint8, "BoolStorage": np.bool_,
}
_TORCH_DTYPES = {"float32": "float32", "float": "float32", "float64": "float64",
                 "double": "float64", "int32": "int32", "int": "int32", "int64": "int64",
                 "long": "int64", "bool": "bool"}


class _StorageType:
    """Stands for `torch.FloatStorage` & co. in the pickle: the element type of a storage."""

    def __init__(self, name):
        self.name = name

    def np_dtype(self):
        if self.name == "BFloat16Storage":
            try:
                import ml_dtypes
            except ImportError:
                raise pickle.UnpicklingError("the checkpoint holds a bfloat16 tensor; reading "
                                             "it needs the ml_dtypes package") from None
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(_STORAGE_DTYPES[self.name])


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
                       backward_hooks=None, metadata=None):
    item = storage.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(storage[storage_offset:], shape=tuple(size),
                                           strides=tuple(s * item for s in stride))
    t = Tensor._make(np.array(view, copy=True), False)
    return t.requires_grad_(True) if requires_grad else t


def _rebuild_parameter(data, requires_grad, backward_hooks=None):
    from aotgrad.nn.parameter import Parameter
    return Parameter(data, requires_grad)


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    p = _rebuild_parameter(data, requires_grad)
    for k, v in (state or {}).items():
        setattr(p, k, v)
    return p


def _find(module, name):
    if module == "collections" and name == "OrderedDict":
        return OrderedDict
    if module == "builtins" and name in ("set", "frozenset", "complex", "slice"):
        return {"set": set, "frozenset": frozenset, "complex": complex, "slice": slice}[name]
    if module == "torch._utils":
        return {"_rebuild_tensor_v2": _rebuild_tensor_v2,
                "_rebuild_parameter": _rebuild_parameter,
                "_rebuild_parameter_with_state": _rebuild_parameter_with_state}.get(name)
    if module == "torch":
        if name in _STORAGE_DTYPES or name == "BFloat16Storage":
            return _StorageType(name)
        if name == "Size":
            return Size
        if name in _TORCH_DTYPES:
            return dt.as_dtype(_TORCH_DTYPES[name])
    return None


class _TorchUnpickler(pickle.Unpickler):
    def __init__(self, data, read_storage):
        super().__init__(io.BytesIO(data))
        self._read_storage = read_storage

    def find_class(self, module, name):
        obj = _find(module, name)
        if obj is None:
            obj = safe_globals.lookup(module, name)
        if obj is None:
            raise pickle.UnpicklingError(
                f"aotgrad.load: this PyTorch checkpoint needs the global {module}.{name}, which "
                f"the reader of PyTorch files does not build (it reads tensors, Parameters and "
                f"containers: a state_dict); aotgrad.serialization.add_safe_globals allows a "
                f"class of your own")
        return obj

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"aotgrad.load: unknown persistent id {pid!r}")
        # (storage, type, key, location, numel): a CUDA tensor's bytes load onto the CPU
        _, storage_type, key, _location, _numel = pid
        return self._read_storage(storage_type, key)


def is_torch_zip(z):
    return any(n.endswith("/data.pkl") for n in z.namelist())


def load(z, map_tensor):
    pkl = next(n for n in z.namelist() if n.endswith("/data.pkl"))
    prefix = pkl[: -len("data.pkl")]
    names = set(z.namelist())
    if prefix + "byteorder" in names and z.read(prefix + "byteorder").strip() != b"little":
        raise RuntimeError("aotgrad.load: big-endian PyTorch checkpoints are not supported")
    cache = {}

    def read_storage(storage_type, key):
        if key not in cache:
            if not isinstance(storage_type, _StorageType):
                raise pickle.UnpicklingError(f"aotgrad.load: unsupported storage type "
                                             f"{storage_type!r}")
            raw = z.read(f"{prefix}data/{key}")
            cache[key] = np.frombuffer(raw, dtype=storage_type.np_dtype())
        return cache[key]

    obj = _TorchUnpickler(z.read(pkl), read_storage).load()
    return _map_tensors(obj, map_tensor, {})


def _map_tensors(obj, fn, memo):
    """Apply map_location's function to every tensor (each object once)."""
    if isinstance(obj, Tensor):
        if id(obj) not in memo:
            memo[id(obj)] = fn(obj)
        return memo[id(obj)]
    if type(obj) in (dict, OrderedDict):
        for k, v in obj.items():
            obj[k] = _map_tensors(v, fn, memo)
        return obj
    if type(obj) is list:
        obj[:] = [_map_tensors(v, fn, memo) for v in obj]
        return obj
    if type(obj) is tuple:
        return tuple(_map_tensors(v, fn, memo) for v in obj)
    return obj
