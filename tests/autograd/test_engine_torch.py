"""The eager autograd engine against PyTorch: hooks, backward()/grad() arguments, double
backward, version counters, in-place ops and views (grad modes, grad_fn graphs and
autograd.Function are in test_engine_torch_graph.py).

Each `_case(M)` builds the same computation with M = aotgrad or torch; the torch-tests run
both and compare results (or error texts); helpers in torch_compare.py.
"""

import pytest

from torch_compare import comparable, leaf


# ---- tensor hooks ---------------------------------------------------------------------------
def _hook_order(M):
    x, log = leaf(M, 1., 2.), []
    y = x * 2
    y.register_hook(lambda g: log.append(("a", comparable(g))) or g + 1)
    y.register_hook(lambda g: log.append(("b", comparable(g))) or g * 3)
    y.register_hook(lambda g: log.append(("c", comparable(g))))
    y.sum().backward()
    return log, x.grad


def _hook_remove(M):
    x = leaf(M, 1., 2.)
    y = x * 2
    h = y.register_hook(lambda g: g * 100)
    h.remove()
    h.remove()
    y.sum().backward()
    return x.grad


def _leaf_hook(M):
    x = leaf(M, 1., 2.)
    x.register_hook(lambda g: g * 10)
    (x * x).sum().backward()
    return x.grad


def _retain_then_hook(M):
    x = leaf(M, 1., 2.)
    y = x * 2
    y.retain_grad()
    y.register_hook(lambda g: g * 10)
    (y * y).sum().backward()
    return y.grad, x.grad


def _hook_then_retain(M):
    x = leaf(M, 1., 2.)
    y = x * 2
    y.register_hook(lambda g: g * 10)
    y.retain_grad()
    (y * y).sum().backward()
    return y.grad, x.grad


def _retain_accumulates(M):
    x = leaf(M, 1., 2.)
    y = x * 2
    y.retain_grad()
    z = (y * y).sum()
    z.backward(retain_graph=True)
    z.backward()
    return y.grad, x.grad


def _used_twice(M):
    x, log = leaf(M, 1., 2.), []
    x.register_hook(lambda g: log.append(comparable(g)))
    y = x * 2
    y.register_hook(lambda g: log.append(("y", comparable(g))))
    (y * y + y).sum().backward()
    return log, x.grad


def _post_acc(M):
    x, log = leaf(M, 1., 2.), []
    x.register_post_accumulate_grad_hook(lambda t: log.append(comparable(t.grad)))
    (x * 3).sum().backward()
    (x * x).sum().backward()
    return log


def _post_acc_runs_first(M):
    # a leaf's AccumulateGrad runs as soon as its gradient is ready, in every iteration
    # (the node is made once per leaf and reused: its sequence number must not make it wait)
    w1, w2, log = leaf(M, 1., 2.), leaf(M, 3., 4.), []
    w1.register_post_accumulate_grad_hook(lambda t: log.append("w1"))
    w2.register_post_accumulate_grad_hook(lambda t: log.append("w2"))
    # held, as DDP holds them: the same nodes serve every iteration
    accumulators = [(w * 1).grad_fn.next_functions[0][0] for w in (w1, w2)]
    for it in range(2):
        h = (w1 * 2).exp()
        h.register_hook(lambda g, it=it: log.append(f"h{it}"))
        u = (h * 0.5).sin()
        u.register_hook(lambda g, it=it: log.append(f"u{it}"))
        (u * w2).sum().backward()
    return log, len(accumulators)


def _post_acc_returns(M):
    x = leaf(M, 1., 2.)
    x.register_post_accumulate_grad_hook(lambda t: M.zeros(2))
    (x * 3).sum().backward()


def _post_acc_no_grad(M):
    M.tensor([1., 2.]).register_post_accumulate_grad_hook(lambda t: None)


def _post_acc_nonleaf(M):
    (leaf(M, 1., 2.) * 2).register_post_accumulate_grad_hook(lambda t: None)


def _hook_no_grad(M):
    M.tensor([1.]).register_hook(lambda g: g)


