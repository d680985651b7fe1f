"""Datasets: the map-style `Dataset` (`__getitem__`, `__len__`), `IterableDataset`
(`__iter__`), `TensorDataset`, `Subset`, `ConcatDataset` and `random_split`, as in
torch.utils.data.

>>> ds = TensorDataset(aotgrad.randn(100, 3), aotgrad.randint(0, 2, (100,)))
>>> train, val = random_split(ds, [0.8, 0.2], generator=aotgrad.Generator().manual_seed(0))
"""
import bisect
import math

import numpy as np

from aotgrad.runtime.factories import from_numpy
from aotgrad.runtime.tensor import Tensor
from aotgrad.utils.data.collate import plain_values
from aotgrad.utils.data.sampler import randperm_list


def _check_index(i, n):
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for dimension 0 with size {n}")
    return i


class Dataset:
    """A map-style dataset: subclasses define `__getitem__(index)` and usually `__len__`.
    `a + b` concatenates."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is a stream: subclasses define `__iter__`. With worker processes each
    worker iterates its own copy; use `get_worker_info()` inside `__iter__` to split the
    stream between them."""

    def __iter__(self):
        raise NotImplementedError("Subclasses of IterableDataset should implement __iter__.")

    def __add__(self, other):
        raise TypeError("IterableDataset does not support concatenation with +")


class TensorDataset(Dataset):
    """Sample i is `tuple(t[i] for t in tensors)`; the tensors share their first dimension."""

    def __init__(self, *tensors):
        if any(not isinstance(t, Tensor) for t in tensors):
            raise TypeError("TensorDataset: every argument must be a Tensor")
        if tensors and any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __getitems__(self, indices):
        """The DataLoader's batched fetch: the same samples as `[self[i] for i in indices]`
        (views of the rows); for plain data tensors (concrete, no grad) built straight from
        the numpy rows, without the op layer's per-call cost."""
        if not plain_values(self.tensors) or \
                not all(isinstance(i, (int, np.integer)) for i in indices):
            return [self[i] for i in indices]
        n, values = len(self), [t._value for t in self.tensors]
        # v[i, ...] is a 0-d array for a 1-d v (v[i] would be a numpy scalar)
        return [tuple(from_numpy(v[_check_index(i, n), ...]) for v in values) for i in indices]

    def __len__(self):
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of `dataset` at `indices`, in that order."""

    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices):
        # the DataLoader's batched fetch: the underlying dataset's, when it has one
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__([self.indices[i] for i in indices])
        return [self.dataset[self.indices[i]] for i in indices]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    """The concatenation of map-style datasets (sample i of the first, then the next, ...)."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise AssertionError("datasets should not be an empty iterable")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes, total = [], 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][idx - start]


def random_split(dataset, lengths, generator=None):
    """Split into non-overlapping Subsets of the given lengths, or of the given fractions
    (floored, the remainder handed out one by one from the first split, as PyTorch does),
    in an order drawn from `generator` (default: the global generator)."""
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = []
        for i, frac in enumerate(lengths):
            if frac < 0 or frac > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            sizes.append(int(math.floor(n * frac)))
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order = randperm_list(n, generator)
    out, offset = [], 0
    for k in lengths:
        out.append(Subset(dataset, order[offset:offset + k]))
        offset += k
    return out
