"""Ops without a derivative (unique, unique_consecutive): the values require grad and carry
PyTorch's node, whose backward raises NotImplementedError; the index outputs do not."""
import itertools

import pytest

import aotgrad as ag

CASES = {
    "unique": lambda T, x, kw: T.unique(x, **kw),
    "unique_dim": lambda T, x, kw: T.unique(x, dim=0, **kw),
    "unique_consecutive": lambda T, x, kw: T.unique_consecutive(x, **kw),
    "unique_consecutive_dim": lambda T, x, kw: T.unique_consecutive(x, dim=0, **kw),
}


def _outputs(T, case, inverse, counts):
    x = T.tensor([3.0, 1.0, 1.0, 2.0], requires_grad=True)
    res = CASES[case](T, x, {"return_inverse": inverse, "return_counts": counts})
    return res if isinstance(res, tuple) else (res,)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("inverse,counts", list(itertools.product((True, False), repeat=2)))
def test_values_require_grad_and_indices_do_not(case, inverse, counts):
    values, *rest = _outputs(ag, case, inverse, counts)
    assert values.requires_grad and values.grad_fn is not None
    assert all(not r.requires_grad and not r.dtype.is_floating_point for r in rest)
    with pytest.raises(NotImplementedError, match="the derivative for .* is not implemented"):
        values.sum().backward()


def test_no_node_without_grad_mode():
    x = ag.tensor([1.0, 1.0], requires_grad=True)
    with ag.no_grad():
        assert not ag.unique(x).requires_grad
    assert not ag.unique(x.detach()).requires_grad


@pytest.mark.parametrize("case", CASES)
def test_node_names_match_torch(torch, case):
    ours, theirs = _outputs(ag, case, False, False)[0], _outputs(torch, case, False, False)[0]
    assert ours.grad_fn.name() == theirs.grad_fn.name()
    with pytest.raises(NotImplementedError) as ours_err:
        ours.grad_fn(ag.ones_like(ours))
    with pytest.raises(NotImplementedError) as theirs_err:
        theirs.grad_fn(torch.ones_like(theirs))
    assert str(ours_err.value) == str(theirs_err.value)
