"""The worker processes of a DataLoader with num_workers > 0 (started by spawn), and
`get_worker_info()`.

A worker receives requests on its own queue and answers on the loader's shared result queue:
(index, list of dataset indices) -> (index, the collated batch) for map-style datasets;
(index, None) -> (index, its stream's next batch, or the end of its stream) for iterable
ones; RESET starts an iterable dataset's stream again (persistent workers, next epoch);
None ends the worker. An exception in a worker travels back as a `WorkerError` with its
traceback and is raised in the main process.
"""
import dataclasses
import multiprocessing
import queue
import random
import traceback

import numpy as np


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """What `get_worker_info()` returns inside a worker: its id, the number of workers, its
    seed (the loader's base seed + id) and its copy of the dataset."""
    id: int
    num_workers: int
    seed: int
    dataset: object


class _Current:
    """The worker this process is (None in the main process)."""
    info = None


def get_worker_info():
    """A WorkerInfo inside a DataLoader worker process, None in the main process."""
    return _Current.info


@dataclasses.dataclass
class WorkerError:
    worker_id: int
    text: str

    def reraise(self):
        raise RuntimeError(f"Caught an exception in DataLoader worker process "
                           f"{self.worker_id}. Original traceback:\n{self.text}")


@dataclasses.dataclass(frozen=True)
class EndOfStream:
    """An iterable dataset's stream in this worker is exhausted."""
    worker_id: int


RESET = "reset"


def fetch(dataset, indices, collate_fn, auto_collation):
    if not auto_collation:
        return collate_fn(dataset[indices])
    getitems = getattr(dataset, "__getitems__", None)
    samples = getitems(indices) if callable(getitems) else [dataset[i] for i in indices]
    return collate_fn(samples)


def iterable_batch(stream, batch_size, drop_last, collate_fn):
    """The next batch of an iterable dataset's stream (StopIteration at its end)."""
    if batch_size is None:
        return collate_fn(next(stream))
    samples = []
    for sample in stream:
        samples.append(sample)
        if len(samples) == batch_size:
            break
    if not samples or (drop_last and len(samples) < batch_size):
        raise StopIteration
    return collate_fn(samples)


def worker_loop(dataset, iterable, requests, results, collate_fn, batch_size, drop_last,
                auto_collation, seed, worker_id, num_workers, worker_init_fn):
    import aotgrad
    random.seed(seed)
    aotgrad.manual_seed(seed)
    np.random.seed(seed % 2 ** 32)
    _Current.info = WorkerInfo(worker_id, num_workers, seed, dataset)
    try:
        if worker_init_fn is not None:
            worker_init_fn(worker_id)
        stream = iter(dataset) if iterable else None
    except Exception:
        results.put((None, WorkerError(worker_id, traceback.format_exc())))
        return
    while True:
        try:
            msg = requests.get(timeout=5.0)
        except queue.Empty:
            parent = multiprocessing.parent_process()
            if parent is not None and not parent.is_alive():
                break  # the main process is gone
            continue
        if msg is None:
            break
        if msg == RESET:
            stream = iter(dataset) if iterable else None
            continue
        index, indices = msg
        try:
            if iterable:
                try:
                    data = iterable_batch(stream, batch_size, drop_last, collate_fn)
                except StopIteration:
                    data = EndOfStream(worker_id)
            else:
                data = fetch(dataset, indices, collate_fn, auto_collation)
        except Exception:
            data = WorkerError(worker_id, traceback.format_exc())
        results.put((index, data))
