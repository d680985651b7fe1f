"""The eager autograd engine against PyTorch, continued: grad modes, grad_fn graphs,
autograd.Function edge cases, gaps fixed in the ops and tensor slots, and torch-free pins of
the fixes (closed forms, so they run without torch). Helpers in torch_compare.py.
"""
import re
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close



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
def test_grad_modes_like_torch(case, vs_torch):
    vs_torch.same(case, exact_error=True)


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
def test_grad_fn_names_and_edges_like_torch(name, vs_torch):
    def case(M):
        x, w = M.ones(2, 3, requires_grad=True), M.ones(2, 3, requires_grad=True)
        n = NAMED[name](M, x, w).grad_fn
        return n.name(), [(f.name().split("::")[-1] if f is not None else None, i)
                          for f, i in n.next_functions]
    vs_torch.same(case)


def test_next_functions_none_and_shared_accumulator_like_torch(vs_torch):
    def case(M):
        x, c = M.ones(2, requires_grad=True), M.ones(2)
        y, z, u = x * c, c * x, x * 3
        y.grad_fn.metadata["k"] = 1
        acc = y.grad_fn.next_functions[0][0]
        return ([(f is None, i) for f, i in y.grad_fn.next_functions],
                [(f is None, i) for f, i in z.grad_fn.next_functions],
                acc is u.grad_fn.next_functions[0][0], acc.variable is x,
                y.grad_fn.metadata, x.is_leaf, y.is_leaf, c.is_leaf)
    vs_torch.same(case)


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
def test_function_edge_cases_like_torch(case, vs_torch):
    vs_torch.same(case)


# ---- gaps owned elsewhere (runtime/shape_ops.py, ops.py, tensor slots) ------------------------
def test_retain_grad_survives_inplace_like_torch(vs_torch):
    def case(M):
        x = M.ones(2, requires_grad=True)
        y = x * 2
        y.retain_grad()
        y.mul_(3)
        (y * y).sum().backward()
        return y.grad, y.retains_grad, x.grad
    vs_torch.same(case)


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
def test_retain_grad_after_inplace_variants_like_torch(case, vs_torch):
    vs_torch.same(case)


def test_inplace_on_view_rebases_base_like_torch(vs_torch):
    def case(M):
        x = M.ones(2, 2, requires_grad=True)
        y = x * 1
        y[0].mul_(3)
        (y * y).sum().backward()
        return y.grad_fn.name().split("::")[-1], x.grad
    vs_torch.same(case)


def _gname(t):
    return t.grad_fn.name().split("::")[-1]


def test_inplace_mul_on_row_view_like_torch(vs_torch):
    def case(M):
        x = M.arange(6., requires_grad=True)
        y = (x * 2).reshape(2, 3)
        row = y[1]
        row.mul_(x[:3])                    # the other operand requires grad too
        (y * y * M.tensor([1., 2., 3.])).sum().backward()
        return _gname(y), _gname(row), x.grad, y, y._version, row._version
    vs_torch.same(case)


def test_inplace_add_on_column_slice_like_torch(vs_torch):
    def case(M):
        x = M.arange(12., requires_grad=True)
        y = x.reshape(3, 4) * 1
        col = y[:, 1:3]                    # not contiguous
        col.add_(10.)
        (y * y).sum().backward()
        return _gname(y), _gname(col), x.grad, y
    vs_torch.same(case)


def test_two_inplace_ops_on_different_views_of_one_base_like_torch(vs_torch):
    def case(M):
        x = M.arange(1., 7., requires_grad=True)
        y = x.reshape(2, 3) * 1
        row, col = y[0], y[:, 2]           # overlapping at y[0, 2]
        row.mul_(3)
        col.mul_(col.detach())             # col's history now starts from the first rebase
        (y * y).sum().backward()
        return _gname(y), _gname(row), _gname(col), x.grad, y, row, y._version
    vs_torch.same(case)


