"""Per-prim facts as tags: each prim defined once by name, the facts other modules ask
about read from the prim's tags (no module keeps its own set of prim names)."""
import ast
import pathlib

import numpy as np
import pytest

from aotgrad.ir import prims
from aotgrad.ir.core import PRIMS, Prim, register
from aotgrad.ir.tags import KINDS, Tag, reduced_dims
from aotgrad.testing import assert_close

IR = pathlib.Path(prims.__file__).parent


def _defined_names(path):
    """Module-level `name = register("name", ...)` assignments of a source file."""
    out = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                getattr(node.value.func, "id", None) == "register":
            out[node.targets[0].id] = node.value.args[0].value
    return out


def test_every_prim_has_one_named_definition():
    defined = {**_defined_names(IR / "prims.py"), **_defined_names(IR / "linalg_prims.py")}
    assert all(var == name for var, name in defined.items()), defined
    assert set(defined) == set(PRIMS)
    for name, p in PRIMS.items():
        assert getattr(prims, name) is p, name   # printed graphs call prims.<name>


def test_a_prim_is_defined_once_and_has_one_kind():
    with pytest.raises(ValueError, match="defined twice"):
        register("exp", prims.exp.shape_rule, prims.exp.impl, (Tag.POINTWISE,))
    with pytest.raises(ValueError, match="exactly one kind"):
        Prim("p", prims.exp.shape_rule, prims.exp.impl, (Tag.VIEW,))
    with pytest.raises(ValueError, match="exactly one kind"):
        Prim("p", prims.exp.shape_rule, prims.exp.impl, (Tag.POINTWISE, Tag.SHAPE))
    assert prims.reshape.kind is Tag.SHAPE and "shape" in prims.reshape.tags


def _names(tag):
    return {n for n, p in PRIMS.items() if tag in p.tags}


def test_view_prims_return_views_of_their_input():
    """VIEW prims move elements without arithmetic; SHARES_MEMORY ones return numpy views."""
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    params = {"reshape": {"shape": (6, 4)}, "transpose": {"perm": (2, 0, 1)},
              "slice": {"start": (0, 1, 0), "limit": (2, 3, 4)}, "rev": {"dims": (1,)},
              "broadcast_in_dim": {"shape": (5, 2, 3, 4), "dims": (1, 2, 3)}}
    assert _names(Tag.VIEW) == set(params)
    for name, p in params.items():
        out = PRIMS[name].bind(x, **p)
        assert set(out.ravel().tolist()) <= set(x.ravel().tolist()), name
        assert np.shares_memory(out, x) == (Tag.SHARES_MEMORY in PRIMS[name].tags), name
    assert _names(Tag.VIEW) <= _names(Tag.MAY_ALIAS_INPUT)


def test_reduced_dims_reads_dim_or_dims():
    assert reduced_dims(prims.argmax, {"dim": 2}) == (2,)
    assert reduced_dims(prims.reduce_sum, {"dims": [0, 1]}) == (0, 1)
    assert reduced_dims(prims.cumsum, {"dim": 0}) is None   # a scan keeps its dims
    assert reduced_dims(prims.exp, {}) is None
    x = np.ones((2, 3, 4), np.float32)
    for name in _names(Tag.AXIS_REDUCTION) | _names(Tag.ARG_REDUCTION):
        params = {"dim": 1} if Tag.ARG_REDUCTION in PRIMS[name].tags else {"dims": (1,)}
        assert PRIMS[name].bind(x, **params).shape == (2, 4), name


def test_non_differentiable_prims_have_no_derivative_rule():
    from aotgrad.runtime.dispatch import VJP
    for name, prim in PRIMS.items():
        assert (prim in VJP) != (Tag.NON_DIFFERENTIABLE in prim.tags), name


def test_no_module_keeps_a_set_of_view_prim_names():
    """The facts used to live in sets of names in the compiler, scheduler, emitters and
    runtime; they are tags now."""
    root = IR.parent
    paths = [*root.glob("compiler*.py"), *root.glob("compiler/*.py"), *root.glob("call_path.py"),
             *root.glob("codegen/*.py"), *root.glob("tracer/*.py"), *root.glob("ir/*.py"),
             *(root / "runtime" / f for f in ("layout.py", "dispatch.py", "derivatives.py"))]
    for path in paths:
        text = path.read_text(encoding="utf-8")
        for stale in ('("argmax", "argmin")', '"broadcast_in_dim", "transpose"',
                      '"reshape", "transpose"', '"transpose", "slice"',
                      '("gather", "scatter_add")', '"logical_or", "logical_not", "argmax"'):
            assert stale not in text, (path, stale)


def test_kinds_are_tags():
    assert KINDS <= set(Tag)
    assert {p.kind for p in PRIMS.values()} == KINDS


def _ir_imports(path):
    """The ir modules `path` imports (at module level or inside functions)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith("aotgrad"):
            assert node.module.startswith("aotgrad.ir"), (path.name, node.module)  # ir imports
            if node.module == "aotgrad.ir":                                         # only ir
                out.update(a.name for a in node.names)
            else:
                out.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            for a in node.names:
                assert not a.name.startswith("aotgrad") or a.name.startswith("aotgrad.ir")
    return out


def test_ir_modules_import_without_a_circle():
    import networkx as nx
    g = nx.DiGraph()
    for path in IR.glob("*.py"):
        if path.name != "__init__.py":
            g.add_edges_from((path.stem, m) for m in _ir_imports(path))
    assert nx.is_directed_acyclic_graph(g), nx.find_cycle(g)
    assert "printer" not in nx.descendants(g, "core")


def test_dot_dims_name_each_operands_dims():
    from aotgrad.ir.prims import dot_dims, free_dims
    d = dot_dims(4, 3, contract=((3,), (1,)), batch=([0], [0]))
    assert d == ((3,), (1,), (0,), (0,), (1, 2), (2,))
    assert d.lhs_free == free_dims(4, (3,), (0,))
    a = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((2, 5, 6)).astype(np.float32)
    out = prims.dot_general.bind(a, b, contract=((3,), (1,)), batch=((0,), (0,)))
    sizes = [a.shape[i] for i in d.lhs_batch + d.lhs_free] + [b.shape[i] for i in d.rhs_free]
    assert out.shape == tuple(sizes) == (2, 3, 4, 6)
    assert_close(out, np.einsum("bijk,bkl->bijl", a, b), rtol=1e-5, atol=0, equal_nan=True)


def test_the_free_dims_are_computed_in_one_place():
    root = IR.parent
    for path in [*root.glob("ir/*.py"), *root.glob("codegen/*.py"),
                 *root.glob("runtime/*.py")]:
        text = path.read_text(encoding="utf-8")
        assert "not in lc and i not in lb" not in text, path
        assert "not in rc and i not in rb" not in text, path


def test_the_ir_node_is_an_eqn():
    from aotgrad import ir
    from aotgrad.autograd.graph import Node as AutogradNode
    assert ir.Node is ir.Eqn and ir.Eqn is not AutogradNode
    assert ir.Eqn.__name__ == "Eqn"
