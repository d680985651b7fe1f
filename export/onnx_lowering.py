"""ExportedProgram.to_onnx: each prim of the exported graph as ONNX operators (the `onnx`
package, `pip install -e ".[export]"`). One table, `LOWERINGS`, keyed by prim name; a prim,
dtype or parameter it has no entry for is an ExportError naming the prim and the user's line.

Graph inputs are the user's inputs; parameters, buffers and constants are initializers
(named as in the module: `fc1.weight`); outputs are named as the program's
(`output`, or `loss`, `grad.fc1.weight` for a training program). Shapes are static.
`check_values` (run-time index checks) becomes Identity: onnxruntime checks indices itself.
"""
import math

import numpy as np

from aotgrad.export.program import ExportError, where_from
from aotgrad.ir import symbolic

MIN_OPSET = 13        # ReduceSum's axes as an input
_UNARY = {"neg": "Neg", "abs": "Abs", "exp": "Exp", "log": "Log", "sqrt": "Sqrt",
          "sin": "Sin", "cos": "Cos", "tanh": "Tanh", "logistic": "Sigmoid", "erf": "Erf",
          "sign": "Sign", "floor": "Floor", "ceil": "Ceil", "reciprocal": "Reciprocal",
          "logical_not": "Not", "sinh": "Sinh", "cosh": "Cosh", "asinh": "Asinh",
          "acosh": "Acosh", "atanh": "Atanh", "asin": "Asin", "acos": "Acos"}
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow",
           "maximum": "Max", "minimum": "Min", "eq": "Equal", "lt": "Less",
           "le": "LessOrEqual", "gt": "Greater", "ge": "GreaterOrEqual",
           "logical_and": "And", "logical_or": "Or"}
_REDUCE = {"reduce_sum": "ReduceSum", "reduce_max": "ReduceMax", "reduce_min": "ReduceMin",
           "reduce_prod": "ReduceProd"}


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ImportError("aotgrad's ONNX export needs the onnx package: "
                          "pip install 'aotgrad[export]' (onnx, onnxruntime)") from None
    return onnx


def _elem_type(np_dtype, what):
    onnx = _onnx()
    t = {np.dtype(np.float32): onnx.TensorProto.FLOAT,
         np.dtype(np.float64): onnx.TensorProto.DOUBLE,
         np.dtype(np.int32): onnx.TensorProto.INT32,
         np.dtype(np.int64): onnx.TensorProto.INT64,
         np.dtype(np.bool_): onnx.TensorProto.BOOL}.get(np.dtype(np_dtype))
    if t is None:
        raise ExportError(f"to_onnx: {what} has dtype {np.dtype(np_dtype)}, which the ONNX "
                          f"export does not support (float32, float64, int32, int64, bool)")
    return t


class _Builder:
    def __init__(self, opset):
        self.onnx, self.opset = _onnx(), opset
        self.nodes, self.initializers, self.name = [], [], {}
        self._count = 0
        self.symbol_reads = {}    # symbol -> (graph input name, dim) its value is read from
        self.symbols = {}         # symbol -> the tensor computed from it (shape [1])

    def fresh(self, prefix="t"):
        self._count += 1
        return f"{prefix}_{self._count}"

    def const(self, value, dtype=None):
        a = np.asarray(value, dtype=dtype)
        name = self.fresh("const")
        self.initializers.append(self.onnx.numpy_helper.from_array(a, name))
        return name

    def ints(self, values):
        values = list(values)
        if not any(symbolic.is_symbolic(v) for v in values):
            return self.const(np.array(values, np.int64))
        # symbolic sizes: computed in the graph from the inputs' shapes
        return self.op("Concat", [self.size(v) for v in values], axis=0)

    def size(self, e):
        """An int64 tensor of shape [1] holding the size `e` (an int or a SymInt)."""
        if not symbolic.is_symbolic(e):
            return self.const(np.array([int(e)], np.int64))
        total = None
        for mono, c in e._terms:
            v = None
            for atom, power in mono:
                if isinstance(atom, str):
                    t = self.symbol(atom)
                else:   # sizes are positive: Div (truncating) is the floor division here
                    t = self.op("Div" if atom.op == "//" else "Mod",
                                [self.size(atom.num), self.size(atom.den)])
                for _ in range(power):
                    v = t if v is None else self.op("Mul", [v, t])
            if v is None:
                v = self.size(c)
            elif c != 1:
                v = self.op("Mul", [v, self.size(c)])
            total = v if total is None else self.op("Add", [total, v])
        return total if total is not None else self.size(0)

    def symbol(self, name):
        """A symbol's value: its input's size along its dim (Shape, then Gather)."""
        got = self.symbols.get(name)
        if got is None:
            where = self.symbol_reads.get(name)
            if where is None:
                raise ExportError(f"to_onnx: the size {name} is not read from any input")
            x, d = where
            got = self.symbols[name] = self.op(
                "Gather", [self.op("Shape", [x]), self.const(np.array([d], np.int64))], axis=0)
        return got

    def op(self, op_type, inputs, **attrs):
        out = self.fresh(op_type.lower())
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), [out], **attrs))
        return out


