"""`backward` and `grad`: the user-facing entry points into the engine."""
import numpy as np

from aotgrad.runtime import tensor as _tensor
from aotgrad.runtime.engine import run_backward
from aotgrad.runtime.tensor import Tensor


def _as_tuple(x):
    if x is None:
        return None
    return (x,) if isinstance(x, Tensor) else tuple(x)


_ONE = {}  # (shape, dtype) -> a 1-element array of ones, copied for each implicit grad


def _make_grads(outputs, grad_outputs):
    out = []
    for i, (o, g) in enumerate(zip(outputs, grad_outputs)):
        if g is None:
            v = o._value
            if o.numel() != 1:
                raise RuntimeError(f"grad can be implicitly created only for scalar outputs "
                                   f"(output {i} has shape {list(o.shape)}); pass `gradient=`")
            if not o.dtype.is_floating_point:
                raise RuntimeError(f"grad can be implicitly created only for real scalar "
                                   f"outputs but got {o.dtype.name}")
            if type(v) is np.ndarray:
                one = _ONE.get((v.shape, v.dtype))
                if one is None:
                    one = _ONE[(v.shape, v.dtype)] = np.ones(v.shape, v.dtype)
                out.append(Tensor._make(one.copy()))
            else:
                from aotgrad.runtime.factories import ones_like
                out.append(ones_like(o))
            continue
        if not isinstance(g, Tensor):
            from aotgrad.runtime.factories import tensor
            g = tensor(g, dtype=o.dtype)
        elif tuple(g.shape) != tuple(o.shape):
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                               f"{list(g.shape)} and output[{i}] has a shape of "
                               f"{list(o.shape)}.")
        if g.dtype is not o.dtype:  # like PyTorch, a gradient of another dtype is cast
            if not o.dtype.is_floating_point:
                raise RuntimeError(f"grad_output[{i}] has dtype {g.dtype.name} but output[{i}] "
                                   f"has non-floating dtype {o.dtype.name}")
            g = g.to(o.dtype)
        out.append(g)
    return out


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate d(tensors)/d(leaves) into the leaves' `.grad` (torch.autograd.backward)."""
    tensors = _as_tuple(tensors)
    grads = _as_tuple(grad_tensors) if grad_tensors is not None else (None,) * len(tensors)
    if len(grads) != len(tensors):
        raise RuntimeError(f"got {len(grads)} gradients for {len(tensors)} tensors")
    for t in tensors:
        if not t.requires_grad:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a "
                               "grad_fn")
    if retain_graph is None:
        retain_graph = create_graph
    inputs = _as_tuple(inputs)
    run_backward(tensors, _make_grads(tensors, grads), retain_graph, create_graph,
                 inputs=inputs, accumulate=True, allow_unused=True)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """Return d(outputs)/d(inputs) without touching `.grad` (torch.autograd.grad).

    >>> x = aotgrad.tensor(3., requires_grad=True)
    >>> aotgrad.autograd.grad(x ** 3, x)
    (tensor(27.),)
    """
    outputs, inputs = _as_tuple(outputs), _as_tuple(inputs)
    if is_grads_batched:
        raise NotImplementedError("is_grads_batched=True is not supported")
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    else:
        grad_outputs = _as_tuple(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"grad requires one grad_output per output: got {len(grad_outputs)} "
                           f"for {len(outputs)} outputs")
    for i, o in enumerate(outputs):
        if not o.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have "
                               f"a grad_fn")
    if retain_graph is None:
        retain_graph = create_graph
    if allow_unused is None:
        allow_unused = materialize_grads
    res = run_backward(outputs, _make_grads(outputs, grad_outputs), retain_graph, create_graph,
                       inputs=inputs, allow_unused=allow_unused, accumulate=False)
    if materialize_grads:
        from aotgrad.runtime.factories import zeros_like
        res = [r if r is not None else zeros_like(i) for r, i in zip(res, inputs)]
    if not create_graph:
        res = [r.detach() if r is not None else None for r in res]
    return tuple(res)


_tensor._autograd_backward = backward  # Tensor.backward (tensor.py cannot import this module)
