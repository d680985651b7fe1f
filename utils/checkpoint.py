"""`aotgrad.utils.checkpoint`, as `torch.utils.checkpoint`: activation checkpointing.

>>> import aotgrad
>>> block = aotgrad.nn.Sequential(aotgrad.nn.Linear(3, 3), aotgrad.nn.Tanh())
>>> x = aotgrad.randn(2, 3, requires_grad=True)
>>> y = checkpoint(block, x, use_reentrant=False)   # block's intermediates are not kept
>>> y.sum().backward()                              # block runs again to rebuild them

`checkpoint(fn, *args)` runs `fn` without keeping the tensors its operations save for
backward; the backward runs `fn` a second time on the same inputs (and, with
`preserve_rng_state=True`, the same random state; and the autocast state it ran under) to
get them back. Two variants, as in PyTorch:

- `use_reentrant=False` (recommended): `fn` runs with grad enabled under a pair of
  saved-tensor hooks; a saved tensor is stored as a placeholder and the first time the
  backward reads one, `fn` is recomputed and its saved tensors are taken in the same order
  (with early stop, the default, the recomputation stops once it has them all). The output's
  graph is the usual one, so `autograd.grad`, `backward(inputs=...)`, keyword arguments,
  gradients of tensors `fn` closes over, a backward inside `fn` and nested checkpoints all
  work. A recomputation that saves other tensors (count, shape, dtype, or the op that saves
  them) raises CheckpointError.
- `use_reentrant=True`: `fn` runs under `no_grad`; the output gets one node whose backward
  recomputes `fn` with grad enabled and runs a nested `backward` through it (gradients of
  closed-over leaves, such as a module's parameters, are accumulated by that inner backward).
  Only tensors passed as arguments get gradients returned, and only if one of them requires
  grad (otherwise a warning, and the output does not require grad).

While `aotgrad.compile` traces a function, `checkpoint(fn, *args)` is `fn(*args)`: the
compiled program's partitioner already chooses what to keep and what to recompute.
"""
import contextlib
import threading
import warnings

from aotgrad.autograd.function import Function
from aotgrad.autograd.graph import saved_tensors_hooks
from aotgrad.ir.core import current_builder, current_op
from aotgrad.runtime.engine import graph_tasks
from aotgrad.runtime.factories import get_rng_state, set_rng_state
from aotgrad.runtime import autocast as _autocast
from aotgrad.runtime.grad_mode import enable_grad
from aotgrad.runtime.tensor import Tensor

__all__ = ["checkpoint", "checkpoint_sequential", "noop_context_fn", "detach_variable",
           "CheckpointError", "set_checkpoint_early_stop", "set_checkpoint_debug_enabled"]

_PASS_EXPLICITLY = (
    "{where}: the use_reentrant parameter should be passed explicitly. use_reentrant=False is "
    "recommended, but if you need to preserve the current default behavior, you can pass "
    "use_reentrant=True. Refer to docs for more details on the differences between the two "
    "variants.")


class _EarlyStop(threading.local):
    """The innermost `set_checkpoint_early_stop` setting (None: none is active)."""

    def __init__(self):
        self.enabled = None


_early_stop = _EarlyStop()


@contextlib.contextmanager
def set_checkpoint_early_stop(enable):
    """Whether a non-reentrant recomputation stops as soon as it has rebuilt every tensor
    the forward saved (PyTorch's default: True). Inside this context it overrides the
    `early_stop` argument of `checkpoint`. The gradients are the same either way; without
    early stop the whole function runs again (its side effects included)."""
    prev, _early_stop.enabled = _early_stop.enabled, bool(enable)
    try:
        yield
    finally:
        _early_stop.enabled = prev


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


@contextlib.contextmanager
def _autocast_as(dtype):
    """Run the body under the autocast state the forward ran under (None: off), as PyTorch
    recomputes."""
    prev, _autocast.state.dtype = _autocast.state.dtype, dtype
    try:
        yield
    finally:
        _autocast.state.dtype = prev


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
    if _early_stop.enabled is not None:
        early_stop = _early_stop.enabled
    return _checkpoint_with_hooks(function, preserve, context_fn, determinism_check,
                                  early_stop, args, kwargs)


