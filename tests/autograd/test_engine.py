"""The eager autograd engine: graph structure, backward/grad, hooks, modes, version
counters, higher-order gradients and bad inputs, with PyTorch's semantics (and, where
installed, PyTorch itself as the oracle)."""
import gc
import math
import re
import warnings
import weakref

import numpy as np
import pytest

import aotgrad as ag
from aotgrad import autograd
from aotgrad.testing import assert_close


def leaf(*values, dtype=None):
    return ag.tensor(list(values) if len(values) > 1 else values[0], dtype=dtype,
                     requires_grad=True)


# ---- requires_grad, is_leaf, grad_fn -------------------------------------------------------
def test_requires_grad_propagation_and_is_leaf():
    a, b = leaf(1., 2.), ag.tensor([3., 4.])
    assert a.requires_grad and a.is_leaf and a.grad_fn is None
    assert not b.requires_grad and b.is_leaf
    c = a * b
    assert c.requires_grad and not c.is_leaf and c.grad_fn is not None
    d = b * 2
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None
    e = (a > 1)
    assert not e.requires_grad and e.is_leaf  # comparisons are not differentiable
    assert not a.argmax().requires_grad


def test_only_float_tensors_can_require_grad():
    with pytest.raises(RuntimeError, match="floating point"):
        ag.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError, match="floating point"):
        ag.tensor([1, 2]).requires_grad_()


def test_requires_grad_():
    x = ag.ones(2)
    assert x.requires_grad_() is x and x.requires_grad
    x.requires_grad_(False)
    assert not x.requires_grad
    y = leaf(1., 2.) * 2
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf"):
        y.requires_grad_(False)


GRAD_FN_NAMES = [  # (expression, PyTorch's grad_fn name)
    (lambda a, b: a + b, "AddBackward0"), (lambda a, b: a - b, "SubBackward0"),
    (lambda a, b: a * b, "MulBackward0"), (lambda a, b: a / b, "DivBackward0"),
    (lambda a, b: a ** 2, "PowBackward0"), (lambda a, b: a ** b, "PowBackward1"),
    (lambda a, b: 2 ** a, "PowBackward2"), (lambda a, b: -a, "NegBackward0"),
    (lambda a, b: a.exp(), "ExpBackward0"), (lambda a, b: a.log(), "LogBackward0"),
    (lambda a, b: a.tanh(), "TanhBackward0"), (lambda a, b: a.sigmoid(), "SigmoidBackward0"),
    (lambda a, b: a.sqrt(), "SqrtBackward0"), (lambda a, b: a.abs(), "AbsBackward0"),
    (lambda a, b: a.sum(), "SumBackward0"), (lambda a, b: a.sum(0), "SumBackward1"),
    (lambda a, b: a.mean(), "MeanBackward0"), (lambda a, b: a.mean(0), "MeanBackward1"),
    (lambda a, b: a @ b.t(), "MmBackward0"), (lambda a, b: a.reshape(-1), "ViewBackward0"),
    (lambda a, b: a.view(4), "ViewBackward0"), (lambda a, b: a.t(), "TBackward0"),
    (lambda a, b: a.permute(1, 0), "PermuteBackward0"),
    (lambda a, b: a.transpose(0, 1), "TransposeBackward0"),
    (lambda a, b: a.unsqueeze(0), "UnsqueezeBackward0"),
    (lambda a, b: a.expand(3, 2, 2), "ExpandBackward0"),
    (lambda a, b: a.clone(), "CloneBackward0"), (lambda a, b: a.max(), "MaxBackward1"),
    (lambda a, b: a.max(0).values, "MaxBackward0"), (lambda a, b: a.min(), "MinBackward1"),
    (lambda a, b: a.amax(0), "AmaxBackward0"), (lambda a, b: a.softmax(0), "SoftmaxBackward0"),
    (lambda a, b: a.log_softmax(0), "LogSoftmaxBackward0"),
    (lambda a, b: ag_or(a).cat([a, b]), "CatBackward0"),
    (lambda a, b: ag_or(a).stack([a, b]), "StackBackward0"),
    (lambda a, b: ag_or(a).where(a > 0, a, b), "WhereBackward0"),
    (lambda a, b: a.relu(), "ReluBackward0"), (lambda a, b: a.cumsum(0), "CumsumBackward0"),
    (lambda a, b: a.tril(), "TrilBackward0"), (lambda a, b: a.triu(), "TriuBackward0"),
    (lambda a, b: a.sort(0).values, "SortBackward0"),
    (lambda a, b: a.topk(1).values, "TopkBackward0"),
    (lambda a, b: a.logsumexp(0), "LogsumexpBackward0"),
    (lambda a, b: a.var(), "VarBackward0"), (lambda a, b: a.std(), "StdBackward0"),
    (lambda a, b: a.prod(), "ProdBackward0"), (lambda a, b: a.prod(0), "ProdBackward1"),
    (lambda a, b: a.double(), "ToCopyBackward0"), (lambda a, b: a.repeat(2, 1), "RepeatBackward0"),
    (lambda a, b: a.flip(0), "FlipBackward0"), (lambda a, b: a.masked_fill(a > 0, 0.), "MaskedFillBackward0"),
    (lambda a, b: a.clamp(0, 1), "ClampBackward1"), (lambda a, b: a.squeeze(), "SqueezeBackward0"),
    (lambda a, b: ag_or(a).maximum(a, b), "MaximumBackward0"),
    (lambda a, b: a.gather(0, ag_or(a).tensor([[0, 1]])), "GatherBackward0"),
    (lambda a, b: a.index_select(0, ag_or(a).tensor([1])), "IndexSelectBackward0"),
]


