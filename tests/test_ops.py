"""Every user-level op in one table: gradient vs central finite differences (float64),
forward and gradient vs PyTorch (when installed), and float32 in -> float32 out.

A row is `R(name, fn, *specs)`; `fn(M, *inputs)` is written once and runs with M = aotgrad
or M = torch. Input specs: `X(shape, dom)` a float input that requires grad, `I(shape, high)`
an int64 index tensor, `B(shape)` a bool mask, `K(array)` a constant float tensor.
Adding an op means adding a row.
"""
import re
import zlib

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.ir import prims
from aotgrad.ir.core import PrimError
from aotgrad.runtime import derivatives, dispatch
from aotgrad.runtime import tprims as tp


# ---- input specs ---------------------------------------------------------------------------
class X:
    """A float input requiring grad. dom: n (normal), p (0.5..2), u (-0.9..0.9),
    d (well separated distinct values, for max/sort ties)."""

    def __init__(self, *shape, dom="n"):
        self.shape, self.dom = shape, dom

    def sample(self, rng):
        n = int(np.prod(self.shape))
        if self.dom == "p":
            v = rng.uniform(0.5, 2.0, n)
        elif self.dom == "u":
            v = rng.uniform(-0.9, 0.9, n)
        elif self.dom == "d":
            v = (rng.permutation(n) - n / 2) * 0.37 + rng.uniform(-0.05, 0.05, n)
        else:
            v = rng.standard_normal(n)
        return v.reshape(self.shape)


class I:
    """int64 indices in [lo, high)."""

    def __init__(self, shape, high, lo=0):
        self.shape, self.high, self.lo = shape, high, lo

    def sample(self, rng):
        return rng.integers(self.lo, self.high, self.shape).astype(np.int64)


class B:
    def __init__(self, *shape):
        self.shape = shape

    def sample(self, rng):
        m = rng.uniform(size=self.shape) < 0.5
        m.flat[0], m.flat[-1] = True, False  # never empty, never full
        return m


class K:
    def __init__(self, value):
        self.value = np.asarray(value, dtype=np.float64)

    def sample(self, rng):
        return self.value


def R(name, fn, *specs, grad=True, torch=True, tol=1e-6, graph_break=None):
    """graph_break: why compiling this row breaks the graph (runs eagerly), when it does."""
    return pytest.param(fn, specs, dict(grad=grad, torch=torch, tol=tol,
                                        graph_break=graph_break), id=name)


_DATA_SHAPE = "its output shape depends on the values of a tensor"


def F(M):
    """nn.functional-style helpers that live in different places in aotgrad and torch."""
    if M is ag:
        from aotgrad.runtime.shape_ops import one_hot
        return type("F", (), {"one_hot": staticmethod(one_hot)})
    return M.nn.functional


def _iadd(M, x, y):
    z = x * 1
    z += y
    return z


def _imul(M, x, y):
    z = x * 1
    z *= y
    return z


def _isub(M, x, y):
    z = x * 1
    z -= y
    return z


def _itruediv(M, x, y):
    z = x * 1
    z /= y
    return z


def _setitem_idx(M, x, v):
    y = x * 1
    y[M.tensor([0, 3, 1])] = v
    return y


def _setitem_mask(M, x, m):
    y = x * 2
    y[m] = 0.0
    return y


def _setitem_slice(M, x, v):
    y = x * 1
    y[:, 1:3] = v
    return y


def _setitem_int(M, x, v):
    y = x.clone()
    y[1] = v
    return y


def _setitem_scalar(M, x):
    y = x.sin()  # (exp would save its output: torch and aotgrad both refuse then)
    y[0, ::2] = 0.5
    return y


