"""aotgrad.func against torch.func on the same functions (an MLP, the Hessian of a small
net, per-sample gradients of a small CNN, jacfwd == jacrev), against finite differences in
float64, the errors torch.func gives, and the compositions under aotgrad.compile."""
import numpy as np
import pytest

import aotgrad
from aotgrad import func as F
from torch_compare import close

rng = np.random.default_rng(1)


def _np(*shape, dtype=np.float64):
    return rng.normal(size=shape).astype(dtype)


def _mlp(lib):
    def f(w1, b1, w2, x):
        h = lib.tanh(x @ w1.T + b1)
        return (h @ w2.T).sum() ** 2 / 10
    return f


def _args(*shapes):
    arrays = [_np(*s) for s in shapes]
    return arrays, [aotgrad.tensor(a) for a in arrays]


def test_grad_of_mlp_argnums_tuple_against_torch(torch):
    arrays, ours = _args((5, 4), (5,), (2, 5), (3, 4))
    theirs = [torch.tensor(a) for a in arrays]
    g = F.grad(_mlp(aotgrad), argnums=(0, 1, 2))(*ours)
    t = torch.func.grad(_mlp(torch), argnums=(0, 1, 2))(*theirs)
    assert isinstance(g, tuple) and len(g) == 3
    for a, b in zip(g, t):
        close(a, b, atol=1e-6, rtol=1e-6)
        assert not a.requires_grad


def test_grad_and_value_has_aux_against_torch(torch):
    x = _np(4)

    def f(lib):
        return lambda v: ((v.sin() * v).sum(), {"m": v.max()})
    (g, (val, aux)) = F.grad_and_value(f(aotgrad), has_aux=True)(aotgrad.tensor(x))
    (tg, (tval, taux)) = torch.func.grad_and_value(f(torch), has_aux=True)(torch.tensor(x))
    close(g, tg, atol=1e-6, rtol=1e-6)
    close(val, tval, atol=1e-6, rtol=1e-6)
    close(aux["m"], taux["m"], atol=1e-6, rtol=1e-6)


def test_grad_of_grad_against_closed_form():
    x = aotgrad.tensor(_np(5))
    g2 = F.grad(lambda v: F.grad(lambda u: (u ** 3).sum())(v).sum())(x)
    close(g2, 6 * x.numpy(), atol=1e-6, rtol=1e-6)


def test_grad_of_grad_sees_captured_outer_tensor():
    x = aotgrad.tensor(_np(3))
    c = aotgrad.tensor(_np(3))
    g = F.grad(lambda v: F.grad(lambda u: (v * u * u).sum())(c).sum())(x)
    close(g, 2 * c.numpy(), atol=1e-6, rtol=1e-6)


def test_grad_result_is_differentiable_by_backward():
    w = aotgrad.tensor(_np(3), requires_grad=True)
    x = aotgrad.tensor(_np(3))
    g = F.grad(lambda v: (w * v.sin()).sum())(x)   # w * cos(x)
    g.sum().backward()
    close(w.grad, np.cos(x.numpy()), atol=1e-6, rtol=1e-6)


def test_vjp_jvp_linearize_against_torch(torch):
    x, v, u = _np(4), _np(4), _np(3)
    m = _np(3, 4)

    def f(lib, mm):
        return lambda a: lib.tanh(mm @ a) * 2
    out, fn = F.vjp(f(aotgrad, aotgrad.tensor(m)), aotgrad.tensor(x))
    tout, tfn = torch.func.vjp(f(torch, torch.tensor(m)), torch.tensor(x))
    close(out, tout, atol=1e-6, rtol=1e-6)
    close(fn(aotgrad.tensor(u))[0], tfn(torch.tensor(u))[0], atol=1e-6, rtol=1e-6)
    o, j = F.jvp(f(aotgrad, aotgrad.tensor(m)), (aotgrad.tensor(x),), (aotgrad.tensor(v),))
    to, tj = torch.func.jvp(f(torch, torch.tensor(m)), (torch.tensor(x),), (torch.tensor(v),))
    close(o, to, atol=1e-6, rtol=1e-6)
    close(j, tj, atol=1e-6, rtol=1e-6)
    o, jfn = F.linearize(f(aotgrad, aotgrad.tensor(m)), aotgrad.tensor(x))
    close(jfn(aotgrad.tensor(v)), tj, atol=1e-6, rtol=1e-6)
    close(jfn(aotgrad.tensor(2 * v)), 2 * tj.numpy(), atol=1e-6, rtol=1e-6)