def ag_or(t):
    return ag if isinstance(t, ag.Tensor) else __import__("torch")


@pytest.mark.parametrize("i", range(len(GRAD_FN_NAMES)))
def test_grad_fn_names_like_pytorch(i):
    fn, name = GRAD_FN_NAMES[i]
    a, b = leaf([1., -2.], [3., 4.]), leaf([0.5, 1.5], [2., -1.])
    assert fn(a, b).grad_fn.name() == name


def test_grad_fn_names_match_torch(torch):
    for fn, name in GRAD_FN_NAMES:
        a = torch.tensor([[1., -2.], [3., 4.]], requires_grad=True)
        b = torch.tensor([[0.5, 1.5], [2., -1.]], requires_grad=True)
        assert type(fn(a, b).grad_fn).__name__ == name


def test_next_functions_and_accumulate_grad():
    a, b = leaf(1., 2.), leaf(3., 4.)
    c = a * b
    (n0, i0), (n1, i1) = c.grad_fn.next_functions
    assert n0.name() == "AccumulateGrad" and n0.variable is a and i0 == 0
    assert n1.variable is b and i1 == 0
    # the same leaf always flows into the same AccumulateGrad while it is alive
    d = a + 1
    assert d.grad_fn.next_functions[0][0] is c.grad_fn.next_functions[0][0]
    # inputs that do not require grad have no next function
    e = a * ag.tensor([1., 1.])
    assert e.grad_fn.next_functions[1] == (None, 0)
    # a chain
    f = (a * b).exp()
    assert f.grad_fn.next_functions[0][0] is not None
    assert f.grad_fn.next_functions[0][0].name() == "MulBackward0"


def test_next_functions_like_torch(torch):
    def shape(fn):
        return tuple((None if n is None else n.name() if isinstance(n, autograd.Node) else
                      type(n).__name__, i) for n, i in fn.next_functions)
    for M in (ag, torch):
        a = M.tensor([1., 2.], requires_grad=True)
        y = (a.exp() * 3 + a).sum()
        s = shape(y.grad_fn)
        assert s == (("AddBackward0", 0),)
        add = y.grad_fn.next_functions[0][0]
        assert shape(add) == (("MulBackward0", 0), ("AccumulateGrad", 0))


