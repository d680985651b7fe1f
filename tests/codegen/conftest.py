"""Fixtures of the codegen tests."""
import os

import pytest


@pytest.fixture(scope="module")
def module_cache_dir(tmp_path_factory):
    """A compile cache of the test module's own (AOTGRAD_CACHE_DIR for its duration): its
    kernels compile afresh, whatever the run's shared cache holds."""
    old = os.environ.get("AOTGRAD_CACHE_DIR")
    d = str(tmp_path_factory.mktemp("aotgrad_cache"))
    os.environ["AOTGRAD_CACHE_DIR"] = d
    yield d
    if old is None:
        os.environ.pop("AOTGRAD_CACHE_DIR", None)
    else:
        os.environ["AOTGRAD_CACHE_DIR"] = old
