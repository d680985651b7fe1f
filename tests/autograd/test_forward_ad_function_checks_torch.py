"""Forward-mode AD of custom autograd.Functions and dual tensors, as PyTorch: what a jvp gets
(zeros for a floating input without tangent, None for an integer one), the checks of what it
returns (non-differentiable outputs, in-place inputs, views and inputs returned as is),
make_dual's refusals, detach_ dropping the tangent, comparisons in place on a dual tensor, and
untyped_storage. Closed forms, and PyTorch where installed."""
import numpy as np
import pytest

import aotgrad as ag


def _raises(fn, match):
    with pytest.raises(RuntimeError, match=match):
        fn()


def _fn_classes(T):
    class Scale(T.autograd.Function):
        """3 x; its jvp multiplies the tangent in place or out of place, and returns it or not
        as the flag says; the forward modifies its input in place."""
        @staticmethod
        def forward(ctx, x, mode):
            ctx.mark_dirty(x)
            ctx.mode = mode
            return x.mul_(3)

        @staticmethod
        def backward(ctx, g):
            return 3 * g, None

        @staticmethod
        def jvp(ctx, xt, _):
            if ctx.mode == "inplace":
                return xt.mul_(3)
            if ctx.mode == "copy":
                return 3 * xt
            xt.mul_(3)
            return xt.clone()   # modified in place, but not returned as is

    class Pick(T.autograd.Function):
        """Returns (2 x, the input itself or a view of it); the jvp returns the tangent's view,
        the tangent itself or a new tensor."""
        @staticmethod
        def forward(ctx, x, how, as_view):
            ctx.how, ctx.as_view = how, as_view
            return 2 * x, (x[1:] if as_view else x)

        @staticmethod
        def backward(ctx, g1, g2):
            return 2 * g1 + g2, None, None

        @staticmethod
        def jvp(ctx, xt, _, __):   # (a non-tensor argument's tangent is None)
            view = xt[1:] if ctx.as_view else xt.view_as(xt)
            return 2 * xt, {"view": view, "same": xt, "copy": view.clone(),
                            "other_view": view.clone()[:]}[ctx.how]

    class Split(T.autograd.Function):
        """(x clone, y clone) with y's marked non-differentiable; records what jvp got."""
        seen = []

        @staticmethod
        def forward(ctx, x, y, mark):
            ctx.mark = mark
            if mark:
                ctx.mark_non_differentiable(y)
            return x.clone(), y.clone()

        @staticmethod
        def jvp(ctx, xt, yt, _):
            Split.seen.append(yt if yt is None else yt.tolist())
            return xt * 5, (None if ctx.mark or not y_is_float(yt) else yt + 1)

    def y_is_float(yt):
        return yt is not None

    return Scale, Pick, Split


def test_jvp_arguments_and_non_differentiable_outputs():
    fw = ag.autograd.forward_ad
    _, _, Split = _fn_classes(ag)
    x, xt = ag.tensor([2.0, 3.0]), ag.tensor([1.0, -1.0])
    with fw.dual_level():
        a, b = Split.apply(fw.make_dual(x, xt), ag.tensor([4.0, 5.0]), False)
        assert fw.unpack_dual(a).tangent.tolist() == [5.0, -5.0]
        assert fw.unpack_dual(b).tangent.tolist() == [1.0, 1.0]   # zeros + 1
        a, b = Split.apply(fw.make_dual(x, xt), ag.tensor([4, 5]), False)
        assert fw.unpack_dual(b).tangent is None
        a, b = Split.apply(fw.make_dual(x, xt), ag.tensor([4.0, 5.0]), True)
        assert fw.unpack_dual(b).tangent is None
    assert Split.seen == [[0.0, 0.0], None, [0.0, 0.0]]


