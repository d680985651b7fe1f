"""`DataLoader`: batches from a dataset, optionally shuffled, optionally loaded by worker
processes, as torch.utils.data.DataLoader.

    loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True,
                        generator=aotgrad.Generator().manual_seed(0))
    for xb, yb in loader:
        ...

With num_workers > 0 the batches are made by worker processes started with the "spawn"
method (the default `multiprocessing_context`; the dataset, collate_fn and worker_init_fn
must be picklable, and a script must guard its entry point with `if __name__ ==
"__main__":`). Batches come back in the sampler's order. Each worker seeds Python's `random`,
numpy's global generator and aotgrad's global generator with base_seed + worker id, where
base_seed is drawn from the loader's generator (or the global one) per epoch, so a seeded run
repeats (the persistent workers of `persistent_workers=True` keep their first epoch's
seeds). pin_memory is accepted and does nothing (tensors live in ordinary CPU memory).
"""
import multiprocessing
import queue

from aotgrad.utils.data import worker as _worker
from aotgrad.utils.data.collate import default_collate, default_convert
from aotgrad.utils.data.dataset import IterableDataset
from aotgrad.utils.data.sampler import (BatchSampler, RandomSampler, SequentialSampler,
                                        draw_seed)


class DataLoader:
    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False,
                 timeout=0, worker_init_fn=None, multiprocessing_context=None, generator=None,
                 *, prefetch_factor=None, persistent_workers=False, pin_memory_device="",
                 in_order=True):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to "
                             "disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in "
                             "multiprocessing.let num_workers > 0 to enable multiprocessing, "
                             "otherwise set prefetch_factor to None.")
        if num_workers > 0 and prefetch_factor is None:
            prefetch_factor = 2
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            if shuffle not in (False, None):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"shuffle option, but got shuffle={shuffle}")
            if sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"sampler option, but got sampler={sampler}")
            if batch_sampler is not None:
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                                 f"batch_sampler option, but got batch_sampler={batch_sampler}")
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if sampler is None and not iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle \
                else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)

        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, drop_last
        self.sampler, self.batch_sampler, self.generator = sampler, batch_sampler, generator
        self.num_workers, self.prefetch_factor = num_workers, prefetch_factor
        self.pin_memory, self.pin_memory_device = pin_memory, pin_memory_device
        self.timeout, self.worker_init_fn = timeout, worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.persistent_workers, self.in_order = persistent_workers, in_order
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self._workers = None

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None or \
            (isinstance(self.dataset, IterableDataset) and self.batch_size is not None)

    @property
    def _index_sampler(self):
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def __len__(self):
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)  # a TypeError when the stream has no length, as in PyTorch
            if self.batch_size is not None:
                n = n // self.batch_size if self.drop_last else -(-n // self.batch_size)
            return n
        return len(self._index_sampler)

    def __iter__(self):
        # every pass draws the workers' base seed first, with or without workers (as PyTorch
        # does), so a seeded shuffle gives the same batches whatever num_workers is
        base_seed = draw_seed(self.generator)
        if self.num_workers == 0:
            return self._single_process()
        if self.persistent_workers:
            if self._workers is None:
                self._workers = _WorkerPool(self, base_seed)
            else:
                self._workers.next_epoch()
            return self._workers.batches()
        return _WorkerPool(self, base_seed).batches(shutdown_after=True)

    def _single_process(self):
        if isinstance(self.dataset, IterableDataset):
            stream = iter(self.dataset)
            while True:
                try:
                    yield _worker.iterable_batch(stream, self.batch_size, self.drop_last,
                                                 self.collate_fn)
                except StopIteration:
                    return
        for indices in self._index_sampler:
            yield _worker.fetch(self.dataset, indices, self.collate_fn, self._auto_collation)

    def __del__(self):
        if getattr(self, "_workers", None) is not None:
            self._workers.shutdown()


class _WorkerPool:
    """The worker processes of one loader and the bookkeeping of one pass over the data."""

    def __init__(self, loader, seed):
        self.loader = loader
        ctx = loader.multiprocessing_context or "spawn"
        if isinstance(ctx, str):
            ctx = multiprocessing.get_context(ctx)
        self.iterable = isinstance(loader.dataset, IterableDataset)
        self.results = ctx.Queue()
        self.requests, self.procs = [], []
        for wid in range(loader.num_workers):
            q = ctx.Queue()
            p = ctx.Process(target=_worker.worker_loop, daemon=True, args=(
                loader.dataset, self.iterable, q, self.results, loader.collate_fn,
                loader.batch_size, loader.drop_last, loader._auto_collation, seed + wid, wid,
                loader.num_workers, loader.worker_init_fn))
            p.start()
            self.requests.append(q)
            self.procs.append(p)
        self.next_id = 0
        self.started = True

    def next_epoch(self):
        if self.iterable:
            for q in self.requests:
                q.put(_worker.RESET)

    def batches(self, shutdown_after=False):
        try:
            yield from (self._iterable_batches() if self.iterable else self._map_batches())
        finally:
            if shutdown_after:
                self.shutdown()

    def _get(self):
        timeout = self.loader.timeout or None
        while True:
            try:
                index, data = self.results.get(timeout=timeout if timeout else 5.0)
            except queue.Empty:
                if timeout:
                    raise RuntimeError(f"DataLoader timed out after {timeout} seconds")
                dead = [p.pid for p in self.procs if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"DataLoader worker (pid(s) {dead}) exited "
                                       f"unexpectedly")
                continue
            if isinstance(data, _worker.WorkerError):
                data.reraise()
            return index, data

    def _map_batches(self):
        """Send index lists round-robin, at most prefetch_factor per worker outstanding;
        yield the batches in the sampler's order. Request ids grow across passes, so the
        results of a pass left early (persistent workers) are recognised and dropped."""
        batches = iter(self.loader._index_sampler)
        n_workers = len(self.procs)
        limit = self.loader.prefetch_factor * n_workers
        first = sent = received = self.next_id
        ready, exhausted = {}, False
        while True:
            while not exhausted and sent - received < limit:
                indices = next(batches, None)
                if indices is None:
                    exhausted = True
                    break
                self.requests[(sent - first) % n_workers].put((sent, indices))
                sent += 1
            self.next_id = sent
            if received == sent:
                return
            while received not in ready:
                index, data = self._get()
                if index >= first:
                    ready[index] = data
            yield ready.pop(received)
            received += 1

    def _iterable_batches(self):
        """Ask the workers in turn for their stream's next batch until every stream ends."""
        active = list(range(len(self.procs)))
        turn = 0
        while active:
            wid = active[turn % len(active)]
            request = self.next_id
            self.next_id += 1
            self.requests[wid].put((request, None))
            index, data = self._get()
            while index != request:  # a result of a pass left early
                index, data = self._get()
            if isinstance(data, _worker.EndOfStream):
                active.remove(wid)
                continue
            turn += 1
            yield data

    def shutdown(self):
        if not getattr(self, "started", False):
            return
        self.started = False
        for q in self.requests:
            try:
                q.put(None)
            except (OSError, ValueError):
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
        for q in self.requests + [self.results]:
            q.cancel_join_thread()
            q.close()
