"""saved_tensors_hooks see the tensors PyTorch packs: a Python number operand (`a * 3`,
`a / 3`, `a ** 2.5`) is never packed, and an input only the other operand's gradient needs
is not saved when that operand does not require grad."""
import pytest

import aotgrad as ag

CASES = {
    "a*3": lambda T, a, b: a * 3, "3*a": lambda T, a, b: 3 * a,
    "a*b": lambda T, a, b: a * b, "a*b-const": lambda T, a, b: a * b.detach(),
    "a.pow(2)": lambda T, a, b: a.pow(2), "a**2.5": lambda T, a, b: a ** 2.5,
    "2.5**a": lambda T, a, b: 2.5 ** a,
    "a/3": lambda T, a, b: a / 3, "3/a": lambda T, a, b: 3 / a, "a/b": lambda T, a, b: a / b,
    "a/b-const": lambda T, a, b: a / b.detach(), "a-const/b": lambda T, a, b: a.detach() / b,
    "a+3": lambda T, a, b: a + 3, "a-3": lambda T, a, b: a - 3,
}


def _packed(T, case):
    a = T.tensor([1., 2., 3.], requires_grad=True)
    b = T.tensor([4., 5., 6.], requires_grad=True)
    packed = []

    def pack(t):
        packed.append(tuple(t.shape))
        return t
    with T.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = CASES[case](T, a, b)
    y.sum().backward()
    return packed, a.grad, b.grad


@pytest.mark.parametrize("case", CASES)
def test_packed_tensors_match_torch(torch, case):
    tp, tga, tgb = _packed(torch, case)
    ap, aga, agb = _packed(ag, case)
    assert ap == tp
    for g, h in ((aga, tga), (agb, tgb)):
        assert (g is None) == (h is None)
        if g is not None:
            assert g.tolist() == pytest.approx(h.tolist())