def test_calling_a_node_returns_input_grads():
    a, b = leaf(1., 2.), leaf(3., 5.)
    c = a * b
    ga, gb = c.grad_fn(ag.tensor([1., 10.]))
    np.testing.assert_array_equal(ga.detach().numpy(), [3., 50.])
    np.testing.assert_array_equal(gb.detach().numpy(), [1., 20.])
    assert ga.requires_grad  # like PyTorch: called under grad mode, with b requiring grad
    s = (a * 2).sum()
    g = s.grad_fn(ag.tensor(2.))  # one gradient: the tensor itself, as PyTorch returns it
    np.testing.assert_array_equal(g.detach().numpy(), [2., 2.])
    assert a.grad is None and b.grad is None


# ---- backward ------------------------------------------------------------------------------
def test_backward_accumulates_into_grad():
    x = leaf(1., 2., 3.)
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2., 4., 6.])
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [5., 7., 9.])
    x.grad = None
    x.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1., 1., 1.])
    assert x.grad.grad_fn is None and not x.grad.requires_grad


def test_backward_with_gradient_argument():
    x = leaf(1., 2.)
    y = x * x
    y.backward(ag.tensor([1., 0.5]))
    np.testing.assert_array_equal(x.grad.numpy(), [2., 2.])
    z = leaf([1., 2.], [3., 4.])
    (z * 2).backward(gradient=ag.ones(2, 2))
    np.testing.assert_array_equal(z.grad.numpy(), np.full((2, 2), 2.))


def test_autograd_backward_function():
    x, y = leaf(1., 2.), leaf(3.)
    autograd.backward([(x * 2).sum(), (y * y).sum()])
    np.testing.assert_array_equal(x.grad.numpy(), [2., 2.])
    np.testing.assert_array_equal(y.grad.numpy(), 6.)
    autograd.backward(x * y, grad_tensors=ag.tensor([1., 2.]))
    np.testing.assert_array_equal(x.grad.numpy(), [5., 8.])
    # inputs= restricts accumulation
    a, b = leaf(1.), leaf(2.)
    (a * b).backward(inputs=[a])
    assert a.grad.item() == 2. and b.grad is None


def test_diamond_graph_waits_for_all_grads():
    order = []
    x = leaf(2.)
    h = x * 3
    h.register_hook(lambda g: order.append(("h", g.item())))
    a, b = h.exp(), h * h
    y = a + b
    y.backward()
    # h's hook ran once, with the sum of both branches
    assert len(order) == 1 and order[0][1] == pytest.approx(math.exp(6.) + 12., rel=1e-6)
    assert x.grad.item() == pytest.approx(3 * (math.exp(6.) + 12.), rel=1e-6)


def test_deep_diamond_and_reused_leaf():
    x = leaf(0.5, 1.5)
    y = x
    for _ in range(5):
        y = y * x + y
    y.sum().backward()
    # y_k = y_{k-1} (x + 1): y_5 = x (x+1)^5, dy/dx = (x+1)^5 + 5x(x+1)^4
    xs = np.array([0.5, 1.5])
    assert_close(x.grad.numpy(), (xs + 1) ** 5 + 5 * xs * (xs + 1) ** 4, rtol=1e-6, atol=0,
                 equal_nan=True, check_dtype=False)


def test_second_backward_raises_after_free():
    x = leaf(1., 2.)
    y = (x.exp() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        y.backward()


def test_second_backward_raises_like_torch(torch):
    for M in (ag, torch):
        x = M.tensor([1., 2.], requires_grad=True)
        y = (x.exp() * x).sum()
        y.backward()
        with pytest.raises(RuntimeError, match="Trying to backward through the graph a second"):
            y.backward()


def test_retain_graph_allows_second_backward():
    x = leaf(1., 2.)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [4., 8.])


def test_saved_tensors_are_freed():
    x = leaf(1., 2.)
    y = x.exp()
    node = y.grad_fn
    y.sum().backward()
    assert all(s.value is None for s in node._saved)
    with pytest.raises(RuntimeError, match="after they have already been freed"):
        node.saved_tensors


