"""compile() on the kinds of code users write, against eager (and PyTorch where natural):
constants made inside the function, closures, pytrees, in-place writes to inputs, buffers and
constants, outputs that could share an input's memory, modules, recompiles, autograd API."""
import collections
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad import nn
from aotgrad.runtime.tensor import Tensor
from aotgrad.tracer.pytree import flatten
from aotgrad.testing import assert_close

BACKENDS = ["interpret", "numba"]


def _run(f, args, seed):
    """f(*args) with the global seed set; -> (output arrays, leaf grads, output types)."""
    wrt = [a for a in flatten(args)[0] if isinstance(a, Tensor) and a.requires_grad and
           a.grad_fn is None]
    for t in wrt:
        t.grad = None
    ag.manual_seed(seed)
    out = f(*args)
    leaves = flatten(out)[0]
    outs = [o for o in leaves if isinstance(o, Tensor)]
    diff = [o for o in outs if o.requires_grad]
    grads = []
    if diff:
        rng = np.random.default_rng(1)
        ag.autograd.backward(diff, [Tensor._make(rng.standard_normal(o.shape).astype(
            o._value.dtype)) for o in diff])
        grads = [None if t.grad is None else t.grad._value.copy() for t in wrt]
    return [o._value.copy() for o in outs], grads, [type(x).__name__ for x in leaves]


