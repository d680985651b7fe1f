"""Shared test settings: a per-session compile cache dir and the `torch` oracle fixture."""
import atexit
import os
import shutil
import tempfile

import numpy as np
import pytest

# this run's own private directory (mode 0700), not a fixed path under /tmp that another
# user could have made first (the cache holds machine code that is loaded and run)
_CACHE_DIR = tempfile.mkdtemp(prefix="aotgrad-test-cache-")
atexit.register(shutil.rmtree, _CACHE_DIR, True)
os.environ.setdefault("AOTGRAD_CACHE_DIR", _CACHE_DIR)
# kernels large enough for prange are compiled parallel whatever their size, so tests on
# small arrays exercise numba's parallel backend (the default compiles medium ones serially)
os.environ.setdefault("AOTGRAD_PARALLEL_MIN", "0")
# ... and up front, not first serially with a parallel variant compiled in the background
# (tests/test_codegen_tiers.py turns that on)
os.environ.setdefault("AOTGRAD_BACKGROUND_COMPILE", "0")


@pytest.fixture
def torch():
    """PyTorch as an oracle: the test skips where it is not installed."""
    return pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _seed():
    import aotgrad
    aotgrad.manual_seed(0)
    np.random.seed(0)