def test_graph_without_saved_tensors_can_backward_twice():
    x = leaf(1., 2.)
    y = (x + 1).sum()  # add and sum save nothing, like PyTorch
    y.backward()
    y.backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2., 2.])


def test_non_leaf_grad_is_none_with_warning():
    x = leaf(1., 2.)
    y = x * 2
    y.sum().backward()
    with pytest.warns(UserWarning, match="is not a leaf Tensor"):
        assert y.grad is None


def test_retain_grad():
    x = leaf(1., 2.)
    y = x * 2
    y.retain_grad()
    assert y.retains_grad
    z = (y * y).sum()
    z.backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(y.grad.numpy(), [4., 8.])
    np.testing.assert_array_equal(x.grad.numpy(), [8., 16.])


def test_retain_grad_accumulates_like_torch(torch):
    res = []
    for M in (ag, torch):
        x = M.tensor([1., 2.], requires_grad=True)
        y = x * 2
        y.retain_grad()
        (y * y).sum().backward(retain_graph=True)
        (y * y).sum().backward()
        res.append((y.grad.detach().numpy().copy(), x.grad.detach().numpy().copy()))
    np.testing.assert_array_equal(res[0][0], res[1][0])
    np.testing.assert_array_equal(res[0][1], res[1][1])


def test_non_scalar_backward_needs_gradient():
    x = leaf(1., 2.)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar"):
        (x * 2).backward()


def test_backward_gradient_shape_mismatch():
    x = leaf(1., 2.)
    with pytest.raises(RuntimeError, match=r"Mismatch in shape.*\[3\].*\[2\]"):
        (x * 2).backward(ag.ones(3))


def test_backward_gradient_of_other_dtype_is_cast_like_torch():
    x = leaf(1., 2.)
    (x * 2).backward(ag.tensor([1, 3]))
    np.testing.assert_array_equal(x.grad.numpy(), [2., 6.])
    assert x.grad.dtype is ag.float32


def test_wrong_dtypes_raise_clear_errors():
    with pytest.raises(RuntimeError, match="same dtype.*float32 != float64"):
        ag.ones(2, 3) @ ag.ones(3, 2, dtype=ag.float64)
    with pytest.raises(RuntimeError, match="int64 for index, got float32"):
        ag.ones(2, 3).gather(1, ag.zeros(2, 1))
    with pytest.raises(IndexError, match="tensors used as indices must be long"):
        ag.ones(3)[ag.tensor([0.])]


def test_backward_on_tensor_without_grad():
    with pytest.raises(RuntimeError, match="does not require grad and does not have a grad_fn"):
        ag.ones(2).sum().backward()


def test_grad_assignment_checks():
    x = leaf(1., 2.)
    with pytest.raises(RuntimeError, match="different size"):
        x.grad = ag.ones(3)
    with pytest.raises(RuntimeError, match="different type"):
        x.grad = ag.ones(2, dtype=ag.float64)


# ---- hooks ---------------------------------------------------------------------------------
def test_register_hook_can_replace_grad_and_be_removed():
    x = leaf(1., 2.)
    seen = []
    h1 = x.register_hook(lambda g: seen.append(g.numpy().copy()))
    h2 = x.register_hook(lambda g: g * 10)
    (x * 3).sum().backward()
    np.testing.assert_array_equal(seen[0], [3., 3.])
    np.testing.assert_array_equal(x.grad.numpy(), [30., 30.])
    h2.remove()
    x.grad = None
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3., 3.])
    h1.remove()
    x.grad = None
    (x * 3).sum().backward()
    assert len(seen) == 2


def test_hook_on_intermediate_changes_upstream_grad():
    x = leaf(1., 2.)
    y = x * 2
    y.register_hook(lambda g: g + 1)
    (y * y).sum().backward()
    # dL/dy = 2y = [4, 8] -> hook -> [5, 9] -> dL/dx = 2 * that
    np.testing.assert_array_equal(x.grad.numpy(), [10., 18.])


