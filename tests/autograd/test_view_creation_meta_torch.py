"""In-place ops on views that autograd cannot rebase are refused, as PyTorch refuses them: a
view made under no_grad / inference_mode (and the views made from it), an output of a
multi-output view op (unbind, split, chunk), a view returned by a custom Function. The same
writes without autograd involved still go through to the base. Messages compared with PyTorch
where it is installed."""
import itertools
import re

import numpy as np
import pytest

import aotgrad
from aotgrad.testing import assert_close


def _error(fn):
    try:
        fn()
    except RuntimeError as e:
        return str(e)
    return None


def _strip_location(msg):
    """aotgrad appends the user's source line to an op's message."""
    return None if msg is None else re.sub(r"\s*\(at .*$", "", msg, flags=re.S)


def _make_view(mod, kind, base):
    if kind == "multi":
        return base.unbind()[0]
    if kind == "split":
        return base.split(1)[1]
    if kind == "chunk":
        return base.chunk(2)[0].t()
    if kind == "custom":
        class ViewOf(mod.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.view_as(x)

            @staticmethod
            def backward(ctx, g):
                return g
        return ViewOf.apply(base)
    if kind == "as_is":
        class Identity(mod.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def backward(ctx, g):
                return g
        return Identity.apply(base)
    return base.view_as(base)


def _case(mod, kind, grad_at_view, grad_at_write, requires_grad, write):
    base = mod.ones(2, 3, dtype=mod.float64, requires_grad=requires_grad).clone()
    with mod.set_grad_enabled(grad_at_view):
        v = _make_view(mod, kind, base)
    with mod.set_grad_enabled(grad_at_write):
        if write == "add_":
            return _error(lambda: v.add_(1))
        if write == "mul_other":
            w = mod.full(tuple(v.shape), 2.0, dtype=mod.float64, requires_grad=True)
            return _error(lambda: v.mul_(w))
        return _error(lambda: v.t_())


CASES = list(itertools.product(("default", "multi", "split", "chunk", "custom", "as_is"),
                               (True, False), (True, False), (True, False),
                               ("add_", "mul_other", "t_")))


@pytest.mark.parametrize("kind,grad_at_view,grad_at_write,requires_grad,write", CASES)
def test_inplace_on_view_error_matches_torch(torch, kind, grad_at_view, grad_at_write,
                                             requires_grad, write):
    ours = _case(aotgrad, kind, grad_at_view, grad_at_write, requires_grad, write)
    theirs = _case(torch, kind, grad_at_view, grad_at_write, requires_grad, write)
    assert (ours is None) == (theirs is None), (ours, theirs)
    if theirs is not None:
        assert _strip_location(ours).endswith(theirs), (ours, theirs)


@pytest.mark.parametrize("kind", ["multi", "split", "chunk"])
def test_multi_output_view_refused_where_autograd_records(kind):
    base = aotgrad.ones(2, 3, requires_grad=True).clone()
    v = _make_view(aotgrad, kind, base)
    with pytest.raises(RuntimeError, match="output of a function that returns multiple views"):
        v.mul_(2)
    # the same write where nothing requires grad reaches the base
    base = aotgrad.zeros(2, 3)
    base.unbind()[1].add_(5)
    assert base.tolist() == [[0, 0, 0], [5, 5, 5]]


def test_no_grad_view_of_view_names_the_node():
    x = aotgrad.zeros(2)
    with aotgrad.no_grad():
        y = x.view(2)
    y.requires_grad_(True)
    z = y.view(2)
    with pytest.raises(RuntimeError, match="Output 0 of View is a view of a view which was "
                                           "created in no_grad mode"):
        z.div_(2)


def test_inference_mode_view_refused():
    a = aotgrad.ones(2, 3, requires_grad=True).clone()
    with aotgrad.inference_mode():
        v = a.view_as(a)
    with pytest.raises(RuntimeError, match="created in inference mode and is being modified "
                                           "inplace in normal mode"):
        v.add_(1)


def test_custom_function_outputs_are_views():
    class Identity(aotgrad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g
    a = aotgrad.rand(1, 2)
    out = Identity.apply(a)
    assert out._is_view() and out is not a
    b = aotgrad.rand(1, requires_grad=True)
    with pytest.raises(RuntimeError, match="This view was created inside a custom Function"):
        out.add_(b)


def test_unsafe_split_pieces_may_be_modified():
    a = aotgrad.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], requires_grad=True)
    for split in (lambda t: t.unsafe_split(1), lambda t: t.unsafe_chunk(3),
                  lambda t: aotgrad.unsafe_split_with_sizes(t, (1, 2))):
        a.grad = None
        s = split(a * 1)
        assert not s[0]._is_view()
        s[0].mul_(s[1][:1] if s[1].shape[0] > 1 else s[1])
        s[0].sum().backward()
        # d/da of sum(a0 * a1) (elementwise): a1 for row 0, a0 for row 1, nothing for row 2
        assert_close(a.grad.numpy(), [[3, 4], [1, 2], [0, 0]], rtol=1e-7, atol=0, equal_nan=True)
    names = [split(a * 1)[0].grad_fn.name() for split in
             (lambda t: t.unsafe_split(1), lambda t: t.unsafe_split_with_sizes([1, 2]))]
    assert names == ["UnsafeSplitBackward0", "UnsafeSplitWithSizesBackward0"]


def test_split_with_sizes_is_split(torch):
    x = aotgrad.arange(6.0).reshape(3, 2)
    ours = [p.tolist() for p in x.split_with_sizes([1, 2])]
    theirs = [p.tolist() for p in torch.arange(6.0).reshape(3, 2).split_with_sizes([1, 2])]
    assert ours == theirs
    assert aotgrad.split_with_sizes(x, [2, 1], dim=0)[0].grad_fn is None


def _after_base_modified(mod, kind):
    """Backward through a view of `kind` after its base was modified in place (recorded)."""
    x = mod.rand(2, 3, dtype=mod.float64, requires_grad=True).clone()
    if kind == "no_grad":
        with mod.no_grad():
            v = x[1]
    elif kind == "default":
        v = x[1]
    else:
        v = _make_view(mod, kind, x)
    x.mul_(2)
    return _error(lambda: (v * 2).sum().backward())


@pytest.mark.parametrize("kind", ["default", "no_grad", "multi", "split", "custom", "as_is"])
def test_view_refused_after_its_base_was_modified(kind):
    msg = _after_base_modified(aotgrad, kind)
    if kind == "default":
        assert msg is None   # the view reads its value out of the base's new history
    else:
        assert msg is not None and "its base or another view of its base has been modified " \
                                   "inplace" in msg


@pytest.mark.parametrize("kind", ["default", "no_grad", "multi", "split", "custom", "as_is"])
def test_view_refused_after_its_base_was_modified_matches_torch(torch, kind):
    # PyTorch raises as the view's grad_fn is read (by the multiplication), aotgrad in the
    # backward: the same message either way
    ours, theirs = _after_base_modified(aotgrad, kind), _after_base_modified(torch, kind)
    assert (ours is None) == (theirs is None), (ours, theirs)
    assert ours is None or _strip_location(ours) == theirs, (ours, theirs)


def test_default_view_gradient_after_base_modified():
    root = aotgrad.tensor([1.0, 2.0, 3.0], requires_grad=True)
    x = root.clone()
    v = x[1:]
    x.mul_(aotgrad.tensor([5.0, 6.0, 7.0]))
    v.sum().backward()
    assert_close(root.grad.numpy(), [0.0, 6.0, 7.0], rtol=1e-7, atol=0, equal_nan=True)
