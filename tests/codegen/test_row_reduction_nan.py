"""A row's max/min (maxnum, which skips NaN) is re-checked for NaN by a scan of the row. When
the max shares its pass with a float32 sum, that pass runs in blocks of BLOCK elements; the
scan after it must still read the whole row, and only that row: rows longer than one block
read past their end (into the next row, or past the buffer), so a NaN in one row made the
rows before it NaN."""
import numpy as np
import pytest

from aotgrad.codegen import compile_graph
from aotgrad.codegen.emit_base import BLOCK
from aotgrad.ir import Aval, GraphBuilder, evaluate, prims
from aotgrad.ir import dtypes as dt
from aotgrad.testing import assert_close

pytestmark = pytest.mark.usefixtures("module_cache_dir")


def _max_min_and_sum(shape):
    b = GraphBuilder("forward")
    x = b.add_input(Aval(shape, dt.float32), "x")
    with b:
        b.graph.outputs = [prims.reduce_max(x, dims=(1,)), prims.reduce_min(x, dims=(1,)),
                           prims.reduce_sum(x, dims=(1,))]
    return b.graph


@pytest.mark.parametrize("cols", [BLOCK + 904, 2 * BLOCK + 3])
def test_nan_check_after_a_blocked_sum_reads_only_its_own_row(cols):
    x = np.random.default_rng(0).standard_normal((4, cols)).astype(np.float32)
    x[1, 100] = np.nan          # read by row 0's scan when it ran past its row
    x[2, cols - 1] = np.nan     # in the last block of its own row
    x[3, 7] = -np.inf
    g = _max_min_and_sum(x.shape)
    got = compile_graph(g)(x)
    ref = evaluate(g, [x])
    for a, r in zip(got, ref):
        r = np.asarray(r)
        np.testing.assert_array_equal(np.isnan(a), np.isnan(r))
        assert_close(a, r, rtol=1e-5, atol=1e-3, equal_nan=True)