def test_hook_requires_grad():
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        ag.ones(2).register_hook(lambda g: g)


def test_post_accumulate_grad_hook():
    x = leaf(1., 2.)
    calls = []

    def hook(t):
        calls.append(t.grad.numpy().copy())
        assert t is x

    h = x.register_post_accumulate_grad_hook(hook)
    (x * 2).sum().backward()
    (x * 2).sum().backward()
    np.testing.assert_array_equal(calls[0], [2., 2.])
    np.testing.assert_array_equal(calls[1], [4., 4.])
    h.remove()
    (x * 2).sum().backward()
    assert len(calls) == 2
    with pytest.raises(RuntimeError, match="non-leaf"):
        (x * 2).register_post_accumulate_grad_hook(hook)


def test_node_hooks():
    x = leaf(1., 2.)
    y = x * 3
    seen = {}

    def pre(go):
        seen["pre"] = go[0].numpy().copy()

    def post(gi, go):
        seen["post"] = gi[0].numpy().copy()
        # a post hook may replace the input grads (one per input, like PyTorch: x * 3 has
        # two, the constant's None)
        return (gi[0] * 2,) + tuple(gi[1:])
    y.grad_fn.register_prehook(pre)
    y.grad_fn.register_hook(post)
    y.sum().backward()
    np.testing.assert_array_equal(seen["pre"], [1., 1.])
    np.testing.assert_array_equal(seen["post"], [3., 3.])
    np.testing.assert_array_equal(x.grad.numpy(), [6., 6.])


# ---- detach, no_grad and friends -----------------------------------------------------------
def test_detach_shares_memory_and_version():
    x = leaf(1., 2.)
    d = x.detach()
    assert not d.requires_grad and d.grad_fn is None
    d[0] = 5.  # writes through to x
    assert x[0].item() == 5.
    assert x._version == d._version == 1


def test_detach_():
    x = leaf(1., 2.)
    y = x * 2
    assert y.detach_() is y
    assert y.grad_fn is None and not y.requires_grad and y.is_leaf


def test_detach_like_torch(torch):
    for M in (ag, torch):
        x = M.tensor([1., 2.], requires_grad=True)
        y = x.exp()
        d = y.detach()
        d.add_(1.)  # modifies y's storage, bumping the shared version
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


@pytest.mark.parametrize("mode", ["ctx", "decorator", "bare_decorator"])
def test_no_grad(mode):
    x = leaf(1., 2.)
    if mode == "ctx":
        with ag.no_grad():
            y = x * 2
    elif mode == "decorator":
        y = ag.no_grad()(lambda: x * 2)()
    else:
        @ag.no_grad
        def f():
            return x * 2
        y = f()
    assert not y.requires_grad and y.grad_fn is None
    assert ag.is_grad_enabled()


def test_enable_grad_inside_no_grad():
    x = leaf(1., 2.)
    with ag.no_grad():
        with ag.enable_grad():
            y = x * 2
        z = x * 2

        @ag.enable_grad()
        def f():
            return x * 2
        w = f()
    assert y.requires_grad and not z.requires_grad and w.requires_grad


def test_set_grad_enabled():
    x = leaf(1.)
    with ag.set_grad_enabled(False):
        assert not (x * 2).requires_grad
        with ag.set_grad_enabled(True):
            assert (x * 2).requires_grad
    assert ag.is_grad_enabled()
    ag.set_grad_enabled(False)
    try:
        assert not ag.is_grad_enabled() and not (x * 2).requires_grad
    finally:
        ag.set_grad_enabled(True)
    f = ag.set_grad_enabled(False)(lambda: x * 2)
    assert ag.is_grad_enabled()  # decorating does not flip the mode
    assert not f().requires_grad and ag.is_grad_enabled()


