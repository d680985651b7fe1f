"""`autograd.is_multithreading_enabled()` reports what `set_multithreading_enabled` set, used
as a function or as a context manager (restored on exit), as PyTorch's does."""
import aotgrad


def _sequence(mod):
    A = mod.autograd
    out = []
    with A.set_multithreading_enabled(False):
        out.append(A.is_multithreading_enabled())
    out.append(A.is_multithreading_enabled())
    with A.set_multithreading_enabled(False):
        A.set_multithreading_enabled(True)
        out.append(A.is_multithreading_enabled())
    out.append(A.is_multithreading_enabled())
    A.set_multithreading_enabled(False)
    out.append(A.is_multithreading_enabled())
    A.set_multithreading_enabled(True)
    out.append(A.is_multithreading_enabled())
    return out


def test_flag_sequence():
    assert _sequence(aotgrad) == [False, True, True, True, False, True]


def test_flag_sequence_matches_torch(torch):
    assert _sequence(aotgrad) == _sequence(torch)
