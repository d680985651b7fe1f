"""Products shared out over aotgrad.s threads (codegen.blas): every layout the executor hands to
`gemm_threads` against numpy, and whole compiled programs against eager mode.

SPLIT_MIN and SERIAL_MAX are lowered to 0 here so that small products take the threaded path
too (test_small_products_run_on_the_calling_thread restores SERIAL_MAX)."""
import threading

import numba
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.codegen.atomics import compare_exchange
from aotgrad.codegen import blas
from aotgrad.ir import evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close
from symbolic_graphs import static

pytestmark = pytest.mark.skipif(not blas.available(),
                                reason="numpy's OpenBLAS not found or no cheap threading layer")


@pytest.fixture(autouse=True)
def _split_everything(monkeypatch):
    monkeypatch.setattr(blas, "SPLIT_MIN", 0)
    monkeypatch.setattr(blas, "SERIAL_MAX", 0)


def _rand(shape, d=np.float32, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(d)


def _check_graph(g, arrays, gemms):
    from aotgrad.codegen import compile_graph
    prog = compile_graph(g)
    got = prog(*arrays)
    src = prog.plan.source
    assert src.count("_gemm(") == gemms, src
    for a, r in zip(got, evaluate(g, arrays)):
        r = np.asarray(r)
        assert a.shape == r.shape and a.dtype == r.dtype
        tol = 1e-5 if r.dtype == np.float32 else 1e-12
        assert_close(a, r, rtol=tol, atol=tol, equal_nan=True)
    return prog


@pytest.mark.parametrize("d", [dt.float32, dt.float64])
def test_plain_and_transposed_operands(d):
    # x @ w, x @ w.T, x.T @ y, x.T @ w.T: all four flag pairs; odd sizes so slabs differ
    def fn(x, w, y):
        return [prims.dot_general(x, w, contract=((1,), (0,))),
                prims.dot_general(x, y, contract=((1,), (1,))),
                prims.dot_general(x, x, contract=((0,), (0,))),
                prims.dot_general(w, y, contract=((1,), (0,)))]
    g = static(fn, ((7, 5), d), ((5, 9), d), ((9, 5), d))
    _check_graph(g, [_rand((7, 5), d.np), _rand((5, 9), d.np, 1), _rand((9, 5), d.np, 2)], 4)


def test_wide_product_is_cut_along_columns():
    assert blas.pieces(1, 3, 40, 2) == (2, True)
    assert blas.pieces(1, 40, 3, 2) == (2, False)
    assert blas.pieces(8, 40, 3, 2) == (1, False)

    def fn(x, w):
        return [prims.dot_general(x, w, contract=((1,), (0,)))]
    g = static(fn, ((3, 6), dt.float32), ((6, 41), dt.float32))
    _check_graph(g, [_rand((3, 6)), _rand((6, 41), seed=1)], 1)


def test_batched_with_permuted_batch_dims():
    # q (B,S,H,D) read as (B,H,S,D) and (B,H,D,S): batch steps that are not one stride apart
    def fn(q, k):
        s = prims.dot_general(q, k, contract=((3,), (3,)), batch=((0, 2), (0, 2)))
        t = prims.dot_general(q, k, contract=((1,), (1,)), batch=((0, 2), (0, 2)))
        return [s, t]
    g = static(fn, ((2, 5, 3, 4), dt.float32), ((2, 5, 3, 4), dt.float32))
    _check_graph(g, [_rand((2, 5, 3, 4)), _rand((2, 5, 3, 4), seed=1)], 2)


def test_vectors_and_empty_products_fall_back_or_work():
    def fn(x, v, e, z):
        return [prims.dot_general(x, v, contract=((1,), (0,))),       # matrix @ vector
                prims.dot_general(v, x, contract=((0,), (1,))),       # vector @ matrix.T
                prims.dot_general(x, e, contract=((1,), (0,))),       # (4,6) @ (6,0)
                prims.dot_general(z, z, contract=((0,), (0,)))]       # k = 0: zeros (3,3)
    g = static(fn, ((4, 6), dt.float32), ((6,), dt.float32), ((6, 0), dt.float32),
               ((0, 3), dt.float32))
    prog = _check_graph(g, [_rand((4, 6)), _rand((6,), seed=1), np.zeros((6, 0), np.float32),
                            np.zeros((0, 3), np.float32)], 2)
    assert prog.plan.source.count("_mm(") == 2    # the empty products stay np.matmul


def test_integer_products_stay_on_numpy():
    def fn(x, w):
        return [prims.dot_general(x, w, contract=((1,), (0,)))]
    g = static(fn, ((4, 6), dt.int64), ((6, 3), dt.int64))
    x = np.arange(24, dtype=np.int64).reshape(4, 6)
    _check_graph(g, [x, x.T[:, :3].copy()], 0)


def test_gemm_layout_rejects_views_that_need_a_copy():
    p = blas.layout_probe((4, 6))
    assert blas.gemm_layout(p, None, (4, 6))[1:] == (blas.NO_TRANS, 6)
    assert blas.gemm_layout(p, (1, 0), (6, 4))[1:] == (blas.TRANS, 6)
    q = blas.layout_probe((2, 3, 4))
    # (2,3,4) -> (3,2,4) -> (3,8): merging dims that are not adjacent in memory needs a copy
    assert blas.gemm_layout(q, (1, 0, 2), (3, 8)) is None
    assert blas.gemm_layout(p[:, ::2], None, (4, 3)) is None          # no unit stride
    sl = p[1:3, 2:5]
    lay = blas.gemm_layout(sl, None, (2, 3))
    assert lay[1:] == (blas.NO_TRANS, 6) and blas.offset_of(sl, p) == 8


def _attention(x, w, wo):
    B, S, D = x.shape
    H = 2
    qkv = (x @ w).reshape(B, S, 3, H, D // H)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    att = ag.softmax(q @ k.transpose(-2, -1) * (D // H) ** -0.5, dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, S, D)
    return ((y @ wo) ** 2).sum()


@pytest.mark.parametrize("backend", ["numba"])
def test_attention_block_matches_eager(backend):
    # the views of one qkv buffer (slices with offsets, permuted batch dims) go to BLAS as
    # they lie, forward and backward
    args = [_rand((2, 5, 8)), _rand((8, 24), seed=1), _rand((8, 8), seed=2)]
    eager = [ag.tensor(a, requires_grad=True) for a in args]
    comp = [ag.tensor(a, requires_grad=True) for a in args]
    le = _attention(*eager)
    le.backward()
    cf = ag.compile(_attention, backend=backend)
    lc = cf(*comp)
    lc.backward()
    assert_close(lc.item(), le.item(), rtol=1e-5, atol=0, equal_nan=True)
    for e, c in zip(eager, comp):
        assert_close(c.grad.numpy(), e.grad.numpy(), rtol=1e-4, atol=1e-5, equal_nan=True)
    prog = next(iter(cf.cache.values()))
    fwd, bwd = prog._kernels["forward"].plan.source, prog._kernels["backward"].plan.source
    assert fwd.count("_gemm(") == 4 and "_mm(" not in fwd
    assert bwd.count("_gemm(") >= 6 and "_mm(" not in bwd


def test_small_products_run_on_the_calling_thread(monkeypatch):
    # below SERIAL_MAX multiply-adds: the same BLAS pieces without a parallel region, for
    # plain, transposed and batched operands read from one buffer; above it: threaded
    monkeypatch.setattr(blas, "SERIAL_MAX", 10 ** 4)

    def fn(x, w, y, q, k):
        return [prims.dot_general(x, w, contract=((1,), (0,))),             # 7*5*9 = 315
                prims.dot_general(x, x, contract=((0,), (0,))),
                prims.dot_general(w, y, contract=((1,), (0,))),
                prims.dot_general(q, k, contract=((3,), (3,)), batch=((0, 2), (0, 2))),
                prims.dot_general(y, y, contract=((0,), (0,)))]

    def fn2(a, b):
        return [prims.dot_general(a, b, contract=((1,), (0,)))]             # 40*50*60 = 120000
    g = static(fn, ((7, 5), dt.float32), ((5, 9), dt.float32), ((9, 5), dt.float32),
               ((2, 5, 3, 4), dt.float32), ((2, 5, 3, 4), dt.float32))
    prog = _check_graph(g, [_rand((7, 5)), _rand((5, 9), seed=1), _rand((9, 5), seed=2),
                            _rand((2, 5, 3, 4), seed=3), _rand((2, 5, 3, 4), seed=4)], 0)
    assert prog.plan.source.count("_gemm1(") == 5
    assert all("calling thread" in how for how in prog.plan.gemm_how.values())
    g2 = static(fn2, ((40, 50), dt.float32), ((50, 60), dt.float32))
    prog2 = _check_graph(g2, [_rand((40, 50)), _rand((50, 60), seed=1)], 1)
    assert "_gemm1(" not in prog2.plan.source


def test_gemm_serial_equals_gemm_threads():
    fn, one, e = blas.gemm_address(np.float32), np.float32(1), np.zeros(0, np.int64)
    buf = _rand((2, 4, 2, 3, 6), np.float32, 3)
    steps = np.array([4 * 2 * 3 * 6, 6], np.int64)
    outs = []
    with blas.single_threaded():
        for gemm, parts in ((blas.gemm_threads, 1), (blas.gemm_threads, 2), (blas.gemm_serial, 1),
                            (blas.gemm_serial, 3)):
            c = np.full((2, 3, 4, 4), np.nan, np.float32)
            gemm(fn, blas.NO_TRANS, blas.TRANS, 4, 4, 6, one, buf.reshape(-1), 0, 36,
                 buf.reshape(-1), 18, 36, c.reshape(-1), 0, 4, np.array([2, 3], np.int64),
                 steps, steps, np.array([48, 16], np.int64), parts, False)
            outs.append(c)
    q, kk = buf[:, :, 0].transpose(0, 2, 1, 3), buf[:, :, 1].transpose(0, 2, 1, 3)
    for c in outs:
        assert_close(c, q @ kk.transpose(0, 1, 3, 2), rtol=1e-5, atol=1e-6, equal_nan=True)


def test_openblas_threads_restored_after_a_call():
    lib = blas.openblas()
    before = lib.get_threads()

    def fn(x, w):
        return [prims.dot_general(x, w, contract=((1,), (0,)))]
    g = static(fn, ((4, 6), dt.float32), ((6, 3), dt.float32))
    _check_graph(g, [_rand((4, 6)), _rand((6, 3), seed=1)], 1)
    assert lib.get_threads() == before


def test_a_forked_child_runs_the_program_on_threads_of_its_own():
    """The parent ran the program on its threads (a product cut into pieces, a kernel in
    parts); a child forked afterwards runs it too, on a pool of its own, with the same
    result (a DataLoader worker started with fork)."""
    import multiprocessing as mp
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("no fork here")

    def fn(x, w):
        return [prims.tanh(prims.dot_general(x, w, contract=((1,), (0,))))]
    g = static(fn, ((400, 60), dt.float32), ((60, 500), dt.float32))
    args = [_rand((400, 60)), _rand((60, 500), seed=1)]
    prog = _check_graph(g, args, 1)
    assert "in parts on threads" in prog.report(), prog.report()
    want = prog(*args)[0]
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(prog, args, q))
    p.start()
    got = q.get(timeout=120)
    p.join(60)
    assert p.exitcode == 0
    np.testing.assert_array_equal(got, want)


def _child(prog, args, q):
    try:
        q.put(prog(*args)[0])
    except BaseException as e:
        q.put(repr(e))


@pytest.mark.parametrize("name", ["openblas", "mkl"])
@pytest.mark.parametrize("d", [np.float32, np.float64])
def test_gemm_threads_on_each_library(name, d):
    # every flag pair, both cuts, and a stack read through batch steps and an offset, on
    # each library that is here (MKL only where the `mkl` package is installed)
    lib = blas.openblas() if name == "openblas" else blas.mkl()
    if lib is None:
        pytest.skip(f"{name} not found here")
    fn, one, e = lib[1][np.dtype(d)], d(1), np.zeros(0, np.int64)
    m, k, n = 7, 5, 9
    with blas.single_threaded():
        for ta in (blas.NO_TRANS, blas.TRANS):
            for tb in (blas.NO_TRANS, blas.TRANS):
                a = _rand((k, m) if ta == blas.TRANS else (m, k), d, 1)
                b = _rand((n, k) if tb == blas.TRANS else (k, n), d, 2)
                want = (a.T if ta == blas.TRANS else a) @ (b.T if tb == blas.TRANS else b)
                for parts, cut in ((1, False), (2, False), (3, True)):
                    c = np.full((m, n), np.nan, d)
                    blas.gemm_threads(fn, ta, tb, m, n, k, one, a.reshape(-1), 0, a.shape[1],
                                    b.reshape(-1), 0, b.shape[1], c.reshape(-1), 0, n, e, e,
                                    e, e, parts, cut)
                    assert_close(c, want, rtol=1e-5, atol=1e-6, equal_nan=True)
        # (2, 3) stack of q @ k^T from one (2, 4, 2, 3, 6) buffer: batch steps (48*2.., 6)
        buf = _rand((2, 4, 2, 3, 6), d, 3)
        q, kk = buf[:, :, 0].transpose(0, 2, 1, 3), buf[:, :, 1].transpose(0, 2, 1, 3)
        c = np.full((2, 3, 4, 4), np.nan, d)
        steps = np.array([4 * 2 * 3 * 6, 6], np.int64)
        blas.gemm_threads(fn, blas.NO_TRANS, blas.TRANS, 4, 4, 6, one, buf.reshape(-1), 0, 36,
                        buf.reshape(-1), 18, 36, c.reshape(-1), 0, 4, np.array([2, 3], np.int64),
                        steps, steps, np.array([48, 16], np.int64), 1, False)
        assert_close(c, q @ kk.transpose(0, 1, 3, 2), rtol=1e-5, atol=1e-6, equal_nan=True)
        # ... written straight into the (2, 4, 3, 4) transpose of that (2, 3, 4, 4) result,
        # inside a larger buffer (offset 5, rows 12 apart, heads 4 apart), in row slabs
        for parts in (1, 2):
            big = np.full(5 + 2 * 4 * 3 * 4 + 3, np.nan, d)
            out = big[5:5 + 96].reshape(2, 4, 3, 4)
            blas.gemm_threads(fn, blas.NO_TRANS, blas.TRANS, 4, 4, 6, one, buf.reshape(-1), 0,
                            36, buf.reshape(-1), 18, 36, big, 5, 12, np.array([2, 3], np.int64),
                            steps, steps, np.array([48, 4], np.int64), parts, False)
            assert_close(out.transpose(0, 2, 1, 3), q @ kk.transpose(0, 1, 3, 2), rtol=1e-5,
                         atol=1e-6, equal_nan=True)
            assert np.isnan(big[:5]).all() and np.isnan(big[5 + 96:]).all()


def test_provider_is_the_library_whose_gemm_runs():
    name = blas.provider()
    assert name in ("mkl", "openblas")
    lib = blas.mkl() if name == "mkl" else blas.openblas()
    assert blas.gemm_address(np.float32) == lib[1][np.dtype(np.float32)]
    assert blas.gemm_address(np.int64) is None


@pytest.mark.skipif(blas.mkl() is None, reason="the mkl package is not installed")
def test_mkl_is_chosen_on_intel_cpus_or_when_forced(monkeypatch):
    cases = [("GenuineIntel", "", "mkl"), (None, "", "mkl"), ("AuthenticAMD", "", "openblas"),
             ("AuthenticAMD", "mkl", "mkl"), ("GenuineIntel", "openblas", "openblas")]
    try:
        for vendor, forced, want in cases:
            monkeypatch.setattr(blas, "_cpu_vendor", lambda: vendor)
            monkeypatch.setenv("AOTGRAD_BLAS", forced)
            blas.provider.cache_clear()
            assert blas.provider() == want, (vendor, forced)
            lib = blas.mkl() if want == "mkl" else blas.openblas()
            assert blas.gemm_address(np.float32) == lib[1][np.dtype(np.float32)]
    finally:
        monkeypatch.undo()
        blas.provider.cache_clear()


@pytest.mark.parametrize("threads", [2, 3])
def test_products_posted_on_the_board_equal_the_calling_threads_bit_for_bit(threads):
    """gemm_threads posts a product's pieces on the thread pool's board, where the workers
    take them between parts (codegen.board): a run of products of many pieces (a stack
    of 64, slabs of one matrix), each posted while the workers still poll for the last or
    after they went to sleep, equals gemm_serial's pieces on one thread bit for bit, with
    three workers as with one, and a part in between still runs."""
    import time
    from aotgrad.codegen import board, parts
    fn, e = blas.gemm_address(np.float32), np.zeros(0, np.int64)
    a, b = _rand((64, 9, 7), np.float32, 1), _rand((64, 7, 11), np.float32, 2)
    stack = (fn, blas.NO_TRANS, blas.NO_TRANS, 9, 11, 7, np.float32(1), a.reshape(-1), 0, 7,
             b.reshape(-1), 0, 11)
    steps = lambda *s: np.array(s, np.int64)   # noqa: E731
    x, w = _rand((300, 40), np.float32, 3), _rand((40, 200), np.float32, 4)
    n = parts.get_num_threads()
    parts.set_num_threads(threads)
    try:
        with blas.single_threaded():
            for i in range(60):
                want, got = (np.full((64, 9, 11), np.nan, np.float32) for _ in range(2))
                for gemm, out in ((blas.gemm_serial, want), (blas.gemm_threads, got)):
                    gemm(*stack, out.reshape(-1), 0, 11, steps(64), steps(63), steps(77),
                         steps(99), 1, False)
                np.testing.assert_array_equal(got, want)
                for cut in (False, True):
                    want, got = (np.full((300, 200), np.nan, np.float32) for _ in range(2))
                    for gemm, out in ((blas.gemm_serial, want), (blas.gemm_threads, got)):
                        gemm(fn, blas.NO_TRANS, blas.NO_TRANS, 300, 200, 40, np.float32(1),
                             x.reshape(-1), 0, 40, w.reshape(-1), 0, 200, out.reshape(-1), 0,
                             200, e, e, e, e, threads, cut)
                    np.testing.assert_array_equal(got, want)
                if i % 20 == 19:          # the workers go to sleep; the next post wakes them
                    deadline = time.monotonic() + 10
                    while parts._pool[0].board[board.POLLING] and \
                            time.monotonic() < deadline:
                        time.sleep(0.01)
                    assert parts._pool[0].board[board.POLLING] == 0
                if i % 7 == 0:
                    assert parts.run_parts(_part_sum, (np.ones(1000),)) == 0
    finally:
        parts.set_num_threads(n)
    assert parts._pool[0].board[board.DONE] == parts._pool[0].board[board.TOTAL]


@numba.njit(nogil=True)
def _part_sum(phase, part, nparts, ws, x):
    s = 0.0
    for i in range(x.size * part // nparts, x.size * (part + 1) // nparts):
        s += x[i]
    return 0 if s >= 0 else 1


def test_a_stale_claim_takes_no_piece_of_the_next_product():
    """A worker that read the claim of a product whose pieces are all taken cannot take a
    piece of the next one: posting sets a new product number in the claim first."""
    from aotgrad.codegen import board
    fn, e = blas.gemm_address(np.float32), np.zeros(0, np.int64)
    a, b = _rand((6, 4), np.float32, 1), _rand((4, 5), np.float32, 2)
    posted = board.new_board()
    c = np.zeros((6, 5), np.float32)
    args = (fn, blas.NO_TRANS, blas.NO_TRANS, 6, 5, 4, np.float32(1), a.reshape(-1), 0, 4,
            b.reshape(-1), 0, 5, c.reshape(-1), 0, 5, e, e, e, e, 3, False)
    board.post(posted, *args)
    stale = int(posted[board.CLAIM])
    assert stale & board.PIECE == 3 and not board.take(posted)
    board.post(posted, *args)
    assert int(posted[board.CLAIM]) >> 32 == (stale >> 32) + 1
    assert not _exchange(posted, board.CLAIM, stale, stale + 1)
    assert_close(c, a @ b, rtol=1e-5, atol=1e-6)


@numba.njit
def _exchange(board, slot, expected, new):
    return compare_exchange(board, slot, expected, new)


def test_products_from_two_python_threads_at_once_are_each_right():
    """Two Python threads running products at the same time: one posts on the pool's board,
    the other finds the pool busy and runs its pieces on its own thread; both are right."""
    fn, e = blas.gemm_address(np.float32), np.zeros(0, np.int64)
    x, w = _rand((300, 40), np.float32, 3), _rand((40, 200), np.float32, 4)
    want = np.empty((300, 200), np.float32)
    blas.gemm_serial(fn, blas.NO_TRANS, blas.NO_TRANS, 300, 200, 40, np.float32(1),
                     x.reshape(-1), 0, 40, w.reshape(-1), 0, 200, want.reshape(-1), 0, 200, e, e,
                     e, e, 2, False)
    wrong = []

    def run():
        for _ in range(40):
            got = np.full((300, 200), np.nan, np.float32)
            blas.gemm_threads(fn, blas.NO_TRANS, blas.NO_TRANS, 300, 200, 40, np.float32(1),
                              x.reshape(-1), 0, 40, w.reshape(-1), 0, 200, got.reshape(-1), 0,
                              200, e, e, e, e, 2, False)
            if not np.array_equal(got, want):
                wrong.append(got)
    with blas.single_threaded():
        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not wrong