def test_inference_mode():
    x = leaf(1., 2.)
    with ag.inference_mode():
        y = x * 2
        assert ag.is_inference_mode_enabled() and not ag.is_grad_enabled()
    assert not y.requires_grad and y.is_inference()
    assert not x.is_inference() and ag.is_grad_enabled()

    @ag.inference_mode()
    def f():
        return x * 2
    assert f().is_inference()

    @ag.inference_mode
    def g():
        return x * 2
    assert g().is_inference()
    with ag.inference_mode(False):
        assert (x * 2).requires_grad


def test_grad_mode_restored_after_exception():
    with pytest.raises(ValueError):
        with ag.no_grad():
            raise ValueError
    assert ag.is_grad_enabled()


# ---- version counters ----------------------------------------------------------------------
def test_inplace_on_saved_tensor_raises_with_op_and_versions():
    x = leaf(1., 2.)
    y = x * 1
    z = y.exp()          # saves its output z
    w = y * y            # saves y
    y.add_(1)            # y: version 0 -> 1
    # like PyTorch, the message names the tensor's current grad_fn (the in-place op's),
    # by its forward op's name ("Add" for AddBackward0)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation: \[aotgrad\."
                                           r"FloatTensor \[2\]\], which is output 0 of "
                                           r"Add, is at version 1; expected version 0 "
                                           r"instead"):
        w.sum().backward()
    del z


def test_inplace_error_message_like_torch(torch):
    msgs = []
    for M in (ag, torch):
        x = M.tensor([1., 2.], requires_grad=True)
        y = x.exp()
        z = y.sin()
        y.mul_(2)
        with pytest.raises(RuntimeError) as ei:
            z.sum().backward()
        msgs.append(re.sub(r"Backward\d", "", str(ei.value).split(" Hint")[0]))
    assert msgs[0] == msgs[1].replace("torch.", "aotgrad.")


def test_inplace_on_output_saved_by_its_own_op():
    x = leaf(1., 2.)
    y = x.exp()  # exp saves its result: PyTorch names the op that saved it
    y.add_(1)
    with pytest.raises(RuntimeError, match="output 0 of Exp, is at version 1"):
        y.sum().backward()


def test_ops_that_saved_nothing_are_unaffected():
    x = leaf(1., 2.)
    y = x * 1
    z = y + 3            # add saves nothing
    s = y.sum()          # sum saves nothing
    y.mul_(5)
    (z.sum() + s).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2., 2.])


def test_inplace_version_counter_bumps():
    x = ag.zeros(3)
    v = x._version
    x.add_(1)
    x[0] = 2.
    x.mul_(2)
    x += 1
    assert x._version == v + 4


def test_inplace_gradients_through_history():
    x = leaf(1., 2.)
    y = x * 2
    y.mul_(3)            # y = 6x
    y.add_(x * x)        # y = 6x + x^2
    y.sum().backward()
    assert_close(x.grad.numpy(), 6 + 2 * np.array([1., 2.]), rtol=1e-7, atol=0, equal_nan=True,
                 check_dtype=False)
    assert y.grad_fn.name() == "AddBackward0"


def test_inplace_self_aliasing_raises_like_torch(torch):
    for M in (ag, torch):
        x = M.tensor([1., 2.], requires_grad=True)
        y = x * 2
        y.mul_(y)        # mul saved `y`, which it then overwrote
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_inplace_on_leaf_requiring_grad_raises():
    x = leaf(1., 2.)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.add_(1)
    with ag.no_grad():
        x.add_(1)        # allowed under no_grad, like optimizer updates
    np.testing.assert_array_equal(x.detach().numpy(), [2., 3.])


def test_inplace_on_view_of_tensor_requiring_grad_rebases_the_base():
    """As in PyTorch: the base's history becomes CopySlices; a view made under no_grad
    may not be modified in place with grad mode on."""
    x = leaf(1., 2., 3.)
    y = x * 2
    y[1:].mul_(2)
    assert y.grad_fn.name() == "CopySlices"
    (y * y).sum().backward()              # d/dx of 4x0^2 + 16x1^2 + 16x2^2
    np.testing.assert_array_equal(x.grad.numpy(), [8., 64., 96.])
    with ag.no_grad():
        v = y[1:]
    with pytest.raises(RuntimeError, match="created in no_grad mode"):
        v.mul_(2)


