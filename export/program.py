"""ExportedProgram: a captured graph with named inputs (the user's, then the parameters,
buffers and constants it reads), printable as the IR is, saved as a package that runs
without aotgrad, or written as ONNX. The step records below are what the package's driver
is emitted from (export.stages makes them from the code generator's schedule)."""
import dataclasses
import enum
import os

import numpy as np

from aotgrad.export.standalone.run import read_inputs
from aotgrad.ir import symbolic


class ExportError(RuntimeError):
    """A function or program that cannot be exported; the message says why and where."""


class InputKind(enum.Enum):
    USER = "user input"
    PARAMETER = "parameter"
    BUFFER = "buffer"
    CONSTANT = "constant"


@dataclasses.dataclass(eq=False)
class Input:
    name: str                  # the argument's name, or the module path (`fc1.weight`)
    kind: InputKind
    var: str                   # the graph input's name
    shape: tuple
    dtype: str                 # numpy dtype name
    value: np.ndarray = None   # state (parameters, buffers, constants): its value at export

    @property
    def is_state(self):
        return self.kind is not InputKind.USER


# ---- the lowered program: the package's driver is emitted from these ---------------------

@dataclasses.dataclass
class KernelArg:
    kind: str                  # "in" | "out" (arrays), "const" (a scalar), "size" (an int)
    var: str = None
    shape: tuple = None
    value: object = None
    dtype: str = None


@dataclasses.dataclass
class KernelStep:
    module: str                # the kernel's module (one self-contained Numba source each)
    function: str
    args: list
    outputs: list              # (var, shape, dtype) allocated before the call
    check: str = None          # the kernel returns nonzero when an index check failed: this
    where: str = ""


@dataclasses.dataclass
class ProductStep:
    a: str
    b: str
    out: str
    contract: tuple
    batch: tuple
    transposed: tuple = None   # (var, perm): the product's result, transposed, is that var


@dataclasses.dataclass
class ReferenceStep:
    prim: str
    inputs: list
    outputs: list              # (var, shape, dtype)
    params: dict
    where: str = ""


@dataclasses.dataclass
class CheckStep:
    x: str
    out: str
    check: object              # an ir.value_checks.ValueCheck


@dataclasses.dataclass
class ViewStep:
    base: str
    out: str
    shape: tuple = None        # a reshape, or
    expr: str = None           # a strided view: `base<expr>` (numpy indexing text)


@dataclasses.dataclass
class Lowered:
    graph: object
    steps: list
    modules: dict              # kernel module name -> Numba source
    signatures: dict           # kernel name -> its argument types (see standalone/run.py)


_NEGATED = {"==": "!=", "!=": "==", "<": ">=", ">=": "<", ">": "<=", "<=": ">"}


def _relation(guard):
    """A guard as the Python relation that holds (`(s1 % 2) == 0`, not `not (... != 0)`)."""
    text = guard.source()
    if guard.holds:
        return text
    inner = text[len("not ("):-1]
    for op, neg in _NEGATED.items():
        if inner.endswith(f" {op} 0"):
            return f"{inner[:-len(op) - 3]} {neg} 0"
    return text


def _sizes(shape):
    """A shape for the manifest: ints, and symbolic sizes as Python source (`s0`, `2*s1`)."""
    return [n.source() if symbolic.is_symbolic(n) else int(n) for n in shape]


def where_from(node):
    """`user.py:12 (linear)` for a node with provenance, else the prim's name."""
    prov = node.provenance
    if prov is None or not prov.file:
        return f"prims.{node.prim.name}"
    text = f"{os.path.basename(prov.file)}:{prov.line}"
    if prov.source:
        text += f": `{prov.source}`"
    return text + (f" ({prov.op})" if prov.op else "")


