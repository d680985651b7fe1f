"""The eager autograd engine against PyTorch: hooks, backward()/grad() arguments, double
backward, version counters, grad modes, grad_fn graphs and autograd.Function edge cases.

Each `_case(M)` builds the same computation with M = aotgrad or torch; the torch-tests run
both and compare results (or error texts). The torch-free tests below pin the fixes with
closed forms, so they run without torch.
"""
import re
import warnings

import numpy as np
import pytest

import aotgrad as ag


def _val(r):
    """A comparable, library-free form of a result (tensors -> rounded lists)."""
    if r is None or isinstance(r, (bool, int, float, str)):
        return r
    if isinstance(r, (tuple, list)):
        return [_val(x) for x in r]
    if isinstance(r, dict):
        return {k: _val(v) for k, v in r.items()}
    if hasattr(r, "detach"):
        return np.round(np.asarray(r.detach().numpy(), dtype=float), 5).tolist()
    return repr(r)


def _outcome(fn, M):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ("ok", _val(fn(M)))
    except Exception as e:  # the error class and its first line, library names unified
        msg = str(e).replace("torch.", "aotgrad.").split("\n")[0]
        return ("err", type(e).__name__ if isinstance(e, (ValueError, TypeError))
                else "RuntimeError", msg)


def _same(fn, torch, exact_error=False):
    ours, ref = _outcome(fn, ag), _outcome(fn, torch)
    assert ours[0] == ref[0], (ours, ref)
    if ours[0] == "ok":
        assert ours == ref
    else:
        assert ours[1] == ref[1], (ours, ref)
        if exact_error:  # ours may add detail after PyTorch's text, or name the op before it
            ours_msg = re.sub(r"^[\w.]+: ", "", ours[2])
            assert ours_msg.startswith(ref[2]) or ref[2].startswith(ours_msg), (ours, ref)


def _L(M, *v):
    return M.tensor(list(v), requires_grad=True)


# ---- tensor hooks ---------------------------------------------------------------------------
def _hook_order(M):
    x, log = _L(M, 1., 2.), []
    y = x * 2
    y.register_hook(lambda g: log.append(("a", _val(g))) or g + 1)
    y.register_hook(lambda g: log.append(("b", _val(g))) or g * 3)
    y.register_hook(lambda g: log.append(("c", _val(g))))
    y.sum().backward()
    return log, x.grad


def _hook_remove(M):
    x = _L(M, 1., 2.)
    y = x * 2
    h = y.register_hook(lambda g: g * 100)
    h.remove()
    h.remove()
    y.sum().backward()
    return x.grad


def _leaf_hook(M):
    x = _L(M, 1., 2.)
    x.register_hook(lambda g: g * 10)
    (x * x).sum().backward()
    return x.grad


def _retain_then_hook(M):
    x = _L(M, 1., 2.)
    y = x * 2
    y.retain_grad()
    y.register_hook(lambda g: g * 10)
    (y * y).sum().backward()
    return y.grad, x.grad


def _hook_then_retain(M):
    x = _L(M, 1., 2.)
    y = x * 2
    y.register_hook(lambda g: g * 10)
    y.retain_grad()
    (y * y).sum().backward()
    return y.grad, x.grad


def _retain_accumulates(M):
    x = _L(M, 1., 2.)
    y = x * 2
    y.retain_grad()
    z = (y * y).sum()
    z.backward(retain_graph=True)
    z.backward()
    return y.grad, x.grad


def _used_twice(M):
    x, log = _L(M, 1., 2.), []
    x.register_hook(lambda g: log.append(_val(g)))
    y = x * 2
    y.register_hook(lambda g: log.append(("y", _val(g))))
    (y * y + y).sum().backward()
    return log, x.grad


def _post_acc(M):
    x, log = _L(M, 1., 2.), []
    x.register_post_accumulate_grad_hook(lambda t: log.append(_val(t.grad)))
    (x * 3).sum().backward()
    (x * x).sum().backward()
    return log


def _post_acc_returns(M):
    x = _L(M, 1., 2.)
    x.register_post_accumulate_grad_hook(lambda t: M.zeros(2))
    (x * 3).sum().backward()


def _post_acc_no_grad(M):
    M.tensor([1., 2.]).register_post_accumulate_grad_hook(lambda t: None)


def _post_acc_nonleaf(M):
    (_L(M, 1., 2.) * 2).register_post_accumulate_grad_hook(lambda t: None)


def _hook_no_grad(M):
    M.tensor([1.]).register_hook(lambda g: g)


