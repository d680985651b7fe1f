"""`backward` and `grad`: the user-facing entry points into the engine."""
import numpy as np

from aotgrad.runtime.autograd_node import GradientEdge, fast_path_ok
from aotgrad.runtime.sizes import size_list
from aotgrad.runtime.backward import run_backward
from aotgrad.runtime.factories import ones_like, tensor, zeros, zeros_like
from aotgrad.runtime.op_base import _add_user_line
from aotgrad.runtime.shape_ops import stack
from aotgrad.runtime.tensor import Size, Tensor


def _as_tuple(x):
    if x is None:
        return None
    return (x,) if isinstance(x, (Tensor, GradientEdge)) else tuple(x)


def _requires_grad(t):
    return t.node is not None if type(t) is GradientEdge else t.requires_grad


_ONE = {}  # (shape, dtype) -> a 1-element array of ones, copied for each implicit grad


def _make_grads(outputs, grad_outputs):
    out = []
    for i, (o, g) in enumerate(zip(outputs, grad_outputs)):
        if type(o) is GradientEdge:  # an edge stands for its node's output: shape and dtype
            o = _EdgeOutput(o)
        if g is None:
            v = o._value
            if o.numel() != 1:
                raise RuntimeError(f"grad can be implicitly created only for scalar outputs "
                                   f"(output {i} has shape {size_list(o.shape)}); pass `gradient=`")
            if not o.dtype.is_floating_point:
                raise RuntimeError(f"grad can be implicitly created only for real scalar "
                                   f"outputs but got {o.dtype.name}")
            if type(v) is np.ndarray:
                one = _ONE.get((v.shape, v.dtype))
                if one is None:
                    one = _ONE[(v.shape, v.dtype)] = np.ones(v.shape, v.dtype)
                out.append(Tensor._make(one.copy()))
            else:
                out.append(ones_like(o))
            continue
        if not isinstance(g, Tensor):
            g = tensor(g, dtype=o.dtype)
        elif tuple(g.shape) != tuple(o.shape):
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                               f"{Size(g.shape)!r} and output[{i}] has a shape of "
                               f"{Size(o.shape)!r}.")
        if g.dtype is not o.dtype:  # like PyTorch, a gradient of another dtype is cast
            if not o.dtype.is_floating_point:
                raise RuntimeError(f"grad_output[{i}] has dtype {g.dtype.name} but output[{i}] "
                                   f"has non-floating dtype {o.dtype.name}")
            g = g.to(o.dtype)
        out.append(g)
    return out


class _EdgeOutput:
    """The shape and dtype of the output a GradientEdge stands for (as _make_grads reads
    them from an output tensor)."""

    def __init__(self, edge):
        aval = edge.node._out_avals[edge.output_nr]
        self.shape, self.dtype = aval.shape, aval.dtype
        self._value = zeros(aval.shape, dtype=aval.dtype)._value

    def numel(self):
        return int(np.prod(self.shape))


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate d(tensors)/d(leaves) into the leaves' `.grad` (torch.autograd.backward)."""
    tensors = _as_tuple(tensors)
    grads = _as_tuple(grad_tensors) if grad_tensors is not None else (None,) * len(tensors)
    if len(grads) != len(tensors):
        raise RuntimeError(f"got {len(tensors)} tensors and {len(grads)} gradients")
    for i, t in enumerate(tensors):
        if not _requires_grad(t):
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have "
                               f"a grad_fn")
    if retain_graph is None:
        retain_graph = create_graph
    if create_graph:
        _warn_create_graph_cycle()
    inputs = _as_tuple(inputs)
    if inputs is not None and len(inputs) == 0:
        raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    if inputs is not None:  # like PyTorch, a non-leaf named in `inputs` retains its grad
        for t in inputs:
            if type(t) is not GradientEdge and (t.grad_fn is not None or not t.requires_grad):
                t.retain_grad()
    run_backward(tensors, _make_grads(tensors, grads), retain_graph, create_graph,
                 inputs=inputs, accumulate=True, allow_unused=True)


_warned_cycle = []


