"""Heavy eager ops on whole-array kernels: one call and one autograd node where the prim
decomposition records dozens (a 5x5 convolution is 25 strided slices, a concatenation and a
contraction forward, and as many pads and adds backward).

An op that has a kernel asks `run(kernel, inputs, reference, **params)` first: it answers
the op's result, or None where the kernel does not apply and the op runs its prims as
before. The kernel applies only eagerly (no trace, no forward-mode level), on float32/float64
numpy buffers (a function transform's values, vmap's batched ones, are not: the prims run), and where `kernel.accepts(params)` holds. The
node's backward runs the kernel's backward on the buffers; under create_graph it runs the
prims of `reference` (the op's decomposition, which stays the reference for the values)
on the saved inputs instead, so a double backward differentiates the same rules as before.

Kernels here are numpy (products, rows, activations; convolution and pooling, as strided
window views and one BLAS contraction, scatter-adds by window offset and selections by bit
masks, are in runtime/window_kernels.py). Ops over rows and elementwise
ops with transcendental functions (softmax, log_softmax, layer_norm, gelu: `Generated`) run
on kernels from the code generator instead, once compiled (runtime/kernel_library.py): the
op's reference recorded over inputs of symbolic sizes, and its backward from the same
source (the output rule, or autograd of the reference). They were faster than the numpy
kernels at every size measured, from 16x10 to 4096x128 (one fused pass, vectorised
exp/erf); the numpy kernels stay the reference and run until the generated ones are
compiled. max_pool2d's and avg_pool2d's forwards run on generated kernels written tap by
tap over strided slices (runtime/window_kernels.py), their backwards on numpy; conv2d stays
on numpy (im2col and one BLAS product): kernels generated from the decompositions were
slower at LeNet's sizes, as was a max_pool2d backward generated as a stack of the taps'
selections; nll_loss runs on numpy (its node follows log_softmax's, as PyTorch records).
tests/runtime/test_eager_kernels.py compares each with its reference on awkward shapes
(size 1, zero size, non-contiguous inputs, padding, stride, dilation).
"""
from dataclasses import dataclass
from typing import Callable

from functools import partial

import numpy as np

from aotgrad.ir.core import Aval, current_builder
from aotgrad.ir.prims import erf
from aotgrad.runtime.autograd_node import GradientEdge, Node, _node_of
from aotgrad.runtime.backward import run_subgraph
from aotgrad.runtime.forward_mode import state as _forward
from aotgrad.runtime.grad_mode import enable_grad
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.kernel_library import ShapedOp, library
from aotgrad.runtime.saved_tensors import SavedTensor
from aotgrad.runtime.tensor import Tensor

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_BITS = {4: np.int32, 8: np.int64}   # an itemsize's integer type, for bitwise selection


def _mask_bits(mask, itemsize):
    """All-ones words where `mask` holds, zero words elsewhere."""
    m = mask.view(np.int8).astype(_BITS[itemsize])
    return np.negative(m, out=m)


def _select(mask, a, b):
    """np.where(mask, a, b) for same-shape arrays of one dtype, bit for bit (NaN payloads and
    -0.0 kept), without np.where's per-element branch, which costs ~20x on an unpredictable
    mask (activations, window maxima)."""
    bits = _BITS[b.dtype.itemsize]
    bi = b.view(bits)
    out = np.bitwise_xor(a.view(bits), bi)
    out &= _mask_bits(mask, b.dtype.itemsize)
    out ^= bi
    return out.view(b.dtype)


def _keep(mask, a):
    """np.where(mask, a, +0.0), bit for bit, without the branch (see _select)."""
    out = _mask_bits(mask, a.dtype.itemsize)
    out &= a.view(out.dtype)
    return out.view(a.dtype)


@dataclass(frozen=True)
class Layout:
    """An op call's arrays as its generated kernels take them: `arrays` (the present
    inputs, reshaped: rows x columns, or flat) with symbolic `shapes` (size names) and
    their `sizes`; `present`: which of the op's inputs they are; `params`: the op's
    params for that layout, as sorted (name, value) pairs."""
    shapes: tuple
    sizes: dict
    arrays: list
    present: tuple
    params: tuple


