"""The public entry points carry type hints that resolve (a typo in a postponed annotation
would only show in a type checker or in typing.get_type_hints)."""
import inspect
import typing

import pytest

import aotgrad as ag

ENTRY_POINTS = ["compile", "tensor", "as_tensor", "from_numpy", "zeros", "ones", "empty", "full",
                "zeros_like", "ones_like", "empty_like", "full_like", "arange", "linspace",
                "eye", "rand", "randn", "randint"]


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_entry_point_is_fully_annotated_and_its_hints_resolve(name):
    fn = getattr(ag, name)
    sig = inspect.signature(fn)
    unannotated = [p.name for p in sig.parameters.values()
                   if p.annotation is inspect.Parameter.empty]
    assert not unannotated, f"aotgrad.{name}: parameters without a type hint: {unannotated}"
    assert sig.return_annotation is not inspect.Signature.empty
    hints = typing.get_type_hints(fn)
    assert set(hints) == set(sig.parameters) | {"return"}


def test_factories_return_tensors_and_compile_returns_a_compiled_function():
    assert typing.get_type_hints(ag.zeros)["return"] is ag.Tensor
    from aotgrad.compiler.api import CompiledFunction
    f = ag.compile(lambda x: x + 1, backend="interpret")
    assert isinstance(f, CompiledFunction)
    assert CompiledFunction in typing.get_args(typing.get_type_hints(ag.compile)["return"])