def _hook_changes_size(M):
    x = _L(M, 1., 2.)
    y = x * 3
    y.register_hook(lambda g: M.ones(3))
    y.sum().backward()


def _hook_changes_dtype(M):
    x = _L(M, 1., 2.)
    y = x * 3
    y.register_hook(lambda g: g.double())
    y.sum().backward()


def _node_hooks(M):
    x, log = _L(M, 1., 2.), []
    y = x * 3
    y.grad_fn.register_prehook(lambda go: log.append(("pre", _val(list(go)))))
    y.grad_fn.register_hook(lambda gi, go: log.append(("post", _val(list(go)))))
    y.register_hook(lambda g: log.append("tensor"))
    y.sum().backward()
    return log


def _node_hooks_replace(M):
    x = _L(M, 1., 2.)
    y = x * 3
    y.grad_fn.register_prehook(lambda go: (go[0] * 5,))
    z = x.exp()
    z.grad_fn.register_hook(lambda gi, go: (gi[0] * 2,))
    (y + z).sum().backward()
    return x.grad


def _accumulate_grad_prehook(M):
    x, log = _L(M, 1., 2.), []
    y = x * 3
    acc = y.grad_fn.next_functions[0][0]
    acc.register_prehook(lambda go: log.append(_val(go[0])))
    y.sum().backward()
    return acc.name().split("::")[-1], acc.variable is x, log, x.grad


def _node_hook_wrong_count(M):
    x = _L(M, 1., 2.)
    y = x * 3
    y.grad_fn.register_hook(lambda gi, go: (gi[0], gi[0], gi[0]))
    y.sum().backward()


def _node_hook_fills_none(M):
    x = _L(M, 1., 2.)
    y = x * M.tensor([3., 4.])
    y.grad_fn.register_hook(lambda gi, go: (gi[0], gi[0]))
    y.sum().backward()


def _hook_grad_mode(M):
    x, log = _L(M, 1., 2.), []
    y = x * x
    y.register_hook(lambda g: log.append((g.requires_grad, M.is_grad_enabled())))
    y.sum().backward(retain_graph=True)
    M.autograd.grad(y.sum(), x, create_graph=True)
    return log


def _leaf_hook_every_backward(M):
    x, log = _L(M, 1., 2.), []
    x.register_hook(lambda g: log.append(_val(g)))
    z = (x * x).sum()
    z.backward(retain_graph=True)
    z.backward()
    return log, x.grad


HOOK_CASES = [_node_hook_wrong_count, _node_hook_fills_none, _hook_grad_mode,
              _leaf_hook_every_backward, _hook_order, _hook_remove, _leaf_hook, _retain_then_hook, _hook_then_retain,
              _retain_accumulates, _used_twice, _post_acc, _post_acc_returns, _post_acc_no_grad,
              _post_acc_nonleaf, _hook_no_grad, _hook_changes_size, _hook_changes_dtype,
              _node_hooks, _node_hooks_replace, _accumulate_grad_prehook]


@pytest.mark.parametrize("case", HOOK_CASES, ids=lambda f: f.__name__)
def test_hooks_like_torch(case, torch):
    _same(case, torch, exact_error=True)


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
def test_backward_and_grad_arguments_like_torch(case, torch):
    _same(case, torch, exact_error=case.__name__ in EXACT)


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
def test_double_backward_like_torch(name, torch):
    def case(M):
        x = M.tensor([[0.3, -0.7, 1.2], [0.5, 0.9, -0.2]], dtype=M.float64, requires_grad=True)
        g, = M.autograd.grad(SECOND_ORDER[name](M, x), x, create_graph=True)
        v = M.tensor([[1., 2., 3.], [-1., 0.5, 2.]], dtype=M.float64)
        gg, = M.autograd.grad((g * v).sum(), x)
        return g, gg
    _same(case, torch)


def test_third_order_and_backward_create_graph_like_torch(torch):
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
    _same(triple, torch)
    _same(via_backward, torch)


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
def test_inplace_and_versions_like_torch(case, torch):
    _same(case, torch, exact_error=case.__name__.startswith(("_version_error", "_saved",
                                                               "_data_setter")))