def check(fn, *args, backend, calls=2, seed=0, tol=1e-5):
    """Eager once, then the compiled function `calls` times (a second call runs the cached
    program): outputs, dtypes, output types and every leaf gradient agree."""
    cf = ag.compile(fn, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a graph break or recompile fails the test
        eo, eg, et = _run(fn, args, seed)
        for _ in range(calls):
            co, cg, ct = _run(cf, args, seed)
            assert ct == et
            assert [a.dtype for a in co] == [a.dtype for a in eo]
            for i, (a, b) in enumerate(zip(co, eo)):
                assert_close(a, b, rtol=tol, atol=tol, equal_nan=True, msg=f"output {i}")
            assert [g is None for g in cg] == [g is None for g in eg]
            for i, (a, b) in enumerate(zip(cg, eg)):
                if a is not None:
                    assert_close(a, b, rtol=tol, atol=tol, equal_nan=True, msg=f"grad {i}")
    return cf


def _r(*shape, rg=True, dtype=None):
    return ag.randn(*shape, requires_grad=rg, dtype=dtype)


# ---- constants, scalars, closures, pytrees ---------------------------------------------------
def _constants(x):
    a = x.tanh() * ag.arange(1, 4) + ag.linspace(0, 1, 3) * ag.full((3,), 2.5)
    b = (x.exp() @ ag.eye(3)) * ag.tensor([1., 2., 3.]) - ag.ones(3) + ag.zeros(3)
    return (a * b + ag.tensor([1, 2, 3]) * 0.5).sum() * 3.0 + 1


def _closure_and_pytrees(d, xs, scale=2.0):
    h = _LIN(d["a"] * scale) + xs[0].sin()
    return {"h": h, "pair": (h.exp(), xs[1] * _CONST)}, len(xs), "tag"


_LIN = nn.Linear(3, 3)
_CONST = ag.randn(3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_constants_made_inside_the_function(backend):
    check(_constants, _r(3), backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_closures_kwargs_pytrees_and_non_tensor_outputs(backend):
    d = {"a": _r(2, 3)}
    xs = [_r(2, 3), _r(3)]
    cf = check(_closure_and_pytrees, d, xs, backend=backend)
    _LIN.zero_grad()
    out, n, tag = cf(d, xs, scale=3.0)
    out["h"].sum().backward()
    assert (n, tag) == (2, "tag")
    assert_close(_LIN.bias.grad._value, [2., 2., 2.], rtol=1e-7, atol=0, equal_nan=True)


RANDOM = {
    "randn": lambda x: x * ag.randn(8),
    "rand_like": lambda x: x * ag.rand_like(x) + ag.randn_like(x),
    "dropout": lambda x: nn.functional.dropout(x, 0.5, True) * 2,
}


@pytest.mark.parametrize("name", sorted(RANDOM))
def test_random_inside_matches_eager_for_the_same_seed(name):
    check(RANDOM[name], _r(8), backend="interpret", calls=2)


# ---- a zoo of small functions (interpret: cheap; a few on numba below) ---------------------
ZOO = {
    "tuple_out": (lambda x: (x.sin(), x.cos()), lambda: [_r(3)]),
    "dict_out": (lambda x: {"a": x.sin(), "b": x.cos() * 2}, lambda: [_r(3)]),
    "list_in": (lambda xs: xs[0] * xs[1], lambda: [[_r(3), _r(3)]]),
    "out_is_input": (lambda x: (x, x.sin()), lambda: [_r(3)]),
    "views_out": (lambda x: (x.view(6), x.t(), x[1:]), lambda: [_r(2, 3)]),
    "detach": (lambda x: x.sin() * x.detach().cos(), lambda: [_r(3)]),
    "mixed_requires_grad": (lambda x, y: x * y.exp(), lambda: [_r(3), _r(3, rg=False)]),
    "int_input": (lambda x, i: x * i + i.float(), lambda: [_r(3), ag.tensor([1, 2, 3])]),
    "int_only": (lambda i: i * 2 + 1, lambda: [ag.tensor([1, 2, 3])]),
    "bool_mask": (lambda x, m: x.masked_fill(m, 0.), lambda: [
        _r(3), ag.tensor([True, False, True])]),
    "gather": (lambda x, i: x.gather(1, i), lambda: [_r(2, 3), ag.tensor([[0, 2], [1, 1]])]),
    "index_select": (lambda x, i: x.index_select(0, i), lambda: [_r(3, 2), ag.tensor([2, 0, 2])]),
    "adv_index": (lambda x, i, j: x[i, j] + x[i].sum(1), lambda: [
        _r(4, 3), ag.tensor([3, 0, 3]), ag.tensor([0, 2, 1])]),
    "scatter_add": (lambda x, i, s: x.scatter_add(1, i, s), lambda: [
        _r(2, 3), ag.tensor([[0, 0], [2, 1]]), _r(2, 2)]),
    "argmax_and_values": (lambda x: (x.argmax(-1), x.max(-1).values, x > 0),
                          lambda: [_r(2, 3)]),
    "shape_control_flow": (lambda x: x.view(x.size(0), -1).sum(1) / x.numel() + len(x)
                           if x.shape[0] > 1 else x.sum(), lambda: [_r(2, 2, 2)]),
    "inner_requires_grad": (lambda x: (x * ag.ones(3, requires_grad=True)).sum(),
                            lambda: [_r(3)]),
    "autograd_grad_inside": (lambda x: _grad_inside(x), lambda: [_r(3)]),
    "retain_grad_inside": (lambda x: _retain(x), lambda: [_r(3)]),
    "no_grad_block": (lambda x: _no_grad(x), lambda: [_r(3)]),
    "inplace_intermediate": (lambda x: _inplace_inter(x), lambda: [_r(3)]),
    "setitem_into_zeros": (lambda x: _setitem(x), lambda: [_r(3)]),
    "mixed_dtypes": (lambda x, w, i: (x * w + i).double().sin().float(),
                     lambda: [_r(3, dtype=ag.float64), _r(3), ag.tensor([1, 2, 3])]),
    "float64": (lambda x, w: (x @ w).tanh(), lambda: [_r(2, 3, dtype=ag.float64),
                                                       _r(3, 2, dtype=ag.float64)]),
    "masked_softmax": (lambda x: x.masked_fill(ag.triu(ag.ones(3, 3, dtype=ag.bool), 1),
                                               float("-inf")).softmax(-1), lambda: [_r(3, 3)]),
    "split_unbind": (lambda x: [c.sum() for c in x.chunk(2, 0)] + list(x.unbind(1)),
                     lambda: [_r(4, 2)]),
}


def _grad_inside(x):
    x2 = x.detach().requires_grad_()
    g, = ag.autograd.grad((x2 ** 2).sum(), x2)
    return (g * x).sum()


def _retain(x):
    h = x * 2
    h.retain_grad()
    return h.sin().sum()


def _no_grad(x):
    with ag.no_grad():
        y = x * 2
    return x.sin() * y


def _inplace_inter(x):
    y = x * 2
    y.add_(1)
    y.mul_(x)
    return y


def _setitem(x):
    y = ag.zeros(3, 3)
    y[0] = x
    y[1:, 1] = x[:2] * 2
    return y


@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_matches_eager(name):
    fn, make = ZOO[name]
    check(fn, *make(), backend="interpret")


@pytest.mark.parametrize("name", ["gather", "adv_index", "masked_softmax", "views_out",
                                  "mixed_dtypes", "inplace_intermediate"])
def test_zoo_matches_eager_numba(name):
    fn, make = ZOO[name]
    check(fn, *make(), backend="numba")


@pytest.mark.parametrize("backend", BACKENDS)
def test_index_ops_match_pytorch(backend, torch):
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    idx, rows = np.array([[0, 2], [1, 1], [2, 0], [0, 0]]), np.array([3, 0, 3])

    def f(m):
        return lambda x, i, r: (m.gather(x, 1, i) * 2).sum() + (x[r] ** 2).sum() + \
            m.index_select(x, 0, r).exp().sum()
    cf = ag.compile(f(ag), backend=backend)
    xa = ag.tensor(x, requires_grad=True)
    cf(xa, ag.tensor(idx), ag.tensor(rows)).backward()
    xt = torch.tensor(x, requires_grad=True)
    f(torch)(xt, torch.tensor(idx), torch.tensor(rows)).backward()
    assert_close(xa.grad._value, xt.grad.numpy(), rtol=1e-5, atol=1e-5, equal_nan=True)


# ---- in-place writes ------------------------------------------------------------------------
def _arange_add(x):
    a = ag.arange(3.)
    a.add_(1)
    return x * a


def _literal_iadd(x):
    a = ag.tensor([1., 2., 3.])
    a += x.detach()
    return x * a


def _linspace_add(x):
    a = ag.linspace(0, 1, 3)
    a.add_(x)  # the constant takes x's history
    return (x * a).sum()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [_arange_add, _literal_iadd, _linspace_add])
def test_constant_made_inside_and_written_in_place_is_fresh_every_call(fn, backend):
    # the constant used to be lifted as state: each call wrote it back and the next read it
    check(fn, _r(3), backend=backend, calls=3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_returned_constant_is_a_new_tensor_every_call(backend):
    cf = ag.compile(lambda x: (x * 2, ag.arange(3.)), backend=backend)
    x = ag.randn(3)
    for _ in range(3):
        _, c = cf(x)
        np.testing.assert_array_equal(c._value, [0., 1., 2.])
        c.add_(10)


@pytest.mark.parametrize("backend", BACKENDS)
def test_clone_of_an_input_does_not_share_its_memory(backend):
    cf = ag.compile(lambda x: x.clone(), backend=backend)
    x = ag.tensor([1., 2., 3.])
    y = cf(x)
    y.add_(10)
    np.testing.assert_array_equal(x._value, [1., 2., 3.])

    def g(v):
        out = v.clone()
        v.add_(1)
        return out
    v = ag.tensor([1., 2.])
    out = ag.compile(g, backend=backend)(v)
    np.testing.assert_array_equal(out._value, [1., 2.])
    np.testing.assert_array_equal(v._value, [2., 3.])


@pytest.mark.parametrize("backend", BACKENDS)
def test_returning_an_input_or_detach_of_it_shares_memory_as_eagerly(backend):
    cf = ag.compile(lambda x: (x, x.detach()), backend=backend)
    x = ag.tensor([1., 2.])
    a, b = cf(x)
    with ag.no_grad():
        a.add_(1)
        b.add_(1)
    np.testing.assert_array_equal(x._value, [3., 4.])


def _mul_inplace(h):
    h.mul_(3)
    return h.sin()


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_on_a_non_leaf_input(backend, torch):
    # the argument used to be traced as a leaf: the in-place op raised the leaf error
    cm = ag.compile(_mul_inplace, backend=backend)
    res = []
    for fn in (_mul_inplace, cm):
        x = ag.tensor([0.1, 0.2, 0.3], requires_grad=True)
        h = x * 2
        out = fn(h)
        assert h.grad_fn is not None and h._version == 1
        (out + h).sum().backward()
        res.append((out._value.copy(), h._value.copy(), x.grad._value.copy()))
    xt = torch.tensor([0.1, 0.2, 0.3], requires_grad=True)
    ht = xt * 2
    ot = _mul_inplace(ht)
    (ot + ht).sum().backward()
    for got in res:
        for a, b in zip(got, (ot.detach().numpy(), ht.detach().numpy(), xt.grad.numpy())):
            assert_close(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_written_with_a_value_that_requires_grad_gets_its_history(backend):
    # the write-back used to drop the history: y stayed a plain tensor, x's grad lost a term
    def f(x, y):
        y.add_(x)
        return (x * 2).sum()
    res = []
    for fn in (f, ag.compile(f, backend=backend)):
        x = ag.tensor([1., 2., 3.], requires_grad=True)
        y = ag.zeros(3)
        loss = fn(x, y)
        assert y.requires_grad and y.grad_fn is not None and not y.is_leaf
        (loss + (y * y).sum()).backward()
        res.append(x.grad._value.copy())
    assert_close(res[1], res[0], rtol=1e-7, atol=0, equal_nan=True)
    assert_close(res[0], [4., 6., 8.], rtol=1e-7, atol=0, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_closed_over_buffer_written_then_read(backend):
    buf = ag.zeros(3)

    def f(x):
        buf.copy_(x * 2)  # history through the buffer: d/dx sum((2x)^2) = 8x
        return (buf * buf).sum()
    cf = ag.compile(f, backend=backend)
    for _ in range(2):
        x = ag.randn(3, requires_grad=True)
        cf(x).backward()
        assert_close(x.grad._value, 8 * x._value, rtol=1e-5, atol=1e-6, equal_nan=True)
        assert_close(buf._value, 2 * x._value, rtol=1e-6, atol=0, equal_nan=True)
        assert buf.requires_grad and buf.grad_fn is not None  # as eagerly after copy_


@pytest.mark.parametrize("backend", BACKENDS)
def test_buffer_read_before_its_write_gives_the_old_value_to_the_backward(backend):
    buf = ag.ones(3)

    def f(x):
        y = (x * buf).sum()
        buf.mul_(2)
        return y
    cf = ag.compile(f, backend=backend)
    for k in range(3):
        x = ag.randn(3, requires_grad=True)
        cf(x).backward()  # eagerly this backward refuses (buf modified in place)
        assert_close(x.grad._value, [2.0 ** k] * 3, rtol=1e-7, atol=0, equal_nan=True)
    assert buf._version == 3
    assert_close(buf._value, [8., 8., 8.], rtol=1e-7, atol=0, equal_nan=True)


def test_reading_a_view_of_a_tensor_written_inside_is_a_clear_graph_break():
    base = ag.zeros(2, 3)
    row = base[0]  # a view made outside: it shares base's memory

    def f(x):
        base.add_(1)
        return x * row
    with pytest.raises(ag.GraphBreakError if hasattr(ag, "GraphBreakError") else RuntimeError,
                       match="view of a tensor that the function wrote in place"):
        ag.compile(f, backend="interpret", fullgraph=True)(ag.randn(3))
    np.testing.assert_array_equal(base._value, 0)  # the failed trace left it alone
    assert base._version == 0


def test_is_leaf_and_requires_grad_inside_match_eager():
    # (a deque: appending to a plain list read inside is a change of Python state the
    # program could not repeat, which runs the call eagerly)
    seen = collections.deque()

    def f(x):
        seen.append((x.is_leaf, x.requires_grad, x.grad_fn is not None))
        return x * 2
    a = ag.randn(2, requires_grad=True)
    for fn in (f, ag.compile(f, backend="interpret"), ag.compile(f, backend="interpret")):
        fn(a * 3)
        fn(a)
    # eager: both calls; compiled: one trace for both (leafness is not a guard)
    assert list(seen) == [(False, True, True), (True, True, False)] + [(False, True, True)] * 2


def test_a_leaf_passed_where_the_trace_wrote_a_non_leaf_is_the_eager_error():
    cf = ag.compile(_mul_inplace, backend="interpret")
    a = ag.randn(3, requires_grad=True)
    cf(a * 2)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        cf(a)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        _mul_inplace(a)


# ---- modules, optimizers, recompiles ------------------------------------------------------
def _model():
    ag.manual_seed(1)
    return nn.Sequential(nn.Linear(4, 5), nn.LayerNorm(5), nn.GELU(), nn.Dropout(0.3),
                         nn.Linear(5, 2))


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("backend", BACKENDS)
def test_sequential_with_dropout_train_and_eval(backend, train):
    m = _model().train(train)
    x = ag.randn(3, 4)
    check(lambda x: m(x), x, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_embedding_and_conv(backend):
    emb, conv = nn.Embedding(5, 3), nn.Conv1d(3, 2, 3, stride=2)
    params = list(emb.parameters()) + list(conv.parameters())

    def f(i):
        return conv(emb(i).transpose(1, 2)).relu().sum()
    cf = ag.compile(f, backend=backend)
    i = ag.tensor([[1, 4, 1, 0, 2, 3, 3]])
    grads = []
    for fn in (f, cf):
        for p in params:
            p.grad = None
        fn(i).backward()
        grads.append([p.grad._value.copy() for p in params])
    for a, b in zip(*grads):
        assert_close(a, b, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_batch_size_and_float64_recompile(backend):
    cf = ag.compile(lambda x, w: (x @ w).tanh().sum(), backend=backend)
    w = ag.randn(3, 2, requires_grad=True)
    for n in (2, 5):
        x = ag.randn(n, 3)
        w.grad = None
        cf(x, w).backward()
        expect = x._value.T @ (1 - np.tanh(x._value @ w._value) ** 2)
        assert_close(w.grad._value, expect, rtol=1e-5, atol=1e-5, equal_nan=True)
    x, w64 = ag.randn(4, 3, dtype=ag.float64), ag.randn(3, 2, dtype=ag.float64, requires_grad=True)
    out = cf(x, w64)
    out.backward()
    assert out.dtype == ag.float64 and w64.grad.dtype == ag.float64
    assert_close(w64.grad._value, x._value.T @ (1 - np.tanh(x._value @ w64._value) ** 2),
                 rtol=1e-12, atol=0, equal_nan=True)
    assert cf.n_traces == 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_optimizer_step_inside_and_outside(backend):
    def pair():
        ag.manual_seed(0)
        a = nn.Linear(3, 1)
        b = nn.Linear(3, 1)
        b.load_state_dict(a.state_dict())
        return a, b
    (m1, m2), (m3, m4) = pair(), pair()
    o1, o2 = ag.optim.Adam(m1.parameters(), lr=0.1), ag.optim.Adam(m2.parameters(), lr=0.1)
    o3 = ag.optim.SGD(m3.parameters(), lr=0.1, momentum=0.9)
    o4 = ag.optim.SGD(m4.parameters(), lr=0.1, momentum=0.9)
    loss_c = ag.compile(lambda x: m1(x).square().mean(), backend=backend)

    def step(x, m, o):
        o.zero_grad()
        loss = m(x).square().mean()
        loss.backward()
        o.step()
        return loss
    step_c = ag.compile(lambda x: step(x, m3, o3), backend=backend)
    for _ in range(3):
        x = ag.randn(4, 3)
        o1.zero_grad()
        loss_c(x).backward()
        o1.step()
        step(x, m2, o2)
        assert_close(step_c(x)._value, step(x, m4, o4)._value, rtol=1e-5, atol=0, equal_nan=True)
    assert_close(m1.weight._value, m2.weight._value, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert_close(m3.weight._value, m4.weight._value, rtol=1e-5, atol=1e-6, equal_nan=True)


# ---- the autograd API on compiled outputs ---------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_partial_outputs_retain_graph_autograd_grad_and_gradient_argument(backend):
    cf = ag.compile(lambda x, y: (x.sin() * y, x.exp()), backend=backend)
    x, y = ag.randn(3, requires_grad=True), ag.randn(3, requires_grad=True)
    a, b = cf(x, y)
    (b * 2).sum().backward(retain_graph=True)  # only one output in the loss
    assert_close(x.grad._value, 2 * np.exp(x._value), rtol=1e-5, atol=0, equal_nan=True)
    assert y.grad is None
    gx, = ag.autograd.grad(a.sum(), [x], retain_graph=True)
    assert_close(gx._value, np.cos(x._value) * y._value, rtol=1e-5, atol=0, equal_nan=True)
    with pytest.raises(RuntimeError, match="scalar"):
        a.backward()
    a.backward(ag.tensor([1., 2., 3.]))  # a non-scalar loss with an explicit gradient
    assert_close(y.grad._value, np.sin(x._value) * [1., 2., 3.], rtol=1e-5, atol=0, equal_nan=True,
                 check_dtype=False)
    with pytest.raises(RuntimeError, match="second time"):
        a.sum().backward()
        a.sum().backward()


@pytest.mark.parametrize("backend", BACKENDS)
def test_create_graph_and_hooks_on_inputs(backend):
    cf = ag.compile(lambda x: (x ** 3).sum(), backend=backend)
    x = ag.tensor([1., 2.], dtype=ag.float64, requires_grad=True)
    g, = ag.autograd.grad(cf(x), x, create_graph=True)
    assert_close(g._value, 3 * x._value ** 2, rtol=1e-7, atol=0, equal_nan=True)
    g.sum().backward()
    assert_close(x.grad._value, 6 * x._value, rtol=1e-7, atol=0, equal_nan=True)
    x.grad = None
    seen = []
    x.register_hook(lambda gr: seen.append(gr) or gr * 10)
    cf(x).backward()
    assert len(seen) == 1
    assert_close(x.grad._value, 30 * x._value ** 2, rtol=1e-7, atol=0, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_leaf_only_other_outputs_reach_gets_no_grad(backend):
    # it used to get a zero .grad (the compiled backward fed zeros for the other outputs);
    # eagerly it stays None, which optimizers (weight decay, momentum) tell apart
    cf = ag.compile(lambda x, y: ((x.sin() * y).sum(), x.exp().sum()), backend=backend)
    x, y = ag.randn(3, requires_grad=True), ag.randn(3, requires_grad=True)
    for _ in range(2):
        x.grad = y.grad = None
        a, b = cf(x, y)
        b.backward()  # the specialised loss.backward()
        assert y.grad is None
        assert_close(x.grad._value, np.exp(x._value), rtol=1e-5, atol=0, equal_nan=True)
        a, b = cf(x, y)
        (b * 2).backward()  # the general engine
        assert y.grad is None
        assert_close(x.grad._value, 3 * np.exp(x._value), rtol=1e-5, atol=0, equal_nan=True)


def test_requires_grad_set_on_an_argument_inside_is_refused_clearly():
    def f(x):
        return x.requires_grad_() * 2
    with pytest.raises(ag.GraphBreakError, match="argument 0 had its requires_grad flag"):
        ag.compile(f, backend="interpret", fullgraph=True)(ag.randn(3))
    x = ag.randn(3)
    with pytest.warns(UserWarning, match="requires_grad"):
        out = ag.compile(f, backend="interpret")(x)  # eager fallback: as eagerly
    assert x.requires_grad and out.requires_grad


_GLOBAL_W = ag.ones(3)


def _reads_global(x):
    return x * _GLOBAL_W


def test_a_replaced_parameter_or_rebound_global_is_read_not_the_old_tensor(monkeypatch):
    # the program used to keep reading the tensor object it was traced with
    cf = ag.compile(_reads_global, backend="interpret")
    x = ag.ones(3)
    np.testing.assert_array_equal(cf(x)._value, 1.)
    # rebound for this test only (restored afterwards: other tests may read it)
    monkeypatch.setitem(_reads_global.__globals__, "_GLOBAL_W", ag.full((3,), 5.))
    with pytest.warns(UserWarning, match="another tensor took its place"):
        np.testing.assert_array_equal(cf(x)._value, 5.)

    m = nn.Linear(2, 1)
    cm, closure = ag.compile(m, backend="interpret"), ag.compile(lambda v: m(v) * 2,
                                                                backend="interpret")
    v = ag.ones(1, 2)
    cm(v), closure(v)
    m.weight = nn.Parameter(ag.zeros(1, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_close(cm(v)._value, m.bias._value[None], rtol=1e-7, atol=0, equal_nan=True)
        assert_close(closure(v)._value, 2 * m.bias._value[None], rtol=1e-7, atol=0, equal_nan=True)
    m.bias.data = ag.full((1,), 7.)  # a new array in the same tensor: read at call time
    assert_close(cm(v)._value, [[7.]], rtol=1e-7, atol=0, equal_nan=True)


@pytest.mark.parametrize("on_input", [False, True])
def test_a_hook_inside_that_keeps_its_gradient_is_refused_clearly(on_input):
    # it used to fail inside the partitioner ("g0 is neither computed nor an input")
    kept = []

    def f(x):
        h = x if on_input else x * 2
        h.register_hook(lambda g: kept.append(g))
        return (h * h).sum()
    x = ag.tensor([1., 2.], requires_grad=True)
    with pytest.raises(ag.GraphBreakError, match="value of the backward .*test_compile_cases"):
        ag.compile(f, backend="interpret", fullgraph=True)(x)
    kept.clear()
    with pytest.warns(UserWarning, match="register such hooks outside"):
        ag.compile(f, backend="interpret")(x).backward()  # runs eagerly, hook included
    assert_close(kept[-1]._value, [2., 4.] if on_input else [4., 8.], rtol=1e-7, atol=0,
                 equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_create_graph_through_a_function_that_writes_an_argument(backend):
    # the double-backward replay read the argument after the write-back: wrong gradients
    def f(x, h):
        h.mul_(3)
        return (h * x).sum()
    res = []
    for fn in (f, ag.compile(f, backend=backend)):
        x = ag.tensor([1., 2.], dtype=ag.float64, requires_grad=True)
        w = ag.tensor([0.5, 1.5], dtype=ag.float64, requires_grad=True)
        gx, gw = ag.autograd.grad(fn(x, w * w), [x, w], create_graph=True)
        (gx.sum() + gw.sum()).backward()
        res.append([gx._value, gw._value, x.grad._value, w.grad._value])
    for a, b in zip(*res):
        assert_close(a, b, rtol=1e-12, atol=0, equal_nan=True)
    assert_close(res[0][0], [0.75, 6.75], rtol=1e-7, atol=0, equal_nan=True)  # 3 w^2
    assert_close(res[0][3], [9., 21.], rtol=1e-7, atol=0, equal_nan=True)     # d/dw (3 w^2 + 6 x w)