def test_jvp_against_finite_differences_float64():
    x, v = _np(5), _np(5)

    def f(a):
        return (a.exp() * a.sin()).cumsum(0)
    _, j = F.jvp(f, (aotgrad.tensor(x),), (aotgrad.tensor(v),))
    eps = 1e-6
    fd = (f(aotgrad.tensor(x + eps * v)).numpy() - f(aotgrad.tensor(x - eps * v)).numpy()) / \
        (2 * eps)
    close(j, fd, atol=1e-6, rtol=1e-6)


def test_jacrev_equals_jacfwd_equals_torch(torch):
    x = _np(2, 3)

    def f(lib):
        return lambda a: lib.tanh(a).sum(0) * a[0]
    jr = F.jacrev(f(aotgrad))(aotgrad.tensor(x))
    jf = F.jacfwd(f(aotgrad))(aotgrad.tensor(x))
    tj = torch.func.jacrev(f(torch))(torch.tensor(x))
    assert tuple(jr.shape) == tuple(tj.shape) == (3, 2, 3)
    close(jr, tj, atol=1e-6, rtol=1e-6)
    close(jf, tj, atol=1e-6, rtol=1e-6)


def test_jacobians_with_argnums_and_several_outputs(torch):
    a, b = _np(3), _np(2)

    def f(x, y):
        return x.sin() * y.sum(), y * 2
    ours = F.jacrev(f, argnums=(0, 1))(aotgrad.tensor(a), aotgrad.tensor(b))
    fw = F.jacfwd(f, argnums=(0, 1))(aotgrad.tensor(a), aotgrad.tensor(b))
    theirs = torch.func.jacrev(f, argnums=(0, 1))(torch.tensor(a), torch.tensor(b))
    for i in range(2):
        for j in range(2):
            close(ours[i][j], theirs[i][j], atol=1e-6, rtol=1e-6)
            close(fw[i][j], theirs[i][j], atol=1e-6, rtol=1e-6)


def _small_net(lib):
    def f(w1, w2, x):
        return (lib.tanh(x @ w1) @ w2).pow(2).sum()
    return f


def test_hessian_of_a_small_net_against_torch(torch):
    arrays, ours = _args((3, 4), (4, 2), (5, 3))
    theirs = [torch.tensor(a) for a in arrays]
    h = F.hessian(_small_net(aotgrad))(*ours)
    th = torch.func.hessian(_small_net(torch))(*theirs)
    assert tuple(h.shape) == (3, 4, 3, 4)
    close(h, th, atol=1e-6, rtol=1e-6)
    hrr = F.jacrev(F.jacrev(_small_net(aotgrad)))(*ours)
    close(hrr, th, atol=1e-6, rtol=1e-6)


def test_hessian_vector_product_forward_over_reverse(torch):
    arrays, ours = _args((3, 4), (4, 2), (5, 3))
    v = _np(3, 4)
    f = _small_net(aotgrad)
    _, hvp = F.jvp(F.grad(f), tuple(ours), (aotgrad.tensor(v), aotgrad.zeros(4, 2),
                                            aotgrad.zeros(5, 3)))
    tf = _small_net(torch)
    _, thvp = torch.func.jvp(torch.func.grad(tf), tuple(torch.tensor(a) for a in arrays),
                             (torch.tensor(v), torch.zeros(4, 2, dtype=torch.float64),
                              torch.zeros(5, 3, dtype=torch.float64)))
    close(hvp, thvp, atol=1e-6, rtol=1e-6)


