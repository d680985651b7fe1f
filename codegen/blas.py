"""Matrix products shared out over aotgrad's threads (codegen.parts), on Intel MKL on Intel
CPUs where it is installed, else on numpy's own OpenBLAS.

A compiled program alternates BLAS calls with fused kernels. Left to itself, OpenBLAS runs
each call on its own thread pool, whose workers then spin for ~0.1 s waiting for the next
call; a parallel kernel started in that window shares its cores with them (several
times slower on 2 cores). So kernels had to run serially, and attention's stacks of small products (32 of 128x64x128) paid for
OpenBLAS splitting every small matrix over its threads.

Here one thread pool does everything, the one the kernels' parts run on: while a program
runs, OpenBLAS is set to one thread (`single_threaded()`), and each product is cut into
pieces (whole matrices of a stack, or slabs of rows or columns of one matrix, one per thread:
`pieces`), each piece a plain single-threaded `cblas_?gemm` called through its address: a
large product runs as fast as np.matmul's own threads, a stack of small ones faster. The
pieces are posted on the pool's board (codegen.board), where the calling thread and the
workers take them without the interpreter lock. A product below SERIAL_MAX runs the same
pieces on the calling thread (`gemm_serial`). (On numba's own OpenMP threads, a product left
them spinning while the next kernel's parts wanted the same cores: the GPT's step ran 0.99x
PyTorch's instead of 0.84x.)

The gemm comes from MKL's sequential layer when the `mkl` package is installed
(`pip install aotgrad[mkl]`) and the CPU is Intel's, else from numpy's OpenBLAS: on the
machine the extra was added on, MKL ran the transformer, MLP and attention products faster
than OpenBLAS; on an AMD EPYC OpenBLAS did (benchmarks/run.py and bench_models.py, each
library forced in turn), and MKL is Intel's library, tuned for Intel's CPUs.
`AOTGRAD_BLAS=openblas` (or `mkl`) forces the choice; `provider()` says which is used.

`gemm_layout` decides at plan time whether BLAS can read an operand as it lies (else the
executor keeps np.matmul). Without either library (another BLAS, another platform)
`available()` is False and every product stays np.matmul.
"""
import ctypes
import ctypes.util
import functools
import logging
import os
import sys
from typing import NamedTuple

import numpy as np
from numba import njit

from aotgrad.codegen.board import NO_TRANS, TRANS, count, piece, post
from aotgrad.codegen.parts import run_posted

# products with fewer multiply-adds than this stay on np.matmul, which OpenBLAS (set to one
# thread meanwhile) runs on the calling thread: cutting them costs more than it gains
SPLIT_MIN = 1 << 18
# products with fewer multiply-adds than this (about ten microseconds on one core) run on
# the calling thread (gemm_serial): posting them costs about as much as sharing them saves.
# Above it the board pays even for a skinny product (a classifier's 10 columns): a piece is
# taken only by a thread that polls, so none waits for a worker that is not running
SERIAL_MAX = 1 << 20

log = logging.getLogger(__name__)

class OpenBLAS(NamedTuple):
    """A loaded ILP64 OpenBLAS: the library, its cblas gemm addresses by dtype, and its
    thread-count getter and setter (ctypes functions: cheap enough for every call)."""
    lib: ctypes.CDLL
    gemm: dict
    get_threads: object
    set_threads: object


@functools.cache
def openblas():
    """numpy's OpenBLAS as an OpenBLAS tuple, or None. Found once, by threadpoolctl among
    the libraries this process has loaded: the ILP64 build numpy's wheels ship, whatever
    its symbols are called (numpy 2's scipy-openblas `scipy_cblas_sgemm64_`, numpy 1's
    `cblas_sgemm64_`)."""
    return _find_openblas()


@functools.cache
def mkl():
    """MKL's single dynamic library set to its sequential layer, as (ctypes library,
    {dtype: address of cblas_?gemm_64}), or None (not installed, AOTGRAD_BLAS=openblas, or
    MKL already running threaded in this process). Found once."""
    return _find_mkl()


