"""Datasets and functions for the DataLoader worker tests: module-level, so that worker
processes started by spawn can unpickle them."""
import aotgrad
from aotgrad.utils.data import IterableDataset, get_worker_info


class Shards(IterableDataset):
    """0..n-1, split between the workers by get_worker_info(); fails at `fail_at`."""

    def __init__(self, n, fail_at=None):
        self.n, self.fail_at = n, fail_at

    def __iter__(self):
        info = get_worker_info()
        wid, nw, seed = (0, 1, -1) if info is None else (info.id, info.num_workers, info.seed)
        for i in range(wid, self.n, nw):
            if i == self.fail_at:
                raise ValueError(f"bad sample {i}")
            # the worker's seeded global generator is used here: same seed, same draws
            yield {"i": i, "worker": wid, "seed": seed, "noise": aotgrad.rand(()).item()}


def record_init(worker_id):
    info = get_worker_info()
    assert info is not None and info.id == worker_id
    info.dataset.init_seen = info.seed
