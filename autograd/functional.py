"""Higher-order autograd on whole functions, as in `torch.autograd.functional`.

>>> f = lambda x: (x ** 3).sum()
>>> aotgrad.autograd.functional.hessian(f, aotgrad.tensor([1., 2.]))
tensor([[ 6.,  0.],
        [ 0., 12.]])

`func` takes Tensors (one, or one per element of a tuple `inputs`) and returns a Tensor or a
tuple of Tensors. Jacobians have the output's dims first, then the input's. Everything is
built on reverse mode: `jvp` and `hvp` use the double-vjp trick (the vjp is linear in its
cotangent, so differentiating it with respect to the cotangent gives the jvp).
`vectorize` and the strategies are accepted for compatibility; rows are computed one by one.
"""
import builtins

import numpy as np

from aotgrad.runtime.autograd_api import grad as _grad
from aotgrad.runtime.factories import tensor, zeros_like
from aotgrad.runtime.grad_mode import enable_grad
from aotgrad.runtime.tensor import Tensor

__all__ = ["vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"]


# ---- helpers -------------------------------------------------------------------------------
def _as_tuple(x, arg_name, fn_name):
    """(was_tuple, tuple of Tensors) with PyTorch's type errors."""
    is_tuple = isinstance(x, tuple)
    xs = x if is_tuple else (x,)
    for i, el in enumerate(xs):
        if not isinstance(el, Tensor):
            where = f"the value at index {i} has type" if is_tuple else \
                f"the given {arg_name} has type"
            raise TypeError(f"The {arg_name} given to {fn_name} must be either a Tensor or a "
                            f"tuple of Tensors but {where} {type(el)}.")
    return is_tuple, xs


def _unpack(res, is_tuple):
    return res if is_tuple else res[0]


def _prepare(inputs, create_graph, need_graph=True):
    """Fresh tensor objects for the inputs, tracked by autograd; they keep their history only
    with create_graph (so the results can be differentiated further)."""
    out = []
    for x in inputs:
        if create_graph and x.requires_grad:
            out.append(x.view_as(x))
        else:
            out.append(x.detach().requires_grad_(need_graph))
    return tuple(out)


def _finish(xs, create_graph):
    if create_graph:
        return xs
    return tuple(x.detach() if isinstance(x, Tensor) else _finish(x, False) for x in xs)


def _validate_v(v, other, other_is_tuple):
    if len(v) != len(other):
        if other_is_tuple:
            raise RuntimeError(f"v is a tuple of invalid length: should be {len(other)} but got "
                               f"{len(v)}.")
        raise RuntimeError("The given v should contain a single Tensor.")
    for i, (a, b) in enumerate(zip(v, other)):
        if tuple(a.shape) != tuple(b.shape):
            pre = f"Entry {i} in " if other_is_tuple else ""
            raise RuntimeError(f"{pre}v has invalid size: should be {b.shape} but got "
                               f"{a.shape}.")


def _check_outputs(outputs, strict):
    if strict:
        for i, o in enumerate(outputs):
            if not o.requires_grad:
                raise RuntimeError(f"Output {i} of the user-provided function does not require "
                                   f"gradients. The outputs must be computed in a differentiable "
                                   f"manner from the input when running in strict mode.")