@dataclass(frozen=True)
class Generated:
    """An op whose kernels come from the code generator: `layout(arrays, params)` -> Layout,
    or None where the generated kernels do not apply (the numpy kernel runs).

    By default the forward kernel is the op's reference and the backward one its autograd.
    `forward(tensors, flags)` (tensor ops over the layout's inputs) instead gives the output
    and then the numpy backward's ctx (`ctx(outputs, arrays, params)` -> (out, ctx) shapes
    them); with `backward=False` the numpy backward runs (where the reference's autograd
    makes a slow kernel)."""
    layout: Callable
    forward: Callable = None
    ctx: Callable = None
    backward: bool = True


@dataclass(frozen=True)
class Kernel:
    """An op's whole-array kernel: `forward(arrays, **params)` -> (out, ctx) and
    `backward(g, arrays, ctx, needs, **params)` -> one gradient array (or None) per input;
    `accepts(arrays, params)` says where it applies; `name` is the node's (PyTorch's)
    name. With `output_rule` the node saves the output instead of the inputs (as PyTorch's
    softmax and relu do: an input changed in place afterwards is no error), its backward gets
    the output's array as `ctx`, and under create_graph `output_rule(g, out, **params)`
    (tensor ops) gives the gradients."""
    name: str
    forward: Callable
    backward: Callable
    accepts: Callable = lambda arrays, params: True
    output_rule: Callable = None
    # the inputs the node saves (checked against in-place changes); None: all of them. The
    # others are kept as they are, for the reference under create_graph only, where the
    # reference's own rule does not save them either (addmm's input)
    saves: tuple = None
    # kernels from the code generator, used once compiled (see Generated)
    generated: Generated = None
    # the inputs that are integer arrays (class indices: no gradient), the others floats
    indices: tuple = ()
    # the inputs the node has edges to, as PyTorch's node (None: all of them)
    edges: tuple = None


def _forward_body(reference, n, present, tensors, flags):
    params = dict(flags)
    args = [None] * n
    for i, t in zip(present, tensors):
        args[i] = t
    return [reference(*args, **params)]


def _rule_body(output_rule, tensors, flags):
    g, out = tensors
    return list(output_rule(g, out, **dict(flags)))


def _grad_body(reference, n, present, needs, tensors, flags):
    """The gradients of the present inputs in `needs` (positions among the present ones):
    the backward of the reference, recorded (the same derivative rules as the prims path)."""
    *inputs, g = tensors
    out = _forward_body(reference, n, present, inputs, flags)[0]
    # (an input the output did not depend on would get None: no graph, so the numpy kernel)
    return run_subgraph([GradientEdge(out.grad_fn, out._output_nr)], [g],
                        [_node_of(inputs[i]) for i in needs], False)


def _op_name(kernel, which, lay, n):
    """The generated kernel's name (part of its key): the node's name, forward or backward,
    and which of the op's n inputs are present where some are not (a weight without a bias
    and a bias without a weight have the same shapes)."""
    name = f"{kernel.name}.{which}"
    return name if len(lay.present) == n else f"{name}{list(lay.present)}"


def generated_forward(kernel, reference, arrays, params):
    """The op's output from its generated kernel and the numpy backward's ctx (None: not
    computed), or None (not compiled yet, or the layout does not apply)."""
    gen = kernel.generated
    lay = gen.layout(arrays, params)
    if lay is None:
        return None
    dtype = lay.arrays[0].dtype
    body = gen.forward or partial(_forward_body, reference, len(arrays), lay.present)
    k = library.shaped_kernel(ShapedOp(
        _op_name(kernel, "forward", lay, len(arrays)), dtype, lay.shapes, body, lay.params))
    if k is None:
        return None
    outs = k(lay.arrays, lay.sizes)
    if gen.ctx is not None:
        return gen.ctx(outs, arrays, params)
    return outs[0].reshape(arrays[0].shape), None


