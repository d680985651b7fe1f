"""`aotgrad.linalg`, laid out like `torch.linalg`: factorisations as library calls (numpy's
LAPACK) with one derivative rule each, batched over leading dims; norms as decompositions.
See aotgrad.runtime.linalg_functions."""
from aotgrad.runtime.linalg_functions import (LinAlgError, cholesky, cond, det, diagonal, eigh,
                                              eigvalsh, inv, lstsq, matrix_norm, matrix_power,
                                              matrix_rank, multi_dot, norm, pinv, qr, slogdet,
                                              solve, solve_triangular, svd, svdvals, vecdot,
                                              vector_norm)
from aotgrad.runtime.linalg_ops import matmul  # noqa: F401

__all__ = ["LinAlgError", "cholesky", "cond", "diagonal", "solve_triangular", "det", "eigh", "eigvalsh", "inv", "lstsq", "matmul",
           "matrix_norm", "matrix_power", "matrix_rank", "multi_dot", "norm", "pinv", "qr",
           "slogdet", "solve", "svd", "svdvals", "vecdot", "vector_norm"]