def _find_mkl():
    if os.environ.get("AOTGRAD_BLAS", "").strip().lower() == "openblas":
        return None
    names = ("libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so")
    paths = [os.path.join(d, n) for d in (os.path.join(sys.prefix, "lib"),
                                          os.path.join(sys.base_prefix, "lib")) for n in names]
    found = ctypes.util.find_library("mkl_rt")
    paths += [found] if found else []
    for p in paths:
        if not os.path.exists(p) and os.sep in p:
            continue
        try:
            lib = ctypes.CDLL(p)
        except OSError:
            continue
        if not all(hasattr(lib, s) for s in ("cblas_sgemm_64", "cblas_dgemm_64",
                                              "MKL_Set_Threading_Layer")):
            continue
        lib.MKL_Set_Threading_Layer.restype = ctypes.c_int
        lib.MKL_Set_Threading_Layer.argtypes = [ctypes.c_int]
        if lib.MKL_Set_Threading_Layer(1) != 1:   # MKL_THREADING_SEQUENTIAL; else in use
            continue
        addr = (lambda f: ctypes.cast(f, ctypes.c_void_p).value)
        return lib, {np.dtype(np.float32): addr(lib.cblas_sgemm_64),
                     np.dtype(np.float64): addr(lib.cblas_dgemm_64)}
    return None


@functools.cache
def provider():
    """'mkl' or 'openblas': whose gemm the products call (None: neither, np.matmul). MKL
    where it is loaded and the CPU is Intel's (or AOTGRAD_BLAS=mkl), else OpenBLAS."""
    forced = os.environ.get("AOTGRAD_BLAS", "").strip().lower()
    if forced != "openblas" and mkl() is not None and \
            (forced == "mkl" or _cpu_vendor() in ("GenuineIntel", None)):
        return "mkl"
    return "openblas" if openblas() is not None else None


def _cpu_vendor():
    """The CPU's vendor string (GenuineIntel, AuthenticAMD, ...), None where unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def gemm_address(dtype):
    """The address of the chosen library's cblas gemm for `dtype` (ILP64), or None."""
    name = provider()
    lib = mkl() if name == "mkl" else openblas() if name == "openblas" else None
    return None if lib is None else lib[1].get(np.dtype(dtype))


@functools.cache
def available():
    """Can products be shared out over aotgrad's threads? Needs MKL or numpy's OpenBLAS."""
    return provider() is not None


# ILP64 builds only: the gemm call passes 64-bit sizes. (prefix, suffix) of the symbol names.
_ILP64_AFFIXES = (("scipy_", "64_"), ("", "64_"), ("scipy_", "_64"), ("", "_64"))


def _numpy_first(path):
    """Sort key: numpy's own OpenBLAS (in its folder or the wheel's numpy.libs) first, as
    numpy's matmul is what the single-thread guard must control."""
    here = os.path.dirname(os.path.abspath(np.__file__))
    inside = path.startswith((here + os.sep, os.path.join(os.path.dirname(here), "numpy.libs")))
    return (not inside, path)


def _find_openblas():
    from threadpoolctl import ThreadpoolController
    paths = sorted({c.filepath for c in ThreadpoolController().lib_controllers
                    if c.internal_api == "openblas" and c.filepath}, key=_numpy_first)
    for p in paths:
        try:
            lib = ctypes.CDLL(p)
        except OSError:
            continue
        for pre, suf in _ILP64_AFFIXES:
            names = [f"{pre}cblas_sgemm{suf}", f"{pre}cblas_dgemm{suf}",
                     f"{pre}openblas_get_num_threads{suf}", f"{pre}openblas_set_num_threads{suf}"]
            if not all(hasattr(lib, s) for s in names):
                continue
            sgemm, dgemm, get, set_ = (getattr(lib, s) for s in names)
            get.restype, get.argtypes = ctypes.c_int, []
            set_.restype, set_.argtypes = None, [ctypes.c_int]
            addr = (lambda f: ctypes.cast(f, ctypes.c_void_p).value)
            log.debug("OpenBLAS %s (symbols %s*%s)", p, pre, suf)
            return OpenBLAS(lib, {np.dtype(np.float32): addr(sgemm),
                                  np.dtype(np.float64): addr(dgemm)}, get, set_)
    log.info("no ILP64 OpenBLAS loaded (found: %s): products stay on np.matmul and its "
             "thread count is left as it is", ", ".join(paths) or "none")
    return None


class single_threaded:
    """Context manager: OpenBLAS on one thread inside, its previous setting after. Cheap
    (two ctypes calls), so a program enters it on every call."""
    __slots__ = ("before",)

    def __enter__(self):
        lib = openblas()
        self.before = 1 if lib is None else lib.get_threads()
        if self.before != 1:
            lib.set_threads(1)

    def __exit__(self, *exc):
        if self.before != 1:
            openblas().set_threads(self.before)


