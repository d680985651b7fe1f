"""What a call of aotgrad's thread pool costs beyond its work (codegen.parts, codegen.board).

    python benchmarks/bench_parts.py [--calls 500] [--rounds 5]

1. A kernel in two parts (a sum over 20,000 float64 values, `reps` times; 14 array
   arguments, as a fused kernel has): each call run on the pool against the same work as
   one part on one thread, with the pool's linger before taking the interpreter lock
   (codegen.parts.LINGER) and without it, taken in turn.
2. Matrix products of the GPT's and W4's shapes: the pieces posted on the pool's board
   (blas.gemm_threads) against np.matmul on numpy's own threads, taken in turn.

Medians over `--calls` calls, per round; the load average before and after. A call's
overhead is its time less its half's: what the hand-off between the threads costs.
"""
import argparse
import os
import time

import numba
import numpy as np

from aotgrad.codegen import blas, parts
from bench_codegen import median_time


@numba.njit(nogil=True)
def _part_sum(phase, part, nparts, ws, x, reps, *rest):
    s = 0.0
    for _ in range(reps):
        for i in range(x.size * part // nparts, x.size * (part + 1) // nparts):
            s += x[i] * 1.0000001
    return 0 if s >= 0 else 1


def _median_us(fn, calls):
    return 1e6 * median_time(fn, reps=calls, warm=1)


def handoff(calls, rounds):
    x = np.ones(20000)
    print("kernel in two parts, 14 array arguments: median us per call (overhead = call - half)")
    lingers = (0, parts.LINGER)
    for reps in (1, 20):
        args = (x, reps) + tuple(np.ones(3) for _ in range(12))
        half = _median_us(lambda: _part_sum(1, 0, 2, parts.NO_WORKSPACE, *args), calls)
        got = {linger: [] for linger in lingers}
        for _ in range(rounds):
            for linger in lingers:
                parts.LINGER = linger
                got[linger].append(_median_us(lambda: parts.run_parts(_part_sum, args), calls))
        parts.LINGER = lingers[-1]
        for linger, ts in got.items():
            print(f"  half {half:7.1f} us  LINGER {linger:6d}: call {min(ts):7.1f}-{max(ts):7.1f} "
                  f"us, overhead {min(ts) - half:6.1f}-{max(ts) - half:6.1f} us")


def products(calls, rounds):
    fn, e = blas.gemm_address(np.float32), np.zeros(0, np.int64)
    rng = np.random.default_rng(0)
    threads = parts.get_num_threads()
    print(f"products on the pool's board ({threads} threads) against np.matmul: median ms")
    for m, k, n in ((1024, 1024, 256), (1024, 256, 1024), (256, 1024, 1024), (1024, 256, 256),
                    (256, 784, 1024)):
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        c = np.empty((m, n), np.float32)
        cuts, cut_cols = blas.pieces(1, m, n, threads)

        def board():
            with blas.single_threaded():
                blas.gemm_threads(fn, blas.NO_TRANS, blas.NO_TRANS, m, n, k, np.float32(1),
                                  a.reshape(-1), 0, k, b.reshape(-1), 0, n, c.reshape(-1), 0, n,
                                  e, e, e, e, cuts, cut_cols)
        ours, theirs = [], []
        for _ in range(rounds):
            ours.append(_median_us(board, max(5, calls // 50)) / 1e3)
            theirs.append(_median_us(lambda: np.matmul(a, b, out=c), max(5, calls // 50)) / 1e3)
            time.sleep(0.2)      # numpy's OpenBLAS threads stop spinning before the next
        print(f"  {m:5d}x{k:<5d}x{n:<5d} board {np.median(ours):7.3f}  np.matmul "
              f"{np.median(theirs):7.3f}  ratio {np.median(ours) / np.median(theirs):5.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    print("load average before", os.getloadavg())
    handoff(a.calls, a.rounds)
    products(a.calls, a.rounds)
    print("load average after", os.getloadavg())


if __name__ == "__main__":
    main()
