"""Samplers: which dataset indices a DataLoader visits, in which order, and how they group
into batches, as in torch.utils.data.

Random orders come from aotgrad's generators (`aotgrad.randperm`, `aotgrad.randint`): the
same seed gives the same order, run after run; the orders are not PyTorch's (aotgrad's
generator is not PyTorch's Philox/MT19937 stream).
"""
from aotgrad.runtime.factories import Generator, default_generator, randint, randperm


def draw_seed(generator=None):
    """An int64 seed drawn from `generator` (default: the global generator)."""
    return int((generator or default_generator).next_seed().item())


def randperm_list(n, generator=None):
    return randperm(n, generator=generator or default_generator).tolist()


class Sampler:
    """Base class: `__iter__` yields indices (or, for a batch sampler, lists of them)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation per pass (`num_samples` > len draws several permutations and
    the start of one more); with `replacement`, `num_samples` independent uniform draws.
    Without a generator, each pass seeds a fresh one from the global generator, so
    `aotgrad.manual_seed` fixes the orders."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source, self.replacement = data_source, replacement
        self._num_samples, self.generator = num_samples, generator
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got "
                            f"replacement={replacement}")
        if not isinstance(self.num_samples, int) or isinstance(self.num_samples, bool) or \
                self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        gen = self.generator
        if gen is None:
            gen = Generator().manual_seed(draw_seed())
        if self.replacement:
            for _ in range(self.num_samples // 32):
                yield from randint(0, n, (32,), generator=gen).tolist()
            yield from randint(0, n, (self.num_samples % 32,), generator=gen).tolist()
        else:
            for _ in range(self.num_samples // n):
                yield from randperm(n, generator=gen).tolist()
            yield from randperm(n, generator=gen).tolist()[:self.num_samples % n]

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order (a new one per pass)."""

    def __init__(self, indices, generator=None):
        self.indices, self.generator = indices, generator

    def __iter__(self):
        for i in randperm_list(len(self.indices), self.generator):
            yield self.indices[i]

    def __len__(self):
        return len(self.indices)


class BatchSampler(Sampler):
    """Groups the indices of `sampler` into lists of `batch_size` (the last one shorter
    unless `drop_last`)."""

    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got "
                             f"drop_last={drop_last}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for idx in self.sampler:
            batch.append(idx)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
