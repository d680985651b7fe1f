"""The thread pools behind `aotgrad.set_num_threads` / `get_num_threads`.

Compiled kernels and their matrix products share numba's threads (see codegen.blas);
eager matrix products run on numpy's OpenBLAS pool. `set_num_threads(n)` sets both, as
PyTorch's sets its intra-op pool. Numba caps the count at `NUMBA_NUM_THREADS` (by default
the number of cores), fixed when numba starts; the generated kernels split their work by
that maximum, so results do not depend on the count set here. Numba's setting applies to
the calling thread (and the threads it starts afterwards).
"""
import numba

from aotgrad.codegen import blas


def set_num_threads(n):
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise RuntimeError(f"set_num_threads: number of threads must be positive, got {n!r}")
    blas.start_threads()
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    lib = blas.openblas()
    if lib is not None:
        lib.set_threads(n)


def get_num_threads():
    """The threads compiled programs use (numba's count for the calling thread)."""
    blas.start_threads()
    return numba.get_num_threads()


class _InteropThreads:
    """aotgrad runs one op or program step at a time: it has no inter-op pool. The count is
    recorded for scripts that read it back, and like PyTorch's it can be set once."""
    __slots__ = ("n", "set_once")

    def __init__(self):
        self.n, self.set_once = 1, False


_interop = _InteropThreads()


def set_num_interop_threads(n):
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise RuntimeError(f"set_num_interop_threads: number of threads must be positive, "
                           f"got {n!r}")
    if _interop.set_once:
        raise RuntimeError("Error: cannot set number of interop threads after parallel work "
                           "has started or set_num_interop_threads called")
    _interop.n, _interop.set_once = n, True


def get_num_interop_threads():
    return _interop.n
