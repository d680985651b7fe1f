"""Entering a dual level inside another raises PyTorch's error (RuntimeError, "Nested forward
mode AD is not supported at the moment"), and the active level survives the refusal."""
import pytest

import aotgrad


def _nested_error(mod):
    fwAD = mod.autograd.forward_ad
    with fwAD.dual_level() as lvl:
        with pytest.raises(RuntimeError) as info:
            fwAD.enter_dual_level()
        # the outer level still works after the refused nesting
        d = fwAD.make_dual(mod.ones(2), mod.ones(2))
        tangent = fwAD.unpack_dual(d * 3).tangent
    return lvl, str(info.value), tangent.tolist()


def test_nested_level_refused():
    lvl, msg, tangent = _nested_error(aotgrad)
    assert lvl == 0 and "Nested forward mode AD is not supported at the moment" in msg
    assert tangent == [3.0, 3.0]


def test_nested_level_matches_torch(torch):
    a, t = _nested_error(aotgrad), _nested_error(torch)
    assert a[0] == t[0] and a[2] == t[2]
    assert "Nested forward mode AD is not supported at the moment" in t[1]
