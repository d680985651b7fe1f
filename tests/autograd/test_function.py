"""autograd.Function: ctx API, node identity, errors, double backward, gradcheck."""
import numpy as np
import pytest

import aotgrad
from aotgrad.autograd import Function, gradcheck, gradgradcheck, once_differentiable
from aotgrad.testing import assert_close


def f64(*shape, requires_grad=True):
    return aotgrad.randn(*shape, dtype=aotgrad.float64, requires_grad=requires_grad)


class Cube(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        x, = ctx.saved_tensors
        return g * 3 * x * x


class Exp(Function):  # saves its output
    @staticmethod
    def forward(ctx, x):
        y = x.exp()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        y, = ctx.saved_tensors
        return g * y


class ScaleBy(Function):  # a non-tensor argument, stored on ctx
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, g):
        return g * ctx.k, None


class MulAdd(Function):  # two tensor inputs, two outputs
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b, a + b

    @staticmethod
    def backward(ctx, g_prod, g_sum):
        a, b = ctx.saved_tensors
        return g_prod * b + g_sum, g_prod * a + g_sum


def test_forward_backward_values_and_node():
    x = f64(4)
    y = Cube.apply(x)
    assert_close(y.detach().numpy(), x.detach().numpy() ** 3, rtol=1e-7, atol=0, equal_nan=True)
    assert y.requires_grad and y.grad_fn.name() == "CubeBackward"
    assert type(y.grad_fn).__name__ == "CubeBackward"
    assert "CubeBackward" in repr(y)
    (node, nr), = y.grad_fn.next_functions
    assert node.name() == "AccumulateGrad" and node.variable is x and nr == 0
    y.sum().backward()
    assert_close(x.grad.numpy(), 3 * x.detach().numpy() ** 2, rtol=1e-7, atol=0, equal_nan=True)


def test_ctx_is_the_node_saved_tensors_needs_input_grad():
    x = f64(3)
    c = aotgrad.randn(3, dtype=aotgrad.float64)
    y, s = MulAdd.apply(x, c)
    assert y.grad_fn is s.grad_fn and y.output_nr == 0 and s.output_nr == 1
    assert y.grad_fn.needs_input_grad == (True, False)
    a, b = y.grad_fn.saved_tensors
    np.testing.assert_array_equal(a.detach().numpy(), x.detach().numpy())
    assert a is x  # a saved leaf comes back as itself
    assert y.grad_fn.next_functions[1] == (None, 0)
    (y * 2 + s).sum().backward()
    assert_close(x.grad.numpy(), 2 * c.numpy() + 1, rtol=1e-7, atol=0, equal_nan=True)


def test_non_tensor_args_and_extra_nones():
    x = f64(3)
    y = ScaleBy.apply(x, 2.5)
    assert y.grad_fn.next_functions[1] == (None, 0)
    assert y.grad_fn.needs_input_grad == (True, False)
    y.sum().backward()
    assert_close(x.grad.numpy(), np.full(3, 2.5), rtol=1e-7, atol=0, equal_nan=True)

    class WithDefault(Function):
        @staticmethod
        def forward(ctx, x, scale=3.0, shift=None):
            return x * scale

        @staticmethod
        def backward(ctx, g):
            return g * 3.0, None, None, None  # an extra trailing None is allowed

    z = f64(2)
    WithDefault.apply(z).sum().backward()
    assert_close(z.grad.numpy(), [3.0, 3.0], rtol=1e-7, atol=0, equal_nan=True)
    z2 = f64(2)
    WithDefault.apply(z2, scale=3.0).sum().backward()  # kwargs bind to forward's signature
    assert_close(z2.grad.numpy(), [3.0, 3.0], rtol=1e-7, atol=0, equal_nan=True)


def test_output_saved_and_no_grad_call():
    x = f64(3)
    y = Exp.apply(x)
    (saved,) = y.grad_fn.saved_tensors
    assert saved.grad_fn is y.grad_fn
    y.sum().backward()
    assert_close(x.grad.numpy(), np.exp(x.detach().numpy()), rtol=1e-7, atol=0, equal_nan=True)
    with aotgrad.no_grad():
        z = Exp.apply(x)
    assert not z.requires_grad and z.grad_fn is None
    w = Exp.apply(aotgrad.randn(2))
    assert not w.requires_grad