# ---- grad modes -----------------------------------------------------------------------------
def _modes(M):
    x, r = M.ones(2, requires_grad=True), []
    with M.no_grad():
        r.append((x * 2).requires_grad)
        with M.enable_grad():
            r.append((x * 2).requires_grad)
        r.append(M.is_grad_enabled())
    with M.set_grad_enabled(False):
        r.append((x * 2).requires_grad)
    r.append(M.is_grad_enabled())
    M.set_grad_enabled(False)
    r.append(M.is_grad_enabled())
    M.set_grad_enabled(True)

    @M.set_grad_enabled(False)
    def f():
        return (x * 2).requires_grad

    @M.no_grad()
    def g():
        return (x * 2).requires_grad

    @M.enable_grad()
    def h():
        return (x * 2).requires_grad
    r += [M.is_grad_enabled(), f(), M.is_grad_enabled(), g()]
    with M.no_grad():
        r.append(h())
    return r


def _inference(M):
    x = M.ones(2, requires_grad=True)
    with M.inference_mode():
        y = x * 2
        r = [y.requires_grad, y.is_inference(), M.is_inference_mode_enabled(),
             M.is_grad_enabled()]
    with M.inference_mode(False):
        z = x * 2
    return r, y.is_inference(), z.requires_grad, z.is_inference()


def _inference_saved(M):
    x = M.ones(2, requires_grad=True)
    with M.inference_mode():
        y = M.ones(2)
    (x * y).sum().backward()


def _inference_requires_grad(M):
    with M.inference_mode():
        y = M.ones(2)
    y.requires_grad_()


def _integer_outputs(M):
    x = M.tensor([1.5, 2.5], requires_grad=True)
    return [t.requires_grad for t in (x.argmax(), x > 1, x.long(), x.max(0)[1])] + \
        [t.requires_grad for t in (x.floor(), x.round(), x.sign())]


def _decorated_generator(M):
    x = M.ones(2, requires_grad=True)

    @M.no_grad()
    def gen():
        yield (x * 2).requires_grad
        yield M.is_grad_enabled()
        return "done"
    g, r = gen(), []
    r.append(next(g))
    r.append(M.is_grad_enabled())
    r.append(next(g))
    try:
        next(g)
    except StopIteration as e:
        r.append(e.value)
    return r


def _backward_inside_no_grad(M):
    x = M.ones(2, requires_grad=True)
    y = (x * x).sum()
    with M.no_grad():
        y.backward()
    return x.grad


def _inference_enable_grad(M):
    x = M.ones(2, requires_grad=True)
    with M.inference_mode():
        with M.enable_grad():
            y = x * 2
            a = (y.requires_grad, M.is_grad_enabled(), y.is_inference())
            with M.no_grad():
                a += (M.is_grad_enabled(),)
        with M.set_grad_enabled(True):
            b = ((x * 2).requires_grad, M.is_grad_enabled())
        c = M.is_grad_enabled()
    return a, b, c, M.is_grad_enabled()


def _inference_false_enables_grad(M):
    x = M.ones(2, requires_grad=True)
    with M.no_grad():
        with M.inference_mode(False):
            r = (M.is_grad_enabled(), M.is_inference_mode_enabled(), (x * 2).requires_grad)
    return r, M.is_grad_enabled()


MODE_CASES = [_inference_enable_grad, _inference_false_enables_grad, _decorated_generator, _backward_inside_no_grad, _modes, _inference, _inference_saved, _inference_requires_grad, _integer_outputs]


@pytest.mark.parametrize("case", MODE_CASES, ids=lambda f: f.__name__)
def test_grad_modes_like_torch(case, torch):
    _same(case, torch, exact_error=True)


# ---- grad_fn graph --------------------------------------------------------------------------
NAMED = {
    "add": lambda M, x, w: x + w, "sub": lambda M, x, w: x - w, "mul": lambda M, x, w: x * w,
    "div": lambda M, x, w: x / w, "neg": lambda M, x, w: -x, "mm": lambda M, x, w: x @ w.t(),
    "sum": lambda M, x, w: x.sum(), "sum_dim": lambda M, x, w: x.sum(0),
    "view": lambda M, x, w: x.view(6), "reshape": lambda M, x, w: x.reshape(3, 2),
    "t": lambda M, x, w: x.t(), "permute": lambda M, x, w: x.permute(1, 0),
    "unsqueeze": lambda M, x, w: x.unsqueeze(0), "slice": lambda M, x, w: x[:, 1:],
    "exp": lambda M, x, w: x.exp(), "tanh": lambda M, x, w: x.tanh(),
    "cat": lambda M, x, w: M.cat([x, w]), "clone": lambda M, x, w: x.clone(),
    "to64": lambda M, x, w: x.double(), "powt": lambda M, x, w: x ** w,
}


