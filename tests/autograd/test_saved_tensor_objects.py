"""The saved tensors as objects: a saved input reads back as the very tensor that was saved,
`_raw_saved_*` / `ctx._raw_saved_tensors` give the SavedTensor objects (data, unpack_hook,
register_hooks and their errors), `autograd.SavedTensor` cannot be made by hand,
`clear_saved_tensors_on_access`, and `autograd.graph.Node` as the nodes' abstract type."""
import pytest

import aotgrad as ag

FREED = "after they have already been freed"


def test_saved_input_reads_back_as_itself_and_output_as_a_new_tensor():
    a = ag.randn(4, requires_grad=True)
    b = a * a
    c = a * b
    d = ag.exp(a)
    assert b.grad_fn._saved_self is a and b.grad_fn._saved_other is a
    assert c.grad_fn._saved_other is b  # a non-leaf input too
    assert d.grad_fn._saved_result is not d
    assert d.grad_fn._saved_result.tolist() == d.tolist()
    c.sum().backward()
    with pytest.raises(RuntimeError, match=FREED):
        c.grad_fn._saved_self


def test_saved_input_modified_in_place_still_raises():
    a = ag.randn(3, requires_grad=True)
    b = a * 2
    c = b * b
    with ag.no_grad():
        b.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()


def test_raw_saved_data_and_unpack_hook():
    def pack(t):
        return t

    def unpack(t):
        return t
    a = ag.tensor(2.0, requires_grad=True)
    with ag.autograd.graph.saved_tensors_hooks(pack, unpack):
        b = a ** 2
    c = b.exp()
    d = c ** 2
    raw_pow, raw_exp, raw_pow2 = (b.grad_fn._raw_saved_self, c.grad_fn._raw_saved_result,
                                  d.grad_fn._raw_saved_self)
    assert isinstance(raw_pow, ag.autograd.SavedTensor)
    assert raw_pow.data is a and raw_pow.unpack_hook is unpack
    assert raw_exp.data is not c and raw_exp.unpack_hook is None
    assert raw_exp.data.grad_fn is None and raw_exp.data.tolist() == c.tolist()
    assert raw_pow2.data is c and raw_pow2.unpack_hook is None


def test_register_hooks_errors():
    a = ag.ones(2, 2, requires_grad=True)
    out = a * a
    raw = out.grad_fn._raw_saved_self
    with pytest.raises(TypeError):
        raw.register_hooks(lambda x: x)
    raw.register_hooks(lambda x: x, lambda x: x)
    with pytest.raises(RuntimeError, match="already been set"):
        raw.register_hooks(lambda x: x, lambda x: x)
    out.sum().backward()
    fresh = a * a
    raw = fresh.grad_fn._raw_saved_self
    fresh.sum().backward()
    with pytest.raises(RuntimeError, match="after it has been freed"):
        raw.register_hooks(lambda x: x, lambda x: x)


def test_register_hooks_changes_what_backward_reads():
    a = ag.tensor([1.0, 2.0], requires_grad=True)
    out = (a * 1) * a
    out.grad_fn._raw_saved_self.register_hooks(lambda x: 3 * x, lambda x: x)
    out.sum().backward()
    # d/da [(a*1) * a]: the saved self (a * 1) reads back tripled for a's gradient
    assert a.grad.tolist() == [1.0 * 3 + 1.0, 2.0 * 3 + 2.0]


def test_saved_tensor_cannot_be_made_by_hand():
    with pytest.raises(RuntimeError, match="from Python is forbidden"):
        ag.autograd.SavedTensor()


