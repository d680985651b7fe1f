"""autograd.forward_ad against PyTorch: tangents of many ops (derived from the reverse
rules), in-place ops and views, custom Functions with jvp, reverse-over-forward, gradcheck's
forward-mode check; and without PyTorch: closed forms and a compiled function called inside
a dual level (runs eagerly, same tangents)."""
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close


_OPS = {
    "sin_mul": lambda M, x, w: x.sin() * 2,
    "exp_sum": lambda M, x, w: x.exp().sum(1),
    "matmul": lambda M, x, w: x @ w,
    "softmax": lambda M, x, w: M.softmax(x, 1),
    "log_softmax": lambda M, x, w: M.log_softmax(x, 0),
    "t_reshape": lambda M, x, w: x.t().reshape(-1),
    "slice_pow": lambda M, x, w: x[:, 1:] ** 3,
    "mse": lambda M, x, w: M.nn.functional.mse_loss(x, M.zeros(2, 3)),
    "max_dim": lambda M, x, w: x.max(1).values,
    "var_mean": lambda M, x, w: M.var_mean(x, 1)[0] + M.var_mean(x, 1)[1],
    "cumsum": lambda M, x, w: M.cumsum(x, 0),
    "sigmoid_log": lambda M, x, w: x.sigmoid().log(),
    "div_abs": lambda M, x, w: x / (x.abs() + 1),
    "where": lambda M, x, w: M.where(x > 0, x, x * x),
    "tanh_norm": lambda M, x, w: x.tanh().norm(),
    "split_cat": lambda M, x, w: M.cat(x.split(1, 1)[::-1], 1),
    "linear": lambda M, x, w: M.nn.functional.linear(x, w.t(), M.ones(4, dtype=M.float64)),
    "logsumexp": lambda M, x, w: M.logsumexp(x * 3, 1),
    "clamp": lambda M, x, w: x.clamp(-0.5, 0.5) * x,
    "std": lambda M, x, w: x.std(0),
    "gather_sort": lambda M, x, w: x.sort(1).values * M.gather(x, 1, M.tensor([[2], [0]])),
    "scatter_reduce": lambda M, x, w: M.zeros(2, 2).scatter_reduce(
        1, M.tensor([[0, 1, 0], [1, 1, 0]]), x, "amax", include_self=False),
}


@pytest.mark.parametrize("name", sorted(_OPS))
def test_tangents_match(name, vs_torch):
    def case(M):
        fw = M.autograd.forward_ad
        x0 = M.tensor(np.linspace(-1, 1, 6).reshape(2, 3))
        t0 = M.tensor(np.arange(6.).reshape(2, 3) / 5 - 0.3)
        w = M.tensor(np.linspace(0.5, 2, 12).reshape(3, 4))
        with fw.dual_level():
            x = fw.make_dual(x0, t0)
            y = _OPS[name](M, x, w)
            primal, tangent = fw.unpack_dual(y)
            return primal, tangent
    vs_torch.same(case)


def test_inplace_views_and_level_exit(vs_torch):
    def case(M):
        fw = M.autograd.forward_ad
        x0, t0 = M.tensor([1., 2., 3., 4.]), M.tensor([0.5, -1., 2., 0.25])
        with fw.dual_level():
            x = fw.make_dual(x0, t0)
            y = x.clone()
            y.mul_(3)
            y[1:3] = x[:2] * x[2:]
            v = y[::2]
            v.add_(x[:2].exp())
            out = [fw.unpack_dual(y).tangent, fw.unpack_dual(v).tangent,
                   fw.unpack_dual(fw.unpack_dual(x).primal).tangent,
                   fw.unpack_dual(M.ones(2)).tangent]
        out.append(fw.unpack_dual(x).tangent)
        return out
    vs_torch.same(case)