@pytest.mark.parametrize("name", sorted(NAMED))
def test_grad_fn_names_and_edges_like_torch(name, torch):
    def case(M):
        x, w = M.ones(2, 3, requires_grad=True), M.ones(2, 3, requires_grad=True)
        n = NAMED[name](M, x, w).grad_fn
        return n.name(), [(f.name().split("::")[-1] if f is not None else None, i)
                          for f, i in n.next_functions]
    _same(case, torch)


def test_next_functions_none_and_shared_accumulator_like_torch(torch):
    def case(M):
        x, c = M.ones(2, requires_grad=True), M.ones(2)
        y, z, u = x * c, c * x, x * 3
        y.grad_fn.metadata["k"] = 1
        acc = y.grad_fn.next_functions[0][0]
        return ([(f is None, i) for f, i in y.grad_fn.next_functions],
                [(f is None, i) for f, i in z.grad_fn.next_functions],
                acc is u.grad_fn.next_functions[0][0], acc.variable is x,
                y.grad_fn.metadata, x.is_leaf, y.is_leaf, c.is_leaf)
    _same(case, torch)


# ---- autograd.Function ----------------------------------------------------------------------
def _function(M, forward, backward, setup=None):
    body = {"forward": staticmethod(forward), "backward": staticmethod(backward)}
    if setup is not None:
        body["setup_context"] = staticmethod(setup)
    return type("F", (M.autograd.Function,), body)


def _fn_view(M):
    F = _function(M, lambda ctx, x: x.view(-1), lambda ctx, g: g.view(2, 2) * 2)
    x = M.ones(2, 2, requires_grad=True)
    F.apply(x).sum().backward()
    return x.grad


def _fn_input(M):
    F = _function(M, lambda ctx, x: x, lambda ctx, g: g * 2)
    x = M.ones(2, requires_grad=True)
    y = F.apply(x)
    y.sum().backward()
    return y is x, y.is_leaf, x.grad


def _fn_nontensor(M):
    F = _function(M, lambda ctx, x, k: (x * k, k + 1), lambda ctx, g, _: (g * 2, None))
    x = M.ones(2, requires_grad=True)
    y, k = F.apply(x, 3)
    y.sum().backward()
    return k, x.grad