class ExportedProgram:
    """The result of `aotgrad.export`: `graph` (an IR Graph: user inputs, then state),
    `inputs` (per graph input: name, kind, shape, dtype, and the value of state),
    `output_names`, `train` (outputs: the loss, then `grad.<name>` per gradient).

    >>> ep = aotgrad.export(nn.Linear(3, 2), aotgrad.randn(4, 3))
    >>> [(i.name, i.kind.name, i.shape) for i in ep.inputs]
    [('input', 'USER', (4, 3)), ('weight', 'PARAMETER', (2, 3)), ('bias', 'PARAMETER', (2,))]
    >>> ep.output_names
    ['output']

    `print(ep)` shows the signature and the graph as the IR prints it; `ep.save(dir)` writes
    the package (run.py: numpy + numba alone); `ep.to_onnx(path)` the ONNX model.
    """

    def __init__(self, graph, inputs, output_names, single_output, train, name,
                 shape_env=None, symbol_dims=(), dim_names=None):
        self.graph, self.inputs, self.output_names = graph, inputs, output_names
        self.single_output, self.train, self.name = single_output, train, name
        self.shape_env = shape_env   # symbolic dims: the trace's symbols and guards
        self.symbol_dims = tuple(symbol_dims)   # (user input index, dim, symbol)
        self.dim_names = dict(dim_names or {})  # symbol -> the user's name of its dim

    @property
    def symbols(self):
        """The program's symbols (`s0`, ...), in the order its driver takes their values."""
        from aotgrad.ir.core import graph_symbols
        return tuple(graph_symbols(self.graph))

    @property
    def guards(self):
        """The relations between symbols the program relies on (ir.symbolic.Guard)."""
        return list(self.shape_env.guards) if self.shape_env is not None else []

    @property
    def user_inputs(self):
        return [i for i in self.inputs if not i.is_state]

    @property
    def state(self):
        """name -> value of the parameters, buffers and constants (as exported)."""
        return {i.name: i.value for i in self.inputs if i.is_state}

    def __str__(self):
        from aotgrad.ir.printer import format_graph
        kind = "training: loss and gradients" if self.train else "inference"
        lines = [f"# ExportedProgram {self.name} ({kind})"]
        for i in self.inputs:
            shape = ",".join(map(str, i.shape))
            lines.append(f"#   {i.kind.value:<10} {i.name} -> {i.var}: {i.dtype}[{shape}]")
        for name, v in zip(self.output_names, self.graph.outputs):
            lines.append(f"#   output     {name} <- {v.name}: {v.dtype.np.name}"
                         f"[{','.join(map(str, v.shape))}]")
        for g in self.guards:
            lines.append(f"#   guard      {_relation(g)}")
        for sp in (self.shape_env.specialised if self.shape_env is not None else ()):
            lines.append(f"#   specialised {symbolic.source(sp.expr)} = {sp.value}: {sp.why}")
        return "\n".join(lines) + "\n" + format_graph(self.graph, self.name)

    __repr__ = __str__

    def __call__(self, *inputs):
        """Run with the IR's numpy reference prims (the package runs the generated kernels):
        numpy arrays in, numpy arrays out (a tuple for several outputs)."""
        from aotgrad.ir.core import evaluate
        arrays, values = read_inputs(self.manifest(), inputs)
        outs = [np.asarray(o) for o in evaluate(self.graph, arrays + [
            i.value for i in self.inputs if i.is_state], values or None)]
        return outs[0] if len(outs) == 1 and self.single_output else tuple(outs)

    def manifest(self):
        """The package's manifest: inputs, outputs, shapes, dtypes (plain data, JSON)."""
        return {
            "format": "aotgrad-exported-program/1",
            "name": self.name,
            "kind": "training" if self.train else "inference",
            "inputs": [{"name": i.name, "shape": _sizes(i.shape), "dtype": i.dtype,
                        "dynamic_dims": [d for d, n in enumerate(i.shape)
                                         if symbolic.is_symbolic(n)]}
                       for i in self.user_inputs],
            # the driver's trailing argument: these symbols' values, in this order
            "symbols": list(self.symbols),
            # where run() reads each symbol: [input index, dim]
            "symbol_dims": self._symbol_dims(),
            "guards": [{"relation": _relation(g), "text": g.text} for g in self.guards],
            "state": [{"name": i.name, "kind": i.kind.name.lower(), "shape": list(i.shape),
                       "dtype": i.dtype} for i in self.inputs if i.is_state],
            "outputs": [{"name": n, "shape": _sizes(v.shape), "dtype": v.dtype.np.name}
                        for n, v in zip(self.output_names, self.graph.outputs)],
            "single_output": self.single_output and len(self.output_names) == 1,
        }

    def _symbol_dims(self):
        """symbol -> [user input index, dim] it was made for (guards may name symbols that
        an equality pinned out of the graph: every one is read)."""
        return {name: [i, d] for i, d, name in self.symbol_dims}

    def save(self, directory, precompile=False):
        """Write a self-contained package to `directory`: run.py (`run(*inputs)`), the
        driver and generated kernels, manifest.json and weights.npz. It runs with numpy and
        numba alone. Returns the directory.

        precompile=True compiles the kernels now, into numba's cache beside them: a copy
        that keeps the files' modification times (`cp -a`, shutil.copytree) starts without
        compiling on a machine with the same CPU (numba recompiles on another one)."""
        from aotgrad.export.package import write_package
        write_package(self, directory)
        if precompile:
            from aotgrad.export.load import load_exported
            load_exported(directory).warm()
        return directory

    def to_onnx(self, path=None, opset=17, input_names=None, output_names=None):
        """The program as an ONNX model (the `onnx` package): graph inputs are the user's
        inputs, parameters and buffers are initializers. Writes it to `path` when given;
        returns the onnx.ModelProto."""
        from aotgrad.export.onnx_lowering import to_onnx
        return to_onnx(self, path, opset, input_names, output_names)
