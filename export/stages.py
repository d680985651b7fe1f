"""The one module of export/ that reaches into the compiler's stages (tracer, IR passes,
code generator). Everything else in export/ works on what these functions return:

    capture(fn, args, train)  -> Captured: one graph whose inputs are the user's inputs, then
                                 the parameters, buffers and constants it reads
    lower(graph)              -> Lowered: the code generator's kernels (self-contained Numba
                                 module sources) and the program's steps, as export's own
                                 step records (export.program)

A training export is the joint graph as ONE program (loss and gradients from one call), so
the partitioner, which splits a joint graph into a forward that saves values and a backward
that runs later, has nothing to decide here.
"""
import dataclasses

import numpy as np

from aotgrad.export.program import (ExportError, Input, InputKind, KernelArg, KernelStep,
                                    Lowered, ProductStep, ReferenceStep, CheckStep, ViewStep,
                                    where_from)
from aotgrad.ir import prims
from aotgrad.ir.core import Graph, Node
from aotgrad.ir import passes
from aotgrad.ir import symbolic


@dataclasses.dataclass
class Captured:
    graph: Graph                 # inputs: user inputs (example order), then named state
    inputs: list                 # per graph input: export.program.Input
    output_names: list           # per graph output
    single_output: bool          # the function returned one tensor (not a tuple/list)
    shape_env: object = None     # symbolic dims: the trace's ShapeEnv (guards), else None
    symbol_dims: tuple = ()      # (user input index, dim, symbol) of each symbol made


def _unwrap(fn):
    """A compiled function or module: export the code it wraps."""
    from aotgrad.compiler import CompiledFunction
    return fn.fn if isinstance(fn, CompiledFunction) else fn


def _state_names(fn):
    """id(tensor) -> (module path name, InputKind) of the parameters and buffers of fn (a
    module) or of the modules a function reaches by name (closure cells and globals it
    names: `model.fc1.weight`)."""
    if hasattr(fn, "named_parameters"):
        modules = [("", fn)]
    else:
        code = getattr(fn, "__code__", None)
        found = {}
        if code is not None:
            for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
                try:
                    found[name] = cell.cell_contents
                except ValueError:   # an empty cell
                    pass
            g = getattr(fn, "__globals__", {})
            found.update({n: g[n] for n in code.co_names if n in g and n not in found})
        modules = [(n + ".", m) for n, m in found.items() if hasattr(m, "named_parameters")]
    names = {}   # in torch.export's order: parameters, then buffers (module order)
    for prefix, module in modules:
        for n, p in module.named_parameters():
            names.setdefault(id(p), (prefix + n, InputKind.PARAMETER))
    for prefix, module in modules:
        for n, b in (module.named_buffers() if hasattr(module, "named_buffers") else ()):
            names.setdefault(id(b), (prefix + n, InputKind.BUFFER))
    return names


def _trace(fn, args, state, train, what, symbolic_dims=None):
    from aotgrad.runtime import dispatch
    from aotgrad.tracer.trace import GraphBreakError, trace
    try:
        return trace(fn, tuple(args), {}, {k: n for k, (n, _) in state.items()},
                     want_grad=train, symbolic_dims=symbolic_dims or None)
    except (dispatch.GraphBreak, GraphBreakError) as e:
        raise ExportError(f"{what}: the function cannot be captured as one graph: {e}") \
            from None


