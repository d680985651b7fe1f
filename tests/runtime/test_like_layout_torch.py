"""The layout of `*_like(x)` and `clone(x)` (PyTorch's preserve_format: x's strides where x is
non-overlapping and dense, else dense strides in the order of x's), of
`clone(memory_format=contiguous_format)` (C order), and `is_contiguous(memory_format=...)`:
eagerly, while tracing (what `stride()` reads inside a compiled function) and against
PyTorch.
"""
import numpy as np
import pytest

import aotgrad as ag


def _x(M):
    return M.arange(12.0).reshape(3, 4)


# (what, make from x, the strides PyTorch gives)
CASES = [
    ("empty_like of a transpose", lambda M, x: M.empty_like(x.t()), (1, 4)),
    ("zeros_like of a transpose", lambda M, x: M.zeros_like(x.t()), (1, 4)),
    ("ones_like of a transpose", lambda M, x: M.ones_like(x.t()), (1, 4)),
    ("full_like of a transpose", lambda M, x: M.full_like(x.t(), 2.0), (1, 4)),
    ("randn_like of a transpose", lambda M, x: M.randn_like(x.t()), (1, 4)),
    ("clone of a transpose", lambda M, x: x.t().clone(), (1, 4)),
    ("clone contiguous_format", lambda M, x: x.t().clone(memory_format=M.contiguous_format),
     (3, 1)),
    ("zeros_like contiguous_format",
     lambda M, x: M.zeros_like(x.t(), memory_format=M.contiguous_format), (3, 1)),
    ("empty_like of a strided transpose", lambda M, x: M.empty_like(x.t()[::2]), (1, 2)),
    ("clone of an expand", lambda M, x: x[:1].expand(3, 4).clone(), (4, 1)),
    ("empty_like of a size-1 transpose", lambda M, x: M.empty_like(x[:1].t()), (1, 4)),
    ("empty_like of a 3-d permute",
     lambda M, x: M.empty_like(x.reshape(2, 2, 3).permute(2, 0, 1)), (1, 6, 3)),
    ("contiguous of a transpose", lambda M, x: x.t().contiguous(), (3, 1)),
]


@pytest.mark.parametrize("what, make, strides", CASES, ids=[c[0] for c in CASES])
def test_like_and_clone_strides(what, make, strides):
    x = _x(ag)
    y = make(ag, x)
    assert y.stride() == strides
    # (PyTorch's contiguity ignores the strides of size-1 dims)
    c_strides = [st for n, st in zip(y.shape, strides) if n != 1]
    sizes = [n for n in y.shape if n != 1]
    assert y.is_contiguous() == (c_strides == [int(np.prod(sizes[d + 1:]))
                                               for d in range(len(sizes))])
    assert y._base is None and not y._is_view()
    if "clone" in what or "contiguous of" in what:   # x's values, whatever the layout
        np.testing.assert_array_equal(y.numpy(), _reference_value(what, x.numpy()))
    elif "zeros" in what:
        assert (y.numpy() == 0).all()


def _reference_value(what, a):
    if "expand" in what:
        return np.broadcast_to(a[:1], (3, 4))
    return a.T


@pytest.mark.parametrize("what, make, strides", CASES[:8], ids=[c[0] for c in CASES[:8]])
def test_traced_like_and_clone_strides_are_eager_modes(what, make, strides):
    """stride() read inside a compiled function is eager mode's (the trace's layout probe)."""
    seen = {}

    def f(x):
        y = make(ag, x)
        seen["stride"] = y.stride()
        return y * 1.0

    ag.compile(f, backend="interpret")(_x(ag))
    assert seen["stride"] == strides


def test_is_contiguous_channels_last():
    """PyTorch: False at a rank other than 4 (5 for channels_last_3d); at rank 4 the strides
    must be NHWC's, which a C-ordered tensor has only where C == 1 or H == W == 1."""
    assert not ag.zeros(3, 4).is_contiguous(memory_format=ag.channels_last)
    assert not ag.zeros(1, 3, 2, 2).is_contiguous(memory_format=ag.channels_last)
    assert ag.zeros(2, 1, 2, 2).is_contiguous(memory_format=ag.channels_last)
    assert ag.zeros(2, 3, 1, 1).is_contiguous(memory_format=ag.channels_last)
    nhwc = ag.zeros(1, 2, 2, 3).permute(0, 3, 1, 2)
    assert nhwc.is_contiguous(memory_format=ag.channels_last) and not nhwc.is_contiguous()
    assert not ag.zeros(1, 2, 2, 2, 3).is_contiguous(memory_format=ag.channels_last)
    assert ag.zeros(1, 2, 2, 2, 3).permute(0, 4, 1, 2, 3).is_contiguous(
        memory_format=ag.channels_last_3d)


def test_like_and_clone_layouts_like_torch(torch):
    def meta(t):
        return (tuple(t.shape), t.stride(), t.is_contiguous(), t.storage_offset(), t._is_view(),
                t.is_contiguous(memory_format=torch.channels_last if t.__module__ == "torch"
                                else ag.channels_last) if t.ndim == 4 else None)
    for what, make, _ in CASES:
        assert meta(make(ag, _x(ag))) == meta(make(torch, _x(torch))), what
    for shape, perm in [((1, 2, 2, 3), (0, 3, 1, 2)), ((2, 3, 4), (1, 2, 0))]:
        for make in (lambda M, x: M.empty_like(x), lambda M, x: x.clone()):
            ours = make(ag, ag.zeros(*shape).permute(*perm))
            assert meta(ours) == meta(make(torch, torch.zeros(*shape).permute(*perm)))


# diagonal(), unfold() and as_strided() are views in PyTorch and copies here: the values and
# gradients are PyTorch's, and a write into the result, which in PyTorch changes the input,
# raises instead of being lost
COPIES_OF_VIEWS = [
    ("diagonal", lambda x: x.diagonal(), lambda y: y.fill_(1.0)),
    ("diagonal", lambda x: ag.linalg.diagonal(x), lambda y: y[1:].add_(1.0)),
    ("diagonal", lambda x: x.diagonal(1), lambda y: y.__setitem__(0, 5.0)),
    ("unfold", lambda x: x.unfold(1, 2, 1), lambda y: y.zero_()),
    ("as_strided", lambda x: x.as_strided((2, 2), (1, 3)), lambda y: y.mul_(2.0)),
]


@pytest.mark.parametrize("name, view, write", COPIES_OF_VIEWS,
                         ids=[f"{c[0]}{i}" for i, c in enumerate(COPIES_OF_VIEWS)])
@pytest.mark.parametrize("mode", [None, "interpret"])
@pytest.mark.filterwarnings("ignore:aotgrad.compile")   # (a write into a view breaks first)
def test_write_into_a_copied_view_raises(name, view, write, mode):
    def f(x):
        write(view(x))
        return x.sum()
    fn = f if mode is None else ag.compile(f, backend=mode)
    with pytest.raises(RuntimeError, match=rf"result of {name}\(\).*PyTorch {name}\(\) returns "
                                           rf"a view"):
        fn(_x(ag))


def test_copied_view_values_and_clones_stay_writable():
    x = _x(ag)
    d = x.diagonal()
    np.testing.assert_array_equal(d.numpy(), [0.0, 5.0, 10.0])
    c = d.clone()
    c.fill_(1.0)                 # a clone is a tensor of its own
    m = ag.diag(x)               # diag() of a matrix is a copy in PyTorch too
    m.fill_(2.0)
    assert x.sum().item() == 66.0
