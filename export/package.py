"""ExportedProgram.save: the self-contained package.

    <dir>/run.py            run(*inputs) (numpy in, numpy out); imports numpy and numba only
    <dir>/manifest.json     inputs, state, outputs: names, shapes, dtypes; kernel list
    <dir>/weights.npz       parameters, buffers and constants by name (`fc1.weight`)
    <dir>/driver.py         the program's steps, one line each, emitted below
    <dir>/kernels/k_*.py    the generated Numba kernels, one self-contained module each
    <dir>/reference.py      numpy implementations of the prims run as reference steps
    <dir>/value_checks.py   the run-time checks of index values (the IR's own module)
    <dir>/program.txt       the exported graph, as the IR prints it (for reading)
"""
import builtins
import dataclasses
import json
import math
import os
import shutil

import numpy as np

from aotgrad.export.program import (CheckStep, ExportError, KernelStep, ProductStep,
                                    ReferenceStep, ViewStep)
from aotgrad.export.standalone import reference
from aotgrad.ir import symbolic

_STANDALONE = os.path.dirname(os.path.abspath(reference.__file__))


def _value_checks_file():
    from aotgrad.ir import value_checks
    return value_checks.__file__


def _py(v):
    """Python source for a step parameter (numpy dtypes and aotgrad dtypes by name; a
    symbolic size as its expression over the program's symbols, locals of the driver)."""
    if symbolic.is_symbolic(v):
        return v.source()
    if hasattr(v, "np") and hasattr(v, "short"):       # an aotgrad DType
        return f"np.dtype({v.np.name!r})"
    if isinstance(v, float):
        if v != v:
            return "float('nan')"
        if v in (math.inf, -math.inf):
            return f"float('{v}')"
        return repr(v)
    if isinstance(v, (list, tuple)):
        inner = ", ".join(_py(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, (bool, int, str)) or v is None:
        return repr(v)
    if isinstance(v, np.generic):
        return _py(v.item())
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k!r}: {_py(x)}" for k, x in v.items()) + "}"
    raise ExportError(f"export: cannot write the step parameter {v!r} into the package")


def _check_source(check):
    error = check.error
    if getattr(builtins, error.__name__, None) is not error:
        error = RuntimeError   # the package has only Python's own exception classes
    fields = [f"error={error.__name__}", f"message={check.message!r}"]
    fields += [f"{f.name}={_py(getattr(check, f.name))}"
               for f in dataclasses.fields(check)[2:]
               if getattr(check, f.name) != f.default]
    return f"VC.ValueCheck({', '.join(fields)})"