def test_saved_tensor_version_check():
    x = f64(3)
    h = x * 1
    y = Cube.apply(h)
    with aotgrad.no_grad():
        h.add_(1)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation.*is at version 1; "
                                           r"expected version 0"):
        y.sum().backward()


def test_backward_twice_and_retain_graph():
    x = f64(3)
    y = Cube.apply(x)
    y.sum().backward(retain_graph=True)
    y.sum().backward()
    assert_close(x.grad.numpy(), 6 * x.detach().numpy() ** 2, rtol=1e-7, atol=0, equal_nan=True)
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.sum().backward()


def test_mark_dirty_inplace():
    class MulInplace(Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = f64(3)
    h = x.clone()
    before = h._version
    out = MulInplace.apply(h)
    assert out is h and h.grad_fn.name() == "MulInplaceBackward" and h._version > before
    assert_close(h.detach().numpy(), 2 * x.detach().numpy(), rtol=1e-7, atol=0, equal_nan=True)
    (h * h).sum().backward()
    assert_close(x.grad.numpy(), 8 * x.detach().numpy(), rtol=1e-7, atol=0, equal_nan=True)

    leaf = f64(3)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad has been used in "
                                           "an in-place operation"):
        MulInplace.apply(leaf)

    class Forgot(Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1)
            ctx.mark_dirty(x)
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(RuntimeError, match="marked as dirty .* were not returned"):
        Forgot.apply(f64(2).clone())