def _vjp_raw(outputs, inputs, cotangents, create_graph, retain_graph=True):
    """grad of sum_i <outputs[i], cotangents[i]> with respect to inputs; None where unused."""
    pairs = [(o, c) for o, c in zip(outputs, cotangents) if o.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    return _grad([o for o, _ in pairs], inputs, [c for _, c in pairs],
                 retain_graph=retain_graph, create_graph=create_graph, allow_unused=True)


def _zeros_for_none(grads, refs, strict, create_graph, what):
    res = []
    for i, (g, r) in enumerate(zip(grads, refs)):
        if g is None:
            if strict:
                raise RuntimeError(what(i))
            g = zeros_like(r)
        elif strict and create_graph and not g.requires_grad:
            raise RuntimeError(f"The jacobian of the user-provided function is independent of "
                               f"input {i}. This is not allowed in strict mode when "
                               f"create_graph=True.")
        res.append(g)
    return tuple(res)


def _hessian_independent(i):
    return (f"While computing the hessian, found that the jacobian of the user-provided "
            f"function with respect to input {i} is independent of the input. This is not "
            f"allowed in strict mode. You should ensure that your function is twice "
            f"differentiable and that the jacobian depends on the inputs (this would be "
            f"violated by a linear function for example).")


def _independent(i):
    return (f"The output of the user-provided function is independent of input {i}. This is "
            f"not allowed in strict mode.")


# ---- public API ----------------------------------------------------------------------------
def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T J): the vector-Jacobian product at `inputs`.

    >>> out, g = vjp(lambda x: x ** 2, aotgrad.tensor([1., 2.]), aotgrad.ones(2))
    >>> g
    tensor([2., 4.])
    """
    with enable_grad():
        in_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
        inputs = _prepare(inputs, create_graph)
        out_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function",
                                       "vjp")
        _check_outputs(outputs, strict)
        if v is not None:
            _, v = _as_tuple(v, "v", "vjp")
            v = _prepare(v, create_graph, need_graph=False)
            _validate_v(v, outputs, out_tuple)
        else:
            if len(outputs) != 1 or outputs[0].numel() != 1:
                raise RuntimeError("The vector v can only be None if the user-provided function "
                                   "returns a single Tensor with a single element.")
            v = (None,)
        grads = _vjp_raw(outputs, inputs, v, create_graph)
        grads = _zeros_for_none(grads, inputs, strict, create_graph, _independent)
    return _unpack(_finish(outputs, create_graph), out_tuple), \
        _unpack(_finish(grads, create_graph), in_tuple)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), J v): the Jacobian-vector product at `inputs` (double-vjp trick).

    >>> out, t = jvp(lambda x: x ** 2, aotgrad.tensor([1., 2.]), aotgrad.ones(2))
    >>> t
    tensor([2., 4.])
    """
    with enable_grad():
        in_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
        inputs = _prepare(inputs, create_graph)
        if v is not None:
            _, v = _as_tuple(v, "v", "jvp")
            v = _prepare(v, create_graph, need_graph=False)
            _validate_v(v, inputs, in_tuple)
        else:
            if len(inputs) != 1 or inputs[0].numel() != 1:
                raise RuntimeError("The vector v can only be None if the input to the "
                                   "user-provided function is a single Tensor with a single "
                                   "element.")
            v = (None,)
        out_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function",
                                       "jvp")
        _check_outputs(outputs, strict)
        # u -> u^T J is linear; its gradient with respect to u, applied to v, is J v.
        us = tuple(zeros_like(o).requires_grad_(True) for o in outputs)
        g = _vjp_raw(outputs, inputs, us, create_graph=True)
        g = _zeros_for_none(g, inputs, strict, create_graph, _independent)
        vs = tuple(x if x is not None else _ones_like(i) for x, i in zip(v, inputs))
        jv = _vjp_raw(g, us, vs, create_graph)
        jv = _zeros_for_none(
            jv, outputs, strict, create_graph,
            lambda i: f"The gradient with respect to the input is independent of entry {i} in "
                      f"the grad_outputs when using the double backward trick to compute forward "
                      f"mode gradients. This is not allowed in strict mode.")
    return _unpack(_finish(outputs, create_graph), out_tuple), \
        _unpack(_finish(jv, create_graph), out_tuple)