# ---- autograd.grad -------------------------------------------------------------------------
def test_grad_basic_does_not_touch_dot_grad():
    x, y = leaf(1., 2.), leaf(3., 4.)
    gx, gy = autograd.grad((x * y).sum(), [x, y])
    np.testing.assert_array_equal(gx.numpy(), [3., 4.])
    np.testing.assert_array_equal(gy.numpy(), [1., 2.])
    assert x.grad is None and y.grad is None
    assert not gx.requires_grad


def test_grad_outputs_and_multiple_outputs():
    x = leaf(1., 2.)
    a, b = x * 2, x * x
    g, = autograd.grad([a, b], x, grad_outputs=[ag.tensor([1., 1.]), ag.tensor([0.5, 2.])])
    np.testing.assert_array_equal(g.numpy(), [2. + 1., 2. + 8.])


def test_grad_allow_unused():
    x, y = leaf(1.), leaf(2.)
    with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
        autograd.grad(x * 2, [x, y])
    gx, gy = autograd.grad(x * 2, [x, y], allow_unused=True)
    assert gx.item() == 2. and gy is None
    gx, gy = autograd.grad(x * 2, [x, y], materialize_grads=True)
    assert gy.item() == 0.


def test_grad_wrt_intermediate():
    x = leaf(1., 2.)
    h = x * 3
    y = (h * h).sum()
    g, = autograd.grad(y, h)
    np.testing.assert_array_equal(g.numpy(), [6., 12.])


def test_grad_retain_graph():
    x = leaf(2.)
    y = x.exp() * x
    autograd.grad(y, x, retain_graph=True)
    autograd.grad(y, x)
    with pytest.raises(RuntimeError, match="second time"):
        autograd.grad(y, x)


def test_grad_input_not_requiring_grad():
    with pytest.raises(RuntimeError, match="does not require grad"):
        autograd.grad(leaf(1.) * 2, ag.tensor(1.))


# ---- higher order --------------------------------------------------------------------------
def test_third_derivative_of_x4():
    x = leaf(2.)
    y = x ** 4
    g1, = autograd.grad(y, x, create_graph=True)
    g2, = autograd.grad(g1, x, create_graph=True)
    g3, = autograd.grad(g2, x)
    assert g1.item() == 4 * 8 and g2.item() == 12 * 4 and g3.item() == 24 * 2
    assert g1.requires_grad and not g3.requires_grad


@pytest.mark.parametrize("name,f,derivs", [
    ("exp", lambda x: x.exp(), lambda v: [math.exp(v)] * 3),
    ("sin", lambda x: x.sin(), lambda v: [math.cos(v), -math.sin(v), -math.cos(v)]),
    ("log", lambda x: x.log(), lambda v: [1 / v, -1 / v ** 2, 2 / v ** 3]),
    ("tanh", lambda x: x.tanh(), lambda v: [1 - math.tanh(v) ** 2,
                                            -2 * math.tanh(v) * (1 - math.tanh(v) ** 2),
                                            (1 - math.tanh(v) ** 2) * (6 * math.tanh(v) ** 2 - 2)]),
    ("sigmoid", lambda x: x.sigmoid(), None),
    ("rsqrt", lambda x: x.rsqrt(), lambda v: [-0.5 * v ** -1.5, 0.75 * v ** -2.5,
                                              -1.875 * v ** -3.5]),
    ("reciprocal", lambda x: 1 / x, lambda v: [-v ** -2, 2 * v ** -3, -6 * v ** -4]),
    ("pow_tensor", lambda x: x ** x, None),
    ("softmax", lambda x: (x * ag.tensor([1., 2., 3.], dtype=ag.float64)).softmax(0)[0], None),
])
def test_higher_order_derivatives(name, f, derivs):
    v = 0.7
    x = ag.tensor(v, dtype=ag.float64, requires_grad=True)
    gs, y = [], f(x)
    for _ in range(3):
        y, = autograd.grad(y, x, create_graph=True)
        gs.append(y.item())
    if derivs is not None:
        assert_close(gs, derivs(v), rtol=1e-10, atol=0, equal_nan=True)
    # finite differences of the 2nd derivative give the 3rd

    def d2(u):
        xx = ag.tensor(u, dtype=ag.float64, requires_grad=True)
        g, = autograd.grad(f(xx), xx, create_graph=True)
        g, = autograd.grad(g, xx)
        return g.item()
    eps = 1e-5
    assert gs[2] == pytest.approx((d2(v + eps) - d2(v - eps)) / (2 * eps), rel=1e-5, abs=1e-7)


