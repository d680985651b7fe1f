"""aotgrad.utils.data without PyTorch: datasets, samplers, default_collate, DataLoader
options, determinism per seed, and worker processes (num_workers=2, spawn)."""
import collections

import numpy as np
import pytest

import aotgrad
from aotgrad.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, RandomSampler,
                                SequentialSampler, Subset, SubsetRandomSampler, TensorDataset,
                                default_collate, get_worker_info, random_split)
from data_helpers import Shards, record_init


def _ds(n=10):
    return TensorDataset(aotgrad.arange(2.0 * n).reshape(n, 2), aotgrad.arange(n))


def test_tensor_dataset_subset_concat():
    ds = _ds()
    x, y = ds[3]
    assert x.tolist() == [6.0, 7.0] and y.item() == 3 and len(ds) == 10
    sub = Subset(ds, [9, 0, 4])
    assert len(sub) == 3 and sub[0][1].item() == 9
    cat = ConcatDataset([ds, sub])
    assert len(cat) == 13 and cat[10][1].item() == 9 and cat[-1][1].item() == 4
    assert len(ds + sub) == 13
    with pytest.raises(AssertionError, match="Size mismatch"):
        TensorDataset(aotgrad.zeros(3), aotgrad.zeros(4))


def test_batched_fetch_gives_the_samples_of_getitem():
    ds = TensorDataset(aotgrad.randn(5, 2), aotgrad.arange(5), aotgrad.randn(5, 2, 3))
    for got, want in zip(ds.__getitems__([4, 0, -1]), [ds[4], ds[0], ds[-1]]):
        for a, b in zip(got, want):
            assert type(a) is aotgrad.Tensor and a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a.numpy(), b.numpy())
    with pytest.raises(IndexError, match="out of bounds"):
        ds.__getitems__([5])
    # tensors that require grad keep the autograd path
    w = aotgrad.randn(3, 2, requires_grad=True)
    sample = TensorDataset(w).__getitems__([1])[0][0]
    assert sample.requires_grad and sample.grad_fn is not None


def test_sequential_batches_and_drop_last():
    batches = [y.tolist() for _, y in DataLoader(_ds(), batch_size=4)]
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    dl = DataLoader(_ds(), batch_size=4, drop_last=True)
    assert [y.tolist() for _, y in dl] == [[0, 1, 2, 3], [4, 5, 6, 7]] and len(dl) == 2
    assert len(DataLoader(_ds(), batch_size=4)) == 3
    x, y = next(iter(DataLoader(_ds(), batch_size=4)))
    assert tuple(x.shape) == (4, 2) and x.dtype == aotgrad.float32 and y.dtype == aotgrad.int64


def test_shuffle_is_a_permutation_and_deterministic_per_seed():
    def epoch(loader):
        return [i for _, y in loader for i in y.tolist()]

    g = aotgrad.Generator().manual_seed(7)
    dl = DataLoader(_ds(50), batch_size=8, shuffle=True, generator=g)
    e1, e2 = epoch(dl), epoch(dl)
    assert sorted(e1) == list(range(50)) and e1 != e2 and e1 != list(range(50))
    g.manual_seed(7)
    assert epoch(dl) == e1 and epoch(dl) == e2
    # without a generator: the global seed decides
    aotgrad.manual_seed(3)
    a = epoch(DataLoader(_ds(50), batch_size=8, shuffle=True))
    aotgrad.manual_seed(3)
    assert epoch(DataLoader(_ds(50), batch_size=8, shuffle=True)) == a


def test_random_sampler_options():
    g = aotgrad.Generator().manual_seed(0)
    s = list(RandomSampler(range(5), num_samples=12, generator=g))
    assert len(s) == 12 and sorted(s[:5]) == sorted(s[5:10]) == list(range(5))
    assert len(set(s[10:])) == 2
    r = list(RandomSampler(range(3), replacement=True, num_samples=40, generator=g))
    assert len(r) == 40 and set(r) == {0, 1, 2}
    with pytest.raises(ValueError, match="num_samples should be a positive integer"):
        RandomSampler(range(3), num_samples=0)
    with pytest.raises(TypeError, match="replacement should be a boolean"):
        RandomSampler(range(3), replacement=1)
    sub = list(SubsetRandomSampler([10, 20, 30], generator=g))
    assert sorted(sub) == [10, 20, 30]
    bs = BatchSampler(SequentialSampler(range(7)), 3, drop_last=False)
    assert list(bs) == [[0, 1, 2], [3, 4, 5], [6]] and len(bs) == 3
    with pytest.raises(ValueError, match="batch_size should be a positive integer"):
        BatchSampler(range(3), 0, False)


def test_random_split_lengths_fractions_and_determinism():
    ds = _ds(10)
    a, b = random_split(ds, [7, 3], generator=aotgrad.Generator().manual_seed(1))
    assert len(a) == 7 and len(b) == 3 and sorted(a.indices + b.indices) == list(range(10))
    a2, _ = random_split(ds, [7, 3], generator=aotgrad.Generator().manual_seed(1))
    assert a2.indices == a.indices
    parts = random_split(range(11), [0.5, 0.3, 0.2], generator=aotgrad.Generator())
    assert [len(p) for p in parts] == [6, 3, 2]  # floors 5, 3, 2; the remainder to the first
    with pytest.raises(ValueError, match="Sum of input lengths"):
        random_split(ds, [5, 4])