def test_view_read_after_inplace_on_base_like_torch(vs_torch):
    def case(M):
        x = M.arange(4., requires_grad=True)
        y = x * 1
        tail = y[1:]
        y.mul_(2)                          # tail now reads the new value of y
        (tail * tail).sum().backward()
        return _gname(tail), x.grad
    vs_torch.same(case)


def test_inplace_on_view_made_under_no_grad_error_text(vs_torch):
    def case(M):
        y = M.ones(3, requires_grad=True) * 1
        with M.no_grad():
            v = y[:2]
        v.mul_(2)
    vs_torch.same(case, exact_error=True)


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
    assert_close(x.grad.numpy(), num, rtol=1e-6, atol=1e-7, equal_nan=True)


def test_inplace_on_view_of_leaf_error_text(vs_torch):
    def case(M):
        M.ones(2, 2, requires_grad=True)[0].add_(1)
    vs_torch.same(case, exact_error=True)


def test_inplace_on_inference_tensor_outside_raises(vs_torch):
    def case(M):
        with M.inference_mode():
            y = M.ones(2)
        y.add_(1)
    vs_torch.same(case)


@pytest.mark.parametrize("write", ["add_", "setitem", "copy_", "fill_", "zero_"])
@pytest.mark.parametrize("grad", [True, False])
def test_inplace_on_inference_tensor_outside_raises_every_write(vs_torch, write, grad):
    def case(M):
        with M.inference_mode():
            y = M.ones(2)
            y.add_(1)                            # allowed inside
        with (M.enable_grad() if grad else M.no_grad()):
            {"add_": lambda: y.add_(1), "setitem": lambda: y.__setitem__(0, 3.),
             "copy_": lambda: y.copy_(M.zeros(2)), "fill_": lambda: y.fill_(4.),
             "zero_": lambda: y.zero_()}[write]()
    vs_torch.same(case)
    with ag.inference_mode():
        y = ag.ones(2)
    with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside"):
        y.add_(1)
    np.testing.assert_array_equal(y.numpy(), [1., 1.])   # nothing written
    z = y.clone()                                         # a clone is a normal tensor
    z.add_(1)
    np.testing.assert_array_equal(z.numpy(), [2., 2.])


def test_grad_fn_name_of_vector_dot_and_matrix_vector(vs_torch):
    def case(M):
        x = M.ones(2, 3, requires_grad=True)
        return (x[0] @ x[1]).grad_fn.name(), (x @ x[0]).grad_fn.name(), (x @ x.T).grad_fn.name()
    vs_torch.same(case)


def test_grad_fn_of_reflected_sub(vs_torch):
    def case(M):
        n = (1 - M.ones(2, requires_grad=True)).grad_fn
        return n.name(), [(f is None, i) for f, i in n.next_functions]
    vs_torch.same(case)


def test_grad_fn_of_sub_variants_and_reflected_sub_gradient(vs_torch):
    def case(M):
        x = M.tensor([1., 2., 3.], requires_grad=True)
        y = M.tensor([0.5, -1., 2.], requires_grad=True)
        nodes = [(x - y).grad_fn, x.__rsub__(y).grad_fn, (x - 2).grad_fn, (2.5 - x).grad_fn]
        names = [(n.name(), [f is None for f, _ in n.next_functions]) for n in nodes]
        ((2.5 - x * y) * x + x.__rsub__(y) * y).sum().backward()
        return names, x.grad.tolist(), y.grad.tolist(), x.__rsub__(y).tolist()
    vs_torch.same(case)


