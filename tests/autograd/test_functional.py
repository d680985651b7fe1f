"""autograd.functional: jacobian, hessian, vjp, jvp, hvp, vhp against closed forms and PyTorch."""
import numpy as np
import pytest

import aotgrad
from aotgrad.autograd import functional as F
from aotgrad.testing import assert_close


def t64(a, requires_grad=False):
    return aotgrad.tensor(np.asarray(a, dtype=np.float64), requires_grad=requires_grad)


def test_jacobian_single_input_output_shape_and_values():
    xs = np.random.randn(2, 3)
    w = np.random.randn(4, 3)
    J = F.jacobian(lambda x: x @ t64(w).T, t64(xs))  # (2, 4) output, (2, 3) input
    assert tuple(J.shape) == (2, 4, 2, 3)
    expected = np.einsum("ac,bd->abcd", np.eye(2), w)
    assert_close(J.numpy(), expected, rtol=1e-12, atol=0, equal_nan=True)
    assert not J.requires_grad


def test_jacobian_tuples_nesting():
    a, b = np.random.randn(2), np.random.randn(3)
    J = F.jacobian(lambda x, y: (x * y.sum(), x.exp()), (t64(a), t64(b)))
    assert isinstance(J, tuple) and len(J) == 2 and all(len(r) == 2 for r in J)
    assert_close(J[0][0].numpy(), np.eye(2) * b.sum(), rtol=1e-7, atol=0, equal_nan=True)
    assert_close(J[0][1].numpy(), np.outer(a, np.ones(3)), rtol=1e-7, atol=0, equal_nan=True)
    assert_close(J[1][0].numpy(), np.diag(np.exp(a)), rtol=1e-7, atol=0, equal_nan=True)
    np.testing.assert_array_equal(J[1][1].numpy(), np.zeros((2, 3)))  # independent -> zeros
    # tuple inputs, single output: a tuple over inputs
    J2 = F.jacobian(lambda x, y: x * y.sum(), (t64(a), t64(b)))
    assert isinstance(J2, tuple) and [tuple(j.shape) for j in J2] == [(2, 2), (2, 3)]
    # single input, tuple output: a tuple over outputs
    J3 = F.jacobian(lambda x: (x.sum(), x * 2), t64(a))
    assert [tuple(j.shape) for j in J3] == [(2,), (2, 2)]
    assert_close(J3[0].numpy(), np.ones(2), rtol=1e-7, atol=0, equal_nan=True)


def test_jacobian_strict_and_type_errors():
    x = t64([1.0, 2.0])
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does not "
                                           "require gradients"):
        F.jacobian(lambda x: aotgrad.ones(2, dtype=aotgrad.float64), x, strict=True)
    with pytest.raises(RuntimeError, match="Output 0 of the user-provided function is "
                                           "independent of input 1"):
        F.jacobian(lambda a, b: a * 2, (x, x.clone()), strict=True)
    with pytest.raises(TypeError, match="The outputs of the user-provided function given to "
                                        "jacobian must be either a Tensor or a tuple of Tensors "
                                        "but the given outputs of the user-provided function "
                                        "has type <class 'float'>"):
        F.jacobian(lambda a: 3.0, x)
    with pytest.raises(TypeError, match="The inputs given to jacobian must be either a Tensor "
                                        "or a tuple of Tensors but the value at index 1 has type "
                                        "<class 'int'>"):
        F.jacobian(lambda a, b: a, (x, 3))


def test_jacobian_create_graph():
    x = t64([0.5, -1.0], requires_grad=True)
    J = F.jacobian(lambda a: a ** 3, x, create_graph=True)
    assert J.requires_grad
    g, = aotgrad.autograd.grad(J.sum(), x)
    assert_close(g.numpy(), 6 * x.detach().numpy(), rtol=1e-7, atol=0, equal_nan=True)


