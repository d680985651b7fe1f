"""A dual tensor prints its tangent (`tensor([...], tangent=tensor([...]))`), as PyTorch's;
plain tensors, the unpacked primal and the tangent itself do not, and after the level ends the
tensor prints as a plain one."""
import aotgrad


def _reprs(mod):
    fw = mod.autograd.forward_ad
    with fw.dual_level():
        plain = mod.tensor([1.0, 2.0])
        dual = fw.make_dual(mod.tensor([1.0, 2.0, 3.0]), mod.tensor([0.0, 1.0, 2.0]))
        primal, tangent = fw.unpack_dual(dual)
        inside = [repr(plain), repr(dual), repr(dual * 2), repr(primal), repr(tangent)]
    return inside + [repr(dual)]


def test_dual_printing():
    r = _reprs(aotgrad)
    assert r[1] == "tensor([1., 2., 3.], tangent=tensor([0., 1., 2.]))"
    assert r[2] == "tensor([2., 4., 6.], tangent=tensor([0., 2., 4.]))"
    assert all("tangent=" not in x for x in (r[0], r[3], r[4], r[5]))


def test_dual_printing_matches_torch(torch):
    assert _reprs(aotgrad) == _reprs(torch)