def _hook_changes_size(M):
    x = leaf(M, 1., 2.)
    y = x * 3
    y.register_hook(lambda g: M.ones(3))
    y.sum().backward()


def _hook_changes_dtype(M):
    x = leaf(M, 1., 2.)
    y = x * 3
    y.register_hook(lambda g: g.double())
    y.sum().backward()


def _node_hooks(M):
    x, log = leaf(M, 1., 2.), []
    y = x * 3
    y.grad_fn.register_prehook(lambda go: log.append(("pre", comparable(list(go)))))
    y.grad_fn.register_hook(lambda gi, go: log.append(("post", comparable(list(go)))))
    y.register_hook(lambda g: log.append("tensor"))
    y.sum().backward()
    return log


def _node_hooks_replace(M):
    x = leaf(M, 1., 2.)
    y = x * 3
    y.grad_fn.register_prehook(lambda go: (go[0] * 5,))
    z = x.exp()
    z.grad_fn.register_hook(lambda gi, go: (gi[0] * 2,))
    (y + z).sum().backward()
    return x.grad


def _accumulate_grad_prehook(M):
    x, log = leaf(M, 1., 2.), []
    y = x * 3
    acc = y.grad_fn.next_functions[0][0]
    acc.register_prehook(lambda go: log.append(comparable(go[0])))
    y.sum().backward()
    return acc.name().split("::")[-1], acc.variable is x, log, x.grad


def _node_hook_wrong_count(M):
    x = leaf(M, 1., 2.)
    y = x * 3
    y.grad_fn.register_hook(lambda gi, go: (gi[0], gi[0], gi[0]))
    y.sum().backward()


def _node_hook_fills_none(M):
    x = leaf(M, 1., 2.)
    y = x * M.tensor([3., 4.])
    y.grad_fn.register_hook(lambda gi, go: (gi[0], gi[0]))
    y.sum().backward()


def _hook_grad_mode(M):
    x, log = leaf(M, 1., 2.), []
    y = x * x
    y.register_hook(lambda g: log.append((g.requires_grad, M.is_grad_enabled())))
    y.sum().backward(retain_graph=True)
    M.autograd.grad(y.sum(), x, create_graph=True)
    return log


def _leaf_hook_every_backward(M):
    x, log = leaf(M, 1., 2.), []
    x.register_hook(lambda g: log.append(comparable(g)))
    z = (x * x).sum()
    z.backward(retain_graph=True)
    z.backward()
    return log, x.grad


HOOK_CASES = [_node_hook_wrong_count, _node_hook_fills_none, _hook_grad_mode,
              _leaf_hook_every_backward, _hook_order, _hook_remove, _leaf_hook, _retain_then_hook, _hook_then_retain,
              _retain_accumulates, _used_twice, _post_acc, _post_acc_runs_first, _post_acc_returns, _post_acc_no_grad,
              _post_acc_nonleaf, _hook_no_grad, _hook_changes_size, _hook_changes_dtype,
              _node_hooks, _node_hooks_replace, _accumulate_grad_prehook]


@pytest.mark.parametrize("case", HOOK_CASES, ids=lambda f: f.__name__)
def test_hooks_like_torch(case, vs_torch):
    vs_torch.same(case, exact_error=True)


