"""Fixtures of the code generator's tests."""
import sys

import pytest

from aotgrad.codegen import parallel_compile, wait_for_parallel_kernels


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """An empty kernel cache (tmp_path): no generated module loaded, no background work
    or helper left over from other tests, none left after."""
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))
    for name in [n for n in sys.modules if n.startswith("aotgrad_gen_")]:
        monkeypatch.delitem(sys.modules, name)
    assert wait_for_parallel_kernels(timeout=300)
    parallel_compile.shutdown()
    yield tmp_path
    assert wait_for_parallel_kernels(timeout=300)
    parallel_compile.shutdown()