def capture(fn, args, train, symbolic_dims=None):
    """Trace fn(*args) (tensors) into one optimised graph: the inference graph, or with
    train=True the loss and the gradients of everything that requires grad.
    `symbolic_dims`: {argument index: dims} traced as symbols (compile(dynamic=True)'s
    machinery); the ShapeEnv's guards come back in Captured.shape_env."""
    from aotgrad.tracer.arg_names import leaf_names
    from aotgrad.tracer.trace_result import Role
    fn = _unwrap(fn)
    module = fn if hasattr(fn, "named_parameters") else None
    what = f"export({getattr(fn, '__name__', type(fn).__name__)})"
    state = _state_names(fn)
    tr = _trace(fn, args, state, train, what, symbolic_dims)
    if any(kind is Role.SEED for kind, _ in tr.roles):
        raise ExportError(f"{what}: the function draws random numbers (dropout in training "
                          f"mode, rand/randn); an exported program is deterministic: call "
                          f"model.eval() or take the randomness out of the function")
    if tr.mutations:
        raise ExportError(f"{what}: the function writes tensors in place or stores them "
                          f"(BatchNorm's running statistics in training mode, optimizer "
                          f"state, .grad); an exported program is a pure function: call "
                          f"model.eval() or keep such updates outside")
    if not all(tr.out_is_tensor) or not tr.out_is_tensor:
        raise ExportError(f"{what}: the function must return a tensor or a tuple/list of "
                          f"tensors; it returned non-tensor values too")
    n_out = len(tr.out_is_tensor)
    g = tr.graph
    from aotgrad.ir import dtypes as dt
    if any(v.dtype in dt.LOW_PRECISION for n in g.nodes for v in n.inputs + n.outputs) or \
            any(v.dtype in dt.LOW_PRECISION for v in g.inputs):
        raise ExportError(f"{what}: float16/bfloat16 values are not exported (the exported "
                          f"program and its ONNX lowering have no 16-bit floats); cast the "
                          f"model and inputs to float32")
    n_primals = tr.n_primals
    nodes, outputs = list(g.nodes), list(g.outputs[:n_out])
    out_names = [f"output{i}" if n_out > 1 else "output" for i in range(n_out)]
    arg_names = leaf_names(fn.forward if module is not None else fn, args, {})
    user, rest, role_inputs = [], [], {}
    rank = {key: r for r, key in enumerate(state)}
    for v, (kind, x) in zip(g.inputs[:n_primals], tr.roles):
        if kind is Role.ARG:
            user.append((x, v, Input(arg_names[x], InputKind.USER, v.name, tuple(v.shape),
                                      v.dtype.np.name)))
            role_inputs[(Role.ARG, x)] = user[-1][2]
            continue
        name, k = state.get(id(x), (None, InputKind.CONSTANT))
        if name is None:
            name = f"constant{sum(i.kind is InputKind.CONSTANT for _, i, _ in rest)}"
        value = np.array(x._value, copy=True)
        rest.append((v, Input(name, k, v.name, tuple(v.shape), v.dtype.np.name, value),
                     (k is InputKind.CONSTANT, rank.get(id(x), 0))))
        role_inputs[(Role.LIFTED, id(x))] = rest[-1][1]
    user.sort(key=lambda t: t[0])
    rest.sort(key=lambda t: t[2])
    rest = [(v, i) for v, i, _ in rest]
    inputs = [i for _, _, i in user] + [i for _, i in rest]
    position = {id(i): k for k, i in enumerate(inputs)}
    order = {key: position[id(i)] for key, i in role_inputs.items()}
    order_names = [i.name for i in inputs]
    if train:
        loss = g.outputs[0]
        if n_out != 1 or loss.shape not in ((), (1,)) or not loss.dtype.is_floating_point:
            raise ExportError(f"{what} with train=True: the function must return one scalar "
                              f"floating-point loss; it returned {n_out} value(s) of "
                              f"{[tuple(v.shape) for v in g.outputs[:n_out]]}")
        if tr.diff_outs != [0] or not any(tr.grad_present):
            raise ExportError(f"{what} with train=True: the loss does not depend on any "
                              f"parameter or input that requires grad")
        tangent = g.inputs[n_primals]
        # d loss / d loss = 1: the tangent the backward reads becomes a constant
        nodes.insert(0, Node(prims.full, [], [tangent],
                             dict(shape=tuple(tangent.shape), value=1.0, dtype=tangent.dtype)))
        grads = iter(g.outputs[n_out + len(tr.mutations):])
        named = [(order[(kind, x if kind is Role.ARG else id(x))], next(grads))
                 for (kind, x), present in zip(tr.diff_roles, tr.grad_present) if present]
        named.sort(key=lambda t: t[0])      # in the order of the inputs
        outputs += [v for _, v in named]
        out_names = ["loss"] + [f"grad.{order_names[k]}" for k, _ in named]
    elif n_primals != len(g.inputs):
        raise ExportError(f"{what}: the traced graph has inputs besides the function's "
                          f"arguments and state ({len(g.inputs) - n_primals})")
    graph = Graph([v for _, v, _ in user] + [v for v, _ in rest], nodes, outputs,
                  name="training" if train else "inference")
    graph = passes.optimize(graph)
    graph.inputs = [v for _, v, _ in user] + [v for v, _ in rest]  # all kept, in this order
    # a symbol's argument index -> the position of that argument among the user inputs (a
    # tensor passed twice is one input)
    position = {x: k for k, (x, _, _) in enumerate(user)}
    symbol_dims = tuple((position[i], d, name) for i, d, name in tr.symbol_dims)
    return Captured(graph, inputs, out_names,
                    tr.out_tree is None, tr.shape_env, symbol_dims)


