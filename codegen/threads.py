"""The thread pools behind `aotgrad.set_num_threads` / `get_num_threads`.

Compiled kernels and their matrix products share one pool (codegen.parts, codegen.blas);
eager matrix products run on numpy's OpenBLAS pool. `set_num_threads(n)` sets both, as
PyTorch's sets its intra-op pool, for every thread of the process. The generated kernels
split their work into blocks whose number does not depend on the count (parts take whole
blocks), so results do not depend on the count set here.
"""
from aotgrad.codegen import blas, parts


def set_num_threads(n):
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise RuntimeError(f"set_num_threads: number of threads must be positive, got {n!r}")
    parts.set_num_threads(n)
    lib = blas.openblas()
    if lib is not None:
        lib.set_threads(n)


def get_num_threads():
    """The threads compiled programs use."""
    return parts.get_num_threads()


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