def _saving(save_none):
    class Saving(ag.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            if save_none is not None:
                ctx.save_for_backward(x, None) if save_none else ctx.save_for_backward(x)
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g
    return Saving


def test_custom_function_raw_saved_tensors():
    a = ag.randn(3, requires_grad=True)
    y = _saving(True).apply(a)
    saved = y.grad_fn.saved_tensors
    assert len(saved) == 2 and saved[0] is a and saved[1] is None
    raw = y.grad_fn._raw_saved_tensors
    with pytest.raises(RuntimeError, match="None is forbidden"):
        raw[1].register_hooks(lambda x: x, lambda x: x)
    raw[0].register_hooks(lambda x: x, lambda x: x)
    with pytest.raises(RuntimeError, match="already been set"):
        raw[0].register_hooks(lambda x: x, lambda x: x)
    y.sum().backward()
    with pytest.raises(RuntimeError, match=FREED):
        y.grad_fn._raw_saved_tensors
    with pytest.raises(RuntimeError, match=FREED):
        y.grad_fn.saved_tensors
    y = _saving(None).apply(a)
    assert y.grad_fn.saved_tensors == () and y.grad_fn._raw_saved_tensors == ()


def test_prim_node_raw_saved_none():
    a = ag.randn(3, requires_grad=True)
    b = ag.randn(3)
    out = a * b  # only a's gradient is wanted: it needs b, not a
    assert out.grad_fn._saved_self is None and out.grad_fn._saved_other is b
    with pytest.raises(RuntimeError, match="None is forbidden"):
        out.grad_fn._raw_saved_self.register_hooks(lambda x: x, lambda x: x)


def test_rule_node_saved_attributes():
    a = ag.tensor([1.0, 2.0], requires_grad=True)
    out = a ** 3
    assert out.grad_fn.name() == "PowBackward0"
    assert out.grad_fn._saved_self is a and out.grad_fn._saved_exponent == 3
    with pytest.raises(AttributeError):
        out.grad_fn._saved_nothing
    out.sum().backward()
    with pytest.raises(RuntimeError, match=FREED):
        out.grad_fn._saved_self
    assert out.grad_fn._saved_exponent == 3  # numbers stay


def _clearing(reads):
    class Clearing(ag.autograd.Function):
        clear_saved_tensors_on_access = True

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            for _ in range(reads):
                x, = ctx.saved_tensors
            return g * x
    return Clearing


def test_clear_saved_tensors_on_access():
    x = ag.tensor([2.0, 3.0], requires_grad=True)
    y = _clearing(1).apply(x)
    node = y.grad_fn
    y.sum().backward(retain_graph=True)
    assert x.grad.tolist() == [2.0, 3.0]
    with pytest.raises(RuntimeError, match="can only be accessed once"):
        node.saved_tensors
    with pytest.raises(RuntimeError, match="can only be accessed once"):
        _clearing(2).apply(x).sum().backward()


def test_graph_node_is_the_abstract_type_of_every_node():
    Node = ag.autograd.graph.Node
    a = ag.rand(3, 3, requires_grad=True)
    b = a.exp()
    assert isinstance(b.grad_fn, Node) and issubclass(type(b.grad_fn), Node)
    assert Node not in type(b.grad_fn).mro()
    assert isinstance(b.grad_fn.next_functions[0][0], Node)  # AccumulateGrad
    assert not isinstance(None, Node) and not isinstance(1, Node)
    assert not isinstance(Node, Node) and issubclass(Node, Node)
    assert issubclass(ag.autograd.function.BackwardCFunction, Node)
    seen = []

    class Func(ag.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            seen.append(isinstance(ctx, Node))
            return x

        @staticmethod
        def backward(ctx, g):
            seen.append(isinstance(ctx, Node))
            return g
    out = Func.apply(a)
    assert isinstance(out.grad_fn, Node) and Node not in type(out.grad_fn).mro()
    out.sum().backward()
    assert seen == [True, True]


def test_cleared_saved_tensor_is_freed_once_backward_drops_it():
    import weakref
    alive = []

    class Clearing(ag.autograd.Function):
        clear_saved_tensors_on_access = True

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            ref = weakref.ref(x)
            del x
            alive.append(ref() is not None)
            return g
    x = ag.randn(3, requires_grad=True)
    Clearing.apply(x * 2).sum().backward()
    assert alive == [False]


def test_function_errors_for_missing_or_doubled_methods():
    class NoForward(ag.autograd.Function):
        @staticmethod
        def backward(ctx, g):
            return g

    class NoBackward(ag.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

    class Both(NoBackward):
        @staticmethod
        def backward(ctx, g):
            return g

        @staticmethod
        def vjp(ctx, g):
            return g

    class VjpOnly(NoBackward):
        @staticmethod
        def vjp(ctx, g):
            return 3 * g
    x = ag.rand(2, requires_grad=True)
    with pytest.raises(NotImplementedError, match="must implement the forward"):
        NoForward.apply(x)
    with pytest.raises(NotImplementedError, match="must implement either the backward"):
        NoBackward.apply(x).sum().backward()
    with pytest.raises(RuntimeError, match="Implementing both 'backward' and 'vjp'"):
        Both.apply(x).sum().backward()
    VjpOnly.apply(x).sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    with pytest.raises(RuntimeError, match="must implement the jvp function"):
        with ag.autograd.forward_ad.dual_level():
            NoBackward.apply(ag.autograd.forward_ad.make_dual(x.detach(), ag.ones(2)))


def test_saved_input_detached_in_place_raises():
    a = ag.tensor(1.0, requires_grad=True).clone()
    b = a.sin()  # saves a itself
    a.detach_()
    with pytest.raises(RuntimeError, match="detached in-place"):
        b.backward()
    a = ag.tensor(1.0, requires_grad=True).clone()
    b = a.exp()  # saves its result only
    a.detach_()
    b.backward()


def test_saved_input_detached_in_place_matches_torch(torch):
    for T in (ag, torch):
        a = T.tensor(1.0, requires_grad=True).clone()
        b = a * a
        a.detach_()
        with pytest.raises(RuntimeError, match="detached in-place"):
            b.backward()