# ---- torch-free pins of the fixes -----------------------------------------------------------
def test_reflected_sub_one_edge_gradient_eager_and_compiled():
    x = ag.tensor([1., 2., 3.], requires_grad=True)
    n = (1 - x).grad_fn
    assert n.name() == "RsubBackward1" and len(n.next_functions) == 1
    assert n.next_functions[0][0] is not None
    f = lambda x: ((2 - x * x) * x).sum()   # d/dx (2x - x^3) = 2 - 3x^2
    f(x).backward()
    assert_close(x.grad.numpy(), 2 - 3 * np.array([1., 2., 3.]) ** 2, rtol=1e-7, atol=0,
                 equal_nan=True, check_dtype=False)
    x.grad = None
    ag.compile(f)(x).backward()
    assert_close(x.grad.numpy(), 2 - 3 * np.array([1., 2., 3.]) ** 2, rtol=1e-7, atol=0,
                 equal_nan=True, check_dtype=False)


def test_backward_inputs_nonleaf_gets_grad():
    x = ag.tensor([1., 2.], requires_grad=True)
    y = x * 3
    z = (y * y).sum()
    z.backward(inputs=[y], retain_graph=True)
    assert_close(y.grad.numpy(), 2 * 3 * np.array([1., 2.]), rtol=1e-7, atol=0, equal_nan=True,
                 check_dtype=False)
    assert x.grad is None and y.retains_grad  # like PyTorch: backward retain_grad()s it
    z.backward(inputs=[y, x])  # accumulates; x now gets its grad too
    assert_close(y.grad.numpy(), 4 * 3 * np.array([1., 2.]), rtol=1e-7, atol=0, equal_nan=True,
                 check_dtype=False)
    assert_close(x.grad.numpy(), 18 * np.array([1., 2.]), rtol=1e-7, atol=0, equal_nan=True,
                 check_dtype=False)


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
    assert_close(gy.numpy(), 4 * np.array([1., 2.]) + 1, rtol=1e-7, atol=0, equal_nan=True,
                 check_dtype=False)
    gy, gx = ag.autograd.grad((y * y).sum(), [y, x])
    assert_close(gy.numpy(), 4 * np.array([1., 2.]), rtol=1e-7, atol=0, equal_nan=True,
                 check_dtype=False)
    assert_close(gx.numpy(), 2 * (4 * np.array([1., 2.]) + 1), rtol=1e-7, atol=0, equal_nan=True,
                 check_dtype=False)


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
    assert_close(jx.numpy(), ex, rtol=1e-6, atol=0, equal_nan=True, check_dtype=False)
    assert_close(jw.numpy(), ew, rtol=1e-6, atol=0, equal_nan=True, check_dtype=False)
    with pytest.raises(RuntimeError, match=r"grad_output\[0\] has shape \[5\], expected a "
                                           r"batch dim"):
        ag.autograd.grad(y, x, ag.ones(5), is_grads_batched=True)


def test_data_does_not_share_version_counter_but_detach_does():
    x = ag.ones(2, requires_grad=True)
    y = x.exp()
    y.data.add_(1)                        # not tracked, no version bump: no error
    y.sum().backward()
    assert_close(x.grad.numpy(), np.full(2, np.e + 1), rtol=1e-6, atol=0, equal_nan=True,
                 check_dtype=False)
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
    # add saves nothing: allowed
    assert_close((x + y).detach().numpy(), np.full(2, 2., np.float32), rtol=1e-7, atol=0,
                 equal_nan=True)
    with pytest.raises(RuntimeError, match="Setting requires_grad=True on inference tensor"):
        y.requires_grad_()
    with ag.inference_mode():
        assert y.requires_grad_().requires_grad


def test_saved_tensor_accessors_and_free():
    x, w = ag.tensor([1., 2.], requires_grad=True), ag.tensor([3., 4.], requires_grad=True)
    y = x * w
    assert y.grad_fn._saved_self is x and y.grad_fn._saved_other is w
    e = (x * 1).exp()
    assert_close(e.grad_fn._saved_result.detach().numpy(), np.exp([1., 2.]), rtol=1e-6, atol=0,
                 equal_nan=True, check_dtype=False)
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
    assert_close(x.grad.numpy(), np.full(2, 72., np.float32), rtol=1e-7, atol=0, equal_nan=True)


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
