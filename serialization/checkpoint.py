"""aotgrad's checkpoint file: one zip (stored, not compressed) holding

- `checkpoint.json`: the saved object as JSON. Plain JSON values stand for themselves
  (None, bools, ints, strings, finite floats, lists); every other value is an object
  {"$type": ..., ...}: "dict" / "ordered_dict" (items as [key, value] pairs, so keys keep
  their types: an optimizer's state is keyed by ints), "tuple", "set", "frozenset",
  "size", "float" (NaN and infinities), "complex", "bytes" (base64), "dtype",
  "numpy_scalar" (np.float64(0.5) & co.), "tensor" (an index into the "tensors" table),
  "ndarray" (a storage of the safetensors part), and "pickle" (an entry of the zip).
- `tensors.safetensors`: the tensors' data in the safetensors format, one entry per storage.
  Tensors that are one object load as one object; distinct tensors over the same data (the
  `state_dict()` of a module with tied weights holds two detached tensors over one array)
  load as distinct tensors over one array, as PyTorch's storage sharing does.
- `pickles/N.pkl`: objects of other types (a whole Module, a user's class), pickled at save
  time, as `torch.save` pickles everything. A weights-only load refuses them unless their
  classes are allowed by `aotgrad.serialization.add_safe_globals`.
"""
import base64
import io
import json
import math
import pickle
import zipfile
from collections import OrderedDict

import numpy as np

from aotgrad.ir import dtypes as dt
from aotgrad.runtime.tensor import Size, Tensor
from aotgrad.serialization import safe_globals

JSON_NAME = "checkpoint.json"
TENSORS_NAME = "tensors.safetensors"
FORMAT = "aotgrad-checkpoint"
VERSION = 1


# ---- writing -------------------------------------------------------------------------------
class _Writer:
    def __init__(self):
        self.tensor_records = []       # per distinct tensor object
        self.tensor_index = {}         # id(tensor) -> index
        self.keep_alive = []           # the saved objects, so ids stay unique while saving
        self.storages = {}             # storage key -> contiguous numpy array
        self.storage_key = {}          # (data pointer, shape, strides, dtype) -> key
        self.pickles = {}              # zip entry name -> bytes

    def encode(self, obj):
        if obj is None or type(obj) in (bool, int, str):  # subclasses (enums) are pickled
            return obj
        if type(obj) is float:
            return obj if math.isfinite(obj) else {"$type": "float", "value": repr(obj)}
        if isinstance(obj, Tensor):
            return {"$type": "tensor", "index": self._tensor(obj)}
        if type(obj) is list:
            return [self.encode(v) for v in obj]
        if type(obj) in (dict, OrderedDict):
            node = {"$type": "dict" if type(obj) is dict else "ordered_dict",
                    "items": [[self.encode(k), self.encode(v)] for k, v in obj.items()]}
            attrs = getattr(obj, "__dict__", None)
            if attrs:  # a module's state_dict may carry `_metadata`
                node["attrs"] = self.encode(dict(attrs))
            return node
        if type(obj) in (tuple, Size, set, frozenset):
            kind = {tuple: "tuple", Size: "size", set: "set", frozenset: "frozenset"}[type(obj)]
            return {"$type": kind, "items": [self.encode(v) for v in obj]}
        if type(obj) is complex:
            return {"$type": "complex", "real": self.encode(obj.real),
                    "imag": self.encode(obj.imag)}
        if type(obj) is bytes:
            return {"$type": "bytes", "base64": base64.b64encode(obj).decode("ascii")}
        if isinstance(obj, dt.DType):
            return {"$type": "dtype", "name": obj.name}
        if type(obj) is np.ndarray and obj.dtype.kind in "biuf":
            return {"$type": "ndarray", "storage": self._storage(obj)}
        if isinstance(obj, np.generic) and obj.dtype.kind in "biuf":
            return {"$type": "numpy_scalar", "dtype": obj.dtype.name,
                    "value": self.encode(obj.item())}
        name = f"pickles/{len(self.pickles)}.pkl"
        self.pickles[name] = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        return {"$type": "pickle", "entry": name, "class": _qualified(type(obj))}

    def _tensor(self, t):
        index = self.tensor_index.get(id(t))
        if index is None:
            value = t._concrete("aotgrad.save")
            index = self.tensor_index[id(t)] = len(self.tensor_records)
            self.keep_alive.append(t)
            from aotgrad.nn.parameter import Parameter
            self.tensor_records.append({"storage": self._storage(value),
                                        "requires_grad": bool(t.requires_grad),
                                        "parameter": isinstance(t, Parameter)})
        return index

    def _storage(self, arr):
        arr = np.asarray(arr)
        ident = (arr.__array_interface__["data"][0], arr.shape, arr.strides, arr.dtype.str)
        key = self.storage_key.get(ident)
        if key is None:
            key = self.storage_key[ident] = str(len(self.storages))
            self.keep_alive.append(arr)
            # (np.ascontiguousarray would make a 0-d array 1-d)
            self.storages[key] = arr if arr.flags.c_contiguous else arr.copy(order="C")
        return key

    def write(self, obj, f):
        from safetensors.numpy import save as st_save
        tree = self.encode(obj)
        stored, dtypes = {}, {}
        for key, arr in self.storages.items():
            stored[key], dtypes[key] = _to_safetensors(arr)
        doc = {"format": FORMAT, "version": VERSION, "tensors": self.tensor_records,
               "storage_dtypes": dtypes, "object": tree}
        with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED) as z:
            z.writestr(JSON_NAME, json.dumps(doc, allow_nan=False))
            z.writestr(TENSORS_NAME, st_save(stored))
            for name, data in self.pickles.items():
                z.writestr(name, data)


