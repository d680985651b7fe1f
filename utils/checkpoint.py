"""`aotgrad.utils.checkpoint`, as `torch.utils.checkpoint`: activation checkpointing.

>>> import aotgrad
>>> block = aotgrad.nn.Sequential(aotgrad.nn.Linear(3, 3), aotgrad.nn.Tanh())
>>> x = aotgrad.randn(2, 3, requires_grad=True)
>>> y = checkpoint(block, x, use_reentrant=False)   # block's intermediates are not kept
>>> y.sum().backward()                              # block runs again to rebuild them

`checkpoint(fn, *args)` runs `fn` without keeping the tensors its operations save for
backward; the backward runs `fn` a second time on the same inputs (and, with
`preserve_rng_state=True`, the same random state) to get them back. Two variants, as in
PyTorch:

- `use_reentrant=False` (recommended): `fn` runs with grad enabled under a pair of
  saved-tensor hooks; a saved tensor is stored as a placeholder and the first time the
  backward reads one, `fn` is recomputed and its saved tensors are taken in the same order.
  The output's graph is the usual one, so `autograd.grad`, `backward(inputs=...)`, keyword
  arguments and gradients of tensors `fn` closes over all work.
- `use_reentrant=True`: `fn` runs under `no_grad`; the output gets one node whose backward
  recomputes `fn` with grad enabled and runs a nested `backward` through it (gradients of
  closed-over leaves, such as a module's parameters, are accumulated by that inner backward).
  Only tensors passed as arguments get gradients returned, and only if one of them requires
  grad (otherwise a warning, and the output does not require grad).

While `aotgrad.compile` traces a function, `checkpoint(fn, *args)` is `fn(*args)`: the
compiled program's partitioner already chooses what to keep and what to recompute.
"""
import contextlib
import warnings

from aotgrad.autograd.function import Function
from aotgrad.autograd.graph import saved_tensors_hooks
from aotgrad.ir.core import current_builder
from aotgrad.runtime.engine import graph_tasks
from aotgrad.runtime.factories import get_rng_state, set_rng_state
from aotgrad.runtime.grad_mode import enable_grad
from aotgrad.runtime.tensor import Tensor

__all__ = ["checkpoint", "checkpoint_sequential", "noop_context_fn", "detach_variable",
           "CheckpointError", "set_checkpoint_early_stop", "set_checkpoint_debug_enabled"]

_PASS_EXPLICITLY = (
    "{where}: the use_reentrant parameter should be passed explicitly. use_reentrant=False is "
    "recommended, but if you need to preserve the current default behavior, you can pass "
    "use_reentrant=True. Refer to docs for more details on the differences between the two "
    "variants.")


@contextlib.contextmanager
def set_checkpoint_early_stop(enable):
    """Whether a non-reentrant recomputation stops once it has rebuilt every saved tensor
    the backward needs (PyTorch's default). aotgrad always runs the whole checkpointed
    function again; the gradients are the same either way, so the setting has no effect."""
    yield


@contextlib.contextmanager
def set_checkpoint_debug_enabled(enabled):
    """PyTorch's switch for the operator traces in non-deterministic-recomputation errors;
    aotgrad's CheckpointError names the differing saved tensors in every case."""
    yield


def noop_context_fn():
    """The default `context_fn`: no context around the forward or the recomputation."""
    return contextlib.nullcontext(), contextlib.nullcontext()


def detach_variable(inputs):
    """Detached copies of the tensors in `inputs` that keep each one's requires_grad."""
    if not isinstance(inputs, tuple):
        raise RuntimeError(f"Only tuple of tensors is supported. Got Unsupported input type: "
                           f"{type(inputs).__name__}")
    out = []
    for a in inputs:
        if isinstance(a, Tensor):
            d = a.detach()
            d.requires_grad = a.requires_grad
            out.append(d)
        else:
            out.append(a)
    return tuple(out)


@contextlib.contextmanager
def _rng_state(state):
    """Run the body with the random state `state` (None: as it is), then put back the state
    it found."""
    if state is None:
        yield
        return
    outer = get_rng_state()
    set_rng_state(state)
    try:
        yield
    finally:
        set_rng_state(outer)