def test_per_sample_grads_of_a_small_cnn_against_torch(torch):
    model = aotgrad.nn.Sequential(aotgrad.nn.Conv2d(1, 2, 3), aotgrad.nn.ReLU(),
                                  aotgrad.nn.Flatten(), aotgrad.nn.Linear(2 * 4 * 4, 3))
    tmodel = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU(),
                                 torch.nn.Flatten(), torch.nn.Linear(2 * 4 * 4, 3))
    with torch.no_grad():
        for (_, p), (_, tp) in zip(model.named_parameters(), tmodel.named_parameters()):
            tp.copy_(torch.tensor(p.detach().numpy()))
    x, y = _np(4, 1, 6, 6, dtype=np.float32), rng.integers(0, 3, 4)
    params = {k: v.detach() for k, v in model.named_parameters()}
    tparams = {k: v.detach() for k, v in tmodel.named_parameters()}

    def loss(lib, m):
        def f(p, xb, yb):
            out = F.functional_call(m, p, (xb[None],)) if lib is aotgrad else \
                torch.func.functional_call(m, p, (xb[None],))
            return lib.nn.functional.cross_entropy(out, yb[None])
        return f
    g = F.vmap(F.grad(loss(aotgrad, model)), in_dims=(None, 0, 0))(
        params, aotgrad.tensor(x), aotgrad.tensor(y))
    tg = torch.func.vmap(torch.func.grad(loss(torch, tmodel)), in_dims=(None, 0, 0))(
        tparams, torch.tensor(x), torch.tensor(y))
    for k in params:
        assert tuple(g[k].shape) == (4,) + tuple(params[k].shape)
        close(g[k], tg[k], atol=1e-4, rtol=1e-4)


def test_vmap_in_out_dims_nested_and_chunked(torch):
    x, y = _np(3, 4), _np(4, 5)
    ours = F.vmap(F.vmap(lambda a, b: a * b, in_dims=(None, 0)), in_dims=(0, None),
                  out_dims=1)(aotgrad.tensor(x), aotgrad.tensor(y.T.copy()))
    theirs = torch.func.vmap(torch.func.vmap(lambda a, b: a * b, in_dims=(None, 0)),
                             in_dims=(0, None), out_dims=1)(torch.tensor(x),
                                                            torch.tensor(y.T.copy()))
    close(ours, theirs, atol=1e-6, rtol=1e-6)
    c = F.vmap(lambda a: a.sum() * a, in_dims=1, chunk_size=2)(aotgrad.tensor(y))
    close(c, torch.func.vmap(lambda a: a.sum() * a, in_dims=1)(torch.tensor(y)),
          atol=1e-6, rtol=1e-6)


def test_vmap_of_jvp_and_grad_of_vmap(torch):
    x, ts = _np(4), _np(3, 4)
    f = lambda a: a.sin() * a.sum()  # noqa: E731
    ours = F.vmap(lambda t: F.jvp(f, (aotgrad.tensor(x),), (t,))[1])(aotgrad.tensor(ts))
    theirs = torch.func.vmap(lambda t: torch.func.jvp(f, (torch.tensor(x),), (t,))[1])(
        torch.tensor(ts))
    close(ours, theirs, atol=1e-6, rtol=1e-6)
    w = _np(4)
    g = F.grad(lambda v: F.vmap(lambda r: (r * v).sin().sum())(aotgrad.tensor(ts)).sum())(
        aotgrad.tensor(w))
    tg = torch.func.grad(lambda v: torch.func.vmap(lambda r: (r * v).sin().sum())(
        torch.tensor(ts)).sum())(torch.tensor(w))
    close(g, tg, atol=1e-6, rtol=1e-6)


def test_backward_through_vmap_sums_a_captured_parameter():
    w = aotgrad.tensor(_np(4), requires_grad=True)
    xs = aotgrad.tensor(_np(3, 4))
    F.vmap(lambda r: (r * w).tanh().sum())(xs).sum().backward()
    want = ((1 - np.tanh(xs.numpy() * w.detach().numpy()) ** 2) * xs.numpy()).sum(0)
    close(w.grad, want, atol=1e-6, rtol=1e-6)


def test_functional_call_and_stack_module_state(torch):
    models = [aotgrad.nn.Linear(3, 2) for _ in range(4)]
    params, buffers = F.stack_module_state(models)
    assert tuple(params["weight"].shape) == (4, 2, 3)
    x = aotgrad.tensor(_np(5, 3, dtype=np.float32))
    base = models[0]

    def call(p, b, xx):
        return F.functional_call(base, (p, b), (xx,))
    out = F.vmap(call, in_dims=(0, 0, None))(params, buffers, x)
    for i, m in enumerate(models):
        close(out[i], m(x), atol=1e-5, rtol=1e-5)
    assert base.weight is models[0].weight   # the module is left as it was


