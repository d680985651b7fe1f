"""Views and inference mode, as PyTorch's (its InferenceMode notes, CreationMeta INFERENCE_MODE):

- A view of an inference tensor is an inference tensor that records nothing: it is not
  reported as a view (`_is_view()` is False), does not require grad and has no grad_fn, in or
  out of inference mode. (It still shares its base's memory and version counter.)
- A view of a normal tensor taken inside inference mode is a normal tensor and a view; it
  records no node, yet it requires grad when its base does (a leaf without a gradient edge:
  what it is used in gets no gradient from it). Outside inference mode, modifying it in place
  under grad mode raises, and so does reading its grad_fn once its base or another view of
  the base was modified in place: the autograd graph it would need was never recorded.
"""
from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor

INPLACE_MESSAGE = (
    "A view was created in inference mode and is being modified inplace in normal mode. Given "
    "that this use case is ambiguous and error-prone, it is forbidden. You can clarify your code "
    "by moving both the view and the inplace either both inside the inference_mode block (if "
    "you don't want the inplace to be tracked) or both outside (if you want the inplace to be "
    "tracked).")

REBASED_MESSAGE = (
    "A view was created in inference mode and its base or another view of its base has been "
    "modified inplace in normal mode. Given that this use case is ambiguous and error-prone, it "
    "is forbidden. You can clarify your code by moving both the view and the inplace either "
    "both inside the inference_mode block (if you don't want the inplace to be tracked) or both "
    "outside (if you want the inplace to be tracked).")

_CREATED_AT = "_inference_view_version"  # the view's version when it was made (in __dict__)
_GRAD_FN = Tensor.__dict__["grad_fn"]    # the grad_fn slot of every tensor


class InferenceModeView(Tensor):
    """The class of a view of a tensor that requires grad taken inside inference mode (the
    one kind of tensor that requires grad without a gradient edge, and whose grad_fn read can
    fail); a Tensor in every other respect."""
    __slots__ = ()

    @property
    def grad_fn(self):
        fn = _GRAD_FN.__get__(self)
        if fn is None and self._version_counter.v != self.__dict__[_CREATED_AT]:
            raise RuntimeError(REBASED_MESSAGE)
        return fn

    @grad_fn.setter
    def grad_fn(self, fn):
        _GRAD_FN.__set__(self, fn)

    def _grad_accumulator(self):
        return None  # its requires_grad is its base's: no AccumulateGrad of its own


def note_view(out, base, root):
    """Apply the rules above to `out`, a view of `base` (whose root is `root`) just made.
    Returns True when `out` is a view of an inference tensor (no view bookkeeping wanted)."""
    if base._inference:
        out._inference = True
        _GRAD_FN.__set__(out, None)
        out.requires_grad = False
        return True
    if _mode.inference and root.requires_grad and type(out) is Tensor:
        out.__class__ = InferenceModeView
        out.__dict__[_CREATED_AT] = out._version_counter.v
        out.requires_grad = True
    return False