def _unsupported(node, why):
    return ExportError(f"to_onnx: prims.{node.prim.name} (from {where_from(node)}) {why}")


def _dot(b, n, x, y):
    a_, b_ = n.inputs
    (lc, rc), (lb, rb) = n.params["contract"], n.params.get("batch", ((), ()))
    af = [i for i in range(a_.ndim) if i not in lc and i not in lb]
    bf = [i for i in range(b_.ndim) if i not in rc and i not in rb]
    pa, pb = list(lb) + af + list(lc), list(rb) + list(rc) + bf
    bsh = [a_.shape[i] for i in lb]
    afs, bfs = [a_.shape[i] for i in af], [b_.shape[i] for i in bf]
    k = math.prod(a_.shape[i] for i in lc)

    def canon(v, var, perm, shape):
        if perm != list(range(var.ndim)):
            v = b.op("Transpose", [v], perm=perm)
        if [var.shape[i] for i in perm] != shape:
            v = b.op("Reshape", [v, b.ints(shape)])
        return v
    out = b.op("MatMul", [canon(x, a_, pa, bsh + [math.prod(afs), k]),
                          canon(y, b_, pb, bsh + [k, math.prod(bfs)])])
    if bsh + [math.prod(afs), math.prod(bfs)] != bsh + afs + bfs:
        out = b.op("Reshape", [out, b.ints(bsh + afs + bfs)])
    return out


def _reduce(b, n, x):
    dims = list(n.params["dims"])
    if not dims:
        return b.op("Identity", [x])
    op = _REDUCE[n.prim.name]
    if op == "ReduceSum" or b.opset >= 18:
        return b.op(op, [x, b.ints(dims)], keepdims=0)
    return b.op(op, [x], axes=dims, keepdims=0)


def _broadcast(b, n, x):
    shape, dims = list(n.params["shape"]), list(n.params["dims"])
    src = n.inputs[0]
    ranked = [src.shape[dims.index(d)] if d in dims else 1 for d in range(len(shape))]
    if ranked != list(src.shape):
        x = b.op("Reshape", [x, b.ints(ranked)])
    return b.op("Expand", [x, b.ints(shape)]) if ranked != shape else x


def _slice(b, n, x):
    start, limit = n.params["start"], n.params["limit"]
    strides = n.params.get("strides") or (1,) * len(start)
    return b.op("Slice", [x, b.ints(start), b.ints(limit), b.ints(range(len(start))),
                          b.ints(strides)])


def _pad(b, n, x):
    config = n.params["config"]
    value = b.const(np.array(n.params.get("value", 0.0), n.inputs[0].dtype.np))
    shape = list(n.inputs[0].shape)
    for d, (_, _, it) in enumerate(config):
        if not it or shape[d] == 0:
            continue
        # interior padding along d: a new axis after d padded with `it` values at its end,
        # merged into d, and the `it` values after the last element cut off
        x = b.op("Unsqueeze", [x, b.ints([d + 1])])
        pads = [0] * (2 * (len(shape) + 1))
        pads[len(shape) + 1 + d + 1] = it
        x = b.op("Pad", [x, b.ints(pads), value], mode="constant")
        merged = shape[:d] + [shape[d] * (it + 1)] + shape[d + 1:]
        x = b.op("Reshape", [x, b.ints(merged)])
        shape[d] = shape[d] + (shape[d] - 1) * it
        x = b.op("Slice", [x, b.ints([0]), b.ints([shape[d]]), b.ints([d])])
    return b.op("Pad", [x, b.ints([lo for lo, _, _ in config] + [hi for _, hi, _ in config]),
                        value], mode="constant")


