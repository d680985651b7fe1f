"""Every row of the op table (tests/op_table.py) compiled and compared with eager: outputs and
the gradients of every float input, with the reference (`interpret`) backend and with Numba.

The Numba run compiles up to three programs per row (about 80 s for the table with a cold
compile cache on 2 cores; the disk cache makes repeated runs cheap)."""
import warnings

import pytest

import aotgrad as ag
from aotgrad.testing import compare_with_eager
from op_table import OPS, _make, _setup

def _compile_row(request, fn, specs, opts, backend):
    rng, arrays = _setup(request, specs)
    ins = _make(ag, specs, arrays, ag.float64)
    brk = opts["graph_break"]
    with warnings.catch_warnings():
        # rows with data-dependent shapes break the graph and run eagerly (said by the row)
        if brk:
            warnings.simplefilter("ignore")
        compare_with_eager(lambda *a: fn(ag, *a), *ins, backend=backend, rtol=1e-9, atol=1e-9,
                           expect_graph_break=brk or False)


@pytest.mark.parametrize("fn,specs,opts", OPS)
def test_op_table_compiled_interpret(request, fn, specs, opts):
    _compile_row(request, fn, specs, opts, "interpret")


@pytest.mark.parametrize("fn,specs,opts", OPS)
def test_op_table_compiled_numba(request, fn, specs, opts):
    _compile_row(request, fn, specs, opts, "numba")