def test_errors_as_torch_func_gives_them():
    xs = aotgrad.tensor(_np(3, 4))
    with pytest.raises(RuntimeError, match="vmap: data-dependent control flow"):
        F.vmap(lambda r: r * 2 if r.sum() > 0 else r)(xs)
    with pytest.raises(RuntimeError, match=r"vmap: Tensor.item\(\)"):
        F.vmap(lambda r: r.sum().item())(xs)
    captured = aotgrad.zeros(4)

    def inplace(r):
        captured.add_(r)
        return r
    with pytest.raises(RuntimeError, match="vmap: in-place"):
        F.vmap(inplace)(xs)
    with pytest.raises(RuntimeError, match="scalar Tensor"):
        F.grad(lambda v: v * 2)(aotgrad.tensor(_np(3)))
    with pytest.raises(ValueError, match="same size in the mapped dimension"):
        F.vmap(lambda a, b: a + b)(xs, aotgrad.ones(2, 4))


# ---- under aotgrad.compile -----------------------------------------------------------------
COMPOSITIONS = {
    "vmap_grad": (lambda w, x: F.vmap(F.grad(lambda ww, xx: (ww @ xx).tanh().sum()),
                                      in_dims=(None, 0))(w, x), [(3, 4), (5, 4)]),
    "jacfwd_jacrev": (lambda w, x: F.jacfwd(F.jacrev(lambda xx: (w @ xx).sin().sum()))(x[0]),
                      [(3, 4), (5, 4)]),
    "vmap_jvp": (lambda w, x: F.vmap(lambda t: F.jvp(lambda xx: (w @ xx).tanh(), (x[0],),
                                                     (t,))[1])(x), [(3, 4), (5, 4)]),
    "grad_grad": (lambda w, x: F.grad(lambda xx: F.grad(lambda u: (u ** 3 * w[0]).sum())(
        xx).sum())(x[0]), [(3, 4), (5, 4)]),
}