# ---- backward() and autograd.grad arguments -------------------------------------------------
def _bw_twice(M):
    x = M.ones(2, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    y.backward()


def _bw_retain(M):
    x = M.ones(2, requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    return x.grad


def _bw_gradient_shape(M):
    (M.ones(2, 3, requires_grad=True) * 2).backward(M.ones(3, 2))


def _bw_gradient_dtype(M):
    x = M.ones(2, requires_grad=True)
    (x * 2).backward(M.ones(2, dtype=M.float64))
    return str(x.grad.dtype).split(".")[-1], x.grad


def _bw_nonscalar(M):
    (M.ones(2, requires_grad=True) * 2).backward()


def _bw_no_grad(M):
    M.ones(2).sum().backward()


def _int_leaf(M):
    M.tensor([1, 2]).requires_grad_()


def _accumulate_in_place(M):
    x = M.ones(2, requires_grad=True)
    (x * 2).sum().backward()
    g = x.grad
    (x * 3).sum().backward()
    return g is x.grad, g


def _accumulate_create_graph(M):
    x = M.ones(2, requires_grad=True)
    (x * 2).sum().backward()
    g = x.grad
    (x * x).sum().backward(create_graph=True)
    return g is x.grad, g, x.grad, x.grad.requires_grad


def _inputs_leaf(M):
    x, w = M.ones(2, requires_grad=True), M.ones(2, requires_grad=True)
    (x * w * 3).sum().backward(inputs=[w])
    return x.grad, w.grad


def _inputs_nonleaf(M):
    x = M.ones(2, requires_grad=True)
    y = x * 2
    (y * y).sum().backward(inputs=[y])
    return y.grad, x.grad


def _inputs_nonleaf_twice(M):
    x = M.ones(2, requires_grad=True)
    y = x * 2
    z = (y * y).sum()
    y.register_hook(lambda g: g + 1)
    z.backward(inputs=[y], retain_graph=True)
    r = y.retains_grad
    z.backward(inputs=[y, x])
    return r, y.grad, x.grad


def _inputs_empty(M):
    (M.ones(2, requires_grad=True) * 2).sum().backward(inputs=[])


def _backward_many(M):
    x = M.ones(2, requires_grad=True)
    M.autograd.backward([(x * 2).sum(), (x * 3).sum()])
    return x.grad


def _backward_second_not_requiring_grad(M):
    x = M.ones(2, requires_grad=True)
    M.autograd.backward([(x * 2).sum(), M.ones(1).sum()])


def _backward_count_mismatch(M):
    x = M.ones(2, requires_grad=True)
    M.autograd.backward([(x * 2).sum(), (x * 3).sum()], [M.tensor(1.)])


def _grad_unused(M):
    x, w = M.ones(2, requires_grad=True), M.ones(2, requires_grad=True)
    M.autograd.grad((x * 2).sum(), [x, w])


def _grad_allow_unused(M):
    x, w = M.ones(2, requires_grad=True), M.ones(2, requires_grad=True)
    return M.autograd.grad((x * 2).sum(), [x, w], allow_unused=True)


def _grad_materialize(M):
    x, w = M.ones(2, requires_grad=True), M.ones(2, requires_grad=True)
    return M.autograd.grad((x * 2).sum(), [x, w], materialize_grads=True)


def _grad_materialize_allow_unused_false(M):
    x, w = M.ones(2, requires_grad=True), M.ones(2, requires_grad=True)
    M.autograd.grad((x * 2).sum(), [x, w], materialize_grads=True, allow_unused=False)


def _grad_none_grad_output(M):
    x = M.ones(2, requires_grad=True)
    return M.autograd.grad([(x * 2).sum(), x * 3], x, grad_outputs=[None, M.ones(2)])


def _grad_batched(M):
    x = M.tensor([1., 2., 3.], requires_grad=True)
    return M.autograd.grad(x * x, x, M.eye(3), is_grads_batched=True)


def _grad_batched_two_inputs(M):
    x, w = M.tensor([1., 2.], requires_grad=True), M.tensor([3., 4.], requires_grad=True)
    v = M.tensor([[1., 0.], [2., 5.], [0., 1.]])
    return M.autograd.grad(x * w.exp(), (x, w), v, is_grads_batched=True)


def _grad_leaves_grad_alone(M):
    x = M.ones(2, requires_grad=True)
    y = x * 2
    y.retain_grad()
    g, = M.autograd.grad((y * y).sum(), x)
    return g, g.requires_grad, x.grad, y.grad


def _grad_hooks_apply(M):
    x = M.ones(2, requires_grad=True)
    x.register_hook(lambda g: g * 10)
    y = x * 2
    y.register_hook(lambda g: g + 1)
    return M.autograd.grad((y * y).sum(), [x, y])


def _grad_twice(M):
    x = M.ones(2, requires_grad=True)
    y = (x * x).sum()
    M.autograd.grad(y, x)
    M.autograd.grad(y, x)


ARG_CASES = [_bw_twice, _bw_retain, _bw_gradient_shape, _bw_gradient_dtype, _bw_nonscalar,
             _bw_no_grad, _int_leaf, _accumulate_in_place, _accumulate_create_graph,
             _inputs_leaf, _inputs_nonleaf, _inputs_nonleaf_twice, _inputs_empty,
             _backward_many, _backward_count_mismatch, _backward_second_not_requiring_grad, _grad_unused, _grad_allow_unused,
             _grad_materialize, _grad_materialize_allow_unused_false, _grad_none_grad_output,
             _grad_batched, _grad_batched_two_inputs, _grad_leaves_grad_alone,
             _grad_hooks_apply, _grad_twice]
EXACT = {"_backward_second_not_requiring_grad", "_bw_twice", "_bw_no_grad", "_inputs_empty", "_backward_count_mismatch",
         "_grad_unused", "_grad_materialize_allow_unused_false", "_bw_nonscalar", "_grad_twice"}


@pytest.mark.parametrize("case", ARG_CASES, ids=lambda f: f.__name__)
def test_backward_and_grad_arguments_like_torch(case, vs_torch):
    vs_torch.same(case, exact_error=case.__name__ in EXACT)


# ---- double backward ------------------------------------------------------------------------
SECOND_ORDER = {
    "mul": lambda M, x: (x * x * x).sum(),
    "div": lambda M, x: (1 / (x + 3)).sum(),
    "exp_log": lambda M, x: (x.exp() + (x + 3).log()).sum(),
    "tanh_sigmoid": lambda M, x: (x.tanh() * x.sigmoid()).sum(),
    "pow_sqrt": lambda M, x: ((x + 3) ** 2.5 + (x + 3).sqrt()).sum(),
    "softmax": lambda M, x: (x.softmax(-1) * M.arange(3.).to(x.dtype)).sum(),
    "logsumexp": lambda M, x: x.logsumexp(-1).sum(),
    "mm": lambda M, x: (x @ x.t()).pow(2).sum(),
    "var": lambda M, x: x.var(0).sum(),
    "relu_abs": lambda M, x: (x.relu() ** 3 + x.abs() ** 3).sum(),
    "max": lambda M, x: (x.max(1)[0] ** 2).sum(),
    "norm": lambda M, x: x.norm(),
    "gelu": lambda M, x: M.nn.functional.gelu(x).sum(),
    "cross_entropy": lambda M, x: M.nn.functional.cross_entropy(x, M.tensor([0, 2])),
    "layer_norm": lambda M, x: (M.nn.functional.layer_norm(x, (3,)) *
                                M.arange(3.).to(x.dtype)).sum(),
    "index_cat": lambda M, x: (x[:, 1:] ** 3).sum() + (M.cat([x, x * x], 0) ** 2).sum(),
    "where_clamp": lambda M, x: M.where(x > 0, x ** 3, x ** 2).sum() + (x.clamp(-.5, .5) ** 2
                                                                         * x).sum(),
    "views": lambda M, x: (x[:, :1].expand(2, 3) * x.t().reshape(3, 2).t()).pow(2).sum(),
}


@pytest.mark.parametrize("name", sorted(SECOND_ORDER))
def test_double_backward_like_torch(name, vs_torch):
    def case(M):
        x = M.tensor([[0.3, -0.7, 1.2], [0.5, 0.9, -0.2]], dtype=M.float64, requires_grad=True)
        g, = M.autograd.grad(SECOND_ORDER[name](M, x), x, create_graph=True)
        v = M.tensor([[1., 2., 3.], [-1., 0.5, 2.]], dtype=M.float64)
        gg, = M.autograd.grad((g * v).sum(), x)
        return g, gg
    vs_torch.same(case)


def test_third_order_and_backward_create_graph_like_torch(vs_torch):
    def triple(M):
        x = M.tensor(0.7, dtype=M.float64, requires_grad=True)
        g1, = M.autograd.grad(x.sin() * x.exp(), x, create_graph=True)
        g2, = M.autograd.grad(g1, x, create_graph=True)
        return g1, g2, M.autograd.grad(g2, x)[0]

    def via_backward(M):
        x = M.tensor([0.7, 0.2], dtype=M.float64, requires_grad=True)
        (x ** 3).sum().backward(create_graph=True)
        g, x.grad = x.grad, None
        g.sum().backward()
        return g, x.grad
    vs_torch.same(triple)
    vs_torch.same(via_backward)


# ---- in-place, versions, detach, .data ------------------------------------------------------
def _version_error_input(M):
    x = M.ones(2, requires_grad=True)
    y = x * 1
    w = y * y
    y.add_(1)
    w.sum().backward()


def _version_error_output(M):
    x = M.ones(2, requires_grad=True)
    y = x.exp()
    y.add_(1)
    y.sum().backward()


def _version_error_detached(M):
    x = M.ones(2, requires_grad=True)
    y = x.exp()
    y.detach().add_(1)
    y.sum().backward()


def _inplace_unsaved_is_fine(M):
    x = M.ones(2, requires_grad=True)
    y = x * 2
    z = y + 1
    y.mul_(2)
    z.sum().backward()
    return x.grad, y


def _versions(M):
    x = M.ones(2)
    d = x.detach()
    x.add_(1)
    d.mul_(2)
    x[0] = 3
    return int(x._version), int(d._version), int(x.data._version), x


def _data_does_not_bump(M):
    x = M.ones(2, requires_grad=True)
    y = x.exp()
    d = y.data
    d.add_(1)
    y.sum().backward()
    return x.grad, int(y._version), d.requires_grad, d.is_leaf


def _leaf_inplace(M):
    M.ones(2, requires_grad=True).add_(1)


def _leaf_inplace_no_grad(M):
    x = M.ones(2, requires_grad=True)
    with M.no_grad():
        x.add_(1)
    return x, x.requires_grad, x.is_leaf, int(x._version)


def _setitem_base(M):
    x = M.ones(2, 2, requires_grad=True)
    y = x * 1
    y[0] = 5
    (y * y).sum().backward()
    return y.grad_fn.name().split("::")[-1], x.grad


def _detach_(M):
    x = M.ones(2, requires_grad=True)
    y = x * 2
    y.detach_()
    return y.requires_grad, y.is_leaf, y.grad_fn


def _requires_grad_nonleaf(M):
    (M.ones(2, requires_grad=True) * 2).requires_grad_(False)


def _saved_accessors(M):
    x, w = M.tensor([1., 2.], requires_grad=True), M.tensor([3., 4.], requires_grad=True)
    y = x * w
    e = x.exp()
    return y.grad_fn._saved_self, y.grad_fn._saved_other, e.grad_fn._saved_result


def _saved_after_free(M):
    y = M.tensor([1., 2.], requires_grad=True).exp()
    y.sum().backward()
    return y.grad_fn._saved_result


def _data_setter(M):
    x = M.ones(2, requires_grad=True)
    y = x * x
    x.data = M.full((2,), 5.)
    y.sum().backward()
    return x, x.requires_grad, x.is_leaf, x.grad


def _data_setter_needs_tensor(M):
    M.ones(2, requires_grad=True).data = [1., 2.]


INPLACE_CASES = [_data_setter, _data_setter_needs_tensor, _version_error_input, _version_error_output, _version_error_detached,
                 _inplace_unsaved_is_fine, _versions, _data_does_not_bump, _leaf_inplace,
                 _leaf_inplace_no_grad, _setitem_base, _detach_, _requires_grad_nonleaf,
                 _saved_accessors, _saved_after_free]


@pytest.mark.parametrize("case", INPLACE_CASES, ids=lambda f: f.__name__)
def test_inplace_and_versions_like_torch(case, vs_torch):
    vs_torch.same(case, exact_error=case.__name__.startswith(("_version_error", "_saved",
                                                               "_data_setter")))
