"""Composite graph nodes: a user-level op that PyTorch records as one node gets one node with
PyTorch's name and edges (walking `grad_fn.next_functions` prints what PyTorch prints), and the
composite ops with a rule of their own (clamp, vector norm, binary cross-entropy) give
PyTorch's derivatives in reverse and forward mode, eagerly and compiled."""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.runtime.composite import RULES
from aotgrad.testing import compare_with_eager
from aotgrad.testing import assert_close


def _walk(fn):
    """The graph below a grad_fn, as nested names (PyTorch's AccumulateGrad name has a C++
    namespace; the rest of the name is compared)."""
    if fn is None:
        return "None"
    name = fn.name().rsplit("::", 1)[-1]
    return f"{name}({', '.join(_walk(nf) for nf, _ in fn.next_functions)})"


def _graph_cases():
    def r(T, *shape, grad=True):
        return T.tensor(np.random.default_rng(len(shape) + sum(shape)).standard_normal(shape),
                        dtype=T.float32, requires_grad=grad)

    def lin(T, xshape, bias=True, xgrad=True):
        w, b = r(T, 2, 3), r(T, 2)
        return T.nn.functional.linear(r(T, *xshape, grad=xgrad), w, b if bias else None)

    t = lambda T: T.tensor([0, 1, 1, 0])              # noqa: E731
    p = lambda T: T.tensor(np.full((4, 3), 0.3, np.float32))  # noqa: E731
    F = lambda T: T.nn.functional                     # noqa: E731
    return {
        "linear-2d": lambda T: lin(T, (4, 3)),
        "linear-1d": lambda T: lin(T, (3,)),
        "linear-3d": lambda T: lin(T, (5, 4, 3)),
        "linear-nobias-2d": lambda T: lin(T, (4, 3), bias=False),
        "linear-nobias-3d": lambda T: lin(T, (5, 4, 3), bias=False),
        "linear-nobias-1d": lambda T: lin(T, (3,), bias=False),
        "linear-input-no-grad": lambda T: lin(T, (4, 3), xgrad=False),
        "mse": lambda T: F(T).mse_loss(r(T, 4, 2), r(T, 4, 2, grad=False)),
        "mse-none": lambda T: F(T).mse_loss(r(T, 4, 2), r(T, 4, 2), reduction="none"),
        "l1": lambda T: F(T).l1_loss(r(T, 4, 2), r(T, 4, 2, grad=False)),
        "smooth-l1": lambda T: F(T).smooth_l1_loss(r(T, 4, 2), r(T, 4, 2, grad=False)),
        "huber": lambda T: F(T).huber_loss(r(T, 4, 2), r(T, 4, 2, grad=False)),
        "cross-entropy": lambda T: F(T).cross_entropy(r(T, 4, 3), t(T)),
        "cross-entropy-1d": lambda T: F(T).cross_entropy(r(T, 3), T.tensor(1)),
        "nll": lambda T: F(T).nll_loss(r(T, 4, 3), t(T)),
        "log-softmax": lambda T: F(T).log_softmax(r(T, 4, 3), 1),
        "softmax": lambda T: F(T).softmax(r(T, 4, 3), 1),
        "bce": lambda T: F(T).binary_cross_entropy(T.sigmoid(r(T, 4, 3)), p(T)),
        "bce-target-grad": lambda T: F(T).binary_cross_entropy(T.sigmoid(r(T, 4, 3)),
                                                               T.sigmoid(r(T, 4, 3))),
        "bce-logits": lambda T: F(T).binary_cross_entropy_with_logits(r(T, 4, 3), p(T)),
        "layer-norm": lambda T: T.nn.LayerNorm(3)(r(T, 4, 3)),
        "layer-norm-no-affine": lambda T: F(T).layer_norm(r(T, 4, 3), (3,)),
        "gelu": lambda T: F(T).gelu(r(T, 4, 3)),
        "gelu-tanh": lambda T: F(T).gelu(r(T, 4, 3), approximate="tanh"),
        "relu": lambda T: F(T).relu(r(T, 4, 3)),
        "silu": lambda T: F(T).silu(r(T, 4, 3)),
        "logsigmoid": lambda T: F(T).logsigmoid(r(T, 4, 3)),
        "addmm": lambda T: T.addmm(r(T, 2), r(T, 4, 3), r(T, 3, 2)),
        "addmm-input-no-grad": lambda T: T.addmm(r(T, 2, grad=False), r(T, 4, 3), r(T, 3, 2)),
        "matmul-vec-vec": lambda T: T.matmul(r(T, 3), r(T, 3)),
        "matmul-mat-vec": lambda T: T.matmul(r(T, 4, 3), r(T, 3)),
        "matmul-vec-mat": lambda T: T.matmul(r(T, 3), r(T, 3, 2)),
        "matmul-batch-mat": lambda T: T.matmul(r(T, 5, 4, 3), r(T, 3, 2)),
        "matmul-batch-vec": lambda T: T.matmul(r(T, 5, 4, 3), r(T, 3)),
        "clamp-numbers": lambda T: T.clamp(r(T, 4, 3), -0.5, 0.5),
        "clamp-tensors": lambda T: T.clamp(r(T, 4, 3), r(T, 4, 3), r(T, 4, 3)),
        "clamp-min": lambda T: T.clamp_min(r(T, 4, 3), 0.1),
        "clamp-min-tensor": lambda T: T.clamp_min(r(T, 4, 3), r(T, 4, 3)),
        "clamp-max-method": lambda T: r(T, 4, 3).clamp_max(0.2),
        "softmax-dtype": lambda T: F(T).softmax(r(T, 4, 3), 1, dtype=T.float64),
        "log-softmax-dtype": lambda T: F(T).log_softmax(r(T, 4, 3), 1, dtype=T.float64),
        "norm": lambda T: r(T, 4, 3).norm(),
        "norm-dim-p1": lambda T: r(T, 4, 3).norm(p=1, dim=1),
        "vector-norm": lambda T: T.linalg.vector_norm(r(T, 4, 3)),
        "mean": lambda T: r(T, 4, 3).mean(),
        "var": lambda T: r(T, 4, 3).var(),
    }


