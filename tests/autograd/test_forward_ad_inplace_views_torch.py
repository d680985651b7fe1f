"""Forward-mode AD and in-place ops on views: an in-place op updates the tensor's tangent in
place (the tangent given to make_dual sees it), and a view of a dual tensor has a tangent that
is a view of its base's, so an in-place op on the view updates the base's tangent at the
view's elements. The primal given to make_dual gets no tangent. Compared with PyTorch."""
import numpy as np

import aotgrad
from aotgrad.testing import assert_close


def _views(mod):
    fwAD = mod.autograd.forward_ad
    out = {}
    foo, bar = mod.tensor([0.5, 0.25]), mod.ones(2)
    with fwAD.dual_level():
        dual = fwAD.make_dual(foo, bar)
        view = dual.narrow(0, 0, 1)
        view *= 2
        out["primal_has_tangent"] = fwAD.unpack_dual(foo).tangent is not None
        out["dual"] = fwAD.unpack_dual(dual).tangent.tolist()
        out["view"] = fwAD.unpack_dual(view).tangent.tolist()
        baz = mod.zeros(2)
        baz[0] = dual[0]
        out["setitem"] = fwAD.unpack_dual(baz).tangent.tolist()
        t = mod.ones(2, dtype=mod.float64)
        d2 = fwAD.make_dual(mod.ones(2, dtype=mod.float64), t)
        d2 *= 3
        out["given_tangent"] = t.tolist()   # modified in place
    return out


def test_inplace_on_view_of_dual():
    got = _views(aotgrad)
    assert got == {"primal_has_tangent": False, "dual": [2.0, 1.0], "view": [2.0],
                   "setitem": [2.0, 0.0], "given_tangent": [3.0, 3.0]}


def test_inplace_on_view_of_dual_matches_torch(torch):
    ours, theirs = _views(aotgrad), _views(torch)
    assert ours.keys() == theirs.keys()
    for k in ours:
        assert_close(ours[k], theirs[k], rtol=1e-7, atol=0, equal_nan=True)