def generated_backward(kernel, reference, g, arrays, out, needs, params):
    """The gradients (one per input, None where not needed) from the op's generated
    backward kernel, or None (not compiled yet, or the layout does not apply). `out`: the
    output's array where the kernel saves it (output_rule), else None."""
    lay = kernel.generated.layout(arrays if out is None else [out], params)
    if lay is None or g.dtype != lay.arrays[0].dtype:
        return None
    dtype = lay.arrays[0].dtype
    gv = np.ascontiguousarray(g).reshape(lay.arrays[0].shape)   # (an expanded one: copied)
    if kernel.output_rule is not None:
        k = library.shaped_kernel(ShapedOp(_op_name(kernel, "backward", lay, 1), dtype,
                                           lay.shapes * 2,
                                           partial(_rule_body, kernel.output_rule),
                                           lay.params))
        if k is None:
            return None
        return [k([gv, lay.arrays[0]], lay.sizes)[0].reshape(out.shape)]
    want = tuple(j for j, i in enumerate(lay.present) if needs[i])
    k = library.shaped_kernel(ShapedOp(
        _op_name(kernel, "backward", lay, len(arrays)), dtype, lay.shapes + lay.shapes[:1],
        partial(_grad_body, reference, len(arrays), lay.present, want), lay.params,
        grads=want))
    if k is None:
        return None
    grads = [None] * len(arrays)
    for j, gr in zip(want, k(lay.arrays + [gv], lay.sizes)):
        i = lay.present[j]
        grads[i] = gr.reshape(arrays[i].shape)
    return grads


class KernelBackward(Node):
    """The one node of a kernel op: edges to its tensor inputs (None for an absent one)."""
    whole_op = True   # composite.one_node keeps it as the op's node (a nested call's included)

    def __init__(self, kernel, reference, inputs, out, params, ctx, ctx_missing=False):
        edged = inputs if kernel.edges is None else [inputs[i] for i in kernel.edges]
        super().__init__([_node_of(t) if t is not None and t.requires_grad else (None, 0)
                          for t in edged],
                         [None if t is None else Aval(t._value.shape, t.dtype) for t in edged],
                         [Aval(out._value.shape, out.dtype)])
        self._name, self._kernel, self._reference = kernel.name, kernel, reference
        self._params, self._ctx = params, ctx
        # the forward ran a generated kernel: no ctx for the numpy backward (recomputed if
        # the numpy backward runs)
        self._ctx_missing = ctx_missing
        self.needs_input_grad = tuple(t is not None and t.requires_grad for t in inputs)
        if kernel.output_rule is None:
            self._saved = [None if t is None else
                           SavedTensor(t) if kernel.saves is None or i in kernel.saves else t
                           for i, t in enumerate(inputs)]
        else:
            self._saved, self._ctx = [SavedTensor(out, is_output=True)], None

    def _backward(self, grads):
        g = grads[0]
        if self._kernel.output_rule is not None:
            out = self._saved[0].unpack(self)
            if _mode.grad_enabled or current_builder() is not None or \
                    type(g._value) is not np.ndarray:
                return list(self._kernel.output_rule(g, out, **self._params))
            with np.errstate(all="ignore"):
                gen = None if self._kernel.generated is None else generated_backward(
                    self._kernel, self._reference, g._value, None, out._value,
                    self.needs_input_grad, self._params)
                gx, = gen or self._kernel.backward(g._value, None, out._value,
                                                   self.needs_input_grad, **self._params)
            return [Tensor._make(gx)]
        inputs = [s.unpack(self) if type(s) is SavedTensor else s for s in self._saved]
        if _mode.grad_enabled or current_builder() is not None or \
                type(g._value) is not np.ndarray:
            # create_graph, or a backward being traced: the decomposition's prims, whose
            # nodes are differentiable and record into a trace
            with enable_grad():
                out = self._reference(*inputs, **self._params)
            return run_subgraph([GradientEdge(out.grad_fn, out._output_nr)], [g],
                                self.next_functions, _mode.grad_enabled)
        arrays = [None if t is None or (self._kernel.saves is not None and
                                        i not in self._kernel.saves) else t._value
                  for i, t in enumerate(inputs)]
        with np.errstate(all="ignore"):
            outs = None if self._kernel.generated is None or \
                not self._kernel.generated.backward else generated_backward(
                    self._kernel, self._reference, g._value, arrays, None,
                    self.needs_input_grad, self._params)
            if outs is None:
                if self._ctx_missing:
                    self._ctx = self._kernel.forward(arrays, **self._params)[1]
                    self._ctx_missing = False
                outs = self._kernel.backward(g._value, arrays, self._ctx,
                                             self.needs_input_grad, **self._params)
        grads = [None if a is None or not need else Tensor._make(a)
                 for a, need in zip(outs, self.needs_input_grad)]
        return grads if self._kernel.edges is None else [grads[i] for i in self._kernel.edges]

    def _release(self):
        for s in self._saved:
            if type(s) is SavedTensor:
                s.release()
        self._saved = [s if type(s) is SavedTensor else None for s in self._saved]
        self._ctx = None


