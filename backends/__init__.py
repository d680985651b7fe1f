"""`aotgrad.backends`, laid out like `torch.backends`: what a CPU-only build reports.

The flags (`cudnn.benchmark`, `cudnn.deterministic`, `cuda.matmul.allow_tf32`, ...) can be
read and set as in PyTorch; aotgrad's results do not depend on them. `mps`, `cudnn` and
`cuda` are not available; `openmp` is (aotgrad's thread pool, see `aotgrad.set_num_threads`).
"""
from aotgrad.backends import cpu, cuda, cudnn, mkl, mkldnn, mps, openmp  # noqa: F401