def test_hessian():
    xs = np.array([1.0, 2.0, -0.5])
    H = F.hessian(lambda x: (x ** 3).sum() + x[0] * x[1], t64(xs))
    expected = np.diag(6 * xs)
    expected[0, 1] = expected[1, 0] = 1.0
    assert tuple(H.shape) == (3, 3)
    assert_close(H.numpy(), expected, rtol=1e-12, atol=0, equal_nan=True)
    # tuple inputs: H[i][j] has shape inputs[i].shape + inputs[j].shape
    a, b = t64([1.0, 2.0]), t64(3.0)
    H2 = F.hessian(lambda x, y: (x ** 2 * y).sum(), (a, b))
    assert [[tuple(h.shape) for h in r] for r in H2] == [[(2, 2), (2,)], [(2,), ()]]
    assert_close(H2[0][0].numpy(), np.eye(2) * 6, rtol=1e-7, atol=0, equal_nan=True)
    assert_close(H2[0][1].numpy(), [2.0, 4.0], rtol=1e-7, atol=0, equal_nan=True)
    assert_close(H2[1][0].numpy(), [2.0, 4.0], rtol=1e-7, atol=0, equal_nan=True)
    assert float(H2[1][1]) == 0.0
    with pytest.raises(RuntimeError, match="The Tensor returned by the function given to hessian "
                                           "should contain a single element"):
        F.hessian(lambda x: x ** 2, t64([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="The function given to hessian should return a single "
                                           "Tensor"):
        F.hessian(lambda x: (x.sum(), x.sum()), t64([1.0, 2.0]))


def test_vjp_jvp():
    xs = np.random.randn(3)
    A = np.random.randn(2, 3)
    f = lambda x: (t64(A) @ x).tanh()  # noqa: E731
    J = (1 - np.tanh(A @ xs) ** 2)[:, None] * A
    u, v = np.random.randn(2), np.random.randn(3)
    out, g = F.vjp(f, t64(xs), t64(u))
    assert_close(out.numpy(), np.tanh(A @ xs), rtol=1e-7, atol=0, equal_nan=True)
    assert_close(g.numpy(), u @ J, rtol=1e-12, atol=0, equal_nan=True)
    out, jv = F.jvp(f, t64(xs), t64(v))
    assert_close(jv.numpy(), J @ v, rtol=1e-12, atol=0, equal_nan=True)
    assert not out.requires_grad and not jv.requires_grad
    # v may be omitted for a single-element output (vjp) / input (jvp)
    _, g1 = F.vjp(lambda x: (x ** 2).sum(), t64(xs))
    assert_close(g1.numpy(), 2 * xs, rtol=1e-7, atol=0, equal_nan=True)
    _, j1 = F.jvp(lambda x: x * t64([1.0, 2.0]), t64(3.0))
    assert_close(j1.numpy(), [1.0, 2.0], rtol=1e-7, atol=0, equal_nan=True)
    # tuples
    _, (ga, gb) = F.vjp(lambda a, b: a * b, (t64(xs), t64(2 * xs)), t64(np.ones(3)))
    assert_close(ga.numpy(), 2 * xs, rtol=1e-7, atol=0, equal_nan=True)
    assert_close(gb.numpy(), xs, rtol=1e-7, atol=0, equal_nan=True)
    _, (ja, jb) = F.jvp(lambda a: (a * 2, a.sum()), t64(xs), t64(v))
    assert_close(ja.numpy(), 2 * v, rtol=1e-7, atol=0, equal_nan=True)
    assert_close(jb.numpy(), v.sum(), rtol=1e-7, atol=0, equal_nan=True)


def test_v_validation_errors():
    x = t64([1.0, 2.0])
    with pytest.raises(RuntimeError, match="The vector v can only be None if the user-provided "
                                           "function returns a single Tensor with a single "
                                           "element."):
        F.vjp(lambda a: a * 2, x)
    with pytest.raises(RuntimeError, match="The vector v can only be None if the input to the "
                                           "user-provided function is a single Tensor with a "
                                           "single element."):
        F.jvp(lambda a: a * 2, x)
    with pytest.raises(RuntimeError, match=r"v has invalid size: should be aotgrad.Size\(\[2\]\) "
                                           r"but got aotgrad.Size\(\[3\]\)."):
        F.vjp(lambda a: a * 2, x, t64([1.0, 2.0, 3.0]))
    with pytest.raises(RuntimeError, match="v is a tuple of invalid length: should be 2 but got "
                                           "1."):
        F.jvp(lambda a, b: a * b, (x, x), (x,))
    with pytest.raises(RuntimeError, match="The output of the user-provided function is "
                                           "independent of input 1"):
        F.vjp(lambda a, b: (a * 2).sum(), (x, x.clone()), strict=True)


def test_hvp_vhp():
    xs = np.array([0.3, -0.7, 1.1])
    v = np.array([1.0, 2.0, -1.0])
    f = lambda x: (x.sin() * x[0]).sum()  # noqa: E731
    H = np.diag(-np.sin(xs) * xs[0])
    H[0, :] += np.cos(xs)
    H[:, 0] += np.cos(xs)
    out, hv = F.hvp(f, t64(xs), t64(v))
    assert_close(float(out), (np.sin(xs) * xs[0]).sum(), rtol=1e-7, atol=0, equal_nan=True)
    assert_close(hv.numpy(), H @ v, rtol=1e-12, atol=0, equal_nan=True)
    _, vh = F.vhp(f, t64(xs), t64(v))
    assert_close(vh.numpy(), v @ H, rtol=1e-12, atol=0, equal_nan=True)
    with pytest.raises(RuntimeError, match="The Tensor returned by the function given to hvp "
                                           "should contain a single element"):
        F.hvp(lambda x: x * 2, t64(xs), t64(v))
    with pytest.raises(RuntimeError, match="The function given to vhp should return a single "
                                           "Tensor"):
        F.vhp(lambda x: (x.sum(), x.sum()), t64(xs), t64(v))


def test_create_graph_hvp_differentiable():
    x = t64([0.5, 1.5], requires_grad=True)
    _, hv = F.hvp(lambda a: (a ** 4).sum(), x, t64([1.0, 1.0]), create_graph=True)
    assert_close(hv.detach().numpy(), 12 * x.detach().numpy() ** 2, rtol=1e-7, atol=0,
                 equal_nan=True)
    g, = aotgrad.autograd.grad(hv.sum(), x)
    assert_close(g.numpy(), 24 * x.detach().numpy(), rtol=1e-7, atol=0, equal_nan=True)


def test_float32_preserved():
    J = F.jacobian(lambda x: x * 2, aotgrad.ones(3))
    assert J.dtype == aotgrad.float32


def test_matches_torch(torch):
    xs, ys = np.random.randn(3), np.random.randn(2)
    v3 = np.random.randn(3)

    def tf(x, y):
        return (x.sin() * y.sum()).exp(), (x * x).sum() * y

    def af(x, y):
        return (x.sin() * y.sum()).exp(), (x * x).sum() * y

    def ts(x):
        return (x.sin() ** 2).sum() * x[0]

    tj = torch.autograd.functional.jacobian(tf, (torch.tensor(xs), torch.tensor(ys)))
    aj = F.jacobian(af, (t64(xs), t64(ys)))
    for tr, ar in zip(tj, aj):
        for t, a in zip(tr, ar):
            assert tuple(t.shape) == tuple(a.shape)
            assert_close(a.numpy(), t.numpy(), rtol=1e-10, atol=1e-12, equal_nan=True)
    th = torch.autograd.functional.hessian(ts, torch.tensor(xs))
    ah = F.hessian(ts, t64(xs))
    assert_close(ah.numpy(), th.numpy(), rtol=1e-10, atol=1e-12, equal_nan=True)
    for name in ("hvp", "vhp"):
        _, t = getattr(torch.autograd.functional, name)(ts, torch.tensor(xs), torch.tensor(v3))
        _, a = getattr(F, name)(ts, t64(xs), t64(v3))
        assert_close(a.numpy(), t.numpy(), rtol=1e-10, atol=1e-12, equal_nan=True)
    _, tjv = torch.autograd.functional.jvp(tf, (torch.tensor(xs), torch.tensor(ys)),
                                           (torch.tensor(v3), torch.ones(2, dtype=torch.float64)))
    _, ajv = F.jvp(af, (t64(xs), t64(ys)), (t64(v3), t64(np.ones(2))))
    for t, a in zip(tjv, ajv):
        assert_close(a.numpy(), t.numpy(), rtol=1e-10, atol=1e-12, equal_nan=True)
