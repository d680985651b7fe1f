"""DistributedSampler: each rank's share of a dataset, as torch.utils.data.distributed."""
import math

from aotgrad.runtime.factories import Generator, randperm
from aotgrad.utils.data.sampler import Sampler


class DistributedSampler(Sampler):
    """The indices of rank `rank` out of `num_replicas` (default: the process group's rank
    and size): rank r takes every num_replicas-th index starting at r. With `shuffle`, the
    order is a permutation drawn from `seed + epoch`, the same on every rank, so that the
    shards never overlap; call `set_epoch(epoch)` before each epoch for a new order. Without
    `drop_last` the list is padded with its own start to a multiple of num_replicas (every
    rank gets the same number of samples); with it, the tail that does not divide evenly is
    dropped."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        if num_replicas is None or rank is None:
            from aotgrad import distributed as dist
            if not dist.is_initialized():
                raise RuntimeError("DistributedSampler: num_replicas and rank default to the "
                                   "process group's, but init_process_group has not been "
                                   "called")
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last = shuffle, seed, drop_last
        self.epoch = 0
        n = len(dataset)
        if drop_last and n % num_replicas:
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            g = Generator()
            g.manual_seed(self.seed + self.epoch)
            indices = randperm(n, generator=g).tolist()
        else:
            indices = list(range(n))
        if not self.drop_last:
            pad = self.total_size - len(indices)
            if pad <= len(indices):
                indices += indices[:pad]
            else:
                indices += (indices * math.ceil(pad / len(indices)))[:pad]
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """The epoch whose order the next pass draws (with shuffle=True)."""
        self.epoch = epoch