GRAPH_CASES = _graph_cases()


@pytest.mark.parametrize("case", sorted(GRAPH_CASES))
def test_walking_next_functions_prints_what_torch_prints(torch, case):
    make = GRAPH_CASES[case]
    assert _walk(make(ag).grad_fn) == _walk(make(torch).grad_fn)


def test_composite_node_gradients_match_torch(torch):
    """The composite nodes' backward runs the prims' rules: gradients as before, as torch."""
    rng = np.random.default_rng(0)
    x0, w0, b0 = (rng.standard_normal(s) for s in ((5, 4, 3), (2, 3), (2,)))
    y0 = rng.standard_normal((5, 4, 2))
    res = []
    for T in (ag, torch):
        x, w, b = (T.tensor(v, requires_grad=True) for v in (x0, w0, b0))
        h = T.nn.functional.linear(x, w, b)
        loss = T.nn.functional.mse_loss(T.nn.functional.gelu(h), T.tensor(y0)) + \
            T.nn.functional.cross_entropy(h.reshape(-1, 2), T.zeros(20, dtype=T.long))
        gs = T.autograd.grad(loss, (x, w, b), create_graph=True)
        hv = T.autograd.grad(sum(g.sum() for g in gs), (x, w))
        res.append([v.detach().numpy() for v in (loss, *gs, *hv)])
    for a, b in zip(*res):
        assert_close(a, b, rtol=1e-10, atol=1e-12, equal_nan=True)