def run(kernel, inputs, reference, /, **params):
    """The op's result from `kernel` with its node, or None where the kernel does not apply
    (the caller runs `reference(*inputs, **params)`, its prims, then)."""
    if current_builder() is not None or _forward.level is not None:
        return None
    dtype = None
    for i, t in enumerate(inputs):
        if t is None:
            continue
        v = t._value
        if type(v) is not np.ndarray or t._sparse is not None:
            return None
        if i in kernel.indices:
            if v.dtype.kind not in "iu":
                return None
            continue
        if v.dtype not in _FLOATS or (dtype is not None and v.dtype != dtype):
            return None
        dtype = v.dtype
    arrays = [None if t is None else t._value for t in inputs]
    if not kernel.accepts(arrays, params):
        return None
    with np.errstate(all="ignore"):   # NaN/inf results without numpy's warnings, as PyTorch
        gen = None if kernel.generated is None else \
            generated_forward(kernel, reference, arrays, params)
        if gen is not None:
            out_val, ctx = gen
        else:
            out_val, ctx = kernel.forward(arrays, **params)
        # (a generated forward without the numpy backward's ctx: recomputed if that runs)
        from_library = gen is not None and ctx is None
    out = Tensor._make(out_val, False)
    if _mode.grad_enabled and any(t is not None and t.requires_grad for t in inputs):
        out.requires_grad = True
        out.grad_fn = KernelBackward(kernel, reference, inputs, out, params, ctx,
                                     ctx_missing=from_library)
    return out


# ---- matrix products -----------------------------------------------------------------------
def _addmm_forward(arrays):
    """input + mat1 @ mat2 (beta = alpha = 1: nn.Linear's product), the input a row or the
    whole matrix."""
    inp, m1, m2 = arrays
    out = np.matmul(m1, m2)
    out += inp
    return out, inp.ndim


def _addmm_backward(g, arrays, input_ndim, needs):
    _, m1, m2 = arrays
    gi = (g.copy() if input_ndim == 2 else g.sum(axis=0)) if needs[0] else None
    g1 = np.matmul(g, m2.T) if needs[1] else None
    g2 = np.matmul(m1.T, g) if needs[2] else None
    return gi, g1, g2


def _addmm_accepts(arrays, params):
    inp, m1, m2 = arrays
    return inp.shape in ((m2.shape[1],), (m1.shape[0], m2.shape[1]))


# saves the two matrices only, as the reference's rules do (an add saves nothing)
ADDMM = Kernel("AddmmBackward0", _addmm_forward, _addmm_backward, _addmm_accepts, saves=(1, 2))


# ---- rows (normalisation, softmax, activations) --------------------------------------------
def _layer_norm_forward(arrays, *, dims, eps):
    x, w, b = arrays
    mu = x.mean(axis=dims, keepdims=True)
    d = x - mu
    var = np.multiply(d, d).mean(axis=dims, keepdims=True)
    rstd = 1 / np.sqrt(var + x.dtype.type(eps))
    xhat = d * rstd
    out = xhat * w if w is not None else xhat.copy()
    if b is not None:
        out += b
    return out, (xhat, rstd)