def test_custom_function_jvp(vs_torch):
    def case(M):
        fw = M.autograd.forward_ad

        class Cube(M.autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                ctx.x, ctx.k = x, k
                return x ** 3 * k

            @staticmethod
            def backward(ctx, g):
                return 3 * ctx.x ** 2 * ctx.k * g, None

            @staticmethod
            def jvp(ctx, t, _):
                return 3 * ctx.x ** 2 * ctx.k * t

        class NoJvp(M.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2
        with fw.dual_level():
            x = fw.make_dual(M.tensor([1., 2.]), M.tensor([1., -1.]))
            t = fw.unpack_dual(Cube.apply(x, 2.0) + x).tangent
            try:
                NoJvp.apply(x)
                err = None
            except RuntimeError as e:
                err = "jvp" in str(e)
        return t, err
    vs_torch.same(case)


def test_reverse_over_forward(vs_torch):
    def case(M):
        fw = M.autograd.forward_ad
        p = M.tensor([0.5, -1.0, 2.0], requires_grad=True)
        tan = M.tensor([1.0, 2.0, -1.0], requires_grad=True)
        with fw.dual_level():
            d = fw.make_dual(p, tan)
            jv = fw.unpack_dual((d.sin() * d).sum()).tangent
        gp, gt = M.autograd.grad(jv, (p, tan))
        return jv, gp, gt
    vs_torch.same(case)


def test_errors(vs_torch):
    def no_level(M):
        return M.autograd.forward_ad.make_dual(M.ones(2), M.ones(2))

    def bad_shape(M):
        fw = M.autograd.forward_ad
        with fw.dual_level():
            fw.make_dual(M.ones(2), M.ones(3))
    vs_torch.same(no_level)
    vs_torch.same(bad_shape, exact_error=True)


def test_gradcheck_forward_mode(vs_torch):
    def case(M):
        x = M.tensor(np.linspace(-1, 1, 4), dtype=M.float64, requires_grad=True)
        w = M.tensor(np.linspace(0.2, 1, 8).reshape(4, 2), dtype=M.float64, requires_grad=True)
        return M.autograd.gradcheck(lambda a, b: (a.tanh() @ b).exp(), (x, w),
                                    check_forward_ad=True)
    vs_torch.same(case)


# ---- without PyTorch ---------------------------------------------------------------------------
def test_closed_form_and_gradcheck_failure():
    fw = ag.autograd.forward_ad
    x0 = ag.tensor([0.3, -0.7], dtype=ag.float64)
    with fw.dual_level():
        x = fw.make_dual(x0, ag.ones(2, dtype=ag.float64))
        t = fw.unpack_dual(x.exp() * x).tangent
    assert_close(t.numpy(), np.exp(x0.numpy()) * (x0.numpy() + 1), rtol=1e-7, atol=0,
                 equal_nan=True)

    class Wrong(ag.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

        @staticmethod
        def jvp(ctx, t):
            return t * 3
    a = ag.tensor([1.0, 2.0], dtype=ag.float64, requires_grad=True)
    assert not ag.autograd.gradcheck(Wrong.apply, (a,), check_forward_ad=True,
                                     raise_exception=False)


def test_nested_levels_are_refused():
    fw = ag.autograd.forward_ad
    with fw.dual_level():
        with pytest.raises(RuntimeError, match="nested"):
            fw.enter_dual_level()


def test_compiled_function_inside_a_dual_level_runs_eagerly():
    fw = ag.autograd.forward_ad
    f = ag.compile(lambda a: (a * a).sin(), backend="interpret")
    x0, t0 = ag.tensor([0.2, 0.4]), ag.tensor([1.0, -2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with fw.dual_level():
            t = fw.unpack_dual(f(fw.make_dual(x0, t0))).tangent
    x = x0.numpy()
    assert_close(t.numpy(), np.cos(x * x) * 2 * x * t0.numpy(), rtol=1e-6, atol=0, equal_nan=True)


@pytest.mark.parametrize("kwargs", [dict(strategy="forward-mode"),
                                    dict(strategy="forward-mode", vectorize=True,
                                         create_graph=True),
                                    dict(strategy="forward-mode", vectorize=True, strict=True),
                                    dict(vectorize=True, strict=True),
                                    dict(strategy="forward-mode", vectorize=True)])
def test_jacobian_strategy_restrictions(kwargs, vs_torch):
    def case(M):
        x = M.tensor([0.5, -1.0], dtype=M.float64)
        return M.autograd.functional.jacobian(lambda a: (a.sin(), a * a), x, **kwargs)
    vs_torch.same(case)


def test_custom_function_save_for_forward(vs_torch):
    def case(M):
        fw = M.autograd.forward_ad

        class Mul(M.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                ctx.save_for_forward(a, b)
                ctx.save_for_backward(a, b)
                return a * b

            @staticmethod
            def backward(ctx, g):
                a, b = ctx.saved_tensors
                return g * b, g * a

            @staticmethod
            def jvp(ctx, ta, tb):
                a, b = ctx.saved_tensors
                return ta * b + a * tb
        a0, b0 = M.tensor([1., 2.]), M.tensor([3., -1.])
        with fw.dual_level():
            a = fw.make_dual(a0, M.tensor([1., 1.]))
            b = fw.make_dual(b0, M.tensor([0.5, 2.]))
            t = fw.unpack_dual(Mul.apply(a, b)).tangent
        x, y = a0.clone().requires_grad_(), b0.clone().requires_grad_()
        Mul.apply(x, y).sum().backward()
        return t, x.grad, y.grad
    vs_torch.same(case)


def test_grad_modes(vs_torch):
    def case(M):
        fw = M.autograd.forward_ad
        out = []
        for mode in (M.no_grad, M.inference_mode, M.enable_grad):
            with mode(), fw.dual_level():
                x = fw.make_dual(M.tensor([1., 2.]), M.tensor([1., -1.]))
                out.append(fw.unpack_dual((x * x).exp()).tangent)
        return out
    vs_torch.same(case)