def _warn_create_graph_cycle():
    """PyTorch's once-per-process warning for backward(create_graph=True)."""
    if not _warned_cycle:
        _warned_cycle.append(True)
        import warnings
        warnings.warn("Using backward() with create_graph=True will create a reference cycle "
                      "between the parameter and its gradient which can cause a memory leak. "
                      "We recommend using autograd.grad when creating the graph to avoid this. "
                      "If you have to use this function, make sure to reset the .grad fields of "
                      "your parameters to None after use to break the cycle and avoid the leak.",
                      UserWarning, stacklevel=4)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """Return d(outputs)/d(inputs) without touching `.grad` (torch.autograd.grad).

    >>> x = aotgrad.tensor(3., requires_grad=True)
    >>> aotgrad.autograd.grad(x ** 3, x)
    (tensor(27.),)
    """
    outputs, inputs = _as_tuple(outputs), _as_tuple(inputs)
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    if is_grads_batched:
        return _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph,
                             allow_unused, materialize_grads)
    if grad_outputs is None:
        grad_outputs = (None,) * len(outputs)
    else:
        grad_outputs = _as_tuple(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise RuntimeError(f"grad requires one grad_output per output: got {len(grad_outputs)} "
                           f"for {len(outputs)} outputs")
    if not inputs:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    for i, o in enumerate(outputs):
        if not _requires_grad(o):
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have "
                               f"a grad_fn")
    if retain_graph is None:
        retain_graph = create_graph
    if allow_unused is None:
        allow_unused = materialize_grads
    res = run_backward(outputs, _make_grads(outputs, grad_outputs), retain_graph, create_graph,
                       inputs=inputs, allow_unused=allow_unused, accumulate=False)
    if materialize_grads:
        if any(r is None and type(i) is GradientEdge for r, i in zip(res, inputs)):
            raise RuntimeError("materialize_grads cannot be used when the given input is a "
                               "GradientEdge")
        # (a materialized zero is a leaf that requires grad under create_graph, as in PyTorch)
        res = [r if r is not None else zeros_like(i).requires_grad_(create_graph)
               for r, i in zip(res, inputs)]
    if not create_graph:
        res = [r.detach() if r is not None else None for r in res]
    return tuple(res)


def _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused,
                  materialize_grads):
    """is_grads_batched=True: the first dim of every grad_output is a batch of vectors; one
    vector-Jacobian product per entry (a loop, not a vmap), results stacked along dim 0."""
    gos = _as_tuple(grad_outputs) if grad_outputs is not None else None
    if gos is None or any(g is None for g in gos):
        raise RuntimeError("is_grads_batched=True needs a batched grad_output for every output")
    if len(gos) != len(outputs):
        raise RuntimeError(f"grad requires one grad_output per output: got {len(gos)} for "
                           f"{len(outputs)} outputs")
    n = gos[0].shape[0] if gos[0].ndim else 0
    for i, (g, o) in enumerate(zip(gos, outputs)):
        if g.ndim == 0 or g.shape[0] != n or tuple(g.shape[1:]) != tuple(o.shape):
            raise RuntimeError(f"is_grads_batched=True: grad_output[{i}] has shape "
                               f"{size_list(g.shape)}, expected a batch dim of size {n} followed "
                               f"by "
                               f"output[{i}]'s shape {size_list(o.shape)}")
    keep = create_graph if retain_graph is None else retain_graph
    rows = [grad(outputs, inputs, [g[b] for g in gos], retain_graph=True if b < n - 1 else keep,
                 create_graph=create_graph, allow_unused=allow_unused,
                 materialize_grads=materialize_grads) for b in range(n)]
    out = []
    for i, x in enumerate(inputs):
        col = [r[i] for r in rows]
        if all(c is None for c in col):
            out.append(None)
            continue
        out.append(stack([c if c is not None else zeros_like(x) for c in col]))
    return tuple(out)


def tensor_backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
    """Tensor.backward: compute the gradient of this tensor w.r.t. graph leaves, accumulated
    into `.grad`."""
    try:
        if gradient is None and inputs is None and not create_graph:
            # the node's own short backward (a compiled program's), where the engine
            # says none of its general work is needed
            node = self.grad_fn
            if node is not None and node._fast_backward is not None and \
                    fast_path_ok(node) and node._fast_backward(self, bool(retain_graph)):
                return
        backward(self, gradient, retain_graph, create_graph, inputs=inputs)
    except (RuntimeError, ValueError, TypeError, IndexError) as e:
        _add_user_line(e, "backward", prefix=False)   # the user's line of backward()
        raise
