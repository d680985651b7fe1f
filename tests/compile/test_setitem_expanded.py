"""`x[a:b] = v` into an expanded tensor (elements that share memory) in a compiled function:
eagerly, as in PyTorch, the indexed view is written, so the write reaches every element
sharing its memory, and a view that overlaps itself raises. The traced whole-tensor update
cannot express that: the call breaks the graph (its result is eager's) or raises eager's
error."""
import warnings

import pytest

import aotgrad


def _write(lo, hi):
    def fn(a):
        a[lo:hi] = 0.5
        return a * 2
    return fn


def _run(M, fn, compiled):
    base = M.tensor([0.64], dtype=M.float64)
    a = base.expand(2)
    if compiled:
        fn = M.compile(fn, backend="interpret")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the graph break's warning)
            out = fn(a)
    except RuntimeError as e:
        return "error", str(e).split("(")[0].replace("setitem: ", "")
    return out.tolist(), base.tolist()


@pytest.mark.parametrize("lo, hi", [(0, 0), (0, 1), (1, 2), (0, 2)])
def test_setitem_into_an_expanded_tensor_compiled_equals_eager(lo, hi):
    eager = _run(aotgrad, _write(lo, hi), False)
    assert _run(aotgrad, _write(lo, hi), True) == eager
    if hi - lo == 1:  # the write reaches both elements through the shared memory
        assert eager == ([1.0, 1.0], [0.5])


@pytest.mark.parametrize("lo, hi", [(0, 0), (0, 1), (0, 2)])
def test_setitem_into_an_expanded_tensor_eager_equals_torch(torch, lo, hi):
    ours, theirs = _run(aotgrad, _write(lo, hi), False), _run(torch, _write(lo, hi), False)
    assert ours[0] == theirs[0]
    if ours[0] != "error":
        assert ours == theirs
    else:
        assert ours[1].strip() == theirs[1].strip()
