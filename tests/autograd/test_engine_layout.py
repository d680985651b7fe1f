"""The engine's layout: its modules' imports point one way, nothing patches another module's
globals, graph breaks go through registered handlers, a node's backward runs in one place
(one gradient-count check), and `.grad` grows along one path (PyTorch's leaf and retained
rules)."""
import ast
import pathlib
import threading

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.runtime import autograd_node, backward, dispatch, graph_breaks
from aotgrad.runtime.autograd_node import Node
from aotgrad.ir.core import Aval
from aotgrad.testing import assert_close

RUNTIME = pathlib.Path(autograd_node.__file__).parent
# the engine's lower half: below Tensor, so it may import none of the runtime's other modules
LOW = {"autograd_node": {"grad_mode", "profiling", "grad_accumulation"},
       "grad_accumulation": {"grad_mode", "graph_breaks", "write_hooks", "sizes"},
       "version_counter": set(),
       "sizes": set(),
       "write_hooks": set(),
       "graph_breaks": set(),
       "grad_fn_names": set()}


def _runtime_imports(path):
    """(name of an imported runtime module, inside a function?) for each import in path."""
    out = []

    def visit(node, in_fn):
        for child in ast.iter_child_nodes(node):
            fn = in_fn or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom) and child.module:
                if child.module == "aotgrad.runtime":
                    out.extend((a.name, in_fn) for a in child.names)
                elif child.module.startswith("aotgrad.runtime."):
                    out.append((child.module.split(".")[2], in_fn))
            visit(child, fn)
    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return out


@pytest.mark.parametrize("name", sorted(LOW))
def test_low_engine_modules_import_only_what_lies_below_them(name):
    got = {m for m, _ in _runtime_imports(RUNTIME / f"{name}.py")}
    assert got <= LOW[name], f"runtime/{name}.py imports {sorted(got - LOW[name])}"


def test_the_engine_modules_import_nothing_inside_functions():
    for name in ("autograd_node", "grad_accumulation", "backward", "backward_hooks",
                 "saved_tensors", "saved_hooks", "graph_breaks", "dispatch"):
        late = [m for m, in_fn in _runtime_imports(RUNTIME / f"{name}.py") if in_fn]
        assert not late, f"runtime/{name}.py imports {late} inside functions"


def _function_level_imports(path):
    """The `aotgrad...` modules that `path` imports inside function bodies."""
    out = []

    def visit(node, in_fn):
        for child in ast.iter_child_nodes(node):
            fn = in_fn or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if in_fn and isinstance(child, ast.ImportFrom) and child.module and \
                    child.module.startswith("aotgrad"):
                out.append(child.module)
            visit(child, fn)
    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return out


# function-level imports left in runtime/: forward_mode's view tangent applies a prim itself
# (dispatch, which calls forward_mode, and view_ops lie above it); Tensor's methods that need
# higher layers are installed by methods.py. The count may only go down
RUNTIME_LATE_IMPORTS_MAX = 2


def test_runtime_imports_ir_at_module_level_and_late_imports_do_not_grow():
    late = {p.stem: _function_level_imports(p) for p in RUNTIME.glob("*.py")}
    # ir lies below runtime (it imports nothing of ours): never a reason to import it late
    ir_late = {n: [m for m in ms if m.startswith("aotgrad.ir")] for n, ms in late.items()}
    assert not any(ir_late.values()), {n: ms for n, ms in ir_late.items() if ms}
    total = sum(map(len, late.values()))
    assert total <= RUNTIME_LATE_IMPORTS_MAX, \
        f"{total} function-level imports in runtime/ (at most {RUNTIME_LATE_IMPORTS_MAX})"


def test_module_level_imports_of_runtime_form_no_cycle():
    graph = {p.stem: {m for m, in_fn in _runtime_imports(p) if not in_fn}
             for p in RUNTIME.glob("*.py")}
    state = {}

    def visit(n, path):
        state[n] = "open"
        for m in graph.get(n, ()):
            if state.get(m) == "open":
                raise AssertionError("import cycle: " + " -> ".join(path + [m]))
            if m not in state:
                visit(m, path + [m])
        state[n] = "done"
    for n in graph:
        if n not in state:
            visit(n, [n])


def _module_aliases(tree):
    """name -> module, for the names a module's imports bind to one of our modules."""
    import importlib
    out = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            names = [(a.asname or a.name.split(".")[0], a.name) for a in n.names]
        elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("aotgrad"):
            names = [(a.asname or a.name, f"{n.module}.{a.name}") for a in n.names]
        else:
            continue
        for alias, full in names:
            if full.startswith("aotgrad"):
                try:
                    importlib.import_module(full)
                except ImportError:
                    continue  # a class or function, not a module
                out[alias] = full
    return out


