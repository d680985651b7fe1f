"""AccumulateGrad takes a gradient nobody else holds as the leaf's `.grad` itself (PyTorch
steals it): a post-accumulate-grad hook that changes `.grad` in place then changes the
gradient the AccumulateGrad node's post hooks see. A gradient someone holds is copied."""
import numpy as np

import aotgrad as ag
from aotgrad.testing import assert_close


def _hook_order(T):
    t = T.tensor([0.5, 1.5, 2.5], requires_grad=True)
    acc = t.view_as(t).grad_fn.next_functions[0][0]
    t.register_hook(lambda g: g.sub(2.0))            # 1 -> -1
    acc.register_prehook(lambda go: (go[0].div(5.0),))  # -> -0.2, a new tensor

    def add_half(p):
        p.grad.add_(0.5)                              # -> 0.3, in place
    t.register_post_accumulate_grad_hook(add_half)

    def post(grad_inputs, grad_outputs):
        t.grad = grad_outputs[0].mul(10)              # the stolen (changed) gradient
    acc.register_hook(post)
    t.sum().backward()
    return t.grad.tolist()


def test_post_hooks_see_the_stolen_gradient():
    assert_close(_hook_order(ag), [3.0, 3.0, 3.0], rtol=1e-6, atol=0, equal_nan=True)


def test_matches_torch(torch):
    assert_close(_hook_order(ag), _hook_order(torch), rtol=1e-6, atol=0, equal_nan=True)


def test_a_gradient_someone_holds_is_copied():
    kept = []
    t = ag.tensor([1.0, 2.0], requires_grad=True)
    acc = t.view_as(t).grad_fn.next_functions[0][0]

    def keep(go):
        g = go[0] * 3
        kept.append(g)  # the hook holds the gradient it passes on
        return (g,)
    acc.register_prehook(keep)
    t.sum().backward()
    assert t.grad is not kept[0]
    kept[0].add_(100)  # changing the hook's tensor leaves .grad alone
    assert t.grad.tolist() == [3.0, 3.0]
    # a gradient given by hand to the node is the caller's: copied too
    u = ag.tensor([1.0, 2.0], requires_grad=True)
    g = ag.tensor([5.0, 6.0])
    u.backward(g)
    assert u.grad is not g and u.grad.tolist() == [5.0, 6.0]
    g.add_(1)
    assert u.grad.tolist() == [5.0, 6.0]
