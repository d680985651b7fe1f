"""Run an exported aotgrad program with numpy and numba alone (aotgrad is not needed).

    import importlib.util
    spec = importlib.util.spec_from_file_location("model_pkg", "path/to/package/run.py")
    pkg = importlib.util.module_from_spec(spec); spec.loader.exec_module(pkg)
    out = pkg.run(x)          # numpy arrays, in the order of the example arguments

manifest.json lists the inputs, outputs, shapes and dtypes; weights.npz holds the
parameters, buffers and constants; driver.py runs the steps; kernels/ holds the generated
Numba kernels (compiled on first use, cached by numba).
"""
import hashlib
import importlib.util
import json
import os
import sys
import threading

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
_LOCK = threading.Lock()
_STATE = {}


def manifest():
    m = _STATE.get("manifest")
    if m is None:
        with open(os.path.join(HERE, "manifest.json"), encoding="utf-8") as f:
            m = _STATE["manifest"] = json.load(f)
    return m


def _import(relpath, own=False):
    """Import a file of the package under a name made from its content: numba's cache
    records the module's name and imports it by that name when it loads, so a copy of the
    package elsewhere finds its machine code. Two packages with the same file share the
    module, unless `own`: then this package's file is executed as a module of its own (under
    the same name, registered only where none is), whose functions compile into this
    package's cache."""
    path = os.path.join(HERE, relpath)
    with open(path, "rb") as f:
        name = "_aotgrad_exported_" + hashlib.sha1(f.read()).hexdigest()[:20]
    mod = sys.modules.get(name)
    if mod is not None and not (own and os.path.abspath(mod.__file__) != os.path.abspath(path)):
        return mod
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    registered = name not in sys.modules
    if registered:
        sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        if registered:
            sys.modules.pop(name, None)
        raise
    return mod


def _program():
    prog = _STATE.get("program")
    if prog is None:
        with _LOCK:
            prog = _STATE.get("program")
            if prog is None:
                m = manifest()
                kernels = {k: getattr(_import(os.path.join("kernels", k + ".py")), k)
                           for k in m["kernels"]}
                driver = _import("driver.py")
                with np.load(os.path.join(HERE, "weights.npz")) as w:
                    state = [np.ascontiguousarray(w[s["name"]]) for s in m["state"]]
                fn = driver.build(kernels, _import("reference.py"),
                                  _import("value_checks.py"))
                prog = _STATE["program"] = (fn, state, _BlasOnOneThread())
    return prog


def _numba_types(desc):
    """The numba argument types of a kernel signature in the manifest: ["size"],
    ["scalar", dtype], ["array", dtype, ndim] (C-contiguous)."""
    import numba
    types = []
    for d in desc:
        if d[0] == "size":
            types.append(numba.int64)
        elif d[0] == "scalar":
            types.append(numba.from_dtype(np.dtype(d[1])))
        else:
            types.append(numba.types.Array(numba.from_dtype(np.dtype(d[1])), int(d[2]), "C"))
    return tuple(types)


def warm():
    """Compile every kernel now, for the argument types the driver passes (numba keeps the
    machine code in its cache: beside the kernels when the folder is writable)."""
    m = manifest()
    for k in m["kernels"]:
        getattr(_import(os.path.join("kernels", k + ".py"), own=True), k).compile(
            _numba_types(m["kernel_signatures"][k]))


class _BlasOnOneThread:
    """The kernels run on numba's threads; products on numpy's BLAS. Both pools busy at once
    oversubscribe the cores (a 64x256 MLP batch took 40 ms instead of 0.5 ms on 2 cores), so
    BLAS runs on one thread while the program runs, through threadpoolctl when it is
    installed (without it BLAS keeps its own setting: set OPENBLAS_NUM_THREADS=1 then)."""

    def __init__(self):
        try:
            from threadpoolctl import ThreadpoolController
            self.libs = [c for c in ThreadpoolController().lib_controllers
                         if c.user_api == "blas"]
        except Exception:   # not installed, or a BLAS it cannot control
            self.libs = []
        self.before = []

    def __enter__(self):
        self.before = [c.num_threads for c in self.libs]
        for c, n in zip(self.libs, self.before):
            if n != 1:
                c.set_num_threads(1)

    def __exit__(self, *exc):
        for c, n in zip(self.libs, self.before):
            if n != 1:
                c.set_num_threads(n)


def _size(expr, values):
    """A manifest size: an int, or Python source over the symbols (`s0`, `2*s1`)."""
    return expr if isinstance(expr, int) else eval(expr, {"__builtins__": {}}, dict(values))


