"""`aotgrad.backends.openmp`: compiled kernels run on numba's threads, on its OpenMP layer
where it loads."""


def is_available():
    return True
