"""runtime/tensor.pyi declares Tensor as the wired runtime has it: every method and property
methods.py installs at import (invisible to IDEs and type checkers otherwise), with its
parameters; it ships with the package."""
import ast
import inspect
import pathlib
import tomllib

import aotgrad as ag
from aotgrad.runtime import _stubgen
from aotgrad.runtime.tensor import Tensor

ROOT = pathlib.Path(ag.__file__).parent


def _stub_class(name):
    tree = ast.parse(_stubgen.STUB.read_text(encoding="utf-8"))
    cls, = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return cls


def _declared(cls):
    names = set()
    for n in cls.body:
        if isinstance(n, ast.FunctionDef):
            names.add(n.name)
        elif isinstance(n, ast.AnnAssign):
            names.add(n.target.id)
    return names


def test_stub_declares_exactly_the_names_tensor_has():
    have = {n for n in vars(Tensor) if n not in _stubgen._SKIP}
    declared = _declared(_stub_class("Tensor"))
    assert not have - declared, f"missing from tensor.pyi: {sorted(have - declared)} " \
                                f"(run python -m aotgrad.runtime._stubgen)"
    assert not declared - have, f"tensor.pyi declares what Tensor lacks: " \
                                f"{sorted(declared - have)}"


def test_stub_is_up_to_date():
    assert _stubgen.STUB.read_text(encoding="utf-8") == _stubgen.render(), \
        "runtime/tensor.pyi is out of date: run python -m aotgrad.runtime._stubgen"
    assert _stubgen.main(["--check"]) == 0


def _params(fn_node):
    a = fn_node.args
    return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)] + \
        ([a.vararg.arg] if a.vararg else []) + ([a.kwarg.arg] if a.kwarg else [])


def test_installed_methods_keep_their_parameters_in_the_stub():
    methods = {n.name: n for n in _stub_class("Tensor").body if isinstance(n, ast.FunctionDef)}
    # an op installed as a method: the tensor is `self`, the op's other parameters follow
    want = list(inspect.signature(ag.add).parameters)[1:]
    assert _params(methods["add"]) == ["self", *want] and "alpha" in want
    # an in-place method has the signature of its out-of-place op, not (*args, **kwargs)
    assert _params(methods["add_"]) == _params(methods["add"])
    assert _params(methods["squeeze_"]) == _params(methods["squeeze"])
    # PyTorch's parameter names where the op has them
    assert _params(methods["sum"])[:3] == ["self", "dim", "keepdim"]
    # a property stays a property (T), a slot an attribute (grad_fn)
    decorated = {n.name for n in _stub_class("Tensor").body if isinstance(n, ast.FunctionDef)
                 if any(getattr(d, "id", None) == "property" for d in n.decorator_list)}
    assert {"T", "mT", "shape", "grad"} <= decorated
    assert "grad_fn" in _declared(_stub_class("Tensor")) - set(methods)


def test_stub_declares_the_other_names_of_tensor_py():
    # a .pyi stands for the whole module: the names other modules import from it
    assert "numel" in _declared(_stub_class("Size"))


def test_stub_ships_with_the_package():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    data = project["tool"]["setuptools"]["package-data"]
    assert "tensor.pyi" in data["aotgrad.runtime"]
    assert "aotgrad.runtime" in project["tool"]["setuptools"]["packages"]
