"""`Tensor._is_view()` says whether a tensor is a view of another (its `_base` is set), for
the same tensors as PyTorch: views, multi-output views, detach; not clones or results."""
import aotgrad


def _flags(mod):
    x = mod.rand(2, 3)
    r = mod.rand(2, 3, requires_grad=True)
    with mod.no_grad():
        nv = r.view(-1)
    return [x._is_view(), x.view(-1)._is_view(), x.t()._is_view(), x[0]._is_view(),
            x.unbind()[1]._is_view(), x.clone()._is_view(), (x + 1)._is_view(),
            r.view_as(r)._is_view(), nv._is_view(), x.view(-1).view(3, 2)._is_view()]


def test_is_view_flags():
    assert _flags(aotgrad) == [False, True, True, True, True, False, False, True, True, True]


def test_is_view_matches_torch(torch):
    assert _flags(aotgrad) == _flags(torch)
