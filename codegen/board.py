"""The board on which aotgrad's threads share work without the interpreter lock: a matrix
product's pieces, and a native row program's parts.

A product is cut into pieces (whole matrices of a stack, or slabs of rows or columns of one
matrix: codegen.blas.pieces), each one single-threaded cblas_?gemm called through its
address; a row program compiled by LLVM (codegen.row_native) into parts, each its share of
the rows with a scratch and accumulators of its own, called through its address. The calling
thread posts the work on its thread pool's board (`post`, `post_rows`) and takes pieces
itself; the pool's workers, polling for their next part (codegen.parts), take the others
(`take`) as soon as it is posted. A part handed to a worker through Python waits for the
interpreter lock while the caller holds it (tens of microseconds a call where a waiting
thread's core sleeps, as on a VM); a piece taken here does not. A thread that the machine's
load slows takes fewer pieces.

A piece is taken by one compare-and-exchange on the board's CLAIM slot, which holds the
posted work's number (high 32 bits) and its next piece: a worker that read the claim of work
whose pieces are all taken cannot take one of the next work's. Before the caller writes the
next work's arguments it sets the claim to the new number with no piece left, so nothing is
taken meanwhile.
"""
import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.extending import intrinsic

from aotgrad.codegen.atomics import compare_exchange, fetch_add, load_acquire, store_release

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112

# the board's int64 slots: the claim, pieces done, pieces in all, workers polling, holds
# that keep them polling (codegen.parts.hold), what is posted (KIND), the address of the
# function its pieces call and their count; then a
# product's arguments (addresses of its arrays, the batch shape's and steps' arrays) or a row
# program's (addresses of its arrays; a part's scratch and accumulators are a row each)
(CLAIM, DONE, TOTAL, POLLING, HOLDS, KIND, FN, PARTS,
 ALPHA, F64, TA, TB, M, N, K, PA, A_OFF, LDA, PB, B_OFF, LDB, PC, C_OFF, LDC, CUT_COLS, RANK,
 BATCH, A_STEPS, B_STEPS, C_STEPS,
 NROWS, AIN, AOUT, PRE, SCRATCH, SCRATCH_STRIDE, ACC, ACC_STRIDE, IDX, SLOTS) = range(40)
PRODUCT, ROWS = 0, 1           # KIND
PIECE = (1 << 32) - 1          # the claim's piece bits
NUMBER = (1 << 31) - 1         # a posted work's number, kept below the sign bit


def new_board():
    return np.zeros(SLOTS, np.int64)


@intrinsic
def _cblas_gemm(typingctx, fn, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, c, ldc):
    """cblas_?gemm(RowMajor, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, 0, c, ldc)
    through the function address `fn`; pointers are integer addresses, sizes 64-bit."""
    i64 = types.int64
    sig = types.void(i64, i64, i64, i64, i64, i64, alpha, i64, i64, i64, i64, i64, i64)

    def codegen(context, builder, signature, args):
        fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc = args
        i32, i64_ = ir.IntType(32), ir.IntType(64)
        ft = context.get_value_type(signature.args[6])
        ptr = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64_, i64_, i64_, ft, ptr, i64_,
                                               ptr, i64_, ft, ptr, i64_])
        f = builder.inttoptr(fn, fnty.as_pointer())
        builder.call(f, [ir.Constant(i32, ROW_MAJOR), builder.trunc(ta, i32),
                         builder.trunc(tb, i32), m, n, k, alpha, builder.inttoptr(a, ptr), lda,
                         builder.inttoptr(b, ptr), ldb, ir.Constant(ft, 0.0),
                         builder.inttoptr(c, ptr), ldc])
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _call_rows(typingctx, fn, lo, hi, ain, aout, pre, scratch, acc, idx):
    """A native row program's rows lo..hi (codegen.row_native's calling convention) through
    its function address `fn`; the other arguments are integer addresses."""
    sig = types.int64(*(types.int64,) * 9)

    def codegen(context, builder, signature, args):
        fn, lo, hi, ain, aout, pre, scratch, acc, idx = args
        i64 = ir.IntType(64)
        p64, pd = i64.as_pointer(), ir.DoubleType().as_pointer()
        fnty = ir.FunctionType(i64, [i64, i64, p64, p64, pd, pd, pd, p64])
        f = builder.inttoptr(fn, fnty.as_pointer())
        return builder.call(f, [lo, hi, builder.inttoptr(ain, p64), builder.inttoptr(aout, p64),
                                builder.inttoptr(pre, pd), builder.inttoptr(scratch, pd),
                                builder.inttoptr(acc, pd), builder.inttoptr(idx, p64)])
    return sig, codegen


