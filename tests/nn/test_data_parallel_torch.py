"""nn.DataParallel on one device: the wrapped module runs as it is (outputs, gradients,
state dict keys with the `module.` prefix, saved-tensor hooks active around the call)."""
import numpy as np

import aotgrad as ag
from aotgrad.testing import assert_close


def _run(T):
    T.manual_seed(0)
    inner = T.nn.Linear(3, 2)
    with T.no_grad():
        inner.weight.copy_(T.tensor([[1.0, -2.0, 0.5], [0.0, 1.0, 3.0]]))
        inner.bias.copy_(T.tensor([0.25, -1.0]))
    model = T.nn.DataParallel(inner)
    x = T.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]], requires_grad=True)
    packed = []
    with T.autograd.graph.saved_tensors_hooks(lambda t: packed.append(1) or t, lambda t: t):
        y = model(x)
    (y * y).sum().backward()
    return (y.tolist(), x.grad.tolist(), inner.weight.grad.tolist(), sorted(model.state_dict()),
            model.module is inner, len(packed) > 0)


def test_runs_the_module_as_it_is():
    out, xg, wg, keys, same, packed = _run(ag)
    w = np.array([[1.0, -2.0, 0.5], [0.0, 1.0, 3.0]])
    x = np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]])
    y = x @ w.T + [0.25, -1.0]
    assert_close(out, y, rtol=1e-6, atol=0, equal_nan=True)
    assert_close(xg, 2 * y @ w, rtol=1e-6, atol=0, equal_nan=True)
    assert_close(wg, 2 * y.T @ x, rtol=1e-6, atol=0, equal_nan=True)
    assert keys == ["module.bias", "module.weight"] and same and packed
    assert ag.nn.parallel.data_parallel(ag.nn.Identity(), (ag.ones(2),)).tolist() == [1.0, 1.0]


def test_matches_torch(torch):
    ours, theirs = _run(ag), _run(torch)
    for a, b in zip(ours[:3], theirs[:3]):
        assert_close(a, b, rtol=1e-6, atol=0, equal_nan=True)
    assert ours[3:] == theirs[3:]