# ---- use_reentrant=True -----------------------------------------------------------------
class _ReentrantCheckpoint(Function):
    @staticmethod
    def forward(ctx, run_function, preserve_rng_state, *args):
        if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn("None of the inputs have requires_grad=True. Gradients will be None")
        ctx.run_function = run_function
        ctx.rng = get_rng_state() if preserve_rng_state else None
        ctx.autocast_dtype = _autocast.state.dtype
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
        with _rng_state(ctx.rng), _autocast_as(ctx.autocast_dtype), enable_grad():
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


class _StopRecomputation(Exception):
    """Raised by the recomputation's pack hook once every tensor the forward saved has been
    rebuilt (early stop); caught where the recomputation started."""


class _Frame:
    """One checkpointed call: what recomputing it needs (the function, its very arguments,
    the random and autocast state of the forward), the shape and dtype of each tensor its
    forward saved, and the saved tensors the last recomputation rebuilt (each handed out
    once, then dropped: another backward through the same graph recomputes again)."""

    def __init__(self, function, args, kwargs, rng, recompute_context, check, early_stop):
        self.function, self.args, self.kwargs = function, args, kwargs
        self.rng, self.recompute_context, self.check = rng, recompute_context, check
        self.early_stop = early_stop
        self.autocast_dtype = _autocast.state.dtype
        self.metadata = []      # _metadata of each tensor packed by the forward
        self.recomputed = {}    # index -> tensor rebuilt by the recomputation
        self.forward_done = False

    def pack(self, t):
        self.metadata.append(_metadata(t))
        return len(self.metadata) - 1

    def unpack(self, index):
        if index not in self.recomputed:
            self._recompute()
        return self.recomputed.pop(index)

    def _recompute(self):
        """Run the function again on the same arguments, under the forward's random and
        autocast state, taking the tensors it saves in order. Its own saves read back as
        they were packed, so a backward inside the function (autograd.grad in it, a nested
        checkpoint) works while it recomputes."""
        wanted = len(self.metadata)  # (a backward inside the forward: those saved so far)
        saved, found = [], []
        more = []  # saves past the forward's count, without early stop

        def pack(t):
            if t.requires_grad:  # (a tensor that needs none is handed back as itself)
                t = t.detach()
            if len(saved) >= wanted:
                more.append(t)
            else:
                saved.append(t)
                found.append(_metadata(t))
                if self.early_stop and len(saved) == wanted:
                    raise _StopRecomputation
            return t

        try:
            with _rng_state(self.rng), _autocast_as(self.autocast_dtype), enable_grad(), \
                    self.recompute_context, saved_tensors_hooks(pack, _same):
                self.function(*self.args, **self.kwargs)
        except _StopRecomputation:
            pass
        if self.check:
            diffs = [f"  tensor {i}: saved {_describe(then)} in the forward, {_describe(now)} "
                     f"when recomputed"
                     for i, (then, now) in enumerate(zip(self.metadata, found)) if then != now]
            if diffs:
                raise CheckpointError("aotgrad.utils.checkpoint: Recomputed values for the "
                                      "following tensors have different metadata than during "
                                      "the forward pass.\n" + "\n".join(diffs))
        if more and self.forward_done:
            raise CheckpointError(
                "aotgrad.utils.checkpoint: trying to save more tensors during recomputation "
                f"than during the original forward pass ({len(self.metadata)}).")
        if len(saved) != wanted:
            raise CheckpointError(
                f"aotgrad.utils.checkpoint: A different number of tensors was saved during "
                f"the original forward ({wanted}) and the recomputation ({len(saved)}); the "
                f"checkpointed function must run the same operations when it runs again")
        self.recomputed = dict(enumerate(saved))


def _same(x):
    return x


def _metadata(t):
    """What the determinism check compares: shape, dtype and the user-level op that saved
    the tensor (stricter than PyTorch, whose check looks at shape and dtype only: an op
    saving a tensor of the same shape in place of another is caught too, even when the
    recomputation stops early)."""
    return tuple(t.shape), t.dtype, current_op.get()


def _describe(metadata):
    shape, dtype, op = metadata
    return f"{list(shape)} {dtype.name}" + (f" by {op}" if op is not None else "")


def _checkpoint_with_hooks(function, preserve, context_fn, determinism_check, early_stop,
                           args, kwargs):
    forward_context, recompute_context = context_fn()
    frame = _Frame(function, args, kwargs, get_rng_state() if preserve else None,
                   recompute_context, determinism_check == "default", early_stop)
    with forward_context, saved_tensors_hooks(frame.pack, frame.unpack):
        out = function(*args, **kwargs)
    frame.forward_done = True
    return out


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