def _layer_norm_backward(g, arrays, ctx, needs, *, dims, eps):
    x, w, b = arrays
    xhat, rstd = ctx
    outer = tuple(range(x.ndim - len(dims)))
    gx = gw = gb = None
    if needs[0]:
        gh = g * w if w is not None else g
        gx = rstd * (gh - gh.mean(axis=dims, keepdims=True) -
                     xhat * np.multiply(gh, xhat).mean(axis=dims, keepdims=True))
    if w is not None and needs[1]:
        gw = np.multiply(g, xhat).sum(axis=outer)
    if b is not None and needs[2]:
        gb = g.sum(axis=outer)
    return gx, gw, gb


def _layer_norm_accepts(arrays, params):
    """A non-empty input; weight and bias (when given) of the normalized shape."""
    x, w, b = arrays
    shape = x.shape[x.ndim - len(params["dims"]):]
    return x.size > 0 and all(a is None or a.shape == shape for a in (w, b))


def rows_layout(arrays, params):
    """A softmax or log_softmax over the last dim of a C-contiguous input: rows x columns."""
    x, = arrays
    if x.ndim == 0 or tuple(params["dim"]) != (x.ndim - 1,) or not x.flags.c_contiguous:
        return None
    c = x.shape[-1]
    r = x.size // c
    return Layout((("r", "c"),), {"r": r, "c": c}, [x.reshape(r, c)], (0,), (("dim", (1,)),))


def _layer_norm_layout(arrays, params):
    """A layer_norm of C-contiguous arrays: rows x the normalized size, the weight and the
    bias flat."""
    x = arrays[0]
    k = len(params["dims"])
    if not all(a is None or a.flags.c_contiguous for a in arrays):
        return None
    c = int(np.prod(x.shape[x.ndim - k:]))
    r = x.size // c
    present = tuple(i for i, a in enumerate(arrays) if a is not None)
    return Layout((("r", "c"),) + (("c",),) * (len(present) - 1), {"r": r, "c": c},
                  [x.reshape(r, c)] + [arrays[i].reshape(c) for i in present[1:]], present,
                  (("dims", (1,)), ("eps", float(params["eps"]))))


def flat_layout(arrays, params):
    """An elementwise op of one C-contiguous input: flat."""
    x, = arrays
    if not x.flags.c_contiguous:
        return None
    return Layout((("n",),), {"n": x.size}, [x.reshape(-1)], (0,),
                  tuple(sorted(params.items())))


LAYER_NORM = Kernel("NativeLayerNormBackward0", _layer_norm_forward, _layer_norm_backward,
                    _layer_norm_accepts, generated=Generated(_layer_norm_layout))


def softmax_forward(arrays, *, dim):
    x, = arrays
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    e /= e.sum(axis=dim, keepdims=True)
    return e, e


def softmax_backward(g, arrays, y, needs, *, dim):
    gy = g * y
    return (gy - y * gy.sum(axis=dim, keepdims=True),)


# softmax's, log_softmax's and relu's Kernel (with the create_graph rule, written with the
# ops) is declared in its op module: this module lies below the ops

def log_softmax_forward(arrays, *, dim):
    x, = arrays
    shifted = x - x.max(axis=dim, keepdims=True)
    out = shifted - np.log(np.exp(shifted).sum(axis=dim, keepdims=True))
    return out, out


def log_softmax_backward(g, arrays, out, needs, *, dim):
    return (g - np.exp(out) * g.sum(axis=dim, keepdims=True),)




def relu_forward(arrays):
    x, = arrays   # 0 where x < 0, x elsewhere: -0.0 stays -0.0 and NaN passes (PyTorch)
    # np.maximum returns its second operand on ties, so x's own zero (-0.0 included) is kept
    return np.maximum(x.dtype.type(0), x), None


def relu_backward(g, arrays, y, needs):
    return (_keep(y != 0, g),)   # y is 0 exactly where x <= 0 (y NaN: g passes)



_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327
_SQRT_2_OVER_PI = 0.7978845608028654