def test_higher_order_like_torch(torch):
    def run(M):
        x = M.tensor([0.3, -0.4, 1.2], dtype=M.float64, requires_grad=True)
        w = M.tensor([[1., 2., 0.5], [0.1, -1., 2.]], dtype=M.float64, requires_grad=True)
        y = (w @ x).tanh().pow(3).sum() + (x * x).softmax(0)[1]
        gx, gw = M.autograd.grad(y, [x, w], create_graph=True)
        hx, = M.autograd.grad((gx * gx).sum() + gw.sum(), x)
        return gx.detach().numpy(), hx.detach().numpy()
    for a, b in zip(run(ag), run(torch)):
        assert_close(a, b, rtol=1e-10, atol=0, equal_nan=True)


def test_backward_create_graph_then_grad_of_grad():
    x = leaf(3., dtype=ag.float64)
    y = x ** 3
    y.backward(create_graph=True)
    assert x.grad.requires_grad and x.grad.item() == 27.
    g2, = autograd.grad(x.grad, x)
    assert g2.item() == 18.


# ---- misc engine properties ----------------------------------------------------------------
def test_graph_is_freed_when_output_dies():
    x = leaf(1., 2.)
    y = (x.exp() * 2).sum()
    ref = weakref.ref(y.grad_fn)
    del y
    gc.collect()
    assert ref() is None


def test_backward_through_shared_subgraph_with_two_roots():
    x = leaf(1., 2.)
    h = x.exp()
    autograd.backward([h.sum(), (h * 2).sum()])
    assert_close(x.grad.numpy(), 3 * np.exp([1., 2.]), rtol=1e-6, atol=0, equal_nan=True,
                 check_dtype=False)


def test_engine_like_torch_on_mlp(torch):
    rng = np.random.default_rng(0)
    xs, w1, w2 = rng.standard_normal((4, 3)), rng.standard_normal((3, 5)), \
        rng.standard_normal((5, 2))
    res = []
    for M in (ag, torch):
        a = M.tensor(w1, requires_grad=True)
        b = M.tensor(w2, requires_grad=True)
        h = (M.tensor(xs) @ a).tanh()
        out = (h @ b).log_softmax(1)[:, 0].mean()
        out.backward()
        res.append((a.grad.numpy().copy(), b.grad.numpy().copy()))
    for x, y in zip(res[0], res[1]):
        assert_close(x, y, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_float32_grads_stay_float32():
    x = leaf(1., 2.)
    (x.double() * 2).sum().backward()
    assert x.grad.dtype is ag.float32


def test_saved_output_makes_no_reference_cycle():
    # exp saves its output; the saved copy must not hold the output tensor itself (which
    # holds the node, which holds the saved copy): freed at once, without the cycle collector
    import gc
    import weakref
    x = ag.randn(3, requires_grad=True)
    gc.disable()
    try:
        y = x.exp()
        node = weakref.ref(y.grad_fn)
        out = weakref.ref(y)
        del y
        assert node() is None and out() is None
    finally:
        gc.enable()
    z = x.exp()
    z.sum().backward()
    assert_close(x.grad.numpy(), np.exp(x.detach().numpy()), rtol=1e-6, atol=0, equal_nan=True)