def _fn_dirty(M):
    def fwd(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x
    F = _function(M, fwd, lambda ctx, g: g * 2)
    a = M.ones(2, requires_grad=True)
    x = a * 1
    y = F.apply(x)
    y.sum().backward()
    return y is x, a.grad, x


def _fn_dirty_leaf(M):
    def fwd(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x
    F = _function(M, fwd, lambda ctx, g: g * 2)
    F.apply(M.ones(2, requires_grad=True))


def _fn_setup_context(M):
    def setup(ctx, inputs, output):
        ctx.k = inputs[1]
        ctx.save_for_backward(inputs[0])

    def bwd(ctx, g):
        x, = ctx.saved_tensors
        return g * ctx.k + x, None
    F = _function(M, lambda x, k: x * k, bwd, setup)
    x = M.ones(2, requires_grad=True)
    F.apply(x, 3).sum().backward()
    return x.grad


def _fn_kwargs(M):
    F = _function(M, lambda ctx, x, k=2: x * k, lambda ctx, g: (g * 2, None))
    F.apply(M.ones(2, requires_grad=True), k=3)


def _fn_double(M):
    def fwd(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    def bwd(ctx, g):
        x, = ctx.saved_tensors
        return g * 3 * x ** 2
    F = _function(M, fwd, bwd)
    x = M.tensor([0.5, 2.], dtype=M.float64, requires_grad=True)
    g, = M.autograd.grad(F.apply(x).sum(), x, create_graph=True)
    return g, M.autograd.grad(g.sum(), x)[0]


def _fn_wrong_count(M):
    F = _function(M, lambda ctx, x, y: x * y, lambda ctx, g: g)
    x = M.ones(2, requires_grad=True)
    F.apply(x, x).sum().backward()


def _fn_non_differentiable(M):
    def fwd(ctx, x):
        i = x.argmax()
        ctx.mark_non_differentiable(i)
        return x * 2, i
    F = _function(M, fwd, lambda ctx, g, gi: g * 2)
    y, i = F.apply(M.tensor([1., 3.], requires_grad=True))
    return y.requires_grad, i.requires_grad, F.apply(M.ones(2))[0].requires_grad


FUNCTION_CASES = [_fn_view, _fn_input, _fn_nontensor, _fn_dirty, _fn_dirty_leaf,
                  _fn_setup_context, _fn_kwargs, _fn_double, _fn_wrong_count,
                  _fn_non_differentiable]


@pytest.mark.parametrize("case", FUNCTION_CASES, ids=lambda f: f.__name__)
def test_function_edge_cases_like_torch(case, torch):
    _same(case, torch)


# ---- gaps owned elsewhere (runtime/shape_ops.py, ops.py, tensor slots) ------------------------
def test_retain_grad_survives_inplace_like_torch(torch):
    def case(M):
        x = M.ones(2, requires_grad=True)
        y = x * 2
        y.retain_grad()
        y.mul_(3)
        (y * y).sum().backward()
        return y.grad, y.retains_grad, x.grad
    _same(case, torch)


def _retain_then_two_inplace(M):
    x = M.tensor([1., 2.], requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.add_(1)
    y.mul_(x)
    (y * y).sum().backward()
    return y.grad, y.retains_grad, x.grad


def _retain_then_setitem(M):
    x, w = M.tensor([1., 2., 3.], requires_grad=True), M.tensor(4., requires_grad=True)
    y = x * 3
    y.retain_grad()
    y[1] = w
    (y * y).sum().backward()
    return y.grad, x.grad, w.grad


def _retain_then_fill_and_nograd_inplace(M):
    x = M.tensor([1., 2.], requires_grad=True)
    y, z = x * 2, x * 5
    y.retain_grad()
    z.retain_grad()
    y.fill_(7.)                        # the new value does not depend on the old one
    with M.no_grad():
        z.mul_(2)                      # untracked: z keeps its grad_fn and keeps retaining
    (y * z).sum().backward()
    return y.grad, z.grad, x.grad, y.retains_grad, z.retains_grad


@pytest.mark.parametrize("case", [_retain_then_two_inplace, _retain_then_setitem,
                                  _retain_then_fill_and_nograd_inplace],
                         ids=lambda f: f.__name__)
def test_retain_grad_after_inplace_variants_like_torch(case, torch):
    _same(case, torch)


def test_inplace_on_view_rebases_base_like_torch(torch):
    def case(M):
        x = M.ones(2, 2, requires_grad=True)
        y = x * 1
        y[0].mul_(3)
        (y * y).sum().backward()
        return y.grad_fn.name().split("::")[-1], x.grad
    _same(case, torch)


def _gname(t):
    return t.grad_fn.name().split("::")[-1]


def test_inplace_mul_on_row_view_like_torch(torch):
    def case(M):
        x = M.arange(6., requires_grad=True)
        y = (x * 2).reshape(2, 3)
        row = y[1]
        row.mul_(x[:3])                    # the other operand requires grad too
        (y * y * M.tensor([1., 2., 3.])).sum().backward()
        return _gname(y), _gname(row), x.grad, y, y._version, row._version
    _same(case, torch)


def test_inplace_add_on_column_slice_like_torch(torch):
    def case(M):
        x = M.arange(12., requires_grad=True)
        y = x.reshape(3, 4) * 1
        col = y[:, 1:3]                    # not contiguous
        col.add_(10.)
        (y * y).sum().backward()
        return _gname(y), _gname(col), x.grad, y
    _same(case, torch)


def test_two_inplace_ops_on_different_views_of_one_base_like_torch(torch):
    def case(M):
        x = M.arange(1., 7., requires_grad=True)
        y = x.reshape(2, 3) * 1
        row, col = y[0], y[:, 2]           # overlapping at y[0, 2]
        row.mul_(3)
        col.mul_(col.detach())             # col's history now starts from the first rebase
        (y * y).sum().backward()
        return _gname(y), _gname(row), _gname(col), x.grad, y, row, y._version
    _same(case, torch)


def test_view_read_after_inplace_on_base_like_torch(torch):
    def case(M):
        x = M.arange(4., requires_grad=True)
        y = x * 1
        tail = y[1:]
        y.mul_(2)                          # tail now reads the new value of y
        (tail * tail).sum().backward()
        return _gname(tail), x.grad
    _same(case, torch)


def test_inplace_on_view_made_under_no_grad_error_text(torch):
    def case(M):
        y = M.ones(3, requires_grad=True) * 1
        with M.no_grad():
            v = y[:2]
        v.mul_(2)
    _same(case, torch, exact_error=True)


def test_inplace_on_view_gradient_matches_finite_differences():
    def f(xv):
        x = ag.tensor(xv, dtype=ag.float64, requires_grad=True)
        base = (x * x).reshape(3, 3)
        y = base.t()                       # a view: its own views are strided views of base
        v = y[1:, ::2]
        v.mul_(y[0, :2] + 1.)
        v.exp_()
        out = (base * ag.arange(9., dtype=ag.float64).reshape(3, 3)).sum()
        return out, x
    xv = np.linspace(-1., 1.2, 9)
    out, x = f(xv)
    out.backward()
    num, eps = np.zeros(9), 1e-6
    for i in range(9):
        e = np.zeros(9)
        e[i] = eps
        num[i] = (f(xv + e)[0].item() - f(xv - e)[0].item()) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), num, rtol=1e-6, atol=1e-7)


def test_inplace_on_view_of_leaf_error_text(torch):
    def case(M):
        M.ones(2, 2, requires_grad=True)[0].add_(1)
    _same(case, torch, exact_error=True)


def test_inplace_on_inference_tensor_outside_raises(torch):
    def case(M):
        with M.inference_mode():
            y = M.ones(2)
        y.add_(1)
    _same(case, torch)


@pytest.mark.parametrize("write", ["add_", "setitem", "copy_", "fill_", "zero_"])
@pytest.mark.parametrize("grad", [True, False])
def test_inplace_on_inference_tensor_outside_raises_every_write(torch, write, grad):
    def case(M):
        with M.inference_mode():
            y = M.ones(2)
            y.add_(1)                            # allowed inside
        with (M.enable_grad() if grad else M.no_grad()):
            {"add_": lambda: y.add_(1), "setitem": lambda: y.__setitem__(0, 3.),
             "copy_": lambda: y.copy_(M.zeros(2)), "fill_": lambda: y.fill_(4.),
             "zero_": lambda: y.zero_()}[write]()
    _same(case, torch)
    with ag.inference_mode():
        y = ag.ones(2)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside"):
        y.add_(1)
    np.testing.assert_array_equal(y.numpy(), [1., 1.])   # nothing written
    z = y.clone()                                         # a clone is a normal tensor
    z.add_(1)
    np.testing.assert_array_equal(z.numpy(), [2., 2.])


def test_grad_fn_name_of_vector_dot_and_matrix_vector(torch):
    def case(M):
        x = M.ones(2, 3, requires_grad=True)
        return (x[0] @ x[1]).grad_fn.name(), (x @ x[0]).grad_fn.name(), (x @ x.T).grad_fn.name()
    _same(case, torch)


def test_grad_fn_of_reflected_sub(torch):
    def case(M):
        n = (1 - M.ones(2, requires_grad=True)).grad_fn
        return n.name(), [(f is None, i) for f, i in n.next_functions]
    _same(case, torch)


def test_grad_fn_of_sub_variants_and_reflected_sub_gradient(torch):
    def case(M):
        x = M.tensor([1., 2., 3.], requires_grad=True)
        y = M.tensor([0.5, -1., 2.], requires_grad=True)
        nodes = [(x - y).grad_fn, x.__rsub__(y).grad_fn, (x - 2).grad_fn, (2.5 - x).grad_fn]
        names = [(n.name(), [f is None for f, _ in n.next_functions]) for n in nodes]
        ((2.5 - x * y) * x + x.__rsub__(y) * y).sum().backward()
        return names, x.grad.tolist(), y.grad.tolist(), x.__rsub__(y).tolist()
    _same(case, torch)


# ---- torch-free pins of the fixes -----------------------------------------------------------
def test_reflected_sub_one_edge_gradient_eager_and_compiled():
    x = ag.tensor([1., 2., 3.], requires_grad=True)
    n = (1 - x).grad_fn
    assert n.name() == "RsubBackward1" and len(n.next_functions) == 1
    assert n.next_functions[0][0] is not None
    f = lambda x: ((2 - x * x) * x).sum()   # d/dx (2x - x^3) = 2 - 3x^2
    f(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 - 3 * np.array([1., 2., 3.]) ** 2)
    x.grad = None
    ag.compile(f)(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 - 3 * np.array([1., 2., 3.]) ** 2)


def test_backward_inputs_nonleaf_gets_grad():
    x = ag.tensor([1., 2.], requires_grad=True)
    y = x * 3
    z = (y * y).sum()
    z.backward(inputs=[y], retain_graph=True)
    np.testing.assert_allclose(y.grad.numpy(), 2 * 3 * np.array([1., 2.]))
    assert x.grad is None and y.retains_grad  # like PyTorch: backward retain_grad()s it
    z.backward(inputs=[y, x])  # accumulates; x now gets its grad too
    np.testing.assert_allclose(y.grad.numpy(), 4 * 3 * np.array([1., 2.]))
    np.testing.assert_allclose(x.grad.numpy(), 18 * np.array([1., 2.]))


def test_backward_inputs_empty_raises():
    x = ag.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="`inputs` argument to `backward\\(\\)` cannot be "
                                           "empty"):
        (x * 2).sum().backward(inputs=[])


def test_captured_grad_of_a_node_that_also_runs_is_taken_before_its_hooks():
    # PyTorch's engine quirk: autograd.grad captures a non-leaf's grad after its tensor hooks
    # when nothing below it is needed, and before them when the node runs for another input
    x = ag.tensor([1., 2.], requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: g + 1)
    gy, = ag.autograd.grad((y * y).sum(), y, retain_graph=True)
    np.testing.assert_allclose(gy.numpy(), 4 * np.array([1., 2.]) + 1)
    gy, gx = ag.autograd.grad((y * y).sum(), [y, x])
    np.testing.assert_allclose(gy.numpy(), 4 * np.array([1., 2.]))
    np.testing.assert_allclose(gx.numpy(), 2 * (4 * np.array([1., 2.]) + 1))


def test_hook_changing_size_or_dtype_raises():
    x = ag.ones(2, requires_grad=True)
    y = x * 2
    y.register_hook(lambda g: ag.ones(3))
    with pytest.raises(RuntimeError, match="hook '<lambda>' has changed the size of value"):
        y.sum().backward()

    def to64(g):
        return g.double()
    x.register_hook(to64)
    with pytest.raises(RuntimeError, match="hook 'to64' has changed the type of value"):
        (x * 2).sum().backward()


def test_post_accumulate_hook_rules():
    x = ag.ones(2, requires_grad=True)
    x.register_post_accumulate_grad_hook(lambda t: t.grad)
    with pytest.raises(RuntimeError, match="post accumulate grad hooks should return None"):
        (x * 2).sum().backward()
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        ag.ones(2).register_post_accumulate_grad_hook(lambda t: None)


def test_grad_unused_names_index_and_materialize_conflict():
    x, w = ag.ones(2, requires_grad=True), ag.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="differentiated Tensor at index 1 appears to not"):
        ag.autograd.grad((x * 2).sum(), [x, w])
    with pytest.raises(ValueError, match="allow_unused to be True or not passed"):
        ag.autograd.grad((x * 2).sum(), [x, w], materialize_grads=True, allow_unused=False)


