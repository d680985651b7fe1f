"""A size read off a traced tensor and used as a number (`x * x.shape[0]`, `x / x.numel()`,
`torch.tensor(x.shape)`, a fill value or clamp bound) computes what eager computes once the
dim is symbolic (automatic dynamic after a second size, or dynamic=True): the program is
specialised on that size and guarded, so every size gets its own right answer."""
import warnings

import numpy as np
import pytest

import aotgrad as ag

CASES = {
    "mul": lambda x: x * x.shape[0],
    "radd rmul": lambda x: x.shape[0] * x + x.shape[-1],
    "div by numel": lambda x: x.sum() / x.numel(),
    "rsub": lambda x: x.shape[0] - x,
    "pow": lambda x: x ** x.shape[0],
    "where": lambda x: ag.where(x > 1, x, x.shape[0]),
    "full": lambda x: ag.full((2,), x.shape[0]) * x.sum(),
    "full float": lambda x: ag.full((2,), x.shape[0], dtype=ag.float32) * x.sum(),
    "clamp": lambda x: x.clamp(x.shape[0] - 3, x.shape[0]),
    "add alpha": lambda x: x.add(x, alpha=x.shape[0]),
    "masked_fill": lambda x: x.masked_fill(x > 2, x.shape[0]),
    "tensor of a size": lambda x: ag.tensor(x.shape[0]) * x,
    "scalar_tensor of a size": lambda x: ag.scalar_tensor(x.shape[0]) * x,
    "tensor of the shape": lambda x: ag.tensor(x.shape).sum() * x,
    "as_tensor list": lambda x: ag.as_tensor([x.shape[0], 2.5]).sum() * x,
}


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("case", list(CASES))
def test_a_size_used_as_a_number_equals_eager_at_every_size(case, dynamic):
    fn = CASES[case]
    compiled = ag.compile(fn, dynamic=dynamic)
    for n in [2, 3, 4, 5, 3]:
        x = ag.arange(float(n))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = compiled(x)
        want = fn(x)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


def test_a_size_as_a_number_in_a_training_step_gives_eagers_gradients():
    def loss(x, w):
        return ((x @ w) * (1.0 / x.shape[0])).pow(2).sum() * x.shape[0]

    compiled = ag.compile(loss, dynamic=True)
    rng = np.random.default_rng(0)
    w_np = rng.standard_normal((3, 2)).astype(np.float32)
    for n in [4, 6, 5]:
        x = ag.tensor(rng.standard_normal((n, 3)).astype(np.float32))
        we, wc = ag.tensor(w_np, requires_grad=True), ag.tensor(w_np, requires_grad=True)
        le, lc = loss(x, we), compiled(x, wc)
        le.backward()
        lc.backward()
        np.testing.assert_allclose(lc.item(), le.item(), rtol=1e-5)
        np.testing.assert_allclose(wc.grad.numpy(), we.grad.numpy(), rtol=1e-5)