def test_calling_a_composite_node_by_hand_with_a_broadcastable_gradient(torch):
    outs = []
    for T in (ag, torch):
        x = T.tensor([0.5], requires_grad=True)
        y = T.nn.functional.mse_loss(x, T.tensor([2.0]), reduction="none")  # shape [1]
        assert y.grad_fn.name() == "MseLossBackward0"
        gx, gt = y.grad_fn(T.tensor(3.0))
        assert gt is None
        outs.append([gx.detach().numpy()])
    for a, b in zip(*outs):
        assert_close(a, b, rtol=1e-6, atol=1e-7, equal_nan=True)


def test_composite_node_wrong_number_of_gradients_is_a_type_error():
    y = ag.nn.functional.mse_loss(ag.ones(3, requires_grad=True), ag.zeros(3))
    with pytest.raises(TypeError):
        y.grad_fn(ag.tensor(1.0), ag.tensor(1.0))


def test_an_argument_that_is_not_an_edge_keeps_its_gradient():
    """nll_loss's edge is the input only: a weight that requires grad keeps the prims' graph
    (no gradient is lost behind the node)."""
    x = ag.randn(4, 3, requires_grad=True, dtype=ag.float64)
    w = ag.rand(3, requires_grad=True, dtype=ag.float64)
    loss = ag.nn.functional.nll_loss(x, ag.tensor([0, 1, 2, 1]), weight=w)
    gx, gw = ag.autograd.grad(loss, (x, w))
    assert gw is not None and float(gw.abs().sum()) > 0


# ---- composite ops with their own rule -------------------------------------------------------
def test_rules_are_registered_by_name():
    for name in ("ClampBackward0", "ClampBackward1", "LinalgVectorNormBackward0",
                 "BinaryCrossEntropyBackward0", "BinaryCrossEntropyBackwardBackward0"):
        assert callable(RULES[name])


def _f64(*shape, seed=0, low=None):
    rng = np.random.default_rng(seed)
    v = rng.uniform(0.1, 0.9, shape) if low == "prob" else rng.standard_normal(shape)
    return ag.tensor(v, dtype=ag.float64, requires_grad=True)


@pytest.mark.parametrize("fn,args", [
    (lambda x, lo, hi: ag.clamp(x, lo, hi), ((3, 4), (3, 4), (4,))),
    (lambda x: ag.clamp(x, min=-0.3), ((3, 4),)),
    (lambda x, lo: ag.clamp_min(x, lo), ((3, 4), (4,))),
    (lambda x, hi: x.clamp_max(hi), ((3, 4), (3, 1))),
    (lambda x: x.norm(), ((3, 4),)),
    (lambda x: x.norm(p=3, dim=1), ((3, 4),)),
    (lambda x: x.norm(p=1.5, dim=0, keepdim=True), ((3, 4),)),
    (lambda x: ag.linalg.vector_norm(x, ord=float("inf"), dim=1), ((3, 4),)),
])
def test_rule_gradcheck(fn, args):
    ts = [_f64(*s, seed=i) for i, s in enumerate(args)]
    assert ag.autograd.gradcheck(fn, ts)
    assert ag.autograd.gradgradcheck(fn, ts)


@pytest.mark.parametrize("exponent", [2, 0.5])
def test_pow_by_a_number_is_one_node_saving_its_input(torch, exponent):
    seen = []
    for T in (ag, torch):
        x = T.tensor([0.25, 1.0, 4.0], dtype=T.float64, requires_grad=True)
        packs = []
        with T.autograd.graph.saved_tensors_hooks(lambda t: packs.append(t) or t,
                                                  lambda t: t):
            y = x.pow(exponent)
        g, = T.autograd.grad(y.sum(), x, create_graph=True)
        gg, = T.autograd.grad(g.sum(), x)
        seen.append((_walk(y.grad_fn), len(packs), g.detach().numpy(), gg.numpy()))
    assert seen[0][:2] == seen[1][:2]
    assert_close(seen[0][2], seen[1][2], rtol=1e-12, atol=0, equal_nan=True)
    assert_close(seen[0][3], seen[1][3], rtol=1e-12, atol=0, equal_nan=True)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_bce_rule_gradcheck_and_gradgradcheck(reduction):
    x, t = _f64(3, 4, low="prob"), _f64(3, 4, seed=1, low="prob")
    w = ag.tensor(np.linspace(0.5, 2.0, 12).reshape(3, 4))
    f = lambda a, b: ag.nn.functional.binary_cross_entropy(  # noqa: E731
        a, b, weight=w, reduction=reduction)
    assert ag.autograd.gradcheck(f, (x, t))
    assert ag.autograd.gradgradcheck(f, (x, t))


