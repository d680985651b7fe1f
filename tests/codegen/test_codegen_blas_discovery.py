"""codegen.blas finds OpenBLAS through threadpoolctl, whatever numpy's build calls its
symbols: numpy 2's scipy-openblas (`scipy_cblas_sgemm64_`) and numpy 1's openblas64_
(`cblas_sgemm64_`); an LP64 build (32-bit sizes) is refused, with a log line saying so."""
import ctypes
import logging
import os
import types

import numpy as np
import pytest

from aotgrad.codegen import blas

BASES = ("cblas_sgemm", "cblas_dgemm", "openblas_get_num_threads", "openblas_set_num_threads")


@pytest.fixture
def real():
    lib = blas.openblas()
    if lib is None:
        pytest.skip("no ILP64 OpenBLAS loaded here")
    return lib


def _renamed(real_lib, prefix, suffix):
    """numpy's real OpenBLAS functions under another build's symbol names."""
    fake = types.SimpleNamespace()
    for pre, suf in blas._ILP64_AFFIXES:
        if all(hasattr(real_lib, f"{pre}{b}{suf}") for b in BASES):
            for b in BASES:
                setattr(fake, f"{prefix}{b}{suffix}", getattr(real_lib, f"{pre}{b}{suf}"))
            return fake
    pytest.skip("numpy's OpenBLAS has none of the expected symbol names")


def _pretend_loaded(monkeypatch, fake, path="/opt/lib/libopenblas64_p-r0.so"):
    import threadpoolctl
    ctl = types.SimpleNamespace(internal_api="openblas", filepath=path)
    monkeypatch.setattr(threadpoolctl, "ThreadpoolController",
                        lambda: types.SimpleNamespace(lib_controllers=[ctl]))
    monkeypatch.setattr(ctypes, "CDLL", lambda p: fake if p == path else None)


def test_numpy1_symbol_names_are_found(real, monkeypatch):
    _pretend_loaded(monkeypatch, _renamed(real.lib, "", "64_"))
    found = blas._find_openblas()
    assert found is not None
    assert found.gemm == real.gemm
    before = found.get_threads()
    assert before == real.get_threads()
    found.set_threads(1)
    try:
        assert real.get_threads() == 1      # the same library's thread count
    finally:
        found.set_threads(before)


def test_lp64_build_is_refused_and_logged(real, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="aotgrad.codegen.blas")
    _pretend_loaded(monkeypatch, _renamed(real.lib, "", ""), "/opt/lib/libopenblas.so.0")
    assert blas._find_openblas() is None
    assert "no ILP64 OpenBLAS" in caplog.text and "/opt/lib/libopenblas.so.0" in caplog.text


def test_single_thread_guard_switches_numpys_openblas(real):
    before = real.get_threads()
    real.set_threads(2)
    try:
        with blas.single_threaded():
            assert real.get_threads() == 1
        assert real.get_threads() == 2
    finally:
        real.set_threads(before)


def test_numpys_own_openblas_comes_first():
    here = os.path.dirname(os.path.abspath(np.__file__))
    ours = os.path.join(os.path.dirname(here), "numpy.libs", "libscipy_openblas64_.so")
    assert sorted(["/usr/lib/libopenblas64_.so", ours], key=blas._numpy_first) == \
        [ours, "/usr/lib/libopenblas64_.so"]
