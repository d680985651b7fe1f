"""autograd.functional's strict-mode messages for second-order functions and the standard
basis helper, against torch."""
import pytest


@pytest.mark.parametrize("api", ["vhp", "hvp", "hessian"])
def test_second_order_strict_messages(api, torch):
    import aotgrad as ag
    for T in (ag, torch):
        fn = getattr(T.autograd.functional, api)
        inp, v = T.rand(4), T.rand(4)
        args = () if api == "hessian" else (v,)
        with pytest.raises(RuntimeError, match="Output 0 of the user-provided function does "
                                               "not require gradients"):
            fn(lambda a: a.detach().sum(), inp, *args, strict=True)
        unrelated = "independent of input 0" if api != "hessian" else \
            "jacobian of the user-provided function with respect to input 0"
        with pytest.raises(RuntimeError, match=unrelated):
            fn(lambda a: a.long().float().requires_grad_().clone().sum(), inp, *args,
               strict=True)
        with pytest.raises(RuntimeError, match="jacobian of the user-provided function with "
                                               "respect to input 0 is"):
            fn(lambda a: (3 * a).sum(), inp, *args, strict=True)


def test_construct_standard_basis_for(torch):
    import aotgrad as ag
    for T in (ag, torch):
        ins = (T.randn(2, dtype=T.float64), T.randn([]), T.randn(3, dtype=T.float32))
        res = T.autograd.functional._construct_standard_basis_for(ins, (2, 1, 3))
        assert [r.dtype for r in res] == [T.float64, T.float32, T.float32]
        assert [tuple(r.shape) for r in res] == [(6, 2), (6, 1), (6, 3)]
        full = T.cat([r.to(dtype=T.float64) for r in res], dim=1)
        assert bool((full == T.eye(6, dtype=T.float64)).all())
