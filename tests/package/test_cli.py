"""`python -m aotgrad`: version, cache (location, size, clear), explain FILE:FN."""
import textwrap

import pytest

import aotgrad
from aotgrad.__main__ import main

from test_package_conventions import run_python


def test_version(capsys):
    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith(f"aotgrad {aotgrad.__version__} (numpy ")


def test_runs_as_a_module():
    out = run_python("import runpy; runpy.run_module('aotgrad', run_name='__main__')")
    assert out.returncode == 2 and "COMMAND" in out.stderr   # no command: usage, exit 2
    out = run_python("import sys, runpy; sys.argv = ['aotgrad', '--help']\n"
                     "runpy.run_module('aotgrad', run_name='__main__')")
    assert out.returncode == 0
    for word in ("version", "cache clear", "explain FILE:FN", "example_inputs()",
                 "__aotgrad_example__"):
        assert word in out.stdout


def test_cache_size_and_clear(capsys, tmp_path, monkeypatch):
    from aotgrad.codegen import cache
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))
    mod, _ = cache.load_module("VALUE = 1  # test_cache_size_and_clear\n")
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{cache.cache_dir()}: 1 modules, ")
    assert main(["cache", "clear"]) == 0
    assert "freed" in capsys.readouterr().out
    assert cache.cache_info()["modules"] == 0
    assert mod.__name__ not in __import__("sys").modules


MODEL = """
import aotgrad

def loss(x, w):
    return ((x @ w).tanh() ** 2).sum()
"""


def _explain(tmp_path, source, target, capsys):
    path = tmp_path / "model_for_explain.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    code = main(["explain", f"{path}:{target}"])
    return code, capsys.readouterr().out


def test_explain_with_example_inputs(tmp_path, capsys):
    src = MODEL + """
def example_inputs():
    return aotgrad.randn(4, 3), aotgrad.randn(3, 2, requires_grad=True)
"""
    code, out = _explain(tmp_path, src, "loss", capsys)
    assert code == 0
    assert out.startswith("explain(loss)") and "graph breaks: 0" in out
    assert "arg0: shape=(4, 3)" in out and "arg1: shape=(3, 2)" in out


def test_explain_with_the_functions_example_attribute(tmp_path, capsys):
    src = MODEL + """
def breaks(x):
    if x.sum() > 0:
        return x * 2
    return x
breaks.__aotgrad_example__ = lambda: (aotgrad.ones(3),)
"""
    code, out = _explain(tmp_path, src, "breaks", capsys)
    assert code == 0 and "graph breaks: 1" in out and "bool(Tensor)" in out


@pytest.mark.parametrize("target, message", [
    ("loss", "no example inputs for"),
    ("nothing", "defines no function 'nothing'"),
])
def test_explain_says_what_is_missing(tmp_path, capsys, target, message):
    with pytest.raises(SystemExit, match=message):
        _explain(tmp_path, MODEL, target, capsys)


def test_explain_needs_file_and_function():
    with pytest.raises(SystemExit, match="expected FILE:FN"):
        main(["explain", "model.py"])
    with pytest.raises(SystemExit, match="no such file"):
        main(["explain", "/no/such/model.py:loss"])