def _symbol_values(manifest, arrays):
    """{symbol: value} read off the inputs' shapes, or a clear error naming the input, the
    dim and the relation the program relies on."""
    specs = manifest["inputs"]
    where = {}
    values = {}
    for name, (k, d) in manifest.get("symbol_dims", {}).items():
        n = int(arrays[k].shape[d])
        where[name] = f"input '{specs[k]['name']}' dim {d}"
        if n < 2:
            raise ValueError(f"{manifest['name']}: {where[name]} has size {n}; the program "
                             f"was exported with this dim symbolic ({name}) and serves sizes "
                             f">= 2 only (sizes 0 and 1 are specialised: export again with "
                             f"an example of that size)")
        values[name] = n
    return values, where


def _check_guards(manifest, values, where):
    for g in manifest.get("guards", ()):
        if not eval(g["relation"], {"__builtins__": {}}, dict(values)):
            names = sorted((n for n in values if n in _names_in(g["relation"])),
                           key=lambda n: int(n[1:]))
            said = ", ".join(f"{where[n]} ({n} = {values[n]})" for n in names)
            raise ValueError(f"{manifest['name']}: {said} violates a relation the program "
                             f"relies on: {g['relation']}; export again for such sizes")


def _names_in(text):
    import re
    return set(re.findall(r"\bs[0-9]+\b", text))


def read_inputs(manifest, inputs):
    """The inputs as C-contiguous arrays of the manifest's shapes and dtypes, and the values
    of the program's symbols read off their shapes; or a clear error naming the input."""
    specs = manifest["inputs"]
    if len(inputs) != len(specs):
        raise TypeError(f"{manifest['name']}: expected {len(specs)} inputs "
                        f"({', '.join(s['name'] for s in specs)}), got {len(inputs)}")
    arrays = []
    for x in inputs:
        if hasattr(x, "detach") and not isinstance(x, np.ndarray):   # a tensor
            x = x.detach().numpy()
        arrays.append(np.asarray(x))
    for a, s in zip(arrays, specs):
        if a.ndim != len(s["shape"]):
            raise ValueError(f"{manifest['name']}: input '{s['name']}' has shape "
                             f"{tuple(a.shape)}; the program was exported for "
                             f"{len(s['shape'])} dims "
                             f"[{','.join(map(str, s['shape']))}]")
    values, where = _symbol_values(manifest, arrays)
    _check_guards(manifest, values, where)   # (first: a pinned size names its relation)
    for a, s in zip(arrays, specs):
        want = [_size(e, values) for e in s["shape"]]
        if tuple(a.shape) != tuple(want):
            if s.get("dynamic_dims") or values:
                shape = "[" + ",".join(map(str, s["shape"])) + "]"
                raise ValueError(f"{manifest['name']}: input '{s['name']}' has shape "
                                 f"{tuple(a.shape)}; the program was exported for shapes "
                                 f"{shape} (symbols read from "
                                 f"{', '.join(f'{n} = {where[n]}' for n in sorted(where))}), "
                                 f"here {tuple(want)}")
            raise ValueError(f"{manifest['name']}: input '{s['name']}' has shape "
                             f"{tuple(a.shape)}; the program was exported for shape "
                             f"{tuple(s['shape'])} (exported programs have static shapes: "
                             f"export again for this shape)")
        if a.dtype != np.dtype(s["dtype"]):
            raise TypeError(f"{manifest['name']}: input '{s['name']}' has dtype {a.dtype}; "
                            f"the program was exported for {s['dtype']}")
    return [np.ascontiguousarray(a) for a in arrays], values


def check_inputs(manifest, inputs):
    """The inputs as C-contiguous arrays of the manifest's shapes and dtypes, or a clear
    error naming the input."""
    return read_inputs(manifest, inputs)[0]


def run(*inputs):
    """Run the program: numpy arrays in the order of the example arguments -> a numpy array,
    or a tuple of them (training programs: the loss, then one gradient per parameter)."""
    m = manifest()
    fn, state, blas = _program()
    arrays, values = read_inputs(m, inputs)
    # a program with symbolic sizes takes their values as one trailing tuple
    syms = (tuple(values[n] for n in m["symbols"]),) if m.get("symbols") else ()
    with _LOCK, blas:   # (one call at a time: the BLAS setting is per process)
        outs = fn(*arrays, *state, *syms)
    return outs[0] if m["single_output"] else tuple(outs)