def _ones_like(x):
    from aotgrad.runtime.factories import ones_like
    return ones_like(x)


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    """The Jacobian of `func` at `inputs`: shape `out.shape + in.shape`; a tuple per input when
    `inputs` is a tuple, per output when func returns a tuple (nested: [out][in]).

    >>> jacobian(lambda x: x ** 2, aotgrad.tensor([1., 2.]))
    tensor([[2., 0.],
            [0., 4.]])
    """
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError('Expected strategy to be either "forward-mode" or "reverse-mode". '
                         'Hint: If your function has more outputs than inputs, "forward-mode" '
                         'tends to be more performant. Otherwise, prefer to use '
                         '"reverse-mode".')
    if strategy == "forward-mode":  # PyTorch's restrictions of the forward-mode strategy
        if create_graph:
            raise NotImplementedError('aotgrad.autograd.functional.jacobian: `create_graph=True` '
                                      'and `strategy="forward-mode"` are not supported together.')
        if strict:
            raise RuntimeError('aotgrad.autograd.functional.jacobian: `strict=True` and '
                               '`strategy="forward-mode"` are not supported together.')
        if not vectorize:
            raise NotImplementedError("Computing Jacobian using forward-AD or forward-over-reverse "
                                      "Hessian is only implemented for `vectorize=True`.")
    elif vectorize and strict:
        raise RuntimeError("aotgrad.autograd.functional.jacobian: `strict=True` and "
                           "`vectorized=True` are not supported together.")
    from aotgrad.runtime.shape_ops import stack
    with enable_grad():
        in_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
        inputs = _prepare(inputs, create_graph)
        out_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function",
                                       "jacobian")
        _check_outputs(outputs, strict)
        jac = []
        for i, out in enumerate(outputs):
            rows = [[] for _ in inputs]
            flat = out.reshape(-1)
            n = flat.shape[0]
            for k in range(n):
                onehot = _basis(out, k)
                g = _vjp_raw((out,), inputs, (onehot,), create_graph) if out.requires_grad \
                    else (None,) * len(inputs)
                for j, (gj, x) in enumerate(zip(g, inputs)):
                    if gj is None:
                        if strict:
                            raise RuntimeError(f"Output {i} of the user-provided function is "
                                               f"independent of input {j}. This is not allowed "
                                               f"in strict mode.")
                        gj = zeros_like(x)
                    elif strict and create_graph and not gj.requires_grad:
                        raise RuntimeError(f"The jacobian of the user-provided function is "
                                           f"independent of input {i}. This is not allowed in "
                                           f"strict mode when create_graph=True.")
                    rows[j].append(gj)
            blocks = []
            for j, x in enumerate(inputs):
                shape = tuple(out.shape) + tuple(x.shape)
                if n == 0:
                    blocks.append(_empty(shape, x))
                else:
                    blocks.append(stack(rows[j], 0).reshape(shape))
            jac.append(tuple(blocks))
    jac = tuple(_finish(b, create_graph) for b in jac)
    if not out_tuple:
        jac = jac[0]
        return _unpack(jac, in_tuple)
    return tuple(_unpack(b, in_tuple) for b in jac)


def _basis(out, k):
    """A tensor shaped like `out` with a 1 at flat index k."""
    import numpy as np
    from aotgrad.runtime.factories import tensor
    e = np.zeros(int(np.prod(out.shape, dtype=np.int64)), dtype=out.dtype.np)
    e[k] = 1
    return tensor(e.reshape(tuple(out.shape)), dtype=out.dtype)


def _empty(shape, like):
    from aotgrad.runtime.factories import zeros
    return zeros(shape, dtype=like.dtype)


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    """The Hessian of a scalar function: shape `in.shape + in.shape`; for tuple inputs a tuple
    of tuples, `H[i][j]` of shape `inputs[i].shape + inputs[j].shape`.

    >>> hessian(lambda x: (x ** 3).sum(), aotgrad.tensor([1., 2.]))
    tensor([[ 6.,  0.],
            [ 0., 12.]])
    """
    in_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")

    def ensure_scalar(*xs):
        out = func(*xs)
        is_tuple, t = _as_tuple(out, "outputs of the user-provided function", "hessian")
        if is_tuple or not isinstance(out, Tensor):
            raise RuntimeError("The function given to hessian should return a single Tensor")
        if out.numel() != 1:
            raise RuntimeError("The Tensor returned by the function given to hessian should "
                               "contain a single element")
        _check_outputs((out,), strict)  # (before the jacobian's own check, as PyTorch)
        return out.squeeze() if out.ndim else out

    def jac_func(*xs):
        xs = tuple(x if x.requires_grad else x.detach().requires_grad_(True) for x in xs)
        jac = jacobian(ensure_scalar, xs, create_graph=True)
        if strict:
            for i, j in enumerate(jac):
                if not j.requires_grad:
                    raise RuntimeError(_hessian_independent(i))
        return jac

    res = jacobian(jac_func, inputs, create_graph=create_graph, strict=strict,
                   vectorize=vectorize, strategy=outer_jacobian_strategy)
    return res if in_tuple else res[0][0]


