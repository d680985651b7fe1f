"""Global autograd switches: grad mode, inference mode and anomaly mode.

Each is a context manager and a decorator, as in torch.autograd.grad_mode.
"""
import functools
import inspect
import sys
import threading
import traceback
import warnings

from aotgrad.ir.core import is_internal_frame


class _State(threading.local):
    def __init__(self):
        self.grad_enabled = True   # whether ops record autograd nodes
        self.inference = False
        # grad mode as set inside inference mode, where nothing records whatever it says
        # (PyTorch: enable_grad() in inference_mode() makes is_grad_enabled() True only)
        self.inference_grad = False
        self.anomaly = False
        self.anomaly_check_nan = True


state = _State()


def is_grad_enabled():
    return state.grad_enabled or (state.inference and state.inference_grad)


def _set_grad(mode):
    """Set grad mode; inside inference mode only the reported mode changes."""
    if state.inference:
        state.inference_grad = mode
    else:
        state.grad_enabled = mode


def is_inference_mode_enabled():
    return state.inference


def is_anomaly_enabled():
    return state.anomaly


def is_anomaly_check_nan_enabled():
    return state.anomaly_check_nan


def forward_stack():
    """The formatted Python stack of the current call, without aotgrad's own frames at its
    end: what anomaly mode stores on each node ("Traceback of forward call ...")."""
    f = sys._getframe(1)
    while f is not None and is_internal_frame(f):
        f = f.f_back
    return traceback.format_list(traceback.extract_stack(f)) if f is not None else []


class _Mode:
    """Base: a context manager that is also a decorator (bare or called)."""

    def __call__(self, fn):
        if inspect.isclass(fn):  # as PyTorch: deprecated; constructing runs under the mode
            import warnings
            warnings.warn("Decorating classes is deprecated and will be disabled in future "
                          "versions. You should only decorate functions or methods. To preserve "
                          "the current behavior of class decoration, you can directly decorate "
                          "the `__init__` method and nothing else.", FutureWarning, stacklevel=2)
            cls = fn

            def fn(*args, **kwargs):
                return cls(*args, **kwargs)
        if inspect.isgeneratorfunction(fn):
            return self._wrap_generator(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__(*self._args):
                return fn(*args, **kwargs)
        return wrapper

    def _wrap_generator(self, fn):
        """A decorated generator runs each step (not just its creation) under the mode, and
        the caller's mode is back in force between steps, as in PyTorch."""
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            gen = fn(*args, **kwargs)
            try:
                with self.__class__(*self._args):
                    value = gen.send(None)
                while True:
                    try:
                        sent = yield value
                    except GeneratorExit:
                        with self.__class__(*self._args):
                            gen.close()
                        raise
                    except BaseException as e:
                        with self.__class__(*self._args):
                            value = gen.throw(e)
                    else:
                        with self.__class__(*self._args):
                            value = gen.send(sent)
            except StopIteration as e:
                return e.value
        return wrapper

    _args = ()


class no_grad(_Mode):
    """Disable gradient recording. `with no_grad(): ...` or `@no_grad()`."""

    def __new__(cls, fn=None):
        self = super().__new__(cls)
        if callable(fn):  # bare @no_grad
            return self(fn)
        return self

    def __init__(self, fn=None):
        pass

    def __enter__(self):
        self.prev = state.grad_enabled, state.inference_grad
        _set_grad(False)

    def __exit__(self, *exc):
        state.grad_enabled, state.inference_grad = self.prev


class enable_grad(no_grad):
    """Enable gradient recording inside a no_grad region."""

    def __enter__(self):
        self.prev = state.grad_enabled, state.inference_grad
        _set_grad(True)


class set_grad_enabled(_Mode):
    """`set_grad_enabled(False)` works as a call, a context manager and a decorator."""

    def __init__(self, mode):
        self._args = (mode,)
        self.prev = state.grad_enabled, state.inference_grad
        _set_grad(bool(mode))

    def __call__(self, fn):
        # used as a decorator: do not flip the mode now
        state.grad_enabled, state.inference_grad = self.prev
        return super().__call__(fn)

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        state.grad_enabled, state.inference_grad = self.prev


class inference_mode(_Mode):
    """Like no_grad; tensors made inside are inference tensors (`is_inference()`)."""

    def __new__(cls, mode=True):
        self = super().__new__(cls)
        if callable(mode):
            self._args = (True,)
            return self(mode)
        return self

    def __init__(self, mode=True):
        self._args = (mode,) if not callable(mode) else (True,)
        self.mode = bool(self._args[0])

    def __enter__(self):
        self.prev = (state.grad_enabled, state.inference, state.inference_grad)
        if self.mode:
            state.grad_enabled, state.inference, state.inference_grad = False, True, False
        else:  # like PyTorch, inference_mode(False) also turns grad mode on
            state.grad_enabled, state.inference = True, False

    def __exit__(self, *exc):
        state.grad_enabled, state.inference, state.inference_grad = self.prev


class detect_anomaly(_Mode):
    """Record the forward stack of every node; report it when a backward fails, and raise
    when a backward produces NaN (with check_nan=True)."""

    def __init__(self, check_nan=True):
        self._args = (check_nan,)
        self.check_nan = check_nan
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime "
                      "and should only be enabled for debugging.", stacklevel=2)

    def __enter__(self):
        self.prev = (state.anomaly, state.anomaly_check_nan)
        state.anomaly, state.anomaly_check_nan = True, self.check_nan

    def __exit__(self, *exc):
        state.anomaly, state.anomaly_check_nan = self.prev


class set_detect_anomaly(_Mode):
    """`set_detect_anomaly(True)` turns anomaly mode on (as a call, a context manager or a
    decorator); `check_nan=False` keeps the stacks but skips the NaN check."""

    def __init__(self, mode, check_nan=True):
        self._args = (mode, check_nan)
        self.prev = (state.anomaly, state.anomaly_check_nan)
        state.anomaly, state.anomaly_check_nan = bool(mode), check_nan

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        state.anomaly, state.anomaly_check_nan = self.prev
