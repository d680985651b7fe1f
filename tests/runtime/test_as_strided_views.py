"""as_strided on views indexes the base's storage from the view's storage offset, as
PyTorch does (values and gradients against PyTorch); inside a compiled function a view's
as_strided is a graph break and gives eager's answer."""
import warnings

import numpy as np
import pytest

import aotgrad as ag

VIEWS = {
    "transposed_slice": lambda x: x.reshape(3, 4).t()[1:],
    "offset_slice": lambda x: x[2:],
    "column_slice": lambda x: x.reshape(3, 4)[:, 1:],
    "contiguous_reshape": lambda x: x.reshape(3, 4),
}
CALLS = [((2, 2), (1, 4)), ((2, 2), (1, 4), 1), ((3,), (2,)), ((2, 3), (3, 1), 0)]


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("call", range(len(CALLS)))
def test_as_strided_on_views_against_torch(vs_torch, view, call):
    def case(M):
        leaf = M.arange(12.0, dtype=M.float64).requires_grad_()
        y = VIEWS[view](leaf).as_strided(*CALLS[call])
        (y * M.arange(1.0, y.numel() + 1, dtype=M.float64).reshape(y.shape)).sum().backward()
        return y, leaf.grad
    vs_torch.same(case)


def test_as_strided_on_a_view_compiled_breaks_and_matches_eager():
    def f(x):
        return x.reshape(3, 4).t()[1:].as_strided((2, 2), (1, 4), 1) * 2

    x = ag.arange(12.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        c = ag.compile(f, backend="interpret")(x)
    np.testing.assert_array_equal(c.numpy(), f(x).numpy())
    assert any("as_strided on a view" in str(w.message) for w in caught)
    for view in VIEWS.values():     # every view: compiled (with or without a break) == eager
        for args in CALLS:
            h = ag.compile(lambda x: view(x).as_strided(*args) + 1, backend="interpret")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                np.testing.assert_array_equal(h(x).numpy(), (view(x).as_strided(*args) + 1)
                                              .numpy())
    # a plain (non-view) input still compiles with no break
    g = ag.compile(lambda x: x.as_strided((2, 2), (1, 4), 1) * 2, fullgraph=True,
                   backend="interpret")
    np.testing.assert_array_equal(g(x).numpy(), (x.as_strided((2, 2), (1, 4), 1) * 2).numpy())