def _scalar_output(func, inputs, name):
    out_tuple, outputs = _as_tuple(func(*inputs), "outputs of the user-provided function", name)
    if out_tuple:
        raise RuntimeError(f"The function given to {name} should return a single Tensor")
    if outputs[0].numel() != 1:
        raise RuntimeError(f"The Tensor returned by the function given to {name} should contain "
                           f"a single element")
    return outputs[0]


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T H) for a scalar function.

    >>> vhp(lambda x: (x ** 3).sum(), aotgrad.tensor([1., 2.]), aotgrad.ones(2))[1]
    tensor([ 6., 12.])
    """
    return _second_order(func, inputs, v, create_graph, strict, "vhp")


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), H v) for a scalar function (double-vjp trick).

    >>> hvp(lambda x: (x ** 3).sum(), aotgrad.tensor([1., 2.]), aotgrad.ones(2))[1]
    tensor([ 6., 12.])
    """
    return _second_order(func, inputs, v, create_graph, strict, "hvp")


def _second_order(func, inputs, v, create_graph, strict, name):
    with enable_grad():
        in_tuple, inputs = _as_tuple(inputs, "inputs", name)
        inputs = _prepare(inputs, create_graph)
        if v is not None:
            _, v = _as_tuple(v, "v", name)
            v = _prepare(v, create_graph, need_graph=False)
            _validate_v(v, inputs, in_tuple)
        elif len(inputs) != 1 or inputs[0].numel() != 1:
            raise RuntimeError("The vector v can only be None if the input to the user-provided "
                               "function is a single Tensor with a single element.")
        else:
            v = (_ones_like(inputs[0]),)
        out = _scalar_output(func, inputs, name)
        _check_outputs((out,), strict)
        g = _vjp_raw((out,), inputs, (None,), create_graph=True)
        if strict:
            for i, gi in enumerate(g):
                if gi is None:   # the output does not depend on the input at all
                    raise RuntimeError(_independent(i))
                if not gi.requires_grad:
                    raise RuntimeError(_hessian_independent(i))
        g = _zeros_for_none(g, inputs, False, create_graph, _independent)
        if name == "vhp":
            res = _vjp_raw(g, inputs, v, create_graph)
        else:
            # H v = d/du (u^T H v)... via the double-vjp trick: w(u) = (d g/d x)^T u is linear
            # in u; its gradient with respect to u applied to v is (dg/dx) v = H v.
            us = tuple(zeros_like(x).requires_grad_(True) for x in inputs)
            w = _vjp_raw(g, inputs, us, create_graph=True)
            w = _zeros_for_none(
                w, inputs, strict, create_graph,
                lambda i: f"The hessian of the user-provided function with respect to input {i} "
                          f"is independent of the input. This is not allowed in strict mode.")
            res = _vjp_raw(w, us, v, create_graph)
        res = _zeros_for_none(
            res, inputs, strict, create_graph,
            lambda i: f"The hessian of the user-provided function with respect to input {i} is "
                      f"independent of the input. This is not allowed in strict mode.")
    return _finish((out,), create_graph)[0], _unpack(_finish(res, create_graph), in_tuple)


def _construct_standard_basis_for(tensors, tensor_numels):
    """The rows of the identity of size sum(tensor_numels), split by columns into one chunk
    per tensor (shape (total, numel_i), the tensor's dtype): the basis vectors a vectorised
    jacobian feeds to the backward (PyTorch's helper of the same name)."""
    total = builtins.sum(tensor_numels)
    chunks, start = [], 0
    for t, n in zip(tensors, tensor_numels):
        block = np.zeros((total, n), dtype=t.dtype.np)
        block[start:start + n] = np.eye(n, dtype=t.dtype.np)
        chunks.append(tensor(block, dtype=t.dtype))
        start += n
    return tuple(chunks)