def _where(b, n, c, x, y):
    if n.inputs[1].dtype.np != np.bool_:
        return b.op("Where", [c, x, y])
    # onnxruntime has no bool Where: (c and x) or (not c and y)
    return b.op("Or", [b.op("And", [c, x]), b.op("And", [b.op("Not", [c]), y])])


def _rev(b, n, x):
    dims = list(n.params["dims"])
    if not dims:
        return b.op("Identity", [x])
    big = np.iinfo(np.int64)
    return b.op("Slice", [x, b.ints([-1] * len(dims)), b.ints([big.min] * len(dims)),
                          b.ints(dims), b.ints([-1] * len(dims))])


def _gather(b, n, x, idx):
    src, ix = n.inputs
    dim = n.params["dim"]
    if any(d != dim and i != s for d, (i, s) in enumerate(zip(ix.shape, src.shape))):
        ends = [s if d == dim else i for d, (i, s) in enumerate(zip(ix.shape, src.shape))]
        x = b.op("Slice", [x, b.ints([0] * len(ends)), b.ints(ends),
                           b.ints(range(len(ends)))])
    return b.op("GatherElements", [x, idx], axis=dim)


def _scatter_add(b, n, x, idx, src):
    if b.opset < 16:
        raise _unsupported(n, "needs opset 16 or later (ScatterElements with reduction)")
    return b.op("ScatterElements", [x, idx, src], axis=n.params["dim"], reduction="add")


def _symbolic_creation(b, n):
    """full / iota with symbolic sizes (or a symbolic fill value): built in the graph."""
    p = n.params
    dtype = p["dtype"].np
    to = _elem_type(dtype, f"prims.{n.prim.name}")
    shape = list(p["shape"])
    if n.prim.name == "full":
        if symbolic.is_symbolic(p["value"]):
            value = b.op("Cast", [b.op("Reshape", [b.size(p["value"]), b.ints([])])], to=to)
        else:
            value = b.const(np.array(p["value"], dtype))
        return b.op("Expand", [value, b.ints(shape)]) if shape else value
    d = p["dim"]
    line = b.op("Range", [b.const(np.array(0, np.int64)),
                          b.op("Reshape", [b.size(shape[d]), b.ints([])]),
                          b.const(np.array(1, np.int64))])
    line = b.op("Cast", [line], to=to)
    ranked = [shape[d] if k == d else 1 for k in range(len(shape))]
    return b.op("Expand", [b.op("Reshape", [line, b.ints(ranked)]), b.ints(shape)])


def _creation(b, n):
    if any(symbolic.is_symbolic(v) for v in list(n.params["shape"]) + [n.params.get("value")]):
        return _symbolic_creation(b, n)
    from aotgrad.ir.core import evaluate
    from aotgrad.ir.core import Graph
    (value,) = evaluate(Graph([], [n], n.outputs), [])
    return b.const(np.asarray(value))


LOWERINGS = {
    **{p: (lambda op: lambda b, n, x: b.op(op, [x]))(op) for p, op in _UNARY.items()},
    **{p: (lambda op: lambda b, n, x, y: b.op(op, [x, y]))(op) for p, op in _BINARY.items()},
    "ne": lambda b, n, x, y: b.op("Not", [b.op("Equal", [x, y])]),
    "rsqrt": lambda b, n, x: b.op("Reciprocal", [b.op("Sqrt", [x])]),
    "log1p": lambda b, n, x: b.op("Log", [b.op("Add", [x, b.const(
        np.array(1, n.inputs[0].dtype.np))])]),
    "expm1": lambda b, n, x: b.op("Sub", [b.op("Exp", [x]), b.const(
        np.array(1, n.inputs[0].dtype.np))]),
    "where": _where,
    "convert_element_type": lambda b, n, x: b.op(
        "Cast", [x], to=_elem_type(n.params["dtype"].np, f"prims.convert_element_type")),
    "broadcast_in_dim": _broadcast,
    "reshape": lambda b, n, x: b.op("Reshape", [x, b.ints(n.params["shape"])]),
    "transpose": lambda b, n, x: b.op("Transpose", [x], perm=list(n.params["perm"])),
    "slice": _slice,
    "pad": _pad,
    "concatenate": lambda b, n, *xs: b.op("Concat", list(xs), axis=n.params["dim"]),
    "rev": _rev,
    **{p: _reduce for p in _REDUCE},
    "argmax": lambda b, n, x: b.op("ArgMax", [x], axis=n.params["dim"], keepdims=0),
    "argmin": lambda b, n, x: b.op("ArgMin", [x], axis=n.params["dim"], keepdims=0),
    "cumsum": lambda b, n, x: b.op("CumSum", [x, b.const(np.array(n.params["dim"],
                                                                  np.int64))]),
    "dot_general": _dot,
    "gather": _gather,
    "scatter_add": _scatter_add,
    "iota": _creation,
    "full": _creation,
    "check_values": lambda b, n, x: b.op("Identity", [x]),
}