@pytest.mark.parametrize("case", ["clamp-tensors", "clamp-numbers", "norm2", "norm3", "norm-inf",
                                  "bce", "bce-target"])
def test_rule_forward_mode_matches_torch(torch, case):
    rng = np.random.default_rng(3)
    x0 = rng.uniform(0.05, 0.95, (3, 4))
    x0[0, 0] = 0.0
    lo0, hi0 = np.full((3, 4), 0.3), np.full((4,), 0.7)
    tx, tt = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    fns = {
        "clamp-tensors": lambda T, x, t: T.clamp(x, T.tensor(lo0), T.tensor(hi0)),
        "clamp-numbers": lambda T, x, t: T.clamp(x, max=0.5),
        "norm2": lambda T, x, t: x.norm(dim=1),
        "norm3": lambda T, x, t: x.norm(p=3),
        "norm-inf": lambda T, x, t: T.linalg.vector_norm(x, ord=float("inf")),
        "bce": lambda T, x, t: T.nn.functional.binary_cross_entropy(
            x.clamp(0.05, 0.95), T.tensor(tt).sigmoid()),
        "bce-target": lambda T, x, t: T.nn.functional.binary_cross_entropy(
            T.tensor(np.full((3, 4), 0.4)), x.clamp(0.05, 0.95), reduction="sum"),
    }
    res = []
    for T in (ag, torch):
        fwAD = T.autograd.forward_ad
        with fwAD.dual_level():
            x = fwAD.make_dual(T.tensor(x0), T.tensor(tx))
            out = fns[case](T, x, None)
            p, tan = fwAD.unpack_dual(out)
            res.append((p.numpy(), tan.numpy()))
    assert_close(res[0][0], res[1][0], rtol=1e-10, atol=0, equal_nan=True)
    assert_close(res[0][1], res[1][1], rtol=1e-10, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("case", ["linear-3d", "cross-entropy", "clamp", "norm", "bce",
                                  "vec-mat"])
def test_composite_ops_compiled_match_eager(case):
    rng = np.random.default_rng(5)
    fns = {
        "linear-3d": (lambda x, w: ag.nn.functional.linear(x, w, w[0]).sum(),
                      [(5, 4, 3), (3, 3)]),
        "cross-entropy": (lambda x, w: ag.nn.functional.cross_entropy(
            ag.nn.functional.linear(x, w), ag.tensor([0, 2, 1, 1])), [(4, 3), (3, 3)]),
        "clamp": (lambda x, w: ag.clamp(x, w, 0.5).sum(), [(3, 3), (3, 3)]),
        "norm": (lambda x, w: (x.norm(dim=1) + w.norm(p=3)).sum(), [(3, 3), (3, 3)]),
        "bce": (lambda x, w: ag.nn.functional.binary_cross_entropy(x.sigmoid(), w.sigmoid()),
                [(3, 3), (3, 3)]),
        "vec-mat": (lambda x, w: ag.matmul(x, w).sum(), [(3,), (3, 2)]),
    }
    fn, shapes = fns[case]
    ins = [ag.tensor(rng.standard_normal(s), dtype=ag.float64, requires_grad=True)
           for s in shapes]
    compare_with_eager(fn, *ins, backend="interpret", rtol=1e-9, atol=1e-9)
