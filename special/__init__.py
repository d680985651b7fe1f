"""`aotgrad.special`, laid out like `torch.special`: special functions with PyTorch's names
and semantics (gradients included).

    from aotgrad import special
    special.erfinv(aotgrad.tensor([0.5]))
"""
from aotgrad.runtime.elementwise_ops import erf, exp2, expm1, log1p
from aotgrad.runtime.elementwise_ops import round as _round
from aotgrad.runtime.reduction_ops import log_softmax, logsumexp, softmax
from aotgrad.runtime.special_ops import (digamma, entr, erfc, erfcx, erfinv, expit, gammaln, i0,
                                         i0e, i1, i1e, log_ndtr, logit, multigammaln, ndtr,
                                         ndtri, polygamma, psi, sinc, xlog1py, xlogy)

modified_bessel_i0, modified_bessel_i1 = i0, i1


def round(input, decimals=0):  # noqa: A001  (special.round, like torch.special.round)
    return _round(input, decimals=decimals)


__all__ = ["digamma", "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1", "gammaln",
           "i0", "i0e", "i1", "i1e", "log1p", "log_ndtr", "log_softmax", "logit", "logsumexp",
           "modified_bessel_i0", "modified_bessel_i1", "multigammaln", "ndtr", "ndtri",
           "polygamma", "psi", "round", "sinc", "softmax", "xlog1py", "xlogy"]