def _dims(ep, shape):
    """A value_info's dims: ints, and symbolic sizes as dim_params (the user's name of the
    dim where given, else the expression: `s0`, `2*s1`)."""
    out = []
    for n in shape:
        if symbolic.is_symbolic(n):
            text = n.source()
            out.append(ep.dim_names.get(text, text))
        else:
            out.append(int(n))
    return out


def lower_graph(ep, opset, input_names, output_names):
    onnx = _onnx()
    if not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise ValueError(f"to_onnx: opset {opset} is not supported: choose one from "
                         f"{MIN_OPSET} to {onnx.defs.onnx_opset_version()}")
    g = ep.graph
    user = ep.user_inputs
    input_names = list(input_names) if input_names else [i.name for i in user]
    output_names = list(output_names) if output_names else list(ep.output_names)
    if len(input_names) != len(user) or len(output_names) != len(g.outputs):
        raise ValueError(f"to_onnx: {len(input_names)} input names for {len(user)} inputs, "
                         f"{len(output_names)} output names for {len(g.outputs)} outputs")
    b = _Builder(opset)
    b.symbol_reads = {name: (input_names[k], d) for k, d, name in ep.symbol_dims}
    inputs = []
    for i, name in zip(ep.inputs, input_names + [i.name for i in ep.inputs if i.is_state]):
        v = next(v for v in g.inputs if v.name == i.var)
        b.name[v] = name
        if i.is_state:
            _elem_type(i.dtype, f"{i.kind.value} '{i.name}'")
            b.initializers.append(onnx.numpy_helper.from_array(np.asarray(i.value), name))
        else:
            inputs.append(onnx.helper.make_tensor_value_info(
                name, _elem_type(i.dtype, f"input '{name}'"), _dims(ep, i.shape)))
    for n in g.nodes:
        rule = LOWERINGS.get(n.prim.name)
        if rule is None:
            raise _unsupported(n, "has no ONNX mapping in aotgrad's exporter (supported: "
                                  f"{', '.join(sorted(LOWERINGS))})")
        for v in list(n.inputs) + list(n.outputs):
            _elem_type(v.dtype.np, f"prims.{n.prim.name} (from {where_from(n)})")
        out = rule(b, n, *[b.name[v] for v in n.inputs])
        b.name[n.outputs[0]] = out
    outputs = []
    for v, name in zip(g.outputs, output_names):
        b.nodes.append(onnx.helper.make_node("Identity", [b.name[v]], [name]))
        outputs.append(onnx.helper.make_tensor_value_info(
            name, _elem_type(v.dtype.np, f"output '{name}'"), _dims(ep, v.shape)))
    graph = onnx.helper.make_graph(b.nodes, ep.name, inputs, outputs, b.initializers)
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)],
                                   producer_name="aotgrad")
    # the oldest IR version that holds this opset: what most onnxruntime releases read
    model.ir_version = onnx.helper.find_min_ir_version_for(
        [onnx.helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


def to_onnx(ep, path=None, opset=17, input_names=None, output_names=None):
    model = lower_graph(ep, opset, input_names, output_names)
    if path is not None:
        if hasattr(path, "write"):
            path.write(model.SerializeToString())
        else:
            _onnx().save(model, path)
    return model
