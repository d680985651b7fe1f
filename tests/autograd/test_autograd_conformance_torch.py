"""The autograd API surface against PyTorch: gradient edges, multi-grad hooks, mutation of
saved tensors, grad_dtype, raw saved tensors, shared nodes of multi-output ops, hooks and
in-place views, calling nodes by hand, scatter_reduce, checkpointing (closed forms and
eager/compiled agreement for what randomness or recomputation counts make library-specific).

Each `_case(M)` runs with M = aotgrad or torch; `_same` compares results or error texts.
"""
import warnings

import numpy as np
import pytest

from torch_compare import comparable, leaf


def _sub(M, path):
    import importlib
    return importlib.import_module(f"{M.__name__}.{path}")


# ---- gradient edges --------------------------------------------------------------------------
def _edge_grad(M):
    G = _sub(M, "autograd.graph")
    x = leaf(M, 1., -2., 3.)
    h = x * x
    e = G.get_gradient_edge(h)
    out = (h.exp() * 0.1).sum()
    gh, = M.autograd.grad(out, e, retain_graph=True)
    gx, = M.autograd.grad(out, G.get_gradient_edge(x), retain_graph=True)
    gh2, gx2 = M.autograd.grad(out, (e, x))
    return gh, gx, gh2, gx2, e.output_nr, e.node is h.grad_fn, isinstance(e, G.GradientEdge)


def _edge_as_output(M):
    G = _sub(M, "autograd.graph")
    x = leaf(M, 1., 2.)
    h = x * 3
    e = G.get_gradient_edge(h)
    _ = (h * h).sum()
    g, = M.autograd.grad(e, x, M.tensor([1., 10.]))
    return g


def _edge_no_grad(M):
    return _sub(M, "autograd.graph").get_gradient_edge(M.ones(2))


@pytest.mark.parametrize("case", [_edge_grad, _edge_as_output, _edge_no_grad])
def test_gradient_edges(case, vs_torch):
    vs_torch.same(case)


# ---- multi-grad hooks ------------------------------------------------------------------------
def _multi_all(M):
    G = _sub(M, "autograd.graph")
    a, b, c = leaf(M, 1., 2.), leaf(M, 3., 4.), leaf(M, 5., 6.)
    log = []
    h = G.register_multi_grad_hook((a, b, c), lambda gs: log.append(comparable(list(gs))))
    (a * b).sum().backward()          # c is not reached: None
    (c * 2).sum().backward()          # only c
    h.remove()
    (a * b).sum().backward()
    p, q = a * 1, c * 1               # autograd.grad: PyTorch asks this of non-leaves only
    G.register_multi_grad_hook((p, q), lambda gs: log.append(comparable(list(gs))))
    M.autograd.grad((p * q).sum(), (a,))
    M.autograd.grad((p * 3).sum(), (p,))
    return log


def _multi_any(M):
    G = _sub(M, "autograd.graph")
    a, b = leaf(M, 1., 2.), leaf(M, 3., 4.)
    log = []
    G.register_multi_grad_hook((a, b), lambda g: log.append(comparable(g)), mode="any")
    (a * b).sum().backward()
    (a * b * 2).sum().backward()
    return len(log)


def _multi_bad_mode(M):
    G = _sub(M, "autograd.graph")
    return G.register_multi_grad_hook((leaf(M, 1.),), print, mode="some")


@pytest.mark.parametrize("case", [_multi_all, _multi_any, _multi_bad_mode])
def test_multi_grad_hooks(case, vs_torch):
    vs_torch.same(case)


# ---- saved tensors ---------------------------------------------------------------------------
def _mutation_allowed(M):
    G = _sub(M, "autograd.graph")
    with G.allow_mutation_on_saved_tensors():
        a = leaf(M, 1., 2., 3.)
        b = a * 1
        y = (b * b * b).sum()
        b.mul_(5)
        y.backward()
        w = leaf(M, 2., 3.)
        with M.no_grad():
            z = M.ones(2)
        loss = (w * z).sum()
        z.add_(4)
        loss.backward()
    return a.grad, w.grad, b


def _mutation_nested(M):
    G = _sub(M, "autograd.graph")
    with G.allow_mutation_on_saved_tensors():
        with G.allow_mutation_on_saved_tensors():
            pass


def _raw_saved(M):
    x = leaf(M, 0.5, 1.5)
    y = x.exp()
    log = []
    y.grad_fn._raw_saved_result.register_hooks(lambda t: (log.append("pack"), t * 2)[1],
                                               lambda p: (log.append("unpack"), p)[1])
    y.sum().backward()
    return x.grad, log


def _raw_saved_twice(M):
    x = leaf(M, 0.5)
    y = x * x
    y.grad_fn._raw_saved_self.register_hooks(lambda t: t, lambda t: t)
    y.grad_fn._raw_saved_self.register_hooks(lambda t: t, lambda t: t)