@intrinsic
def _int64s_at(typingctx, address):
    """The int64 at integer address `address`, as a pointer (for numba's carray)."""
    sig = types.CPointer(types.int64)(types.int64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return sig, codegen


@njit(cache=True, nogil=True)
def count(batch, parts):
    """How many pieces a stack of shape `batch` has, `parts` per matrix."""
    total = parts
    for d in batch:
        total *= d
    return total


@njit(cache=True, nogil=True)
def _offset(i, batch, steps):
    """Element offset of matrix i (C order over the batch shape `batch`)."""
    off = 0
    for d in range(batch.size - 1, -1, -1):
        off += (i % batch[d]) * steps[d]
        i //= batch[d]
    return off


@njit(cache=True, nogil=True)
def piece(it, fn, ta, tb, m, n, k, alpha, pa, a_off, lda, pb, b_off, ldb, pc, c_off, ldc, isz,
          batch, a_steps, b_steps, c_steps, parts, cut_cols):
    """Piece `it` of a stack (see codegen.blas.gemm_serial for the arguments): slab
    it % parts of matrix it // parts."""
    i, p = it // parts, it % parts
    ao = a_off + _offset(i, batch, a_steps)
    bo, co = b_off + _offset(i, batch, b_steps), c_off + _offset(i, batch, c_steps)
    mm, nn = m, n
    if cut_cols:
        c0, c1 = n * p // parts, n * (p + 1) // parts
        nn = c1 - c0
        bo += c0 * (ldb if tb == TRANS else 1)
        co += c0
    else:
        r0, r1 = m * p // parts, m * (p + 1) // parts
        mm = r1 - r0
        ao += r0 * (1 if ta == TRANS else lda)
        co += r0 * ldc
    if mm > 0 and nn > 0:
        _cblas_gemm(fn, ta, tb, mm, nn, k, alpha, pa + ao * isz, lda, pb + bo * isz, ldb,
                    pc + co * isz, ldc)


@njit(cache=True, nogil=True)
def rows_part(it, fn, parts, nrows, ain, aout, pre, scratch, scratch_stride, acc, acc_stride,
              idx):
    """Part `it` of `parts` of native row program `fn` over `nrows` rows: its share of the
    rows, with scratch and accumulator row `it` (strides in bytes)."""
    lo, hi = nrows * it // parts, nrows * (it + 1) // parts
    if lo < hi:
        _call_rows(fn, lo, hi, ain, aout, pre, scratch + it * scratch_stride,
                   acc + it * acc_stride, idx)


@njit(cache=True, nogil=True)
def rows_serial(fn, parts, nrows, ain, aout, pre, scratch, scratch_stride, acc, acc_stride,
                idx):
    """Every part of a native row program on the calling thread, one after another (the
    arguments as post_rows'): the same parts, so the same sums, as on the board."""
    for it in range(parts):
        rows_part(it, fn, parts, nrows, ain, aout, pre, scratch, scratch_stride, acc,
                  acc_stride, idx)
    return 0


@njit(cache=True, nogil=True)
def _run(board, it):
    """Piece `it` of the work posted on `board`."""
    if board[KIND] == ROWS:
        rows_part(it, board[FN], board[PARTS], board[NROWS], board[AIN], board[AOUT],
                  board[PRE], board[SCRATCH], board[SCRATCH_STRIDE], board[ACC],
                  board[ACC_STRIDE], board[IDX])
        return
    r = board[RANK]
    batch, a_steps = carray(_int64s_at(board[BATCH]), r), carray(_int64s_at(board[A_STEPS]), r)
    b_steps, c_steps = carray(_int64s_at(board[B_STEPS]), r), carray(_int64s_at(board[C_STEPS]), r)
    alpha = board[ALPHA:ALPHA + 1].view(np.float64)[0]
    if board[F64]:
        piece(it, board[FN], board[TA], board[TB], board[M], board[N], board[K],
              np.float64(alpha), board[PA], board[A_OFF], board[LDA], board[PB], board[B_OFF],
              board[LDB], board[PC], board[C_OFF], board[LDC], 8, batch, a_steps, b_steps,
              c_steps, board[PARTS], board[CUT_COLS] != 0)
    else:
        piece(it, board[FN], board[TA], board[TB], board[M], board[N], board[K],
              np.float32(alpha), board[PA], board[A_OFF], board[LDA], board[PB], board[B_OFF],
              board[LDB], board[PC], board[C_OFF], board[LDC], 4, batch, a_steps, b_steps,
              c_steps, board[PARTS], board[CUT_COLS] != 0)


@njit(cache=True, nogil=True)
def take(board):
    """Take one piece of the work posted on `board` and run it: True if one was run, False
    if none is left (or another thread took the one this tried for)."""
    claim = load_acquire(board, CLAIM)
    it = claim & PIECE
    if it >= load_acquire(board, TOTAL):
        return False
    if not compare_exchange(board, CLAIM, claim, claim + 1):
        return False
    _run(board, it)
    fetch_add(board, DONE, 1)
    return True


@njit(cache=True, nogil=True)
def _open(board):
    """The next work's number, set in the claim with no piece left: nothing is taken while
    its arguments are written."""
    number = ((load_acquire(board, CLAIM) >> 32) + 1) & NUMBER
    store_release(board, CLAIM, (number << 32) | PIECE)
    return number


@njit(cache=True, nogil=True)
def _share(board, number, total):
    """Post the work whose arguments are written: its `total` pieces taken by this thread
    and the workers polling the board; returns once every piece is done."""
    board[DONE] = 0
    store_release(board, TOTAL, total)
    store_release(board, CLAIM, number << 32)
    while (load_acquire(board, CLAIM) & PIECE) < total:
        take(board)
    while load_acquire(board, DONE) < total:     # pieces a worker took, still running
        pass
    return 0


@njit(cache=True, nogil=True)
def post(board, fn, ta, tb, m, n, k, alpha, a, a_off, lda, b, b_off, ldb, c, c_off, ldc, batch,
         a_steps, b_steps, c_steps, parts, cut_cols):
    """c[i] = alpha op(a)[i] @ op(b)[i] for every matrix i of the stack `batch`, its pieces
    posted on `board` and taken by this thread and the workers polling it (the arguments as
    codegen.blas.gemm_serial's); returns once every piece is done."""
    number = _open(board)
    board[KIND] = PRODUCT
    board[ALPHA:ALPHA + 1].view(np.float64)[0] = np.float64(alpha)
    board[F64] = c.itemsize == 8
    board[FN], board[TA], board[TB], board[M], board[N], board[K] = fn, ta, tb, m, n, k
    board[PA], board[A_OFF], board[LDA] = a.ctypes.data, a_off, lda
    board[PB], board[B_OFF], board[LDB] = b.ctypes.data, b_off, ldb
    board[PC], board[C_OFF], board[LDC] = c.ctypes.data, c_off, ldc
    board[PARTS], board[CUT_COLS], board[RANK] = parts, cut_cols, batch.size
    board[BATCH], board[A_STEPS] = batch.ctypes.data, a_steps.ctypes.data
    board[B_STEPS], board[C_STEPS] = b_steps.ctypes.data, c_steps.ctypes.data
    return _share(board, number, count(batch, parts))


@njit(cache=True, nogil=True)
def post_rows(board, fn, parts, nrows, ain, aout, pre, scratch, scratch_stride, acc,
              acc_stride, idx):
    """Native row program `fn` over `nrows` rows in `parts` parts (rows_part), posted on
    `board` and taken by this thread and the workers polling it; returns once every part is
    done. The arrays (addresses) must stay alive until then."""
    number = _open(board)
    board[KIND] = ROWS
    board[FN], board[PARTS], board[NROWS] = fn, parts, nrows
    board[AIN], board[AOUT], board[PRE], board[IDX] = ain, aout, pre, idx
    board[SCRATCH], board[SCRATCH_STRIDE] = scratch, scratch_stride
    board[ACC], board[ACC_STRIDE] = acc, acc_stride
    return _share(board, number, parts)