_WARM = set()


def warm(dtype):
    """Compile (or load from numba's cache) gemm_threads' and gemm_serial's code for `dtype`
    now: when a program is prepared, not in the middle of its first call."""
    if dtype in _WARM:
        return
    fn = gemm_address(dtype)
    a, c, e = np.ones(1, dtype), np.zeros(1, dtype), np.zeros(0, np.int64)
    with single_threaded():
        for gemm in (gemm_threads, gemm_serial):
            gemm(fn, NO_TRANS, NO_TRANS, 1, 1, 1, dtype.type(1), a, 0, 1, a, 0, 1, c, 0, 1, e, e,
                 e, e, 1, False)
    _WARM.add(dtype)


def layout_probe(shape):
    """A stand-in for a C-contiguous array of `shape` that takes no memory: int8 over one
    byte, so its strides and data offsets count elements. Replaying a program's view steps
    on it shows where each view's elements lie (`gemm_layout`)."""
    strides = np.cumprod((1,) + tuple(shape[::-1]))[:-1][::-1] if len(shape) else ()
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), tuple(shape),
                                           tuple(int(s) for s in strides))


def offset_of(view, probe):
    return view.__array_interface__["data"][0] - probe.__array_interface__["data"][0]


def gemm_layout(view, perm, new_shape):
    """How BLAS reads `view` (a layout_probe view) transposed by `perm` (or None) and
    reshaped to `new_shape` (batch..., rows, cols) without a copy: (batch steps, trans flag,
    leading dimension), in elements; None when that needs a copy or the matrices are not
    BLAS-readable (neither dim unit-stride)."""
    x = view if perm is None else view.transpose(perm)
    try:
        x = np.reshape(x, tuple(new_shape), copy=False)
    except ValueError:
        return None
    (r, c), (sr, sc) = x.shape[-2:], x.strides[-2:]
    # a stride along a dim of size 1 is never used: BLAS only needs ld >= the row length
    if (c <= 1 or sc == 1) and (r <= 1 or sr >= max(1, c)):
        flag, ld = NO_TRANS, sr if r > 1 else max(1, c)
    elif (r <= 1 or sr == 1) and (c <= 1 or sc >= max(1, r)):
        flag, ld = TRANS, sc if c > 1 else max(1, r)
    else:
        return None
    return tuple(int(s) for s in x.strides[:-2]), flag, int(ld)


def pieces(batch, m, n, threads):
    """(parts per matrix, cut along columns?) for a stack of `batch` m x n products: whole
    matrices when there are enough of them, else each cut into `threads` slabs."""
    if batch >= threads or threads <= 1:
        return 1, False
    return threads, n > m


def gemm_threads(fn, ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, c, c_off, ldc,
                 batch, a_steps, b_steps, c_steps, parts, cut_cols):
    """What a program's driver calls for a product shared out over aotgrad's threads: its
    pieces posted on the thread pool's board (codegen.board), taken by every thread;
    the arguments as gemm_serial's."""
    return run_posted(post, (fn, ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, c, c_off,
                             ldc, batch, a_steps, b_steps, c_steps, parts, cut_cols), gemm_serial)


@njit(cache=True, nogil=True)
def gemm_serial(fn, ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, c, c_off, ldc, batch,
                a_steps, b_steps, c_steps, parts, cut_cols):
    """c[i] = alpha op(a)[i] @ op(b)[i] for every matrix i of the stack `batch`, its pieces one
    after another on the calling thread: a, b and c are the flat arrays the operands and the
    result are views of, from element a_off/b_off/c_off on, with the given flags, leading
    dimensions and batch steps (c's rows unit-stride: it may be a transposed view, e.g.
    attention heads written straight into (batch, seq, heads, dim)); alpha 1 in c's dtype;
    `parts` pieces per matrix, cut along columns or rows (pieces)."""
    pa, pb, pc = np.int64(a.ctypes.data), np.int64(b.ctypes.data), np.int64(c.ctypes.data)
    for it in range(count(batch, parts)):
        piece(it, fn, ta, tb, m, n, k, alpha, pa, a_off, lda, pb, b_off, ldb, pc, c_off, ldc,
              c.itemsize, batch, a_steps, b_steps, c_steps, parts, cut_cols)
    return 0