def _saved_variables(M):
    class Cube(M.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                x, = ctx.saved_variables
            ctx.warned = [c.category.__name__ for c in w]
            return g * 3 * x * x
    x = leaf(M, 1., 2.)
    y = Cube.apply(x)
    y.sum().backward()
    return x.grad, y.grad_fn.warned


@pytest.mark.parametrize("case", [_mutation_allowed, _mutation_nested, _raw_saved,
                                  _raw_saved_twice, _saved_variables])
def test_saved_tensors(case, vs_torch):
    vs_torch.same(case)


# ---- tensor attributes -------------------------------------------------------------------------
def _grad_dtype(M):
    x = leaf(M, 1., 2.)
    d0 = str(x.grad_dtype)
    x.grad_dtype = M.float64
    (x * 3).sum().backward()
    d1 = str(x.grad.dtype)
    (x * 3).sum().backward()
    y = leaf(M, 1.)
    y.grad_dtype = None
    y.grad = M.ones(1, dtype=M.float64)
    (y * 2).sum().backward()
    return d0.split(".")[-1], d1.split(".")[-1], x.grad, str(y.grad.dtype).split(".")[-1]


def _grad_dtype_nonleaf(M):
    return (leaf(M, 1.) * 2).grad_dtype


def _grad_dtype_assign(M):
    x = leaf(M, 1.)
    x.grad_dtype = M.float64
    x.grad = M.ones(1)


def _del_grad(M):
    x = leaf(M, 1., 2.)
    (x * x).sum().backward()
    first = x.grad
    del x.grad
    (x * 3).sum().backward()
    return first, x.grad


def _variable(M):
    V = M.autograd.Variable
    base = leaf(M, 1., 2.)
    y = base * 2
    v = V(y)
    w = V(M.ones(2), requires_grad=True)
    (w * 4).sum().backward()
    return (v.requires_grad, v.grad_fn is None, isinstance(y, V), w.is_leaf, w.grad,
            V().shape[0])


@pytest.mark.parametrize("case", [_grad_dtype, _grad_dtype_nonleaf, _grad_dtype_assign,
                                  _del_grad, _variable])
def test_tensor_attributes(case, vs_torch):
    vs_torch.same(case)


def test_increment_version(vs_torch):
    def case(M):
        G = _sub(M, "autograd.graph")
        x = M.ones(2)
        v0 = x._version
        G.increment_version(x)
        G.increment_version([x, x])
        return x._version - v0
    vs_torch.same(case)


# ---- multi-output ops: one node --------------------------------------------------------------
_MULTI = {
    "var_mean": lambda M, x: M.var_mean(x, 0),
    "std_mean": lambda M, x: M.std_mean(x, 1, keepdim=True),
    "var_mean_all": lambda M, x: M.var_mean(x),
    "split": lambda M, x: x.split(2),
    "split_sizes": lambda M, x: x.split([1, 3]),
    "chunk": lambda M, x: x.chunk(3, 1),
    "unbind": lambda M, x: x.unbind(1),
}


@pytest.mark.parametrize("name", sorted(_MULTI))
def test_multi_output_shared_node(name, vs_torch):
    def case(M):
        x = M.tensor(np.arange(12.).reshape(4, 3) ** 1.5 / 7, requires_grad=True)
        outs = _MULTI[name](M, x)
        node = outs[0].grad_fn
        seen = []
        node.register_prehook(lambda gs: seen.append([g is not None for g in gs]))
        loss = sum(((o * (i + 1)) ** 2).sum() for i, o in enumerate(outs) if i != 1)
        g, = M.autograd.grad(loss, x, create_graph=True)
        gg, = M.autograd.grad((g * g).sum(), x)  # double backward through the shared node
        return (node.name(), all(o.grad_fn is node for o in outs),
                [o.output_nr for o in outs], seen, g, gg)
    vs_torch.same(case)


def test_shared_node_retain_graph(vs_torch):
    def case(M):
        x = leaf(M, 1., 2., 4., 8.)
        v, m = M.var_mean(x)
        y = v + m
        y.backward()
        try:
            y.backward()
        except RuntimeError as e:
            return x.grad, "second time" in str(e)
        return x.grad
    vs_torch.same(case)


# ---- hooks -----------------------------------------------------------------------------------
def _prehooks_with_inputs(M):
    x = leaf(M, 1., 2.)
    y = x * 2
    z = y * 3
    log = []
    z.grad_fn.register_prehook(lambda g: log.append("z"))
    y.grad_fn.register_prehook(lambda g: log.append("y"))
    z.sum().backward(inputs=[y])
    M.autograd.grad((y * 3).sum(), y)  # grad() of a captured input: no prehook of y runs
    return log, y.grad, x.grad


def _view_hook_after_inplace(M):
    x = leaf(M, 1., 2., 3., 4.)
    b = x * 1
    v = b[1:3]
    log = []
    v.register_hook(lambda g: log.append("before"))
    v.mul_(10)
    v.register_hook(lambda g: log.append("after"))
    (b * M.tensor([1., 2., 3., 4.])).sum().backward()
    return log, x.grad


def _hook_order_leaf(M):
    x = leaf(M, 1., 2.)
    log = []
    y = x * 2
    acc = y.grad_fn.next_functions[0][0]
    x.register_hook(lambda g: log.append("tensor"))
    acc.register_prehook(lambda g: log.append("pre"))
    acc.register_hook(lambda gi, go: log.append("post"))
    x.register_post_accumulate_grad_hook(lambda t: log.append("post_accumulate"))
    y.sum().backward()
    return log


@pytest.mark.parametrize("case", [_prehooks_with_inputs, _view_hook_after_inplace,
                                  _hook_order_leaf])
def test_hooks(case, vs_torch):
    vs_torch.same(case)


# ---- custom Functions ------------------------------------------------------------------------
def _non_diff_grads(M, materialize):
    class SplitIdx(M.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx._materialize_non_diff_grads = materialize
            idx = (x > 0).to(x.dtype)
            ctx.mark_non_differentiable(idx)
            return x * 2, idx

        @staticmethod
        def backward(ctx, g, g_idx):
            ctx.saw = g_idx if g_idx is None else comparable(g_idx)
            return g * 2
    x = leaf(M, -1., 2.)
    out, idx = SplitIdx.apply(x)
    out.sum().backward()
    return x.grad, out.grad_fn.saw


def _inplace_function(M):
    class Twice(M.autograd.function.InplaceFunction):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2
    x = leaf(M, 1., 3.)
    Twice.apply(x).sum().backward()
    return x.grad, issubclass(M.autograd.function.InplaceFunction, M.autograd.Function)


def _none_grad_from_backward(M):
    class First(M.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, g):
            return g, None
    a, b = leaf(M, 1.), leaf(M, 2.)
    First.apply(a, b).backward()
    return a.grad, b.grad


@pytest.mark.parametrize("case", [lambda M: _non_diff_grads(M, True),
                                  lambda M: _non_diff_grads(M, False), _inplace_function,
                                  _none_grad_from_backward])
def test_functions(case, vs_torch):
    vs_torch.same(case)


# ---- calling nodes, grad() arguments -----------------------------------------------------------
def _call_node(M):
    x = leaf(M, 2.)
    y = x * 3
    n = y.grad_fn
    return n(M.ones(1)), n(None)


def _call_node_broadcast(M):
    x = leaf(M, 2., 5.)
    return (x.exp()).grad_fn(M.tensor(1.))


def _call_node_too_many(M):
    x = leaf(M, 2.)
    return (x * 3).grad_fn(M.ones(1), M.ones(1))


def _call_node_none(M):
    x = leaf(M, 2.)
    return (x * 3).grad_fn()


def _grad_no_inputs(M):
    x = leaf(M, 2.)
    return M.autograd.grad((x * 2).sum(), [])


def _materialize_create_graph(M):
    x, z = leaf(M, 1., 2.), leaf(M, 3., 4.)
    gx, gz = M.autograd.grad((x * x).sum(), (x, z), create_graph=True, materialize_grads=True)
    plain = M.autograd.grad((x * x).sum(), (x, z), materialize_grads=True)[1]
    return gz, gz.requires_grad, gz.is_leaf, plain.requires_grad, gx.requires_grad


def _shape_mismatch_text(M):
    x = leaf(M, 1., 2.)
    M.autograd.grad(x * 2, x, M.ones(3))


@pytest.mark.parametrize("case", [_call_node, _call_node_broadcast, _call_node_too_many,
                                  _call_node_none, _grad_no_inputs, _materialize_create_graph,
                                  _shape_mismatch_text])
def test_calls_and_arguments(case, vs_torch):
    vs_torch.same(case, exact_error=True)


def test_no_grad_on_class_warns(vs_torch):
    def case(M):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")

            @M.no_grad()
            class Box:
                def __init__(self):
                    self.grad_on = M.is_grad_enabled()
        return [c.category.__name__ for c in w], Box().grad_on
    vs_torch.same(case)


# ---- gradcheck of views ----------------------------------------------------------------------
@pytest.mark.parametrize("fn", [lambda t: t[:], lambda t: t.t(), lambda t: t.reshape(-1),
                                lambda t: t.transpose(0, 1)[1:], lambda t: t.unbind(0)[1],
                                lambda t: t.split(1, 1)])
def test_gradcheck_view_outputs(fn, vs_torch):
    def case(M):
        x = M.tensor(np.linspace(-1, 1, 6).reshape(2, 3), dtype=M.float64, requires_grad=True)
        return M.autograd.gradcheck(fn, (x,)), M.autograd.gradgradcheck(fn, (x,))
    vs_torch.same(case)


# ---- scatter_reduce --------------------------------------------------------------------------
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_reduce(reduce, include_self, dim, vs_torch):
    rng = np.random.default_rng(3)
    xs = rng.integers(-2, 3, (3, 4)).astype(np.float64)  # small integers: many ties
    shape = (5, 4) if dim == 0 else (3, 6)
    idx = rng.integers(0, xs.shape[dim], shape)
    src = rng.integers(-2, 3, shape).astype(np.float64)

    def case(M):
        x = M.tensor(xs, requires_grad=True)
        s = M.tensor(src, requires_grad=True)
        out = M.scatter_reduce(x, dim, M.tensor(idx), s, reduce, include_self=include_self)
        w = M.tensor(np.arange(12.).reshape(3, 4))
        gx, gs = M.autograd.grad((out * w).sum(), (x, s))
        return out, gx, gs
    vs_torch.same(case)


def test_scatter_reduce_errors(vs_torch):
    def bad_reduce(M):
        return M.zeros(2).scatter_reduce(0, M.tensor([0]), M.ones(1), reduce="max")
    vs_torch.same(bad_reduce)


# ---- checkpoint ------------------------------------------------------------------------------
@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_module_grads(reentrant, vs_torch):
    def case(M):
        cp = _sub(M, "utils.checkpoint")
        lin = M.nn.Linear(3, 2)
        with M.no_grad():
            lin.weight.copy_(M.tensor([[0.1, -0.2, 0.3], [0.4, 0.5, -0.6]]))
            lin.bias.copy_(M.tensor([0.05, -0.05]))
        x = M.tensor([[1., 2., 3.], [-1., 0.5, 2.]], requires_grad=True)
        y = cp.checkpoint(lambda t: lin(t).tanh() * t[:, :2], x, use_reentrant=reentrant)
        y.pow(2).sum().backward()
        return y, x.grad, lin.weight.grad, lin.bias.grad
    vs_torch.same(case)


def test_checkpoint_warns_without_use_reentrant(vs_torch):
    def case(M):
        cp = _sub(M, "utils.checkpoint")
        x = leaf(M, 1., 2.)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            y = cp.checkpoint(lambda t: t * 2, x)
        return y, len(w)
    vs_torch.same(case)


def test_no_gradient_in_gives_none_out(vs_torch):
    def case(M):
        class Drop(M.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return None
        x = leaf(M, 1., 2.)
        Drop.apply(x.exp() * 3).sum().backward()
        first = x.grad
        g, = M.autograd.grad(Drop.apply(x.sin()).sum(), x, allow_unused=True)
        w = leaf(M, 1.)
        (Drop.apply(x.exp()).sum() + w * 2).backward()
        return first, g, x.grad, w.grad
    vs_torch.same(case)


def test_deprecated_jacobian_helpers(vs_torch):
    def case(M):
        gc = M.autograd.gradcheck
        a = M.tensor([0.5, -1.0], dtype=M.float64, requires_grad=True)
        b = M.tensor([2.0, 3.0, 4.0], dtype=M.float64, requires_grad=True)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            num = gc.get_numerical_jacobian(lambda ab: (ab[0].sum() * ab[1]).exp(), (a, b),
                                            eps=1e-6)
            out = (a.sum() * b).exp()
            ana, reentrant, sizes, types = gc.get_analytical_jacobian((a, b), out)
        return ([np.round(n.detach().numpy(), 4).tolist() for n in num], ana, reentrant,
                sizes, types, sorted({c.category.__name__ for c in w}))
    vs_torch.same(case)


def test_once_differentiable_graph(vs_torch):
    def case(M):
        from importlib import import_module
        once = import_module(f"{M.__name__}.autograd.function").once_differentiable

        class Twice(M.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            @once
            def backward(ctx, g):
                return g * 2
        x, go = leaf(M, 1., 2.), leaf(M, 1., 1.)
        g, = M.autograd.grad(Twice.apply(x), x, go, create_graph=True)
        plain, = M.autograd.grad(Twice.apply(x).sum(), x, create_graph=True)
        try:
            g.sum().backward()
            err = None
        except RuntimeError as e:
            err = str(e)
        return (type(g.grad_fn).__name__, len(g.grad_fn.next_functions),
                g.grad_fn.next_functions[0][0].name().endswith("AccumulateGrad"),
                plain.requires_grad, err)
    vs_torch.same(case)
