"""`aotgrad.save` / `aotgrad.load` and `aotgrad.serialization`, laid out like
torch.serialization.

    aotgrad.save({"model": model.state_dict(), "optim": opt.state_dict(), "epoch": 3}, "ck.pt")
    ck = aotgrad.load("ck.pt")                       # weights_only=True by default
    model.load_state_dict(ck["model"]); opt.load_state_dict(ck["optim"])

The file is a zip with the tensors in safetensors format and everything else as JSON
(`checkpoint.py` describes it): loading it runs no code from the file. Objects JSON cannot
hold are pickled at save time, and a weights-only load refuses them unless their classes
were allowed with `add_safe_globals` / `safe_globals`; `weights_only=False` unpickles them
(only for files you trust: unpickling runs arbitrary code).

`aotgrad.load` also reads a `torch.save` zip checkpoint of a state_dict without PyTorch
installed (`torch_format.py` lists exactly what is supported), and a bare `.safetensors`
file (a dict of tensors).
"""
import io
import os
import pickle
import zipfile

from aotgrad.runtime.tensor import Tensor
from aotgrad.serialization import checkpoint, torch_format
from aotgrad.serialization.safe_globals import (add_safe_globals, clear_safe_globals,
                                                get_safe_globals, safe_globals)

__all__ = ["save", "load", "add_safe_globals", "clear_safe_globals", "get_safe_globals",
           "safe_globals"]

DEFAULT_PROTOCOL = 2


def save(obj, f, pickle_module=pickle, pickle_protocol=DEFAULT_PROTOCOL,
         _use_new_zipfile_serialization=True, _disable_byteorder_record=False):
    """Save `obj` (tensors, state dicts, nested dicts/lists/tuples of numbers, strings, None)
    to `f`, a path or a binary file object. The pickling arguments are accepted for
    PyTorch's signature; only objects JSON cannot hold are pickled."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            checkpoint.save(obj, fh)
    else:
        checkpoint.save(obj, f)


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None,
         **pickle_load_args):
    """Load what `save` wrote (or a PyTorch zip checkpoint of a state_dict, or a
    `.safetensors` file) from a path or a binary file object.

    weights_only (default True, as in PyTorch 2.6 and later): build only tensors, containers,
    numbers and strings (and the classes allowed by `add_safe_globals`). map_location: None,
    "cpu", a CPU device, a dict of locations mapped to "cpu", or a function called as
    fn(tensor, "cpu") whose result (when not None) replaces the tensor; aotgrad keeps tensors
    on the CPU, so other devices raise."""
    weights_only = True if weights_only is None else bool(weights_only)
    map_tensor = _tensor_mapper(map_location)
    data = _read_all(f)
    if data[:4] != b"PK\x03\x04":
        if _is_safetensors(data):
            from safetensors.numpy import load as st_load
            return {k: map_tensor(Tensor._make(v, False)) for k, v in st_load(data).items()}
        raise RuntimeError("aotgrad.load: not a checkpoint aotgrad can read (neither an "
                           "aotgrad checkpoint, a PyTorch zip checkpoint nor a safetensors "
                           "file; PyTorch's legacy pre-1.6 format is not supported)")
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        if checkpoint.is_checkpoint(z):
            return checkpoint.load(z, weights_only, map_tensor)
        if torch_format.is_torch_zip(z):
            return torch_format.load(z, map_tensor)
    raise RuntimeError("aotgrad.load: a zip file that is neither an aotgrad checkpoint nor a "
                       "PyTorch checkpoint")


def _read_all(f):
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return fh.read()
    if isinstance(f, (bytes, bytearray)):
        raise TypeError("aotgrad.load: expected a path or a file object, got bytes (wrap them "
                        "in io.BytesIO)")
    return f.read()


def _is_safetensors(data):
    if len(data) < 10:
        return False
    n = int.from_bytes(data[:8], "little")
    return 8 + n <= len(data) and data[8:9] == b"{"


def _is_cpu(location):
    return str(getattr(location, "type", location)).split(":")[0] == "cpu"


def _tensor_mapper(map_location):
    if map_location is None:
        return lambda t: t
    if callable(map_location) and not isinstance(map_location, (str, dict)) and \
            not hasattr(map_location, "type"):
        def apply(t):
            out = map_location(t, "cpu")
            return t if out is None else out
        return apply
    targets = map_location.values() if isinstance(map_location, dict) else [map_location]
    for target in targets:
        if not _is_cpu(target):
            raise RuntimeError(f"aotgrad.load: map_location={map_location!r}: aotgrad tensors "
                               f"live on the CPU (no CUDA device); use map_location='cpu' or "
                               f"None")
    return lambda t: t