def test_no_runtime_module_assigns_another_modules_globals():
    for p in RUNTIME.glob("*.py"):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        modules = _module_aliases(tree)
        for n in ast.walk(tree):
            targets = n.targets if isinstance(n, ast.Assign) else \
                [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                for e in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and \
                            e.value.id in modules:
                        raise AssertionError(f"{p.name}:{e.lineno} sets "
                                             f"{modules[e.value.id]}.{e.attr}")


# ---- graph breaks: a registered handler --------------------------------------------------
def test_graph_break_handler_is_registered_and_removed():
    seen = []

    def handler(what, tensor):
        seen.append(what)
        raise dispatch.GraphBreak("handled: " + what)
    with pytest.raises(graph_breaks.GraphBreak, match="^plain$"):
        dispatch.graph_break("plain", None)
    with graph_breaks.on_graph_break(handler):
        with pytest.raises(graph_breaks.GraphBreak, match="handled: why"):
            dispatch.graph_break("why", None)
    assert seen == ["why"]
    with pytest.raises(graph_breaks.GraphBreak, match="^after$"):
        graph_breaks.graph_break("after", None)


def test_graph_break_handlers_belong_to_their_thread():
    def handler(what, tensor):
        raise graph_breaks.GraphBreak("mine")
    errors = []

    def other():
        try:
            graph_breaks.graph_break("other thread", None)
        except graph_breaks.GraphBreak as e:
            errors.append(str(e))
    with graph_breaks.on_graph_break(handler):
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert errors == ["other thread"]


def test_compiled_break_still_names_the_user_line():
    @ag.compile(fullgraph=True)
    def f(x):
        return x * float(x.sum())
    with pytest.raises(Exception, match=r"test_engine_layout.py:\d+"):
        f(ag.ones(3))


# ---- one place runs a node: the gradient-count check -------------------------------------
class _TwoForOne(Node):
    """A node with one input that returns two gradients (a broken backward)."""
    _name = "TwoForOneBackward"

    def __init__(self, x):
        a = [Aval(tuple(x.shape), x.dtype)]
        super().__init__([(x._grad_accumulator(), 0)], a, a)

    def _backward(self, grads):
        return [grads[0], grads[0]]


def _broken_output(x):
    y = ag.Tensor._make(np.array(x.detach().numpy() * 2), True)
    y.grad_fn = _TwoForOne(x)
    return y


def test_wrong_number_of_gradients_raises_pytorchs_error_on_every_path(torch):
    # torch's wording, checked on a Function that returns one gradient too many
    class F(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g, g, g
    with pytest.raises(RuntimeError) as ref:
        F.apply(torch.ones(2, requires_grad=True)).sum().backward()
    want = str(ref.value).replace("FBackward", "TwoForOneBackward").replace("got 3", "got 2")
    x = ag.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError) as one_node:  # the one-node path (its node feeds a leaf)
        _broken_output(x).backward(ag.ones(2))
    with pytest.raises(RuntimeError) as loop:      # the general loop
        _broken_output(x).sum().backward()
    with pytest.raises(RuntimeError) as grad:      # autograd.grad
        ag.autograd.grad(_broken_output(x).sum(), x)
    for e in (one_node, loop, grad):
        assert str(e.value).startswith(want)
    assert x.grad is None


def test_one_node_path_and_general_loop_agree():
    x, w = ag.randn(3, requires_grad=True), ag.randn(3, requires_grad=True)
    y = x * w
    assert backward._one_node_backward(y, ag.ones(3), True)
    gx, gw = x.grad.numpy().copy(), w.grad.numpy().copy()
    x.grad = w.grad = None
    with ag.autograd.profiler.profile():  # a profiler refuses the short path
        assert not autograd_node.fast_path_ok(y.grad_fn)
        y.backward(ag.ones(3))
    np.testing.assert_array_equal(x.grad.numpy(), gx)
    np.testing.assert_array_equal(w.grad.numpy(), gw)
    np.testing.assert_array_equal(gx, w.detach().numpy())


# ---- one accumulate path: PyTorch's leaf and retained-gradient rules ----------------------
def test_leaf_grad_accumulates_in_place_retained_grad_is_new_each_time(torch):
    def run(lib, x):
        y = x * 3
        y.retain_grad()
        (y * y).sum().backward(retain_graph=True)
        leaf, kept = x.grad, y.grad
        (y * y).sum().backward()
        return (x.grad is leaf, y.grad is kept, x.grad.detach().numpy().copy(),
                y.grad.detach().numpy().copy())
    data = np.array([1., -2., 0.5], np.float32)
    got = run(ag, ag.tensor(data, requires_grad=True))
    ref = run(torch, torch.tensor(data, requires_grad=True))
    assert got[:2] == ref[:2] == (True, False)
    assert_close(got[2], ref[2], rtol=1e-6, atol=0, equal_nan=True)
    assert_close(got[3], ref[3], rtol=1e-6, atol=0, equal_nan=True)


def test_first_gradient_is_copied_unless_fresh():
    from aotgrad.runtime.grad_accumulation import accumulate_array
    x = ag.zeros(3, requires_grad=True)
    shared = np.ones(3, np.float32)
    accumulate_array(x, shared, owned=False)
    assert x.grad._value is not shared
    shared += 1  # the .grad does not see later writes to a buffer the backward reuses
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(3, np.float32))
    y = ag.zeros(3, requires_grad=True)
    mine = np.ones(3, np.float32)
    accumulate_array(y, mine, owned=True)
    assert y.grad._value is mine
    accumulate_array(y, np.ones(3, np.float32), owned=True)  # then summed in place
    assert y.grad._value is mine
    np.testing.assert_array_equal(mine, np.full(3, 2, np.float32))


def test_grad_fn_names_come_from_one_table():
    from aotgrad.ir.prims import exp, reduce_sum
    from aotgrad.runtime import derivatives, grad_fn_names
    assert derivatives.VJP[reduce_sum].node_name == "SumBackward0"
    assert grad_fn_names.prim_node_name(exp) == "ExpBackward0"
    x = ag.ones(2, 2, requires_grad=True)
    assert x.sum().grad_fn.name() == "SumBackward0"
    assert x.sum(0).grad_fn.name() == "SumBackward1"
    assert x.t().grad_fn.name() == "TBackward0"