@pytest.mark.parametrize("backend", ["interpret", pytest.param("numba", marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", sorted(COMPOSITIONS))
def test_compositions_compiled_equal_eager(name, backend):
    fn, shapes = COMPOSITIONS[name]
    args = [aotgrad.tensor(_np(*s, dtype=np.float32)) for s in shapes]
    eager = fn(*args)
    compiled = aotgrad.compile(fn, fullgraph=True, backend=backend)
    got = compiled(*args)
    close(got, eager, atol=1e-5, rtol=1e-5)


def test_vmap_randomness():
    x = aotgrad.ones(3, 4)
    with pytest.raises(RuntimeError, match="randomness='error'"):
        F.vmap(lambda r: r * aotgrad.rand(4))(x)
    same = F.vmap(lambda r: r * aotgrad.rand(4), randomness="same")(x).numpy()
    assert (same == same[0]).all()
    diff = F.vmap(lambda r: r * aotgrad.rand(4), randomness="different")(x).numpy()
    assert not (diff == diff[0]).all() and ((0 <= diff) & (diff < 1)).all()
    with pytest.raises(RuntimeError, match="Only allowed values for randomness"):
        F.vmap(lambda r: r, randomness="sometimes")
    with pytest.raises(RuntimeError, match="randomness='error'"):
        F.jacfwd(lambda r: r * aotgrad.rand(4))(aotgrad.ones(4))


def test_vmap_runs_one_bind_per_prim_whatever_the_batch():
    """No loop over the batch: the traced program of vmap(f) has as many nodes at batch 2
    as at batch 7."""
    from aotgrad.ir.core import GraphBuilder
    from aotgrad.runtime.tensor import Tensor

    def count(batch):
        with GraphBuilder() as b:
            x = Tensor._make(b.add_input(_aval(batch)))
            F.vmap(lambda r: (r @ r.T).softmax(-1).sum(0))(x)
        return len(b.graph.nodes)
    assert count(2) == count(7) > 0


def _aval(batch):
    from aotgrad.ir import dtypes as dt
    from aotgrad.ir.core import Aval
    return Aval((batch, 3, 4), dt.float32)


def test_compiled_backward_through_vmap_sums_over_the_batch():
    w = aotgrad.tensor(_np(4, dtype=np.float32), requires_grad=True)
    xs = aotgrad.tensor(_np(3, 4, dtype=np.float32))

    def f(ww, x):
        return F.vmap(lambda r: (r * ww).tanh().sum())(x).sum()
    f(w, xs).backward()
    eager = w.grad.numpy().copy()
    w.grad = None
    aotgrad.compile(f, fullgraph=True, backend="interpret")(w, xs).backward()
    close(w.grad, eager, atol=1e-6, rtol=1e-6)


def test_jacrev_of_jacrev_compiled_equals_eager():
    h = lambda x: F.jacrev(F.jacrev(lambda y: (y.sin() * y).sum()))(x)  # noqa: E731
    x = aotgrad.tensor(_np(3))
    want = np.diag(2 * np.cos(x.numpy()) - x.numpy() * np.sin(x.numpy()))
    close(h(x), want, atol=1e-10, rtol=1e-10)
    close(aotgrad.compile(h, fullgraph=True, backend="interpret")(x), want, atol=1e-10, rtol=1e-10)


def test_vmap_in_dims_follow_the_argument_structure(torch):
    a, b = _np(3, 2), _np(5, 3)
    ours = F.vmap(lambda d: d["a"] * d["b"].sum(), in_dims=({"b": 1, "a": 0},))(
        {"a": aotgrad.tensor(a), "b": aotgrad.tensor(b)})
    theirs = torch.func.vmap(lambda d: d["a"] * d["b"].sum(), in_dims=({"a": 0, "b": 1},))(
        {"a": torch.tensor(a), "b": torch.tensor(b)})
    close(ours, theirs, atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="in_dims"):
        F.vmap(lambda d: d["a"], in_dims=({"a": 0, "c": 1},))({"a": aotgrad.tensor(a),
                                                             "b": aotgrad.tensor(b)})


def test_a_prim_without_rule_falls_back_to_a_loop_with_a_warning(monkeypatch):
    from aotgrad.ir import batching, prims
    monkeypatch.delitem(batching.BATCHING_RULES, prims.cumsum)
    xs = aotgrad.tensor(_np(4, 5))
    with pytest.warns(RuntimeWarning, match="prims.cumsum has no batching rule"):
        got = F.vmap(lambda r: r.cumsum(0))(xs)
    close(got, np.cumsum(xs.numpy(), axis=1), atol=1e-6, rtol=1e-6)


def test_vmap_of_vmap_of_grad(torch):
    x = _np(2, 3, 4)
    f = lambda v: (v.sin() * v).sum()  # noqa: E731
    ours = F.vmap(F.vmap(F.grad(f)))(aotgrad.tensor(x))
    theirs = torch.func.vmap(torch.func.vmap(torch.func.grad(f)))(torch.tensor(x))
    close(ours, theirs, atol=1e-6, rtol=1e-6)


def _fd_jacobian(f, x, eps=1e-6):
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        cols.append((f(x + e) - f(x - e)) / (2 * eps))
    return np.stack(cols, -1).reshape(np.shape(f(x)) + x.shape)


def test_jacobians_and_hessian_against_finite_differences_float64():
    w1, w2 = _np(4, 3), _np(2, 4)

    def net(lib_w1, lib_w2):
        return lambda x: (lib_w2 @ (lib_w1 @ x).tanh()).sin()
    f = net(aotgrad.tensor(w1), aotgrad.tensor(w2))
    x = _np(3)
    fd = _fd_jacobian(lambda a: f(aotgrad.tensor(a)).numpy(), x)
    close(F.jacrev(f)(aotgrad.tensor(x)), fd, atol=1e-7, rtol=1e-7)
    close(F.jacfwd(f)(aotgrad.tensor(x)), fd, atol=1e-7, rtol=1e-7)
    scalar = lambda a: (f(a) ** 2).sum()  # noqa: E731
    fd_h = _fd_jacobian(lambda a: F.grad(scalar)(aotgrad.tensor(a)).numpy(), x)
    close(F.hessian(scalar)(aotgrad.tensor(x)), fd_h, atol=1e-6, rtol=1e-6)
    close(F.grad(scalar)(aotgrad.tensor(x)),
          _fd_jacobian(lambda a: np.asarray(scalar(aotgrad.tensor(a)).numpy()), x),
          atol=1e-7, rtol=1e-7)


def test_jacobians_has_aux_against_torch(torch):
    x = _np(3)

    def f(lib):
        return lambda a: (a.sin() * 2, a.sum())
    jr, auxr = F.jacrev(f(aotgrad), has_aux=True)(aotgrad.tensor(x))
    jf, auxf = F.jacfwd(f(aotgrad), has_aux=True)(aotgrad.tensor(x))
    tj, taux = torch.func.jacrev(f(torch), has_aux=True)(torch.tensor(x))
    close(jr, tj, atol=1e-6, rtol=1e-6)
    close(jf, tj, atol=1e-6, rtol=1e-6)
    close(auxr, taux, atol=1e-6, rtol=1e-6)
    close(auxf, taux, atol=1e-6, rtol=1e-6)
    with pytest.raises(RuntimeError, match="scalar Tensor"):
        F.grad(lambda a: a.sum(0, keepdim=True))(aotgrad.tensor(x))


def test_results_are_plain_unless_something_outside_needs_their_graph():
    x, v = aotgrad.tensor(_np(3)), aotgrad.tensor(_np(3))
    f = lambda a: (a.sin() * a).sum()  # noqa: E731
    nested = F.jvp(lambda a: F.jvp(f, (a,), (v,))[1], (x,), (v,))
    assert not any(t.requires_grad for t in nested)
    close(nested[1], (2 * np.cos(x.numpy()) - x.numpy() * np.sin(x.numpy())) *
           v.numpy() ** 2 @ np.ones(3), atol=1e-6, rtol=1e-6)
    assert not F.grad(f)(x).requires_grad
    assert not F.jacrev(F.jacrev(f))(x).requires_grad
    w = aotgrad.tensor(_np(3), requires_grad=True)
    out = F.jvp(lambda a: a * w, (x,), (v,))[1]     # v * w: differentiable w.r.t. w
    out.sum().backward()
    close(w.grad, v.numpy(), atol=1e-6, rtol=1e-6)


def test_backward_through_per_sample_grads_of_a_captured_parameter():
    """Meta-learning's pattern: per-sample gradients that depend on a parameter from
    outside vmap, differentiated by backward(); checked against finite differences."""
    xs = aotgrad.tensor(_np(3, 4))
    w0 = _np(4)

    def loss(wv):
        return F.vmap(F.grad(lambda x: (wv * x).sin().sum()))(xs).pow(2).sum()
    w = aotgrad.tensor(w0, requires_grad=True)
    loss(w).backward()
    fd = [(loss(aotgrad.tensor(w0 + e)).item() - loss(aotgrad.tensor(w0 - e)).item()) / 2e-6
          for e in np.eye(4) * 1e-6]
    close(w.grad, fd, atol=1e-6, rtol=1e-6)


def test_custom_function_under_vmap_and_per_sample_grad():
    class Cube(aotgrad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors
            return g * 3 * x ** 2
    xs = aotgrad.tensor(_np(3, 4))
    close(F.vmap(Cube.apply)(xs), xs.numpy() ** 3, atol=1e-6, rtol=1e-6)
    close(F.vmap(F.grad(lambda r: Cube.apply(r).sum()))(xs), 3 * xs.numpy() ** 2,
          atol=1e-6, rtol=1e-6)


def test_functional_call_strict_and_tied_weights():
    class Tied(aotgrad.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = aotgrad.nn.Linear(2, 2, bias=False)
            self.b = aotgrad.nn.Linear(2, 2, bias=False)
            self.b.weight = self.a.weight

        def forward(self, x):
            return self.b(self.a(x))
    m = Tied()
    x = aotgrad.ones(1, 2)
    w = aotgrad.eye(2) * 2
    # tied: both replaced
    close(F.functional_call(m, {"a.weight": w}, (x,)), 4 * x.numpy(), atol=1e-6, rtol=1e-6)
    untied = (x.numpy() @ (2 * np.eye(2, dtype=np.float32)).T) @ m.b.weight.detach().numpy().T
    close(F.functional_call(m, {"a.weight": w}, (x,), tie_weights=False), untied,
          atol=1e-6, rtol=1e-6)
    with pytest.raises(RuntimeError, match="missing key"):
        F.functional_call(m, {"a.weight": w}, (x,), strict=True, tie_weights=False)
    assert m.a.weight is m.b.weight


def test_a_compiled_function_called_inside_vmap_runs_eagerly_with_a_warning():
    g = aotgrad.compile(lambda r: (r.sin() * 2).sum(), backend="interpret")
    xs = aotgrad.tensor(_np(3, 4))
    with pytest.warns(UserWarning, match="called inside aotgrad.func.vmap"):
        got = F.vmap(g)(xs)
    close(got, (np.sin(xs.numpy()) * 2).sum(1), atol=1e-6, rtol=1e-6)
    close(aotgrad.compile(F.vmap(g), fullgraph=True, backend="interpret")(xs), got,
          atol=1e-6, rtol=1e-6)