def test_grad_is_grads_batched_gives_jacobian():
    x = ag.tensor([1., 2., 3.], requires_grad=True)
    w = ag.tensor([0.5, -1.], requires_grad=True)
    y = ag.cat([x * x, w.exp()])             # 5 outputs
    jx, jw = ag.autograd.grad(y, (x, w), ag.eye(5), is_grads_batched=True)
    ex = np.zeros((5, 3))
    ex[[0, 1, 2], [0, 1, 2]] = 2 * np.array([1., 2., 3.])
    ew = np.zeros((5, 2))
    ew[[3, 4], [0, 1]] = np.exp([0.5, -1.])
    np.testing.assert_allclose(jx.numpy(), ex, rtol=1e-6)
    np.testing.assert_allclose(jw.numpy(), ew, rtol=1e-6)
    with pytest.raises(RuntimeError, match=r"grad_output\[0\] has shape \[5\], expected a "
                                           r"batch dim"):
        ag.autograd.grad(y, x, ag.ones(5), is_grads_batched=True)


def test_data_does_not_share_version_counter_but_detach_does():
    x = ag.ones(2, requires_grad=True)
    y = x.exp()
    y.data.add_(1)                        # not tracked, no version bump: no error
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(2, np.e + 1), rtol=1e-6)
    y = x.exp()
    y.detach().add_(1)
    assert int(y._version) == 1 and y._version == 1 and y._version != 0
    assert y._version + 1 == 2 and 3 - y._version == 2 and y._version > 0
    with pytest.raises(RuntimeError, match=r"output 0 of Exp, is at version 1; expected "
                                           r"version 0"):
        y.sum().backward()