def lower(graph):
    """The code generator's schedule of `graph`, without compiling it here: Numba module
    source per distinct kernel, and the steps that call them, products, reference prims,
    views and value checks (the package's driver is emitted from these)."""
    from aotgrad.codegen.emit_base import ParallelForm
    from aotgrad.codegen.emitter import emit_kernel, module_source
    from aotgrad.codegen.scheduler import Kernel, Scheduler
    graph = passes.cse(graph, keep_outputs=True)   # as codegen.compile_graph does
    # the exported driver runs prims' numpy implementations, not codegen's library kernels
    scheduler = Scheduler(graph, library_kernels=False)
    schedule = scheduler.run()
    modules, steps, signatures = {}, [], {}
    for st in schedule.steps:
        if isinstance(st, Kernel):
            helpers = set()
            # numba's prange: the package runs without aotgrad's thread pool (codegen.parts)
            spec = emit_kernel(scheduler, st, helpers, form=ParallelForm.PRANGE)
            src = module_source([spec], helpers)    # names the kernel k_<hash of its body>
            modules[spec.name] = src
            signatures[spec.name] = [
                ["size"] if a.kind == "size" else ["scalar", a.dtype.np.name]
                if a.kind == "const" else ["array", a.var.dtype.np.name, max(1, len(a.shape))]
                for a in spec.args]      # the types codegen compiles the kernel for
            args, outs = [], []
            for a in spec.args:
                if a.kind == "size":
                    args.append(KernelArg("size", value=_size(a.value)))
                elif a.kind == "const":
                    value = a.value if symbolic.is_symbolic(a.value) else \
                        a.dtype.np.type(a.value).item()   # (a symbolic size: the driver's)
                    args.append(KernelArg("const", value=value, dtype=a.dtype.np.name))
                else:
                    shape = None if tuple(a.shape) == tuple(a.var.shape) else tuple(a.shape)
                    args.append(KernelArg(a.kind, var=a.var.name, shape=shape))
                    if a.kind == "out" and a.var not in outs:
                        outs.append(a.var)
            check = None
            if spec.checks:
                names = sorted({n.prim.name for n in st.nodes
                                if n.prim.name in ("gather", "scatter_add")})
                check = f"{'/'.join(names) or 'gather'}(): {'; '.join(spec.checks)}"
            outs = [(v.name, tuple(v.shape), v.dtype.np.name) for v in outs]
            steps.append(KernelStep(spec.name, spec.name, args, outs, check,
                                    where_from(st.nodes[0])))
            continue
        n = st.nodes[0]
        if st.kind == "dot":
            transposed = None
            if st.out_view is not None:   # the product's result goes on transposed
                d, inv = st.out_view
                perm = tuple(inv.index(i) for i in range(len(inv)))
                transposed = (st.outputs[0].name, perm)
            steps.append(ProductStep(n.inputs[0].name, n.inputs[1].name, n.outputs[0].name,
                                     _plain(n.params["contract"]),
                                     _plain(n.params.get("batch", ((), ()))), transposed))
        elif st.kind == "check":
            steps.append(CheckStep(n.inputs[0].name, n.outputs[0].name, n.params["check"]))
        elif st.kind == "view":
            expr = getattr(st, "view_expr", None)
            if expr:
                steps.append(ViewStep(st.inputs[0].name, st.outputs[0].name, expr=expr))
            else:
                steps.append(ViewStep(n.inputs[0].name, n.outputs[0].name,
                                      shape=tuple(n.params["shape"])))
        else:
            steps.append(ReferenceStep(n.prim.name, [v.name for v in n.inputs],
                                       [(v.name, tuple(v.shape), v.dtype.np.name)
                                        for v in n.outputs],
                                       dict(n.params), where_from(n)))
    return Lowered(graph, steps, modules, signatures)


def _size(x):
    """A kernel's size argument: an int, or a SymInt (the driver computes it from the
    program's symbol values)."""
    return x if symbolic.is_symbolic(x) else int(x)


def _plain(x):
    return tuple(_plain(i) for i in x) if isinstance(x, (list, tuple)) else int(x)
