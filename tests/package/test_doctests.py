"""The `>>>` examples in the library's docstrings run as doctests.

Each example sees the names the docs assume are imported (`aotgrad`, `nn` = aotgrad.nn, `F`
= aotgrad.nn.functional, `optim` = aotgrad.optim, `np` = numpy), starts from
`aotgrad.manual_seed(0)`, and runs in a temporary working directory. Examples that compile
with Numba take seconds each: they run with `-m slow`.
"""
import doctest
import importlib
import os
import re

import numpy as np
import pytest

import aotgrad

ROOT = os.path.dirname(os.path.abspath(aotgrad.__file__))
NOT_SHIPPED = ("tests", "examples", "benchmarks")
NEEDS_NUMBA = {"aotgrad.compiler.api.compile"}   # its example compiles with the numba backend
EXAMPLE = re.compile(r"^\s*>>> (?!#)", re.M)
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules_with_examples():
    for dirpath, dirnames, files in os.walk(ROOT):
        rel = os.path.relpath(dirpath, ROOT)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__"))
                             and not (rel == "." and d in NOT_SHIPPED))
        for f in sorted(files):
            if not f.endswith(".py") or f == "__main__.py":
                continue
            with open(os.path.join(dirpath, f), encoding="utf-8") as fh:
                # `>>> # a -> b` lines are notation (doctest skips comment-only examples)
                if not EXAMPLE.search(fh.read()):
                    continue
            parts = [p for p in os.path.normpath(os.path.join(rel, f[:-3])).split(os.sep)
                     if p not in (".", "__init__")]
            yield ".".join(["aotgrad"] + parts)


def _globals():
    return {"aotgrad": aotgrad, "nn": aotgrad.nn, "F": aotgrad.nn.functional,
            "optim": aotgrad.optim, "np": np}


def _doctests():
    finder = doctest.DocTestFinder()
    found = {}
    for name in _modules_with_examples():
        module = importlib.import_module(name)
        found[name] = [t for t in finder.find(module, name, extraglobs=_globals())
                       if t.examples]
    return found


DOCTESTS = _doctests()


def test_every_module_with_examples_yields_doctests():
    assert DOCTESTS and all(DOCTESTS.values()), [m for m, t in DOCTESTS.items() if not t]


@pytest.mark.parametrize("test", [
    pytest.param(t, id=t.name, marks=[pytest.mark.slow] if t.name in NEEDS_NUMBA else [])
    for tests in DOCTESTS.values() for t in tests])
def test_docstring_examples(test, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    aotgrad.manual_seed(0)
    out = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    result = runner.run(test, out=out.append, clear_globs=False)
    assert result.failed == 0, "".join(out)
