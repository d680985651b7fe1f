"""set_printoptions changes repr as PyTorch's does (precision, threshold, edgeitems,
linewidth, sci_mode, profiles)."""
import numpy as np
import pytest

import aotgrad

SETTINGS = [dict(precision=2), dict(precision=6), dict(threshold=5), dict(edgeitems=1,
            threshold=10), dict(linewidth=40), dict(sci_mode=True), dict(sci_mode=False),
            dict(profile="short"), dict(profile="full"), dict(profile="default", precision=1)]


@pytest.fixture
def restore(torch):
    yield
    aotgrad.set_printoptions(profile="default")
    torch.set_printoptions(profile="default")


@pytest.mark.parametrize("kwargs", SETTINGS,
                         ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_repr_matches_torch(torch, restore, kwargs):
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=(12,)).astype(np.float32),
              (rng.normal(size=(4, 9)) * 1e-5).astype(np.float32),
              np.arange(30, dtype=np.float32).reshape(5, 6),
              rng.integers(-50, 50, (3, 20)), np.array([1.5e9, 2.0, np.nan])]
    aotgrad.set_printoptions(**kwargs)
    torch.set_printoptions(**kwargs)
    for a in arrays:
        assert repr(aotgrad.tensor(a)).replace("aotgrad.", "torch.") == repr(torch.tensor(a))
        assert aotgrad.get_printoptions()["precision"] == torch._tensor_str.PRINT_OPTS.precision


def test_unknown_profile_names_the_choices():
    with pytest.raises(ValueError, match="short"):
        aotgrad.set_printoptions(profile="long")