OPS = [
    # ---- arithmetic, broadcasting, scalars ----
    R("add", lambda M, x, y: x + y, X(3, 4), X(3, 4)),
    R("add_bcast", lambda M, x, y: x + y, X(3, 1), X(4)),
    R("add_scalar", lambda M, x: x + 2.5, X(2, 3)),
    R("radd_scalar", lambda M, x: 2.5 + x, X(2, 3)),
    R("add_alpha", lambda M, x, y: M.add(x, y, alpha=2), X(2, 3), X(3)),
    R("sub", lambda M, x, y: x - y, X(2, 3, 4), X(3, 1)),
    R("rsub_scalar", lambda M, x: 1 - x, X(5)),
    R("mul", lambda M, x, y: x * y, X(3, 4), X(3, 4)),
    R("mul_bcast", lambda M, x, y: x * y, X(2, 1, 4), X(3, 1)),
    R("mul_scalar", lambda M, x: 3 * x, X(4)),
    R("mul_0d", lambda M, x, y: x * y, X(3, 2), X()),
    R("div", lambda M, x, y: x / y, X(3, 4), X(3, 4, dom="p")),
    R("div_bcast", lambda M, x, y: x / y, X(3, 4), X(4, dom="p")),
    R("rdiv_scalar", lambda M, x: 2 / x, X(4, dom="p")),
    R("div_scalar", lambda M, x: x / 4, X(4)),
    R("pow_int", lambda M, x: x ** 3, X(2, 3)),
    R("pow_2", lambda M, x: x ** 2, X(2, 3)),
    R("pow_frac", lambda M, x: x ** 1.5, X(2, 3, dom="p")),
    R("pow_neg", lambda M, x: x ** -2, X(5, dom="p")),
    R("pow_tensor", lambda M, x, y: x ** y, X(2, 3, dom="p"), X(2, 3)),
    R("pow_bcast", lambda M, x, y: M.pow(x, y), X(2, 3, dom="p"), X(3)),
    R("rpow", lambda M, x: 2 ** x, X(4)),
    R("neg", lambda M, x: -x, X(2, 3)),
    R("abs", lambda M, x: x.abs(), X(2, 3)),
    R("maximum", lambda M, x, y: M.maximum(x, y), X(3, 4), X(3, 4)),
    R("maximum_bcast", lambda M, x, y: M.maximum(x, y), X(3, 4), X(4)),
    R("minimum", lambda M, x, y: M.minimum(x, y), X(3, 4), X(1, 4)),
    R("atan2", lambda M, x, y: M.atan2(x, y), X(3, 4), X(3, 4)),
    R("remainder", lambda M, x, y: M.remainder(x, y), X(6), X(6, dom="p")),
    R("floor_divide", lambda M, x, y: M.floor_divide(x, y), X(6), X(6, dom="p"), grad=False),
    R("div_floor", lambda M, x, y: M.div(x, y, rounding_mode="floor"), X(6), X(6, dom="p"),
      grad=False),
    R("div_trunc", lambda M, x, y: M.div(x, y, rounding_mode="trunc"), X(6), X(6, dom="p"),
      grad=False),
    # ---- comparisons and logic (forward only) ----
    R("eq", lambda M, x: x == x.clamp(min=0), X(3, 4), grad=False),
    R("ne", lambda M, x, y: x != y, X(3, 4), X(4), grad=False),
    R("lt", lambda M, x, y: x < y, X(3, 4), X(3, 1), grad=False),
    R("le_scalar", lambda M, x: x <= 0.1, X(3, 4), grad=False),
    R("gt", lambda M, x, y: M.gt(x, y), X(3, 4), X(3, 4), grad=False),
    R("ge_rscalar", lambda M, x: 0 >= x, X(5), grad=False),
    R("logical", lambda M, x, y: ((x > 0) & (y > 0)) | ~(x < y) ^ (y > 1), X(3, 4), X(3, 4),
      grad=False),
    R("isfinite", lambda M, x: M.isfinite(M.log(x)), X(6), grad=False),
    # ---- matmul ----
    R("mm", lambda M, x, y: M.mm(x, y), X(3, 4), X(4, 5)),
    R("matmul_op", lambda M, x, y: x @ y, X(3, 4), X(4, 2)),
    R("matmul_1d_1d", lambda M, x, y: M.matmul(x, y), X(4), X(4)),
    R("matmul_2d_1d", lambda M, x, y: x @ y, X(3, 4), X(4)),
    R("matmul_1d_2d", lambda M, x, y: x @ y, X(4), X(4, 3)),
    R("matmul_3d_2d", lambda M, x, y: x @ y, X(2, 3, 4), X(4, 5)),
    R("matmul_batched", lambda M, x, y: x @ y, X(2, 3, 4), X(2, 4, 5)),
    R("matmul_bcast_batch", lambda M, x, y: x @ y, X(2, 1, 3, 4), X(3, 4, 2)),
    R("matmul_1d_3d", lambda M, x, y: x @ y, X(4), X(2, 4, 3)),
    R("matmul_3d_1d", lambda M, x, y: x @ y, X(2, 3, 4), X(4)),
    R("matmul_T", lambda M, x, y: x.T @ y, X(4, 3), X(4, 2)),
    R("bmm", lambda M, x, y: M.bmm(x, y), X(2, 3, 4), X(2, 4, 2)),
    R("dot", lambda M, x, y: M.dot(x, y), X(5), X(5)),
    R("mv", lambda M, x, y: M.mv(x, y), X(3, 5), X(5)),
    R("outer", lambda M, x, y: M.outer(x, y), X(3), X(4)),
    # ---- unary math ----
    R("exp", lambda M, x: x.exp(), X(2, 3)),
    R("log", lambda M, x: M.log(x), X(2, 3, dom="p")),
    R("log1p", lambda M, x: x.log1p(), X(2, 3, dom="p")),
    R("expm1", lambda M, x: x.expm1(), X(2, 3)),
    R("sqrt", lambda M, x: x.sqrt(), X(2, 3, dom="p")),
    R("rsqrt", lambda M, x: x.rsqrt(), X(2, 3, dom="p")),
    R("sin", lambda M, x: x.sin(), X(2, 3)),
    R("cos", lambda M, x: M.cos(x), X(2, 3)),
    R("tan", lambda M, x: x.tan(), X(2, 3, dom="u")),
    R("tanh", lambda M, x: x.tanh(), X(2, 3)),
    R("sigmoid", lambda M, x: x.sigmoid(), X(2, 3)),
    R("erf", lambda M, x: M.erf(x), X(2, 3)),
    R("floor", lambda M, x: x.floor(), X(2, 3)),
    R("ceil", lambda M, x: x.ceil(), X(2, 3)),
    R("round", lambda M, x: (x * 3).round(), X(2, 3)),
    R("sign", lambda M, x: x.sign(), X(2, 3)),
    R("reciprocal", lambda M, x: x.reciprocal(), X(2, 3, dom="p")),
    R("square", lambda M, x: x.square(), X(2, 3)),
    R("relu", lambda M, x: M.relu(x), X(2, 3)),
    R("log2", lambda M, x: x.log2(), X(4, dom="p")),
    R("log10", lambda M, x: M.log10(x), X(4, dom="p")),
    R("exp2", lambda M, x: M.exp2(x), X(4)),
    R("clamp", lambda M, x: x.clamp(-0.5, 0.5), X(3, 4)),
    R("clamp_min", lambda M, x: M.clamp(x, min=0.1), X(3, 4)),
    R("clamp_max", lambda M, x: x.clamp(max=-0.2), X(3, 4)),
    R("clamp_tensor", lambda M, x, lo: x.clamp(min=lo), X(3, 4), X(4)),
    # ---- reductions ----
    R("sum", lambda M, x: x.sum(), X(3, 4)),
    R("sum_dim", lambda M, x: x.sum(1), X(3, 4)),
    R("sum_dims_keepdim", lambda M, x: x.sum(dim=(0, 2), keepdim=True), X(2, 3, 4)),
    R("sum_neg_dim", lambda M, x: M.sum(x, -1), X(2, 3, 4)),
    R("mean", lambda M, x: x.mean(), X(3, 4)),
    R("mean_dim_keepdim", lambda M, x: x.mean(0, keepdim=True), X(3, 4)),
    R("mean_dims", lambda M, x: M.mean(x, (1, 2)), X(2, 3, 4)),
    R("prod", lambda M, x: x.prod(), X(2, 3, dom="p")),
    R("prod_dim", lambda M, x: x.prod(1, keepdim=True), X(3, 4)),
    R("prod_with_zero", lambda M, x, k: (x * k).prod(1), X(3, 4), K([[0, 1, 1, 1], [0, 0, 1, 1],
                                                                    [1, 1, 1, 1]])),
    R("max", lambda M, x: x.max(), X(3, 4, dom="d")),
    R("max_dim", lambda M, x: M.max(x, 1), X(3, 4, dom="d")),
    R("max_dim_keepdim", lambda M, x: x.max(dim=0, keepdim=True), X(3, 4, dom="d")),
    R("max_values", lambda M, x: x.max(-1).values * 2, X(2, 3, 4, dom="d")),
    R("max_binary", lambda M, x, y: M.max(x, y), X(3, 4), X(3, 4)),
    R("min", lambda M, x: M.min(x), X(3, 4, dom="d")),
    R("min_dim", lambda M, x: x.min(0), X(3, 4, dom="d")),
    R("amax", lambda M, x: x.amax(dim=(0, 2)), X(2, 3, 4, dom="d")),
    R("amax_keepdim", lambda M, x: M.amax(x, 1, keepdim=True), X(2, 3, 4, dom="d")),
    R("amin", lambda M, x: x.amin(-1), X(3, 4, dom="d")),
    R("amax_ties", lambda M, x: (x * 0 + M.tensor([[1., 1., 0.]], dtype=x.dtype)).amax(1) + x.sum(),
      X(2, 3)),
    R("argmax", lambda M, x: x.argmax(), X(3, 4, dom="d"), grad=False),
    R("argmax_dim", lambda M, x: x.argmax(1, keepdim=True), X(3, 4, dom="d"), grad=False),
    R("argmin_dim", lambda M, x: M.argmin(x, 0), X(3, 4, dom="d"), grad=False),
    R("var", lambda M, x: x.var(), X(3, 4)),
    R("var_dim", lambda M, x: x.var(1, unbiased=False), X(3, 4)),
    R("var_correction_keepdim", lambda M, x: M.var(x, 0, correction=0, keepdim=True), X(3, 4)),
    R("std", lambda M, x: x.std(), X(3, 4)),
    R("std_dim", lambda M, x: x.std(dim=1, keepdim=True), X(3, 4)),
    R("norm", lambda M, x: x.norm(), X(3, 4)),
    R("norm_dim", lambda M, x: x.norm(dim=1), X(3, 4)),
    R("norm_p1", lambda M, x: x.norm(p=1, dim=0), X(3, 4)),
    R("norm_p3", lambda M, x: M.norm(x, p=3), X(3, 4)),
    R("logsumexp", lambda M, x: x.logsumexp(1), X(3, 4)),
    R("logsumexp_dims", lambda M, x: M.logsumexp(x, (0, 2), keepdim=True), X(2, 3, 4)),
    R("softmax", lambda M, x: x.softmax(-1), X(3, 4)),
    R("softmax_dim0", lambda M, x: M.softmax(x, 0), X(3, 4)),
    R("log_softmax", lambda M, x: x.log_softmax(1), X(3, 4)),
    R("cumsum", lambda M, x: x.cumsum(1), X(3, 4)),
    R("cumsum_dim0", lambda M, x: M.cumsum(x, dim=0), X(3, 4)),
    # ---- shape ----
    R("reshape", lambda M, x: x.reshape(4, 3), X(3, 4)),
    R("reshape_infer", lambda M, x: M.reshape(x, (2, -1)), X(3, 4)),
    R("view", lambda M, x: x.view(12) * 2, X(3, 4)),
    R("view_as", lambda M, x, y: x.view_as(y), X(3, 4), X(2, 6)),
    R("flatten", lambda M, x: x.flatten(), X(2, 3, 4)),
    R("flatten_1", lambda M, x: M.flatten(x, 1), X(2, 3, 4)),
    R("permute", lambda M, x: x.permute(2, 0, 1), X(2, 3, 4)),
    R("transpose", lambda M, x: x.transpose(0, 2), X(2, 3, 4)),
    R("t", lambda M, x: x.t(), X(3, 4)),
    R("T", lambda M, x: x.T, X(3, 4)),
    R("mT", lambda M, x: x.mT, X(2, 3, 4)),
    R("unsqueeze", lambda M, x: x.unsqueeze(1), X(3, 4)),
    R("unsqueeze_neg", lambda M, x: M.unsqueeze(x, -1), X(3, 4)),
    R("squeeze", lambda M, x: x.squeeze(), X(3, 1, 4, 1)),
    R("squeeze_dim", lambda M, x: x.squeeze(1), X(3, 1, 4, 1)),
    R("expand", lambda M, x: x.expand(2, 3, 4), X(3, 1)),
    R("expand_neg", lambda M, x: x.expand(-1, 5), X(3, 1)),
    R("expand_as", lambda M, x, y: x.expand_as(y) * y, X(4), X(3, 4)),
    R("repeat", lambda M, x: x.repeat(2, 3), X(2, 3)),
    R("repeat_more_dims", lambda M, x: x.repeat(2, 1, 2), X(2, 3)),
    R("clone", lambda M, x: x.clone(), X(2, 3)),
    R("contiguous", lambda M, x: x.t().contiguous(), X(2, 3)),
    R("flip", lambda M, x: x.flip(0), X(3, 4)),
    R("cat", lambda M, x, y: M.cat([x, y]), X(2, 3), X(4, 3)),
    R("cat_dim1", lambda M, x, y, z: M.cat([x, y, z], dim=1), X(2, 3), X(2, 1), X(2, 2)),
    R("cat_neg", lambda M, x, y: M.cat((x, y), -1), X(2, 2, 3), X(2, 2, 1)),
    R("stack", lambda M, x, y: M.stack([x, y]), X(2, 3), X(2, 3)),
    R("stack_last", lambda M, x, y: M.stack([x, y], dim=-1), X(2, 3), X(2, 3)),
    R("split", lambda M, x: x.split(2), X(5, 3)),
    R("split_sizes", lambda M, x: M.split(x, [1, 2], dim=1), X(2, 3)),
    R("chunk", lambda M, x: x.chunk(3, 1), X(2, 7)),
    R("unbind", lambda M, x: x.unbind(1), X(2, 3)),
    R("narrow", lambda M, x: x.narrow(1, 1, 2), X(3, 4)),
    # ---- selection ----
    R("where", lambda M, x, y: M.where(x > 0, x, y), X(3, 4), X(3, 4)),
    R("where_bcast_scalar", lambda M, x: M.where(x > 0, x, 0.0), X(3, 4)),
    R("where_method", lambda M, x, y: x.where(y > 0, y), X(3, 4), X(4)),
    R("masked_fill", lambda M, x, m: x.masked_fill(m, -1.0), X(3, 4), B(3, 4)),
    R("masked_fill_bcast", lambda M, x, m: M.masked_fill(x, m, 2.0), X(3, 4), B(4)),
    R("tril", lambda M, x: x.tril(), X(4, 4)),
    R("tril_neg", lambda M, x: M.tril(x, -1), X(2, 3, 4)),
    R("triu", lambda M, x: x.triu(1), X(3, 4)),
    R("sort", lambda M, x: x.sort(), X(3, 4, dom="d")),
    R("sort_desc", lambda M, x: M.sort(x, dim=0, descending=True), X(3, 4, dom="d")),
    R("argsort", lambda M, x: x.argsort(1), X(3, 4, dom="d"), grad=False),
    R("topk", lambda M, x: x.topk(2), X(3, 4, dom="d")),
    R("topk_smallest", lambda M, x: M.topk(x, 2, dim=0, largest=False), X(3, 4, dom="d")),
    R("one_hot", lambda M, i: F(M).one_hot(i, 5), I((4,), 5), grad=False),
    R("one_hot_infer", lambda M, i: F(M).one_hot(i), I((2, 3), 4), grad=False,
      graph_break=_DATA_SHAPE + " (num_classes inferred from the largest index)"),
    # ---- indexing ----
    R("getitem_int", lambda M, x: x[1], X(3, 4)),
    R("getitem_neg_int", lambda M, x: x[-1, 2], X(3, 4)),
    R("getitem_slice", lambda M, x: x[1:3], X(4, 3)),
    R("getitem_step", lambda M, x: x[::2, 1:], X(5, 3)),
    R("getitem_col", lambda M, x: x[:, 1], X(3, 4)),
    R("getitem_none", lambda M, x: x[None, :, None], X(3, 4)),
    R("getitem_ellipsis", lambda M, x: x[..., 0], X(2, 3, 4)),
    R("getitem_mixed", lambda M, x: x[1, ..., None, 1:3], X(2, 3, 4)),
    R("getitem_int_tensor", lambda M, x, i: x[i], X(4, 3), I((5,), 4)),
    R("getitem_int_tensor_2d", lambda M, x, i: x[i], X(4, 3), I((2, 3), 4)),
    R("getitem_int_tensor_dim1", lambda M, x, i: x[:, i], X(4, 3), I((5,), 3)),
    R("getitem_two_tensors", lambda M, x, i, j: x[i, j], X(4, 3), I((5,), 4), I((5,), 3)),
    R("getitem_neg_tensor", lambda M, x, i: x[i], X(4, 3), I((3,), 0, lo=-4)),
    R("getitem_list", lambda M, x: x[1:, [0, 2]], X(3, 4)),
    R("getitem_split_adv", lambda M, x, i: x[i, :, i], X(3, 2, 3), I((2,), 3)),
    R("getitem_mask", lambda M, x, m: x[m], X(3, 4), B(3, 4), graph_break=_DATA_SHAPE),
    R("getitem_mask_rows", lambda M, x, m: x[m], X(4, 3), B(4), graph_break=_DATA_SHAPE),
    R("getitem_mask_cmp", lambda M, x: x[x > 0], X(3, 4), graph_break=_DATA_SHAPE),
    R("setitem_int", _setitem_int, X(3, 4), X(4)),
    R("setitem_slice", _setitem_slice, X(3, 4), X(3, 1)),
    R("setitem_scalar", _setitem_scalar, X(2, 4)),
    R("setitem_mask", _setitem_mask, X(3, 4), B(3, 4),
      graph_break="boolean mask assignment (the mask's true count is data-dependent)"),
    R("setitem_index", _setitem_idx, X(5, 3), X(3, 3)),
    R("gather", lambda M, x, i: x.gather(1, i), X(3, 4), I((3, 2), 4)),
    R("gather_dim0", lambda M, x, i: M.gather(x, 0, i), X(3, 4), I((5, 4), 3)),
    R("index_select", lambda M, x, i: x.index_select(0, i), X(4, 3), I((5,), 4)),
    R("index_select_dim1", lambda M, x, i: M.index_select(x, 1, i), X(2, 4), I((3,), 4)),
    R("take_along_dim", lambda M, x, i: M.take_along_dim(x, i, 1), X(3, 4), I((3, 2), 4)),
    R("scatter_add", lambda M, x, i, s: x.scatter_add(1, i, s), X(3, 4), I((3, 5), 4), X(3, 5)),
    # ---- in-place ----
    R("add_", lambda M, x, y: (x * 1).add_(y), X(3, 4), X(4)),
    R("sub_", lambda M, x, y: (x * 1).sub_(y, alpha=2), X(3, 4), X(3, 4)),
    R("mul_", lambda M, x, y: (x + 0).mul_(y), X(3, 4), X(3, 1)),
    R("div_", lambda M, x, y: (x + 0).div_(y), X(3, 4), X(4, dom="p")),
    R("pow_", lambda M, x: (x * 1).pow_(2), X(3, 4)),
    R("exp_", lambda M, x: (x * 1).exp_(), X(3, 4)),
    R("clamp_", lambda M, x: (x * 1).clamp_(-0.3, 0.3), X(3, 4)),
    R("masked_fill_", lambda M, x, m: (x * 1).masked_fill_(m, 0.0), X(3, 4), B(3, 4)),
    R("zero_", lambda M, x, y: (x * 1).zero_() + y, X(3), X(3)),
    R("fill_", lambda M, x: (x * 2).fill_(3.0) * x, X(3)),
    R("copy_", lambda M, x, y: (x * 2).copy_(y), X(3, 4), X(4)),
    R("iadd", _iadd, X(3, 4), X(4)),
    R("isub", _isub, X(3, 4), X(3, 4)),
    R("imul", _imul, X(3, 4), X(3, 4)),
    R("itruediv", _itruediv, X(3, 4), X(3, 4, dom="p")),
    R("inplace_chain", lambda M, x: (x * 1).mul_(2).add_(1).exp_(), X(4)),
]