def test_inference_tensors_cannot_be_saved_or_require_grad():
    with ag.inference_mode():
        y = ag.ones(2)
    x = ag.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        x * y
    np.testing.assert_allclose((x + y).detach().numpy(), 2.)   # add saves nothing: allowed
    with pytest.raises(RuntimeError, match="Setting requires_grad=True on inference tensor"):
        y.requires_grad_()
    with ag.inference_mode():
        assert y.requires_grad_().requires_grad


def test_saved_tensor_accessors_and_free():
    x, w = ag.tensor([1., 2.], requires_grad=True), ag.tensor([3., 4.], requires_grad=True)
    y = x * w
    assert y.grad_fn._saved_self is x and y.grad_fn._saved_other is w
    e = (x * 1).exp()
    np.testing.assert_allclose(e.grad_fn._saved_result.detach().numpy(), np.exp([1., 2.]), rtol=1e-6)
    e.sum().backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second"):
        e.grad_fn._saved_result
    with pytest.raises(AttributeError, match="_saved_nothing"):
        e.grad_fn._saved_nothing


def test_backward_tensor_gradient_count_message():
    x = ag.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match=re.escape("got 2 tensors and 1 gradients")):
        ag.autograd.backward([(x * 2).sum(), (x * 3).sum()], [ag.tensor(1.)])


