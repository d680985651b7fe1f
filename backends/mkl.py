"""`aotgrad.backends.mkl`: whether compiled programs' matrix products run on Intel MKL (the
optional `mkl` package, see aotgrad.codegen.blas)."""


def is_available():
    from aotgrad.codegen import blas
    return blas.provider() == "mkl"