# ---- machinery -----------------------------------------------------------------------------
def _rng(request):
    return np.random.default_rng(zlib.crc32(request.node.callspec.id.encode()))


def _make(M, specs, arrays, dtype):
    ins = []
    for s, a in zip(specs, arrays):
        if isinstance(s, X):
            ins.append(M.tensor(a, dtype=dtype, requires_grad=True))
        elif isinstance(s, K):
            ins.append(M.tensor(a, dtype=dtype))
        else:
            ins.append(M.tensor(a))
    return ins


def _outs(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _np(t):
    return np.asarray(t.detach().numpy() if hasattr(t, "detach") else t)


def _float_outs(outs):
    return [o for o in outs if o.dtype.is_floating_point]


def _grads(M, fn, specs, arrays, cots, dtype, grad=True):
    """(outputs as numpy, grads of sum(out * cot) w.r.t. each X input as numpy)."""
    ins = _make(M, specs, arrays, dtype)
    outs = _outs(fn(M, *ins))
    fouts = _float_outs(outs)
    diff = [t for t, s in zip(ins, specs) if isinstance(s, X)]
    loss = sum((o * M.tensor(c, dtype=o.dtype)).sum() for o, c in zip(fouts, cots))
    if not (grad and fouts):
        return outs, []
    gs = M.autograd.grad(loss, diff, allow_unused=True)
    gs = [np.zeros(t.shape) if g is None else _np(g) for g, t in zip(gs, diff)]
    return outs, gs


def _loss_np(fn, specs, arrays, cots):
    with ag.no_grad():
        outs = _float_outs(_outs(fn(ag, *_make(ag, specs, arrays, ag.float64))))
    return sum(float((_np(o) * c).sum()) for o, c in zip(outs, cots))


def _setup(request, specs):
    rng = _rng(request)
    return rng, [s.sample(rng) for s in specs]


def _cotangents(rng, fn, specs, arrays):
    with ag.no_grad():
        outs = _float_outs(_outs(fn(ag, *_make(ag, specs, arrays, ag.float64))))
    return [rng.standard_normal(tuple(o.shape)) for o in outs]


@pytest.mark.parametrize("fn,specs,opts", OPS)
def test_grad_vs_finite_differences(request, fn, specs, opts):
    if not opts["grad"]:
        pytest.skip("not differentiable")
    rng, arrays = _setup(request, specs)
    cots = _cotangents(rng, fn, specs, arrays)
    assert cots, "a differentiable row must have a float output"
    _, grads = _grads(ag, fn, specs, arrays, cots, ag.float64)
    eps = 1e-6
    k = 0
    for s, a in zip(specs, arrays):
        if not isinstance(s, X):
            continue
        fd = np.zeros(a.shape)
        for j in range(a.size):
            ap, am = a.copy(), a.copy()
            ap.flat[j] += eps
            am.flat[j] -= eps
            lp = _loss_np(fn, specs, [ap if b is a else b for b in arrays], cots)
            lm = _loss_np(fn, specs, [am if b is a else b for b in arrays], cots)
            fd.flat[j] = (lp - lm) / (2 * eps)
        np.testing.assert_allclose(grads[k], fd, rtol=1e-5, atol=opts["tol"],
                                   err_msg=f"gradient of input {k}")
        k += 1


@pytest.mark.parametrize("fn,specs,opts", OPS)
def test_forward_and_grad_vs_torch(request, torch, fn, specs, opts):
    if not opts["torch"]:
        pytest.skip("no PyTorch counterpart")
    rng, arrays = _setup(request, specs)
    cots = _cotangents(rng, fn, specs, arrays)
    outs, grads = _grads(ag, fn, specs, arrays, cots, ag.float64, opts["grad"])
    touts, tgrads = _grads(torch, fn, specs, arrays, cots, torch.float64, opts["grad"])
    assert len(outs) == len(touts)
    for o, to in zip(outs, touts):
        assert tuple(o.shape) == tuple(to.shape)
        assert o.dtype.name == str(to.dtype).replace("torch.", "")
        np.testing.assert_allclose(_np(o), _np(to), rtol=1e-10, atol=1e-12)
    if opts["grad"]:
        for g, tg in zip(grads, tgrads):
            np.testing.assert_allclose(g, tg, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("fn,specs,opts", OPS)
def test_float32_stays_float32(request, fn, specs, opts):
    rng, arrays = _setup(request, specs)
    ins = _make(ag, specs, arrays, ag.float32)
    outs = _outs(fn(ag, *ins))
    for o in outs:
        assert o.dtype in (ag.float32, ag.int64, ag.bool), o.dtype
        assert o.numpy(force=True).dtype == o.dtype.np
    fouts = _float_outs(outs)
    if opts["grad"] and fouts:
        diff = [t for t, s in zip(ins, specs) if isinstance(s, X)]
        gs = ag.autograd.grad(sum(o.sum() for o in fouts), diff, allow_unused=True)
        for g in gs:
            assert g is None or (g.dtype is ag.float32 and g.numpy().dtype == np.float32)


# ---- the prim table ------------------------------------------------------------------------
def test_every_prim_has_a_vjp_or_is_non_differentiable():
    for name in prims.PRIMS:
        assert (name in dispatch.VJP) != (name in derivatives.NON_DIFFERENTIABLE), name


def test_op_table_names_are_unique():
    ids = [p.id for p in OPS]
    assert len(ids) == len(set(ids))


f32, i64 = np.float32, np.int64


def _a(*shape, dtype=f32):
    return np.ones(shape, dtype)


PRIM_ERRORS = [  # (prim, args, params, words the message must contain)
    ("exp", [_a(2, dtype=i64)], {}, ["i64[2]", "floating-point"]),
    ("logical_not", [_a(2)], {}, ["f32[2]", "bool"]),
    ("add", [_a(2), _a(3)], {}, ["f32[2]", "f32[3]", "differ"]),
    ("mul", [_a(2), _a(2, dtype=np.float64)], {}, ["f32[2]", "f64[2]", "dtypes"]),
    ("where", [_a(2), _a(2), _a(2)], {}, ["condition must be bool"]),
    ("convert_element_type", [_a(2)], {"dtype": "float32"}, ["dtype"]),
    ("broadcast_in_dim", [_a(3)], {"shape": (2, 4), "dims": (1,)}, ["f32[3]", "size 3",
                                                                     "[2, 4]"]),
    ("reshape", [_a(2, 3)], {"shape": (4, 2)}, ["f32[2,3]", "[4, 2]"]),
    ("transpose", [_a(2, 3)], {"perm": (0, 0)}, ["f32[2,3]", "permutation"]),
    ("slice", [_a(4)], {"start": (1,), "limit": (6,)}, ["f32[4]", "out of range"]),
    ("pad", [_a(4)], {"config": ((1, 1, 0), (0, 0, 0))}, ["f32[4]", "pad config"]),
    ("concatenate", [_a(2, 3), _a(2, 4)], {"dim": 0}, ["f32[2,3]", "f32[2,4]", "dim 0"]),
    ("rev", [_a(2)], {"dims": (1,)}, ["f32[2]", "out of range"]),
    ("reduce_sum", [_a(2, 3)], {"dims": (2,)}, ["f32[2,3]", "out of range"]),
    ("reduce_max", [_a(0, 3)], {"dims": (0,)}, ["f32[0,3]", "empty"]),
    ("argmax", [_a(2, 3)], {"dim": 5}, ["f32[2,3]", "dim 5"]),
    ("cumsum", [_a(2, 3)], {"dim": -1}, ["f32[2,3]", "dim -1"]),
    ("argsort", [_a(2, 3)], {"dim": 2}, ["f32[2,3]", "dim 2"]),
    ("dot_general", [_a(2, 3), _a(4, 5)], {"contract": ((1,), (0,))},
     ["f32[2,3]", "f32[4,5]", "size mismatch"]),
    ("gather", [_a(2, 3), _a(2, 3)], {"dim": 0}, ["f32[2,3]", "integer"]),
    ("scatter_add", [_a(3), np.zeros(2, i64), _a(3)], {"dim": 0}, ["f32[3]", "i64[2]"]),
    ("iota", [], {"shape": (2, 3), "dim": 2, "dtype": ag.int64}, ["dim 2"]),
    ("full", [], {"shape": (-1,), "value": 0.0, "dtype": ag.float32}, ["negative"]),
    ("uniform", [np.zeros(2, i64)], {"shape": (2,), "dtype": ag.float32}, ["i64[2]", "seed"]),
    ("linalg_inv", [_a(2, 3)], {}, ["f32[2,3]", "square"]),
    ("check_values", [np.zeros(2, i64)], {"check": "x >= 0"}, ["i64[2]", "ValueCheck"]),
]


@pytest.mark.parametrize("name,args,params,words", PRIM_ERRORS, ids=[e[0] for e in PRIM_ERRORS])
def test_prim_shape_rule_errors(name, args, params, words):
    with pytest.raises(PrimError) as ei:
        prims.PRIMS[name].bind(*args, **params)  # the user line is this one
    msg = str(ei.value)
    assert f"prims.{name}(" in msg
    for w in words:
        assert w in msg, (w, msg)
    assert re.search(r"test_ops\.py:\d+: `prims\.PRIMS\[name\]\.bind", msg), msg


def test_prim_error_through_the_op_layer_names_the_user_line():
    x = ag.ones(2, 3)
    with pytest.raises(PrimError, match=r"prims\.reshape.*test_ops\.py:\d+: `tp\.reshape"):
        tp.reshape(x, shape=(5,))


def test_every_prim_family_has_an_error_case():
    covered = {e[0] for e in PRIM_ERRORS}
    families = {}
    for name, p in prims.PRIMS.items():
        families.setdefault(p.kind, set()).add(name)
    for kind, names in families.items():
        assert names & covered, f"no shape-rule error test for the family {kind}"


# ---- integer and bool inputs: dtype promotion and values like PyTorch ----------------------
INT_EXPRS = [
    "x.sum()", "x.sum(1, keepdim=True)", "x.prod()", "x.max()", "x.max(1).values", "x.argmax()",
    "x.cumsum(0)", "x.abs()", "-x", "x * 2", "x / 2", "x // 2", "x % 3", "x ** 2", "x + 1.5",
    "x.clamp(0, 2)", "x.clamp(min=0.5)", "x.float().mean()", "x > 1", "(x > 1).sum()",
    "x.sign()", "M.where(x > 0, x, 0)", "x[:, [0, 2]]", "M.maximum(x, x.flip(0))",
    "x.sort(1).values", "x.topk(2).values", "x.amax(0)", "M.cat([x, x], 1)",
    "x.masked_fill(x > 1, 7)", "x.tril()", "x.sum(dtype=M.float64)", "x.exp()",
    "x.sqrt()", "x.floor()", "x.round()", "x.logsumexp(1)", "x.square()", "x == 2",
    "x.count_nonzero()", "x.any()", "x.all()",
]


@pytest.mark.parametrize("expr", INT_EXPRS)
def test_integer_inputs_like_torch(torch, expr):
    a = np.array([[3, -1, 2], [0, 5, -4]])
    out, ref = (eval(expr, {"M": M, "x": M.tensor(a)}) for M in (ag, torch))
    assert out.dtype.name == str(ref.dtype).replace("torch.", "")
    np.testing.assert_allclose(out.numpy().astype(float), ref.numpy().astype(float), rtol=1e-6)


@pytest.mark.parametrize("expr", ["x.sum()", "x & ~x", "x | x.flip(1)", "x ^ True", "x.any(1)",
                                  "x.all()", "x.float()", "x + 1", "x * 2.5", "x.long().sum(0)",
                                  "x.max()", "M.where(x, 1.0, 0.0)", "M.where(x, 2, 0)",
                                  "x == False"])
def test_bool_inputs_like_torch(torch, expr):
    a = np.array([[True, False, True], [False, False, True]])
    out, ref = (eval(expr, {"M": M, "x": M.tensor(a)}) for M in (ag, torch))
    assert out.dtype.name == str(ref.dtype).replace("torch.", "")
    np.testing.assert_array_equal(out.numpy(), ref.numpy())


RELU_POINTS = [-1.0, 0.0, -0.0, 2.0, float("nan"), float("inf"), -float("inf")]


@pytest.mark.parametrize("backend", [None, "interpret", "numba"])
def test_relu_is_zero_with_zero_gradient_at_zero_and_passes_nan(backend):
    """PyTorch's relu: out = 0 where x <= 0 else x, so the gradient at 0 is 0 (not the 0.5
    a max(x, 0) subgradient would give) and NaN passes through with gradient 1."""
    x = ag.tensor(RELU_POINTS, requires_grad=True)
    f = (lambda t: ag.relu(t) * ag.arange(1, 8, dtype=ag.float32))
    if backend is not None:
        f = ag.compile(f, backend=backend)
    y = f(x)
    y.sum().backward()
    xs = np.array(RELU_POINTS, np.float32)
    want_y = np.where(xs <= 0, 0, xs) * np.arange(1, 8)
    want_g = np.where(xs <= 0, 0, 1) * np.arange(1, 8)
    np.testing.assert_array_equal(y.detach().numpy(), want_y.astype(np.float32))
    np.testing.assert_array_equal(x.grad.numpy(), want_g.astype(np.float32))


def test_relu_at_zero_and_nan_like_torch(torch):
    x = ag.tensor(RELU_POINTS, requires_grad=True)
    tx = torch.tensor(RELU_POINTS, requires_grad=True)
    y, ty = ag.relu(x), torch.relu(tx)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())
