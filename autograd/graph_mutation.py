"""`autograd.graph.allow_mutation_on_saved_tensors`, as PyTorch's: inside the context a tensor
saved for backward may be modified in place; the backward reads the value it had when it was
saved.

>>> a = aotgrad.tensor([1.0, 2.0], requires_grad=True)
>>> with allow_mutation_on_saved_tensors() as ctx:
...     b = a.clone()
...     y = (b ** 2).sum()    # pow saves b
...     _ = b.mul_(3)         # b is copied first: the backward reads the old b
...     y.backward()
>>> a.grad
tensor([2., 4.])

How (PyTorch's scheme): every tensor saved inside the context goes through a pack hook that
stores a handle instead of the tensor and keeps the tensor aside under that handle
(`ctx.original`). Just before any in-place write (runtime/write_hooks.py), the tensors saved
from the written memory at its current version are copied (`ctx.cloned`), and the backward
(the unpack hook) reads the copy. A copy is made only when a saved tensor is modified, and
dropped with the graph that saved it: the handles are held only by the saved tensors of the
graph, and the context's tables refer to them weakly.

Errors, as PyTorch's: a backward (or any unpacking) of a graph recorded inside the context once
the context has been left raises AssertionError; contexts cannot be nested (RuntimeError).
Compiled functions keep their saved values inside the compiled program: tracing a function
that saves tensors inside the context is a graph break (it runs eagerly, as under
`saved_tensors_hooks`).
"""
import contextlib
import threading
import weakref
from collections import defaultdict

import numpy as np

from aotgrad.runtime import write_hooks
from aotgrad.runtime.saved_hooks import SavedTensorHooks
from aotgrad.runtime.saved_tensors import saved_hooks
from aotgrad.runtime.tensor import Tensor

__all__ = ["allow_mutation_on_saved_tensors", "AllowMutationOnSavedContext"]

OUT_OF_CONTEXT_MESSAGE = (
    "Trying to backward outside of the 'allow_mutation_on_saved_tensors' context in which the "
    "graph was originally recorded.")


class _Handle:
    """What the graph stores for one saved tensor (one per tensor and version); the context's
    tables hold it weakly, so their entries go when the graph that saved it goes."""
    __slots__ = ("__weakref__",)


def _memory_of(t):
    """The identity of the memory t shares with its views and detached aliases: the version
    counter they share (what PyTorch's storage pointer identifies)."""
    return id(t._version_counter)


def _tensor_id(t):
    """One saved tensor at one version (PyTorch's (id, data pointer, version))."""
    return id(t), _memory_of(t), t._version_counter.v


def _memory_id(t):
    """The memory t refers to, at its current version."""
    return _memory_of(t), t._version_counter.v


class AllowMutationOnSavedContext:
    """What `with allow_mutation_on_saved_tensors() as ctx` gives: the tables of the tensors
    saved inside the context (named as PyTorch's, which tests read).

    original: handle -> the saved tensor (an alias sharing its memory), until it is modified
    cloned: handle -> the copy of the saved tensor made before it was modified
    tid_to_weakhandle: (id, memory, version) of each saved tensor -> its handle
    sid_to_tid: (memory, version) -> the ids of the tensors saved from that memory"""

    def __init__(self):
        self.cloned = weakref.WeakKeyDictionary()
        self.original = weakref.WeakKeyDictionary()
        self.tid_to_weakhandle = weakref.WeakValueDictionary()
        self.sid_to_tid = defaultdict(set)
        self.active = False

    def clear(self):
        self.cloned.clear()
        self.original.clear()
        self.tid_to_weakhandle.clear()
        self.sid_to_tid.clear()

    def pack(self, tensor):
        """Pack hook: the handle of `tensor` at its current version (shared by every save of
        the same tensor at the same version)."""
        tid = _tensor_id(tensor)
        self.sid_to_tid[_memory_id(tensor)].add(tid)
        handle = self.tid_to_weakhandle.get(tid)
        if handle is None:
            handle = _Handle()
            self.tid_to_weakhandle[tid] = handle
            # an alias, not the tensor: the alias holds no autograd history, so keeping it
            # makes no reference cycle through the graph that holds the handle
            alias = Tensor._make(tensor._value, False)
            alias._version_counter = tensor._version_counter
            self.original[handle] = alias
        return handle

    def unpack(self, handle):
        """Unpack hook: the copy if the tensor was modified since it was saved, else the
        tensor itself."""
        if not self.active:
            raise AssertionError(OUT_OF_CONTEXT_MESSAGE)
        res = self.cloned.get(handle)
        if res is None:
            res = self.original.get(handle)
        if res is None:
            raise AssertionError(OUT_OF_CONTEXT_MESSAGE)
        return res

    def before_write(self, tensor):
        """Write hook: copy every live saved tensor of the memory `tensor` is about to write
        (at its current version) that has not been copied yet."""
        tids = self.sid_to_tid.get(_memory_id(tensor))
        if not tids:
            return
        for tid in tids:
            handle = self.tid_to_weakhandle.get(tid)
            if handle is None or handle in self.cloned:
                # its graph is gone (a backward freed it), or copied already
                continue
            orig = self.original.pop(handle)
            if isinstance(orig._value, np.ndarray):
                self.cloned[handle] = Tensor._make(np.array(orig._value, copy=True), False)
            else:  # (a traced value is an immutable SSA value: nothing to copy)
                self.cloned[handle] = orig


class _SavedHooks(SavedTensorHooks):
    what = "autograd.graph.allow_mutation_on_saved_tensors"


class _State(threading.local):
    def __init__(self):
        self.ctx = None  # the active context of this thread


_state = _State()


@contextlib.contextmanager
def allow_mutation_on_saved_tensors():
    """Context manager (and decorator) under which tensors saved for backward may be modified
    in place: the backward uses their values from when they were saved. Yields the context's
    tables (AllowMutationOnSavedContext); they are cleared when it exits."""
    if _state.ctx is not None:
        raise RuntimeError("allow_mutation_on_saved_tensors contexts cannot be nested")
    if saved_hooks.disabled_message is not None:  # (it installs saved-tensor hooks)
        raise RuntimeError(saved_hooks.disabled_message)
    ctx = AllowMutationOnSavedContext()
    hooks = _SavedHooks(ctx.pack, ctx.unpack)
    prev_watcher = write_hooks.state.watcher
    saved_hooks.stack.append(hooks)
    write_hooks.state.watcher = ctx.before_write
    _state.ctx, ctx.active = ctx, True
    try:
        yield ctx
    finally:
        _state.ctx, ctx.active = None, False
        write_hooks.state.watcher = prev_watcher
        if hooks in saved_hooks.stack:
            saved_hooks.stack.remove(hooks)
        ctx.clear()
