"""`aotgrad.utils.data`, laid out like torch.utils.data: datasets, samplers, collation and
the DataLoader.

>>> from aotgrad.utils.data import DataLoader, TensorDataset
>>> X, y = aotgrad.randn(100, 3), aotgrad.randint(0, 2, (100,))
>>> loader = DataLoader(TensorDataset(X, y), batch_size=32, shuffle=True)
>>> [len(xb) for xb, yb in loader]
[32, 32, 32, 4]
"""
from aotgrad.utils.data.collate import default_collate, default_convert
from aotgrad.utils.data.dataloader import DataLoader
from aotgrad.utils.data.distributed import DistributedSampler
from aotgrad.utils.data.dataset import (ConcatDataset, Dataset, IterableDataset, Subset,
                                        TensorDataset, random_split)
from aotgrad.utils.data.sampler import (BatchSampler, RandomSampler, Sampler,
                                        SequentialSampler, SubsetRandomSampler)
from aotgrad.utils.data.worker import WorkerInfo, get_worker_info

__all__ = ["BatchSampler", "ConcatDataset", "DataLoader", "Dataset", "DistributedSampler",
           "IterableDataset",
           "RandomSampler", "Sampler", "SequentialSampler", "Subset", "SubsetRandomSampler",
           "TensorDataset", "WorkerInfo", "default_collate", "default_convert",
           "get_worker_info", "random_split"]