class _Driver:
    """Emits driver.py: `build(kernels, R, VC) -> program(*inputs, *state) -> [outputs]`."""

    def __init__(self, lowered):
        self.lowered = lowered
        self.consts = []          # lines run once in build()
        self.bound = {}           # their text -> name
        self.views = set()        # values that may share memory with an input or state

    def name(self, var):
        return f"v_{var}"

    def bind(self, text):
        n = self.bound.get(text)
        if n is None:
            n = self.bound[text] = f"_c{len(self.consts)}"
            self.consts.append(f"    {n} = {text}")
        return n

    def step(self, st):
        if isinstance(st, KernelStep):
            lines = [f"{self.name(v)} = np.empty({_py(tuple(s))}, np.{d})"
                     for v, s, d in st.outputs]
            args = []
            for a in st.args:
                if a.kind == "size":
                    args.append(_py(a.value))
                elif a.kind == "const" and symbolic.is_symbolic(a.value):
                    args.append(f"np.{a.dtype}({_py(a.value)})")   # per call: its symbols
                elif a.kind == "const":
                    args.append(self.bind(f"np.{a.dtype}({_py(a.value)})"))
                else:
                    v = self.name(a.var)
                    args.append(v if a.shape is None else f"{v}.reshape({_py(tuple(a.shape))})")
            call = f"{self.bind(f'kernels[{st.function!r}]')}({', '.join(args)})"
            if st.check is None:
                return lines + [call]
            return lines + [f"if {call}:", f"    raise IndexError({st.check!r})"]
        if isinstance(st, ProductStep):
            line = f"{self.name(st.out)} = R.dot_general({self.name(st.a)}, " \
                   f"{self.name(st.b)}, {_py(st.contract)}, {_py(st.batch)})"
            if st.transposed is None:
                return [line]
            var, perm = st.transposed
            return [line, f"{self.name(var)} = np.ascontiguousarray("
                          f"{self.name(st.out)}.transpose({_py(perm)}))"]
        if isinstance(st, CheckStep):
            c = self.bind(_check_source(st.check))
            if st.x in self.views:
                self.views.add(st.out)
            return [f"{c}.raise_if_violated({self.name(st.x)})",
                    f"{self.name(st.out)} = {self.name(st.x)}"]
        if isinstance(st, ViewStep):
            if st.base in self.views:
                self.views.add(st.out)
            if st.expr is not None:
                return [f"{self.name(st.out)} = {self.name(st.base)}{st.expr}"]
            return [f"{self.name(st.out)} = {self.name(st.base)}.reshape({_py(tuple(st.shape))})"]
        if isinstance(st, ReferenceStep):
            impl = reference.IMPLS.get(st.prim)
            if impl is None:
                raise ExportError(
                    f"export: prims.{st.prim} (from {st.where}) runs as a reference step and "
                    f"has no implementation in the standalone package (supported there: "
                    f"{', '.join(sorted(reference.IMPLS))})")
            params = ", ".join(f"{k}={_py(v)}" for k, v in st.params.items())
            args = ", ".join([self.name(v) for v in st.inputs] + ([params] if params else []))
            outs = [self.name(v) for v, _, _ in st.outputs]
            return [f"{outs[0]} = np.ascontiguousarray(R.IMPLS[{st.prim!r}]({args}))"]
        raise ExportError(f"export: unknown step {st!r}")

    def source(self, symbols=()):
        g = self.lowered.graph
        self.views = {v.name for v in g.inputs}
        ins = [self.name(v.name) for v in g.inputs]
        body = []
        if symbols:   # the values of the symbolic sizes: one trailing tuple (as compile's)
            ins.append("symbol_values")
            body.append(f"{', '.join(symbols)}, = symbol_values")
        for st in self.lowered.steps:
            body += self.step(st)
        outs = [f"{self.name(v.name)}.copy()" if v.name in self.views else self.name(v.name)
                for v in g.outputs]
        return "\n".join([
            '"""The driver of an exported aotgrad program (generated: do not edit)."""',
            "import numpy as np", "", "",
            "def build(kernels, R, VC):",
            "    \"\"\"program(*inputs, *state[, symbol_values]) -> [outputs], over the "
            "package's kernels (R: "
            "reference.py, VC: value_checks.py).\"\"\"",
            *self.consts, "",
            f"    def program({', '.join(ins)}):",
            *["        " + line for line in body],
            f"        return [{', '.join(outs)}]", "",
            "    return program", ""])


def write_package(ep, directory):
    from aotgrad.export.stages import lower
    lowered = lower(ep.graph)
    driver = _Driver(lowered).source(ep.symbols)
    os.makedirs(os.path.join(directory, "kernels"), exist_ok=True)
    for old in os.listdir(os.path.join(directory, "kernels")):   # a package saved before
        if old.startswith("k_") and old.endswith(".py"):
            os.remove(os.path.join(directory, "kernels", old))
    for name, src in lowered.modules.items():
        with open(os.path.join(directory, "kernels", name + ".py"), "w", encoding="utf-8") as f:
            f.write(src)
    with open(os.path.join(directory, "driver.py"), "w", encoding="utf-8") as f:
        f.write(driver)
    for src, dst in ((os.path.join(_STANDALONE, "run.py"), "run.py"),
                     (os.path.join(_STANDALONE, "reference.py"), "reference.py"),
                     (_value_checks_file(), "value_checks.py")):
        shutil.copyfile(src, os.path.join(directory, dst))
    manifest = ep.manifest()
    manifest["kernels"] = sorted(lowered.modules)
    manifest["kernel_signatures"] = {k: lowered.signatures[k] for k in manifest["kernels"]}
    with open(os.path.join(directory, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
    np.savez(os.path.join(directory, "weights.npz"), **ep.state)
    with open(os.path.join(directory, "program.txt"), "w", encoding="utf-8") as f:
        f.write(str(ep))
    return directory