def test_tangent_for_a_non_differentiable_output_raises():
    fw = ag.autograd.forward_ad

    class Bad(ag.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            out = x.clone()
            ctx.mark_non_differentiable(out)
            return x * 2, out

        @staticmethod
        def jvp(ctx, xt):
            return 2 * xt, xt.clone()

    class IntOut(ag.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x.long()

        @staticmethod
        def jvp(ctx, xt):
            return 2 * xt, xt

    with fw.dual_level():
        d = fw.make_dual(ag.tensor([1.0, 2.0]), ag.ones(2))
        _raises(lambda: Bad.apply(d), "return None at that position instead")
        _raises(lambda: IntOut.apply(d), "gradient at position 1")


@pytest.mark.parametrize("mode", ["inplace", "copy", "modified_not_returned"])
def test_inplace_function_must_update_the_tangent_in_place(mode):
    fw = ag.autograd.forward_ad
    Scale, _, _ = _fn_classes(ag)
    tangent = ag.tensor([1.0, 2.0])
    if mode == "modified_not_returned":
        # (PyTorch compares the returned tensor's version with the given tangent's: at
        # version 1, the new tensor's version 0 differs from it, so the second check speaks)
        tangent.add_(0)
    with fw.dual_level():
        d = fw.make_dual(ag.tensor([1.0, -1.0]), tangent)
        if mode == "inplace":
            out = Scale.apply(d, mode)
            assert out is d and fw.unpack_dual(d).tangent is tangent
            assert tangent.tolist() == [3.0, 6.0] and d.tolist() == [3.0, -3.0]
        else:
            _raises(lambda: Scale.apply(d, mode),
                    "not modifying the forward mode gradients inplace" if mode == "copy"
                    else "not returning the forward mode gradients as-is")


@pytest.mark.parametrize("as_view", [False, True])
@pytest.mark.parametrize("how", ["view", "same", "copy", "other_view"])
def test_view_or_input_returned_needs_a_view_of_the_tangent(how, as_view):
    fw = ag.autograd.forward_ad
    _, Pick, _ = _fn_classes(ag)
    tangent = ag.tensor([1.0, 2.0, 3.0])
    with fw.dual_level():
        d = fw.make_dual(ag.tensor([4.0, 5.0, 6.0]), tangent)
        run = lambda: Pick.apply(d, how, as_view)  # noqa: E731
        if how == "view":
            _, o = run()
            t = fw.unpack_dual(o).tangent
            assert t._base is tangent
            assert t.tolist() == ([2.0, 3.0] if as_view else [1.0, 2.0, 3.0])
        elif how == "other_view":
            _raises(run, "not returning a view of the given grad input")
        else:
            _raises(run, r"forward is returning a view \(or an input as-is\) but the jvp is "
                         r"not returning a view")
    # without a tangent on the input, nothing is checked
    with fw.dual_level():
        Pick.apply(ag.tensor([4.0, 5.0, 6.0]), how, as_view)


def test_make_dual_refuses_duals():
    fw = ag.autograd.forward_ad
    with fw.dual_level():
        d = fw.make_dual(ag.rand(2), ag.rand(2))
        _raises(lambda: fw.make_dual(d, ag.rand(2)),
                "Making a dual Tensor based on a Tensor that already has a forward gradient "
                "at the same level 0")
        _raises(lambda: fw.make_dual(ag.rand(2), d),
                "Setting a forward grad that itself has a forward gradient at the same level")


def test_detach_inplace_drops_the_tangent():
    fw = ag.autograd.forward_ad
    with fw.dual_level():
        d = fw.make_dual(ag.tensor([1.0, 2.0]), ag.tensor([1.0, 1.0])).clone()
        assert fw.unpack_dual(d * 2).tangent.tolist() == [2.0, 2.0]
        d.detach_()
        assert fw.unpack_dual(d).tangent is None and fw.unpack_dual(d * 2).tangent is None


@pytest.mark.parametrize("op", ["eq_", "ne_", "lt_", "le_", "gt_", "ge_", "logical_and_",
                                "logical_or_", "logical_xor_"])
def test_comparison_in_place(op):
    ref = {"eq_": np.equal, "ne_": np.not_equal, "lt_": np.less, "le_": np.less_equal,
           "gt_": np.greater, "ge_": np.greater_equal, "logical_and_": np.logical_and,
           "logical_or_": np.logical_or, "logical_xor_": np.logical_xor}[op]
    a, b = np.array([0.0, 2.0, 3.0]), np.array([2.0, 2.0, 0.0])
    for dtype in (ag.float32, ag.int64, ag.bool_):
        x = ag.tensor(a, dtype=dtype)
        assert getattr(x, op)(ag.tensor(b, dtype=dtype)) is x
        assert x.dtype is dtype and x._version == 1
        np.testing.assert_array_equal(x.numpy(), ref(a.astype(dtype.np), b.astype(dtype.np)))
    # a result that requires grad gets a zero gradient; a dual tensor is allowed
    w = ag.tensor([1.0, -1.0], requires_grad=True)
    y = w * 3
    getattr(y, op)(ag.zeros(2))
    y.sum().backward()
    assert w.grad.tolist() == [0.0, 0.0]
    fw = ag.autograd.forward_ad
    with fw.dual_level():
        d = fw.make_dual(ag.tensor([1.0, 2.0]), ag.tensor([1.0, 1.0]))
        getattr(d, op)(ag.tensor([1.0, 3.0]))


def test_untyped_storage():
    x = ag.randn(5)
    v = x[:4].detach()
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert len(v.untyped_storage()) // v.element_size() == 5
    assert v.untyped_storage().nbytes() == 20
    assert ag.zeros(3).untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    fw = ag.autograd.forward_ad
    with fw.dual_level():
        d = fw.make_dual(x, ag.ones(5))
        assert d.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        p, _ = fw.unpack_dual(d)
        assert p.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def _scenario(T):
    """Every behaviour above in one run, as values to compare with PyTorch's."""
    fw = T.autograd.forward_ad
    out = []
    Scale, Pick, _ = _fn_classes(T)

    def err(fn):
        try:
            fn()
        except RuntimeError as e:
            return str(e)[:60]
        return None
    with fw.dual_level():
        for mode in ("inplace", "copy", "modified_not_returned"):
            t = T.tensor([1.0, 2.0])
            t.add_(0)
            d = fw.make_dual(T.tensor([1.0, -1.0]), t)
            out.append(err(lambda: Scale.apply(d, mode)))
        for how in ("view", "same", "copy", "other_view"):
            for as_view in (False, True):
                d = fw.make_dual(T.tensor([4.0, 5.0, 6.0]), T.tensor([1.0, 2.0, 3.0]))
                out.append(err(lambda: Pick.apply(d, how, as_view)))
        d = fw.make_dual(T.rand(2), T.rand(2))
        out.append(err(lambda: fw.make_dual(d, T.rand(2)))[:40])
        out.append(err(lambda: fw.make_dual(T.rand(2), d))[:40])
        c = d.clone()
        c.detach_()
        out.append(fw.unpack_dual(c).tangent is None)
    return out


def test_matches_torch(torch):
    assert _scenario(ag) == _scenario(torch)


VIEWS = {"select": lambda x: x[0], "t": lambda x: x.t(), "reshape": lambda x: x.reshape(6),
         "expand": lambda x: x.expand(4, 2, 3), "view": lambda x: x.view(3, 2),
         "narrow": lambda x: x.narrow(1, 0, 2), "unsqueeze": lambda x: x.unsqueeze(0)}


def _view_tangent(T, name):
    fw = T.autograd.forward_ad
    tangent = T.arange(6, dtype=T.float64).reshape(2, 3).clone()
    with fw.dual_level():
        d = fw.make_dual(T.ones(2, 3, dtype=T.float64), tangent)
        vt = fw.unpack_dual(VIEWS[name](d)).tangent
        is_view = vt._base is tangent
        values = vt.tolist()
        if name != "expand":  # (an expanded tensor cannot be written in place)
            vt.mul_(10)       # writes the input's tangent
        return is_view, values, tangent.tolist()


@pytest.mark.parametrize("name", VIEWS)
def test_view_tangent_is_that_view_of_the_input_tangent(name):
    is_view, values, after = _view_tangent(ag, name)
    t = np.arange(6.0).reshape(2, 3)
    assert is_view
    np.testing.assert_array_equal(values, VIEWS[name](ag.tensor(t)).numpy())
    if name != "expand":
        want = t.copy()
        view = {"select": want[0], "t": want.T, "reshape": want.reshape(6),
                "view": want.reshape(3, 2), "narrow": want[:, :2],
                "unsqueeze": want[None]}[name]
        view *= 10
        np.testing.assert_array_equal(after, want)


@pytest.mark.parametrize("name", VIEWS)
def test_view_tangent_matches_torch(torch, name):
    assert _view_tangent(ag, name) == _view_tangent(torch, name)


def test_view_of_a_view_input_needs_a_view_of_the_same_base():
    """The input is a view of a dual tensor, so its tangent is a view of that tangent: a jvp
    returning a view of a copy of it is refused with PyTorch's message."""
    fw = ag.autograd.forward_ad

    class Narrow(ag.autograd.Function):
        @staticmethod
        def forward(ctx, x, copy):
            ctx.copy = copy
            return x.narrow(0, 0, 2)

        @staticmethod
        def backward(ctx, g):
            raise NotImplementedError

        @staticmethod
        def jvp(ctx, xt, _):
            r = xt.narrow(0, 0, 2)
            return r.clone().view_as(r) if ctx.copy else r

    tangent = ag.ones(4, 4, dtype=ag.float64)
    with fw.dual_level():
        d = fw.make_dual(ag.rand(4, 4, dtype=ag.float64), tangent)
        out = Narrow.apply(d.view_as(d), False)
        assert fw.unpack_dual(out).tangent._base is tangent
        _raises(lambda: Narrow.apply(d.view_as(d), True),
                "not returning a view of the same base as the given grad input")


INPLACE_WRITES = {"copy_": lambda T, d: d.copy_(T.ones(2)), "fill_": lambda T, d: d.fill_(1.0),
                  "zero_": lambda T, d: d.zero_(), "eq_": lambda T, d: d.eq_(T.ones(2)),
                  "floor_": lambda T, d: d.floor_(), "setitem": lambda T, d: d.__setitem__(0, 5.0),
                  "mul_": lambda T, d: d.mul_(T.full((2,), 2.0))}


def _tangent_after_write(T, name):
    fw = T.autograd.forward_ad
    out = []
    with fw.dual_level():
        d = fw.make_dual(T.tensor([1.5, 2.5]), T.tensor([3.0, 4.0])).clone()
        INPLACE_WRITES[name](T, d)
        t = fw.unpack_dual(d).tangent
        out.append(None if t is None else t.tolist())
        p = T.tensor([1.5, 2.5])          # a tensor without a tangent gets none
        INPLACE_WRITES[name](T, p)
        out.append(fw.unpack_dual(p).tangent)
    return out


@pytest.mark.parametrize("name", INPLACE_WRITES)
def test_tangent_after_an_inplace_write(name):
    want = {"setitem": [0.0, 4.0], "mul_": [6.0, 8.0]}.get(name, [0.0, 0.0])
    assert _tangent_after_write(ag, name) == [want, None]


@pytest.mark.parametrize("name", INPLACE_WRITES)
def test_tangent_after_an_inplace_write_matches_torch(torch, name):
    assert _tangent_after_write(ag, name) == _tangent_after_write(torch, name)