_SAFETENSORS_KINDS = {np.dtype(t) for t in (np.bool_, np.int8, np.int16, np.int32, np.int64,
                                            np.uint8, np.uint16, np.uint32, np.uint64,
                                            np.float16, np.float32, np.float64)}


def _to_safetensors(arr):
    """(array safetensors can store, the numpy dtype name to view it back as, or None).
    Types safetensors' numpy API does not know (ml_dtypes' bfloat16) travel as raw bits."""
    if arr.dtype in _SAFETENSORS_KINDS:
        return arr, None
    return arr.view(np.dtype(f"u{arr.dtype.itemsize}")), arr.dtype.name


def _qualified(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def save(obj, f):
    _Writer().write(obj, f)


# ---- reading -------------------------------------------------------------------------------
class _Reader:
    def __init__(self, z, doc, weights_only, map_tensor):
        from safetensors.numpy import load as st_load
        self.z, self.weights_only, self.map_tensor = z, weights_only, map_tensor
        raw = st_load(z.read(TENSORS_NAME))
        self.storages = {}
        for key, arr in raw.items():
            view_as = doc.get("storage_dtypes", {}).get(key)
            self.storages[key] = arr.view(np.dtype(view_as)) if view_as else arr
        self.records = doc["tensors"]
        self.tensors = {}

    def decode(self, node):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, list):
            return [self.decode(v) for v in node]
        kind = node["$type"]
        if kind in ("dict", "ordered_dict"):
            out = (dict if kind == "dict" else OrderedDict)(
                (self.decode(k), self.decode(v)) for k, v in node["items"])
            if "attrs" in node:
                out.__dict__.update(self.decode(node["attrs"]))
            return out
        if kind in ("tuple", "size", "set", "frozenset"):
            cls = {"tuple": tuple, "size": Size, "set": set, "frozenset": frozenset}[kind]
            return cls(self.decode(v) for v in node["items"])
        if kind == "float":
            return float(node["value"])
        if kind == "complex":
            return complex(self.decode(node["real"]), self.decode(node["imag"]))
        if kind == "bytes":
            return base64.b64decode(node["base64"])
        if kind == "dtype":
            return dt.as_dtype(node["name"])
        if kind == "tensor":
            return self._tensor(node["index"])
        if kind == "ndarray":
            return np.array(self.storages[node["storage"]], copy=True)
        if kind == "numpy_scalar":
            return np.dtype(node["dtype"]).type(self.decode(node["value"]))
        if kind == "pickle":
            data = self.z.read(node["entry"])
            if self.weights_only:
                return restricted_loads(data, node.get("class", "?"))
            return pickle.loads(data)
        raise pickle.UnpicklingError(f"aotgrad.load: unknown entry type {kind!r} in the "
                                     f"checkpoint")

    def _tensor(self, index):
        t = self.tensors.get(index)
        if t is None:
            rec = self.records[index]
            t = Tensor._make(self.storages[rec["storage"]], False)
            if rec["parameter"]:
                from aotgrad.nn.parameter import Parameter
                t = Parameter(t, rec["requires_grad"])
            elif rec["requires_grad"]:
                t.requires_grad_(True)
            t = self.map_tensor(t)
            self.tensors[index] = t
        return t


def is_checkpoint(z):
    return JSON_NAME in z.namelist()


def load(z, weights_only, map_tensor):
    doc = json.loads(z.read(JSON_NAME))
    if doc.get("format") != FORMAT or doc.get("version", 0) > VERSION:
        raise RuntimeError(f"aotgrad.load: not an aotgrad checkpoint of a known version "
                           f"(format {doc.get('format')!r}, version {doc.get('version')!r})")
    return _Reader(z, doc, weights_only, map_tensor).decode(doc["object"])


# ---- weights-only unpickling of the objects that JSON does not hold -------------------------
_NP_RECONSTRUCT = np.zeros(0).__reduce__()[0]


def _allowed_builtin(module, name):
    from aotgrad.nn import parameter
    from aotgrad.runtime import tensor
    table = {
        ("collections", "OrderedDict"): OrderedDict,
        ("builtins", "set"): set, ("builtins", "frozenset"): frozenset,
        ("builtins", "complex"): complex, ("builtins", "slice"): slice,
        ("aotgrad.runtime.tensor", "_rebuild"): tensor._rebuild,
        ("aotgrad.nn.parameter", "_rebuild_parameter"): parameter._rebuild_parameter,
        ("aotgrad.ir.dtypes", "from_numpy"): dt.from_numpy,
        ("numpy", "dtype"): np.dtype, ("numpy", "ndarray"): np.ndarray,
        # how numpy pickles an array (module numpy._core, or numpy.core before numpy 2)
        ("numpy.core.multiarray", "_reconstruct"): _NP_RECONSTRUCT,
        ("numpy._core.multiarray", "_reconstruct"): _NP_RECONSTRUCT,
    }
    return table.get((module, name))


class RestrictedUnpickler(pickle.Unpickler):
    """Builds only containers, tensors, numpy arrays and the user's safe globals."""

    def find_class(self, module, name):
        obj = _allowed_builtin(module, name) or safe_globals.lookup(module, name)
        if obj is None:
            raise pickle.UnpicklingError(
                f"Weights only load failed: the checkpoint needs the global {module}.{name}, "
                f"which is not allowed. If you trust the file, load it with "
                f"weights_only=False (this runs arbitrary code from the file), or allow the "
                f"global with aotgrad.serialization.add_safe_globals([{name}]) or the "
                f"aotgrad.serialization.safe_globals([{name}]) context manager.")
        return obj


def restricted_loads(data, what):
    try:
        return RestrictedUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        raise pickle.UnpicklingError(f"{e} (the object is a {what})") from None
