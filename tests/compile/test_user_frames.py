"""User frames are told from aotgrad's own by the module's name, not by where its file lies:
code of a module outside the package counts as the user's even in a file inside the
checkout, and aotgrad's tests, examples and benchmarks count as the user's."""
import os
import warnings

import aotgrad as ag
from aotgrad.ir.core import is_aotgrad_module, user_location
from aotgrad.tracer.reads import is_library_module

ROOT = os.path.dirname(os.path.abspath(ag.__file__))


def test_module_names():
    assert is_aotgrad_module("aotgrad") and is_aotgrad_module("aotgrad.compiler.api")
    assert is_aotgrad_module("aotgrad.nn.functional")
    for user in ("aotgrad.tests.test_x", "aotgrad.examples.train_mlp", "aotgrad.benchmarks.run",
                 "test_x", "__main__", "aotgradx.model", None, ""):
        assert not is_aotgrad_module(user), user
    assert is_library_module("aotgrad.ir.core") and is_library_module("numpy.linalg")
    assert not is_library_module("aotgrad.tests.helpers") and not is_library_module("model")


def _run_as(module_name, filename, source, **names):
    g = {"__name__": module_name, **names}
    exec(compile(source, filename, "exec"), g)
    return g


def test_a_user_module_whose_file_lies_inside_the_package_is_the_users():
    # a file path inside the package folder, a module name outside the package
    inside = os.path.join(ROOT, "nn", "my_model.py")
    g = _run_as("my_model", inside, "def where():\n    return user_location()\n",
                user_location=user_location)
    file, line, _ = g["where"]()
    assert file == inside and line == 2


def test_graph_break_warning_points_at_the_callers_line():
    def f(x):
        return x * 2 if x.sum() > 0 else x
    cf = ag.compile(f, backend="interpret")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cf(ag.ones(2))  # the line the warning names
    msgs = [m for m in w if "graph break" in str(m.message)]
    assert msgs and msgs[0].filename == __file__
