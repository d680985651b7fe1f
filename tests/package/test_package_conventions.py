"""The conventions of a well-kept package: a light `import aotgrad`, exact reference erf."""
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import aotgrad
from repo_paths import REPO_ROOT
from aotgrad.testing import assert_close


def run_python(code, **env):
    """Run `code` in a fresh interpreter that imports this checkout's aotgrad."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(aotgrad.__file__)))
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [full.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=120)


def test_import_loads_no_scipy_networkx_or_numba():
    # networkx is needed by the partitioner of a compile, numba by codegen and the reference
    # erf of large arrays (numba loads scipy); none of them by `import aotgrad` or by eager
    # code on small tensors (GELU's erf included).
    code = ("import sys, aotgrad\n"
            "x = aotgrad.randn(3, 2, requires_grad=True)\n"
            "(x.tanh() * x).sum().backward()\n"
            "model = aotgrad.nn.Sequential(aotgrad.nn.Linear(2, 4), aotgrad.nn.GELU())\n"
            "opt = aotgrad.optim.Adam(model.parameters())\n"
            "aotgrad.nn.functional.mse_loss(model(x), aotgrad.zeros(3, 4)).backward()\n"
            "opt.step()\n"
            "print(sorted(m for m in ('scipy', 'networkx', 'numba') if m in sys.modules))")
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_cache_functions_still_reachable_from_the_top_level():
    assert callable(aotgrad.cache_info) and callable(aotgrad.cache_clear)
    from aotgrad import cache_info
    assert cache_info is aotgrad.codegen.cache_info
    out = run_python("import aotgrad; print(aotgrad.codegen.blas.provider() in "
                     "('mkl', 'openblas', None))")
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr
    with pytest.raises(AttributeError, match="no_such_name"):
        aotgrad.no_such_name  # noqa: B018


def _erf_samples():
    rng = np.random.default_rng(7)
    tiny = 10.0 ** rng.uniform(-320, -1, 20000) * rng.choice([-1.0, 1.0], 20000)
    return np.concatenate([np.linspace(-7, 7, 40001), rng.standard_normal(20000) * 3, tiny,
                           [0.0, -0.0, 5e-324, -5e-324, 6.0, 5.92, 27.0, 1e300, -1e300,
                            np.inf, -np.inf, np.nan]])


@pytest.mark.parametrize("size", ["per_element", "numba_loop"])
def test_reference_erf_matches_libm_erf_in_float64(size):
    from aotgrad.ir.prims import ERF_PER_ELEMENT_MAX
    x = _erf_samples()
    assert x.size > ERF_PER_ELEMENT_MAX
    if size == "per_element":
        x = np.concatenate([x[:ERF_PER_ELEMENT_MAX - 12], x[-12:]])
    got = aotgrad.erf(aotgrad.tensor(x, dtype=aotgrad.float64)).numpy()
    want = np.array([math.erf(v) for v in x])
    assert got.dtype == np.float64
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    # within one unit in the last place (in practice bit for bit: both are libm's erf)
    ulps = np.abs(got[~nan].view(np.int64) - want[~nan].view(np.int64))
    assert ulps.max() <= 1
    assert np.signbit(got[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()


def test_reference_erf_float32_is_the_rounded_float64_erf():
    x = _erf_samples()
    x = x[~(np.abs(x) > 1e30)].astype(np.float32)   # in float32 range (NaN kept)
    got = aotgrad.erf(aotgrad.tensor(x)).numpy()
    assert got.dtype == np.float32
    want = np.array([math.erf(v) for v in x.astype(np.float64)]).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_erf_gradient_still_matches_its_closed_form():
    x = aotgrad.tensor([-2.0, -0.5, 0.0, 0.3, 1.7], dtype=aotgrad.float64, requires_grad=True)
    aotgrad.erf(x).sum().backward()
    xs = x.detach().numpy()
    assert_close(x.grad.numpy(), 2 / np.sqrt(np.pi) * np.exp(-xs * xs), rtol=1e-14, atol=0,
                 equal_nan=True)


# ---- public names, version, license, typing marker ---------------------------------------

ROOT = REPO_ROOT
SHADOWING = {"bool", "float", "int"}     # dtype aliases left out of __all__ on purpose


def _public(module):
    import types
    return {n for n, v in vars(module).items()
            if not n.startswith("_") and not isinstance(v, types.ModuleType)}


def test_top_level_all_lists_the_public_names():
    names = set(aotgrad.__all__)
    assert len(names) == len(aotgrad.__all__)
    assert names == (_public(aotgrad) - SHADOWING) | {
        "autograd", "nn", "optim", "serialization", "utils", "cache_clear", "cache_info",
        "special", "linalg", "sparse", "accelerator", "amp", "backends", "cpu", "cuda", "jit",
        "set_num_threads", "get_num_threads", "set_num_interop_threads",
        "get_num_interop_threads", "distributed", "func", "export", "onnx", "futures"}
    assert all(hasattr(aotgrad, n) for n in names)


@pytest.mark.parametrize("name", ["nn", "optim", "autograd", "testing", "distributed",
                                  "nn.parallel", "func"])
def test_public_subpackages_declare_all(name):
    import importlib
    mod = importlib.import_module(f"aotgrad.{name}")
    assert len(set(mod.__all__)) == len(mod.__all__)
    missing = [n for n in mod.__all__ if not hasattr(mod, n)]
    assert missing == []
    undeclared = sorted(_public(mod) - set(mod.__all__))
    assert undeclared == []


def test_star_import_does_not_shadow_builtins():
    ns = {}
    exec("from aotgrad import *", ns)
    assert not SHADOWING & set(ns)
    assert ns["tensor"] is aotgrad.tensor


def test_version_is_in_one_place():
    import tomllib
    from aotgrad import _version
    assert aotgrad.__version__ == _version.__version__
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "aotgrad._version.__version__"}
    from aotgrad.codegen import cache
    assert f"aotgrad={aotgrad.__version__} " in cache._VERSION_KEY


def test_license_and_typing_marker_ship():
    import tomllib
    with open(os.path.join(ROOT, "LICENSE"), encoding="utf-8") as f:
        text = f.read()
    assert text.startswith("MIT License") and "Copyright (c) 2026 the aotgrad authors" in text
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    assert project["project"]["license"] == "MIT"
    assert os.path.isfile(os.path.join(ROOT, "py.typed"))
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["aotgrad"]


def _library_files():
    for dirpath, dirnames, files in os.walk(ROOT):
        rel = os.path.relpath(dirpath, ROOT)
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__"))
                       and not (rel == "." and d in ("tests", "examples", "benchmarks"))]
        yield from (os.path.join(dirpath, f) for f in files if f.endswith(".py"))


def test_library_opens_text_files_with_an_explicit_encoding():
    import ast
    bad = []
    for path in _library_files():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call):
                continue
            fn = call.func
            name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
            if name not in ("open", "fdopen"):
                continue
            if isinstance(fn, ast.Attribute) and getattr(fn.value, "id", None) == "os" and \
                    name == "open":
                continue   # os.open(path, flags): a file descriptor, no text
            mode = call.args[1] if len(call.args) > 1 else next(
                (k.value for k in call.keywords if k.arg == "mode"), None)
            binary = isinstance(mode, ast.Constant) and "b" in str(mode.value)
            if not binary and not any(k.arg == "encoding" for k in call.keywords):
                bad.append(f"{os.path.relpath(path, ROOT)}:{call.lineno}")
    assert bad == []


def test_library_has_no_bare_prints():
    import ast
    bad = []
    for path in _library_files():
        if os.path.basename(path) == "__main__.py":   # the command line prints its answers
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        bad += [f"{os.path.relpath(path, ROOT)}:{c.lineno}" for c in ast.walk(tree)
                if isinstance(c, ast.Call) and getattr(c.func, "id", None) == "print"]
    assert bad == []