def test_returned_input_becomes_new_tensor():
    class Identity(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return 2 * g

    x = f64(3)
    y = Identity.apply(x)
    assert y is not x and x.grad_fn is None and y.grad_fn.name() == "IdentityBackward"
    y.sum().backward()
    assert_close(x.grad.numpy(), [2.0, 2.0, 2.0], rtol=1e-7, atol=0, equal_nan=True)


def test_mark_non_differentiable_and_integer_outputs():
    class SortLike(Function):
        @staticmethod
        def forward(ctx, x):
            idx = x.argsort()
            mask = (x > 0).double()
            ctx.mark_non_differentiable(mask)
            ctx.seen = None
            return x * 2, idx, mask

        @staticmethod
        def backward(ctx, g, g_idx, g_mask):
            ctx.seen = (g_idx, g_mask)
            return g * 2

    x = f64(4)
    y, idx, mask = SortLike.apply(x)
    assert y.requires_grad and not idx.requires_grad and idx.grad_fn is None
    assert not mask.requires_grad and mask.grad_fn is None
    y.sum().backward()
    g_idx, g_mask = y.grad_fn.seen
    # materialized zeros for outputs that got no gradient (like PyTorch)
    assert g_idx.dtype == aotgrad.int64 and not g_idx.numpy().any()
    np.testing.assert_array_equal(g_mask.numpy(), np.zeros(4))
    assert_close(x.grad.numpy(), np.full(4, 2.0), rtol=1e-7, atol=0, equal_nan=True)


def test_set_materialize_grads_false():
    class Two(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            ctx.got = (g1, g2)
            out = 0
            if g1 is not None:
                out = out + 2 * g1
            if g2 is not None:
                out = out + 3 * g2
            return out

    x = f64(3)
    a, b = Two.apply(x)
    a.sum().backward()
    g1, g2 = a.grad_fn.got
    assert g2 is None and g1 is not None
    assert_close(x.grad.numpy(), np.full(3, 2.0), rtol=1e-7, atol=0, equal_nan=True)


def test_non_tensor_output_gets_none_grad():
    class WithInfo(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, "info"

        @staticmethod
        def backward(ctx, g, g_info):
            assert g_info is None
            return g * 2

    x = f64(2)
    y, info = WithInfo.apply(x)
    assert info == "info"
    y.sum().backward()
    assert_close(x.grad.numpy(), [2.0, 2.0], rtol=1e-7, atol=0, equal_nan=True)


def test_wrong_number_of_grads():
    class TooMany(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g, g

    with pytest.raises(RuntimeError, match=r"function TooManyBackward returned an incorrect "
                                           r"number of gradients \(expected 1, got 2\)"):
        TooMany.apply(f64(3)).sum().backward()

    class TooFew(Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g

    with pytest.raises(RuntimeError, match=r"expected 2, got 1"):
        TooFew.apply(f64(3), f64(3)).sum().backward()


def test_wrong_shape_grad_and_grad_for_non_tensor():
    class BadShape(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g[:2]

    with pytest.raises(RuntimeError, match=r"Function BadShapeBackward returned an invalid "
                                           r"gradient at index 0 - got \[2\] but expected shape "
                                           r"compatible with \[3\]"):
        BadShape.apply(f64(3)).sum().backward()

    class GradForConst(Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g, g

    with pytest.raises(RuntimeError, match="returned a gradient different than None at position "
                                           "2, but the corresponding forward input was not a "
                                           "Variable"):
        GradForConst.apply(f64(3), 2.0).sum().backward()

    class NotATensor(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return 3

    with pytest.raises(RuntimeError, match=r"expected Variable or None \(got int\)"):
        NotATensor.apply(f64(3)).sum().backward()


def test_missing_methods_and_legacy_use():
    class NoBackward(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

    with pytest.raises(NotImplementedError, match="You must implement either the backward or "
                                                  "vjp method"):
        NoBackward.apply(f64(2)).sum().backward()

    class NoForward(Function):
        pass

    with pytest.raises(NotImplementedError, match="You must implement the forward function"):
        NoForward.apply(f64(2))
    with pytest.warns(DeprecationWarning, match="should not be instantiated"):
        inst = Cube()
    with pytest.raises(RuntimeError, match="Legacy autograd function with non-static forward"):
        inst(f64(2))

    class SavesInt(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x, 3)
            return x

    with pytest.raises(TypeError, match="save_for_backward can only save variables, but "
                                        "argument 1 is of type int"):
        SavesInt.apply(f64(2))


def test_none_grad_for_optional_input():
    class Affine(Function):
        @staticmethod
        def forward(ctx, x, w, b=None):
            ctx.save_for_backward(x, w)
            out = x * w
            return out if b is None else out + b

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            gx = g * w if ctx.needs_input_grad[0] else None
            gw = g * x if ctx.needs_input_grad[1] else None
            return gx, gw, None

    x, w = f64(3), aotgrad.randn(3, dtype=aotgrad.float64)
    Affine.apply(x, w, None).sum().backward()
    assert_close(x.grad.numpy(), w.numpy(), rtol=1e-7, atol=0, equal_nan=True)
    assert w.grad is None


def test_double_backward_create_graph():
    x = f64(3)
    y = Cube.apply(x)
    g, = aotgrad.autograd.grad(y.sum(), x, create_graph=True)
    assert_close(g.detach().numpy(), 3 * x.detach().numpy() ** 2, rtol=1e-7, atol=0, equal_nan=True)
    assert g.requires_grad
    gg, = aotgrad.autograd.grad(g.sum(), x)
    assert_close(gg.numpy(), 6 * x.detach().numpy(), rtol=1e-7, atol=0, equal_nan=True)
    # the saved output of Exp reconnects to the node itself
    z = f64(2)
    e = Exp.apply(z)
    g1, = aotgrad.autograd.grad(e.sum(), z, create_graph=True)
    g2, = aotgrad.autograd.grad(g1.sum(), z)
    assert_close(g2.numpy(), np.exp(z.detach().numpy()), rtol=1e-7, atol=0, equal_nan=True)


def test_once_differentiable():
    class Square(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 2

        @staticmethod
        @once_differentiable
        def backward(ctx, g):
            x, = ctx.saved_tensors
            assert not aotgrad.is_grad_enabled()
            return 2 * x * g

    x = f64(3)
    y = Square.apply(x)
    g, = aotgrad.autograd.grad((y * y).sum(), x, create_graph=True)
    assert_close(g.detach().numpy(), 4 * x.detach().numpy() ** 3, rtol=1e-7, atol=0, equal_nan=True)
    assert g.requires_grad
    with pytest.raises(RuntimeError, match="trying to differentiate twice a function that was "
                                           "marked with @once_differentiable"):
        g.sum().backward()
    # first-order use is unaffected
    Square.apply(x).sum().backward()
    assert_close(x.grad.numpy(), 2 * x.detach().numpy(), rtol=1e-7, atol=0, equal_nan=True)


def test_hooks_on_function_node():
    x = f64(3)
    y = Cube.apply(x)
    seen = []
    y.grad_fn.register_prehook(lambda go: seen.append("pre") or (go[0] * 2,))
    y.grad_fn.register_hook(lambda gi, go: seen.append("post"))
    y.register_hook(lambda g: seen.append("tensor"))
    y.sum().backward()
    assert seen == ["tensor", "pre", "post"]
    assert_close(x.grad.numpy(), 6 * x.detach().numpy() ** 2, rtol=1e-7, atol=0, equal_nan=True)


def test_setup_context_style():
    class Sin(Function):
        @staticmethod
        def forward(x):
            return x.sin()

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * x.cos()

    x = f64(4)
    assert gradcheck(Sin.apply, (x,))
    Sin.apply(x).sum().backward()
    assert_close(x.grad.numpy(), np.cos(x.detach().numpy()), rtol=1e-7, atol=0, equal_nan=True)


def test_float32_stays_float32():
    x = aotgrad.randn(3, requires_grad=True)
    y = Cube.apply(x)
    assert y.dtype == aotgrad.float32
    y.sum().backward()
    assert x.grad.dtype == aotgrad.float32


def test_gradcheck_custom_functions():
    x, y = f64(3), f64(3)
    assert gradcheck(Cube.apply, (x,))
    assert gradcheck(Exp.apply, (x,))
    assert gradcheck(lambda a: ScaleBy.apply(a, 1.7), (x,))
    assert gradcheck(MulAdd.apply, (x, y))
    assert gradgradcheck(Cube.apply, (x,))
    assert gradgradcheck(MulAdd.apply, (x, y))


def test_matches_torch(torch):
    xs = np.random.randn(5)

    class TCube(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * 3 * x * x

    tx = torch.tensor(xs, requires_grad=True)
    tg, = torch.autograd.grad(TCube.apply(tx).sin().sum(), tx, create_graph=True)
    tgg, = torch.autograd.grad(tg.sum(), tx)
    ax = aotgrad.tensor(xs, requires_grad=True)
    ag, = aotgrad.autograd.grad(Cube.apply(ax).sin().sum(), ax, create_graph=True)
    agg, = aotgrad.autograd.grad(ag.sum(), ax)
    assert_close(ag.detach().numpy(), tg.detach().numpy(), rtol=1e-12, atol=0, equal_nan=True)
    assert_close(agg.numpy(), tgg.numpy(), rtol=1e-10, atol=0, equal_nan=True)
    assert TCube.apply(tx).grad_fn.name() == "TCubeBackward"


def test_compiled_function_uses_custom_backward():
    """Under compile the tracer runs forward and the user's backward on traced tensors."""
    calls = []

    class CubeTraced(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            calls.append(type(g))
            x, = ctx.saved_tensors
            return g * 3 * x * x

    def f(x):
        return CubeTraced.apply(x).sin().sum()

    xs = np.random.randn(5)
    x_eager = aotgrad.tensor(xs, requires_grad=True)
    f(x_eager).backward()
    x_comp = aotgrad.tensor(xs, requires_grad=True)
    aotgrad.compile(f)(x_comp).backward()
    assert_close(x_comp.grad.numpy(), x_eager.grad.numpy(), rtol=1e-10, atol=0, equal_nan=True)
    assert_close(x_eager.grad.numpy(), 3 * xs ** 2 * np.cos(xs ** 3), rtol=1e-12, atol=0,
                 equal_nan=True)
    assert len(calls) >= 2  # once eagerly, once while tracing the backward


def test_vjp_is_an_alias_of_backward():
    class Neg(Function):
        @staticmethod
        def forward(ctx, x):
            return -x

        @staticmethod
        def vjp(ctx, g):
            return -g

    x = f64(3)
    assert gradcheck(Neg.apply, (x,))
