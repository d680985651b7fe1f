"""aotgrad.utils.data against torch.utils.data: collation (structure, dtypes, values), the
sequential batches, split sizes, batch samplers, lengths and error messages. (Shuffled orders
are aotgrad's own: its generator is not PyTorch's.)"""
import collections

import numpy as np
import pytest

import aotgrad
from aotgrad.utils import data as ad

Pair = collections.namedtuple("Pair", "a b")


def _same(ours, ref):
    if hasattr(ref, "numpy") and not isinstance(ref, np.ndarray):
        assert isinstance(ours, aotgrad.Tensor), (ours, ref)
        assert str(ours.dtype).split(".")[-1] == str(ref.dtype).split(".")[-1]
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())
    elif isinstance(ref, dict):
        assert type(ours) is type(ref) and list(ours) == list(ref)
        for k in ref:
            _same(ours[k], ref[k])
    elif isinstance(ref, (list, tuple)):
        assert type(ours) is type(ref) and len(ours) == len(ref), (ours, ref)
        for a, b in zip(ours, ref):
            _same(a, b)
    else:
        assert ours == ref


def _samples(lib):
    return [{"x": lib.arange(3) * k, "f": 0.5 * k, "i": k, "b": k % 2 == 0, "s": f"s{k}",
             "np": np.full((2,), k, np.float32), "npi": np.int32(k), "t": (k, [1.0 * k, 2]),
             "nt": Pair(k, lib.ones(2)), "od": collections.OrderedDict(z=k, a=[k])}
            for k in range(3)]


def test_default_collate_matches_torch(torch):
    from torch.utils.data import default_collate
    _same(ad.default_collate(_samples(aotgrad)), default_collate(_samples(torch)))


def test_default_convert_matches_torch(torch):
    from torch.utils.data._utils.collate import default_convert
    sample = {"a": np.arange(3), "b": (np.float64(2.0), "s"), "c": [np.ones(2, np.float32)]}
    _same(ad.default_convert(sample), default_convert(sample))


@pytest.mark.parametrize("batch_size,drop_last", [(1, False), (3, False), (3, True),
                                                  (10, False), (16, True)])
def test_sequential_batches_match_torch(torch, batch_size, drop_last):
    X = np.arange(30, dtype=np.float32).reshape(10, 3)
    ours = ad.DataLoader(ad.TensorDataset(aotgrad.tensor(X), aotgrad.arange(10)),
                         batch_size=batch_size, drop_last=drop_last)
    ref = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.tensor(X), torch.arange(10)),
        batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(ref)
    _same(list(ours), list(ref))


def test_split_sizes_and_batch_samplers_match_torch(torch):
    tdata = torch.utils.data
    for lengths in ([0.5, 0.3, 0.2], [0.1] * 10, [0.34, 0.33, 0.33], [3, 8]):
        n = 11
        ours = [len(s) for s in ad.random_split(range(n), lengths)]
        assert ours == [len(s) for s in tdata.random_split(range(n), lengths)], lengths
    for bs, drop in [(3, False), (3, True), (4, False), (20, True)]:
        ours = ad.BatchSampler(ad.SequentialSampler(range(11)), bs, drop)
        ref = tdata.BatchSampler(tdata.SequentialSampler(range(11)), bs, drop)
        assert list(ours) == list(ref) and len(ours) == len(ref)
    for kw in [dict(num_samples=7), dict(num_samples=25), dict(replacement=True,
                                                              num_samples=70)]:
        assert len(list(ad.RandomSampler(range(10), **kw))) == \
            len(list(tdata.RandomSampler(range(10), **kw)))


def test_error_messages_match_torch(torch):
    tdata = torch.utils.data
    cases = [dict(batch_sampler=[[0]], batch_size=2), dict(sampler=[0], shuffle=True),
             dict(num_workers=-1), dict(batch_size=None, drop_last=True),
             dict(prefetch_factor=2)]
    for kw in cases:
        with pytest.raises(ValueError) as e1:
            ad.DataLoader(list(range(3)), **kw)
        with pytest.raises(ValueError) as e2:
            tdata.DataLoader(list(range(3)), **kw)
        assert str(e1.value) == str(e2.value), kw
    with pytest.raises(ValueError) as e1:
        ad.RandomSampler(range(3), num_samples=-2)
    with pytest.raises(ValueError) as e2:
        tdata.RandomSampler(range(3), num_samples=-2)
    assert str(e1.value) == str(e2.value)