def checkpoint(function, *args, use_reentrant=None, context_fn=noop_context_fn,
               determinism_check="default", debug=False, early_stop=True, **kwargs):
    """function(*args, **kwargs), its intermediates recomputed in backward instead of kept."""
    if use_reentrant is None:
        warnings.warn(_PASS_EXPLICITLY.format(where="aotgrad.utils.checkpoint"), stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs and use_reentrant:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if determinism_check not in ("default", "none"):
        raise ValueError(f"determinism_check should be one of 'default', 'none', but got "
                         f"{determinism_check}")
    if use_reentrant and (context_fn is not noop_context_fn or debug):
        raise ValueError("Passing `context_fn` or `debug` is only supported when "
                         "use_reentrant=False.")
    if current_builder() is not None:
        return function(*args, **kwargs)
    if use_reentrant:
        return _ReentrantCheckpoint.apply(function, preserve, *args)
    return _checkpoint_with_hooks(function, preserve, context_fn, determinism_check, args,
                                  kwargs)


# ---- use_reentrant=True -----------------------------------------------------------------
class _ReentrantCheckpoint(Function):
    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None")
        ctx.run_function = run_function
        ctx.rng = get_rng_state() if preserve_rng_state else None
        ctx.inputs = [None if isinstance(a, Tensor) else a for a in args]
        ctx.tensor_indices = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.input_requires_grad = [isinstance(a, Tensor) and a.requires_grad for a in args]
        ctx.save_for_backward(*[a for a in args if isinstance(a, Tensor)])
        return run_function(*args)

    @staticmethod
    def backward(ctx, *grads):
        from aotgrad.runtime.autograd_api import backward
        if graph_tasks.stack and graph_tasks.stack[-1].only_inputs:
            raise RuntimeError(
                "When use_reentrant=True, aotgrad.utils.checkpoint is incompatible with .grad() "
                "or passing an `inputs` parameter to .backward(). To resolve this error, you can "
                "either set use_reentrant=False, or call .backward() without passing the "
                "`inputs` argument.")
        inputs = list(ctx.inputs)
        for i, t in zip(ctx.tensor_indices, ctx.saved_tensors):
            d = t.detach()
            d.requires_grad = ctx.input_requires_grad[i]
            inputs[i] = d
        with _rng_state(ctx.rng), enable_grad():
            outputs = ctx.run_function(*inputs)
        if isinstance(outputs, Tensor):
            outputs = (outputs,)
        pairs = [(o, g) for o, g in zip(outputs, grads)
                 if isinstance(o, Tensor) and o.requires_grad]
        if not pairs:
            raise RuntimeError("none of output has requires_grad=True, this checkpoint() is "
                               "not necessary")
        backward([o for o, _ in pairs], [g for _, g in pairs])
        return (None, None) + tuple(a.grad if isinstance(a, Tensor) else None for a in inputs)


# ---- use_reentrant=False ----------------------------------------------------------------
class CheckpointError(RuntimeError):
    """The recomputation of a checkpointed function did not save what its forward saved."""


class _Frame:
    """One checkpointed call: what recomputing it needs, the shape and dtype of each tensor
    its forward saved, and the saved tensors the last recomputation produced (each handed out
    once, then dropped)."""

    def __init__(self, function, args, kwargs, rng, recompute_context, check):
        self.function, self.args, self.kwargs = function, args, kwargs
        self.rng, self.recompute_context, self.check = rng, recompute_context, check
        self.metadata = []      # (shape, dtype) of each tensor packed by the forward
        self.recomputed = {}    # index -> tensor value rebuilt by the recomputation

    def pack(self, t):
        self.metadata.append((tuple(t.shape), t.dtype))
        return len(self.metadata) - 1

    def unpack(self, index):
        if index not in self.recomputed:
            self._recompute()
        return self.recomputed.pop(index)

    def _recompute(self):
        args = detach_variable(tuple(self.args))
        saved = []
        with _rng_state(self.rng), enable_grad(), self.recompute_context, \
                saved_tensors_hooks(lambda t: saved.append(t.detach()), _unreachable):
            self.function(*args, **self.kwargs)
        if len(saved) != len(self.metadata):
            raise CheckpointError(
                f"aotgrad.utils.checkpoint: A different number of tensors was saved during "
                f"the original forward ({len(self.metadata)}) and the recomputation "
                f"({len(saved)}); the checkpointed function must run the same operations when "
                f"it runs again")
        if self.check:
            diffs = [f"  tensor {i}: saved {list(shape)} {dtype.name} in the forward, "
                     f"{list(t.shape)} {t.dtype.name} when recomputed"
                     for i, ((shape, dtype), t) in enumerate(zip(self.metadata, saved))
                     if shape != tuple(t.shape) or dtype is not t.dtype]
            if diffs:
                raise CheckpointError("aotgrad.utils.checkpoint: Recomputed values for the "
                                      "following tensors have different metadata than during "
                                      "the forward pass.\n" + "\n".join(diffs))
        self.recomputed = dict(enumerate(saved))


def _unreachable(packed):
    raise RuntimeError("aotgrad.utils.checkpoint: a tensor saved while recomputing was read "
                       "back")


def _checkpoint_with_hooks(function, preserve, context_fn, determinism_check, args, kwargs):
    forward_context, recompute_context = context_fn()
    frame = _Frame(function, args, kwargs, get_rng_state() if preserve else None,
                   recompute_context, check=determinism_check == "default")
    with forward_context, saved_tensors_hooks(frame.pack, frame.unpack):
        return function(*args, **kwargs)


def checkpoint_sequential(functions, segments, input, use_reentrant=None, **kwargs):
    """Run `functions` (a list or an `nn.Sequential`) in `segments` chunks, each but the last
    under `checkpoint`."""
    if use_reentrant is None:
        warnings.warn(_PASS_EXPLICITLY.format(where="aotgrad.utils.checkpoint."
                                              "checkpoint_sequential"), stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if hasattr(functions, "children") and not isinstance(functions, (list, tuple)):
        functions = list(functions.children())
    functions = list(functions)

    def run(start, end):
        def forward(x):
            for f in functions[start:end + 1]:
                x = f(x)
            return x
        return forward

    size = len(functions) // segments
    end = -1
    for start in range(0, size * (segments - 1), size):
        end = start + size - 1
        input = checkpoint(run(start, end), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run(end + 1, len(functions) - 1)(input)