def _gelu_forward(arrays, *, approximate):
    x, = arrays
    f = x.dtype.type
    if approximate == "none":
        cdf = erf.impl(x * f(_SQRT_HALF))
        cdf += f(1)
        cdf *= f(0.5)
        return x * cdf, cdf
    t = np.tanh((x + x * x * x * f(0.044715)) * f(_SQRT_2_OVER_PI))
    return (x * f(0.5)) * (t + f(1)), t


def _gelu_backward(g, arrays, ctx, needs, *, approximate):
    x, = arrays
    f = x.dtype.type
    if approximate == "none":
        pdf = np.exp(x * x * f(-0.5))
        pdf *= f(_INV_SQRT_2PI)
        pdf *= x
        pdf += ctx
        return (g * pdf,)
    t = ctx
    inner_d = (x * x * f(3 * 0.044715) + f(1)) * f(_SQRT_2_OVER_PI)
    d = (t + f(1)) * f(0.5) + (x * f(0.5)) * (f(1) - t * t) * inner_d
    return (g * d,)


GELU = Kernel("GeluBackward0", _gelu_forward, _gelu_backward, generated=Generated(flat_layout))


# ---- nll_loss (cross_entropy's second node, after log_softmax's) ---------------------------
def _class_rows(x):
    """Logits (C,), (N, C) or (N, C, d1, ...) as rows x classes (the class dim moved last)."""
    if x.ndim == 1:
        return x.reshape(1, -1)
    if x.ndim == 2:
        return x
    return np.moveaxis(x, 1, -1).reshape(-1, x.shape[1])


def _from_class_rows(rows, x):
    """The inverse of _class_rows, for an array of x's shape."""
    if x.ndim <= 2:
        return rows.reshape(x.shape)
    moved = x.shape[:1] + x.shape[2:] + x.shape[1:2]
    return np.ascontiguousarray(np.moveaxis(rows.reshape(moved), -1, 1))


def nll_forward(arrays, *, ignore_index, reduction, label_smoothing):
    """nll_loss of log-probabilities (C,), (N, C) or (N, C, d1, ...) against class indices,
    with label smoothing (cross_entropy's), as the ops' reference computes it."""
    logp, t, w = arrays
    rows = _class_rows(logp)
    f = logp.dtype.type
    t = t.reshape(-1)
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    w_t = np.where(valid, w[safe], f(0)) if w is not None else valid.astype(logp.dtype)
    loss = -(np.where(valid, rows[np.arange(rows.shape[0]), safe], f(0)) * w_t)
    if label_smoothing > 0:
        lw = rows * w if w is not None else rows
        smooth = np.where(valid, -lw.sum(axis=1), f(0))
        loss = loss * f(1.0 - label_smoothing) + smooth * f(label_smoothing / rows.shape[1])
    if reduction == "mean":
        out = loss.sum() / w_t.sum()
    elif reduction == "sum":
        out = loss.sum()
    else:
        out = loss.reshape(arrays[1].shape)
    return np.asarray(out, logp.dtype), (safe, valid, w_t)


def nll_backward(g, arrays, ctx, needs, *, ignore_index, reduction, label_smoothing):
    """The log-probabilities' gradient: minus the (weighted, smoothed) cotangent at each
    row's target, over the summed weights for a mean; none at ignored rows."""
    logp, t, w = arrays
    if ctx is None:
        ctx = nll_forward(arrays, ignore_index=ignore_index, reduction=reduction,
                          label_smoothing=label_smoothing)[1]
    safe, valid, w_t = ctx
    f = logp.dtype.type
    n = safe.shape[0]
    c = logp.shape[0 if logp.ndim == 1 else 1]
    if reduction == "none":
        gl = g.reshape(-1)
    else:
        gl = np.broadcast_to(g / w_t.sum() if reduction == "mean" else g, (n,))
    d = np.zeros((n, c), logp.dtype)
    if label_smoothing > 0:
        s = np.where(valid, gl, f(0)) * f(label_smoothing / c)
        d -= s[:, None] * w if w is not None else s[:, None]
        gl = gl * f(1.0 - label_smoothing)
    picked = -gl * w_t
    picked[~valid] = 0        # (an ignored row: no gradient, whatever the cotangent)
    d[np.arange(n), safe] += picked
    return _from_class_rows(d, logp), None, None
