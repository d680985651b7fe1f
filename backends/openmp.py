"""`aotgrad.backends.openmp`: whether intra-op parallelism is available, as PyTorch's CPU
builds report it. Compiled programs run their kernels and products on aotgrad's own thread
pool (codegen.parts, `aotgrad.set_num_threads`); numba's OpenMP layer runs only the kernels of
exported packages."""


def is_available():
    return True