def test_node_hook_result_is_checked():
    x = ag.ones(2, requires_grad=True)
    y = x * ag.tensor([3., 4.])            # a constant operand: its grad slot is None
    h = y.grad_fn.register_hook(lambda gi, go: (gi[0],))
    with pytest.raises(RuntimeError, match=r"returned an incorrect number of values \(got 1, "
                                           r"but expected 2\)"):
        y.sum().backward(retain_graph=True)
    h.remove()
    y.grad_fn.register_hook(lambda gi, go: (gi[0], gi[0]))
    with pytest.raises(RuntimeError, match="can't replace a None gradient with a non-None"):
        y.sum().backward()


def test_stale_retain_grad_after_inplace_writes_nothing():
    # the old value's gradient (36 here) must not land in y.grad after y.mul_(3)
    x = ag.ones(2, requires_grad=True)
    y = x * 2
    y.retain_grad()
    y.mul_(3)
    (y * y).sum().backward()
    assert y.grad is None or np.allclose(y.grad.numpy(), 12.)
    np.testing.assert_allclose(x.grad.numpy(), 72.)


def test_grad_mode_decorator_on_generator_applies_per_step():
    x = ag.ones(2, requires_grad=True)
    seen = []

    @ag.no_grad()
    def gen():
        seen.append((x * 2).requires_grad)
        got = yield 1
        seen.append((got, ag.is_grad_enabled()))
        yield 2
    g = gen()
    assert next(g) == 1 and ag.is_grad_enabled()
    assert g.send("a") == 2
    assert seen == [False, ("a", False)]
    g.close()
    assert ag.is_grad_enabled()

    @ag.enable_grad()
    def gen2():
        yield (x * 2).requires_grad
    with ag.no_grad():
        assert list(gen2()) == [True]


def test_backward_create_graph_warns_once_about_the_cycle():
    from aotgrad.runtime import autograd_api
    autograd_api._warned_cycle.clear()
    x = ag.ones(2, requires_grad=True)
    with pytest.warns(UserWarning, match="reference cycle"):
        (x * x).sum().backward(create_graph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (x * x).sum().backward(create_graph=True)


def test_grad_mode_inside_inference_mode_is_reported_but_records_nothing():
    x = ag.ones(2, requires_grad=True)
    with ag.inference_mode():
        with ag.enable_grad():
            assert ag.is_grad_enabled()
            y = x * 2
            assert not y.requires_grad and y.grad_fn is None
            with ag.set_grad_enabled(False):
                assert not ag.is_grad_enabled()
            assert ag.is_grad_enabled()
        assert not ag.is_grad_enabled()
        with ag.inference_mode(False):   # leaves inference mode and turns grad mode on
            assert ag.is_grad_enabled() and (x * 2).requires_grad
    with ag.no_grad():
        with ag.inference_mode(False):
            assert ag.is_grad_enabled()
        assert not ag.is_grad_enabled()
    assert ag.is_grad_enabled()


def test_backward_names_the_tensor_that_does_not_require_grad():
    x = ag.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="element 1 of tensors does not require grad"):
        ag.autograd.backward([(x * 2).sum(), ag.ones(1).sum()])


def test_data_setter_needs_a_tensor():
    x = ag.ones(2, requires_grad=True)
    with pytest.raises(TypeError, match="Variable data has to be a tensor, but got list"):
        x.data = [1., 2.]
    x.data = ag.tensor([3., 4.])
    assert x.requires_grad and x.is_leaf
    np.testing.assert_array_equal(x.detach().numpy(), [3., 4.])