def test_default_collate_types():
    Point = collections.namedtuple("Point", "x y")
    batch = [{"a": aotgrad.ones(2), "b": 1.5, "c": 3, "d": "s", "e": np.zeros(3, np.float32),
              "f": (True, np.int32(4)), "p": Point(1, 2.0)} for _ in range(4)]
    out = default_collate(batch)
    assert tuple(out["a"].shape) == (4, 2)
    assert out["b"].dtype == aotgrad.float64 and out["c"].dtype == aotgrad.int64
    assert out["d"] == ["s"] * 4
    assert out["e"].dtype == aotgrad.float32 and tuple(out["e"].shape) == (4, 3)
    assert isinstance(out["f"], list) and out["f"][0].dtype == aotgrad.bool
    assert out["f"][1].dtype == aotgrad.int32
    assert type(out["p"]) is Point and out["p"].y.dtype == aotgrad.float64
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([[1, 2], [1]])
    with pytest.raises(TypeError, match="default_collate: batch must contain"):
        default_collate([object()])


def test_batch_size_none_collate_fn_and_batch_sampler():
    class Squares(Dataset):
        def __getitem__(self, i):
            return np.array([i * i])

        def __len__(self):
            return 4

    out = list(DataLoader(Squares(), batch_size=None))
    assert [t.tolist() for t in out] == [[0], [1], [4], [9]]
    assert isinstance(out[0], aotgrad.Tensor)
    dl = DataLoader(Squares(), batch_sampler=[[3, 0], [1]], collate_fn=lambda b: len(b))
    assert list(dl) == [2, 1]
    with pytest.raises(ValueError, match="mutually exclusive with batch_size"):
        DataLoader(Squares(), batch_sampler=[[0]], batch_size=2)
    with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
        DataLoader(Squares(), sampler=[0, 1], shuffle=True)
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        DataLoader(Shards(4), shuffle=True)
    with pytest.raises(ValueError, match="num_workers option should be non-negative"):
        DataLoader(Squares(), num_workers=-1)


def test_iterable_dataset_in_the_main_process():
    assert get_worker_info() is None
    batches = list(DataLoader(Shards(5), batch_size=2, pin_memory=True))
    assert [b["i"].tolist() for b in batches] == [[0, 1], [2, 3], [4]]
    assert [b["i"].tolist() for b in DataLoader(Shards(5), batch_size=2, drop_last=True)] == \
        [[0, 1], [2, 3]]


def test_two_worker_processes_map_style_match_the_main_process():
    ds = _ds(23)
    main = [(x.numpy(), y.tolist()) for x, y in
            DataLoader(ds, batch_size=4, shuffle=True,
                       generator=aotgrad.Generator().manual_seed(5))]
    gen = aotgrad.Generator().manual_seed(5)
    dl = DataLoader(ds, batch_size=4, shuffle=True, generator=gen, num_workers=2,
                    persistent_workers=True, prefetch_factor=2)
    first = [(x.numpy(), y.tolist()) for x, y in dl]
    assert [y for _, y in first] == [y for _, y in main]
    for (xa, _), (xb, _) in zip(first, main):
        np.testing.assert_array_equal(xa, xb)
    second = [y.tolist() for _, y in dl]  # the same workers, the next order of the sampler
    assert sorted(i for b in second for i in b) == list(range(23)) and second != first
    del dl


def test_two_worker_processes_iterable_seeds_and_errors():
    batches = list(DataLoader(Shards(7), batch_size=2, num_workers=2,
                              worker_init_fn=record_init,
                              generator=aotgrad.Generator().manual_seed(11)))
    # worker 0 has 0, 2, 4, 6 and worker 1 has 1, 3, 5: batches alternate between them
    assert [b["i"].tolist() for b in batches] == [[0, 2], [1, 3], [4, 6], [5]]
    assert [b["worker"].tolist() for b in batches] == [[0, 0], [1, 1], [0, 0], [1]]
    # worker w's global generator is seeded with base + w, base drawn from the loader's
    # generator: the same seed gives the same draws, run after run
    base = int(aotgrad.Generator().manual_seed(11).next_seed().item())
    for w in (0, 1):
        seeds = {s for b in batches for s, k in zip(b["seed"].tolist(), b["worker"].tolist())
                 if k == w}
        assert seeds == {base + w}
        aotgrad.manual_seed(base + w)
        expect = [aotgrad.rand(()).item() for _ in range(4 - w)]
        got = [v for b in batches for v, k in zip(b["noise"].tolist(), b["worker"].tolist())
               if k == w]
        assert got == pytest.approx(expect, rel=1e-15)
    with pytest.raises(RuntimeError, match=r"worker process 1(.|\n)*bad sample 3"):
        list(DataLoader(Shards(7, fail_at=3), batch_size=2, num_workers=2))
