"""Python side effects a trace cannot repeat on each call: draws from `random` and
`numpy.random`, clock reads (`time.*`). A trace that makes one would freeze its result into
the program; instead it is a graph break that names the call and the user's line, so the
call runs eagerly (with the warning). The Python random states are put back when a trace is
abandoned, so the eager run draws what it would have drawn without the trace.

Calls are seen with a profile function on the tracing thread while the function runs (only
calls made by the user's code count: aotgrad's own generator and library internals do
not). Where another profiler is active, the states of `random` and `numpy.random` compared
before and after the trace catch the draws (not the clock reads).
"""
import random
import sys
import time
import types

import numpy as np

from aotgrad.runtime import dispatch
from aotgrad.tracer.reads import is_library_module

_RANDOM_FILE = random.__file__
_RNG_TYPES = (random.Random, np.random.RandomState, np.random.Generator)
_CLOCKS = frozenset(n + s for n in ("time", "perf_counter", "monotonic", "process_time",
                                      "thread_time") for s in ("", "_ns")) | \
    frozenset(("localtime", "gmtime", "ctime", "asctime", "strftime"))


def rng_states():
    return random.getstate(), np.random.get_state()


def set_rng_states(states):
    random.setstate(states[0])
    np.random.set_state(states[1])


def rng_changed(states):
    """Which global generators were drawn from since `states` (a description, or None)."""
    now = rng_states()
    if now[0] != states[0]:
        return "Python's random module"
    a, b = now[1], states[1]
    if a[2:] != b[2:] or not np.array_equal(a[1], b[1]):
        return "numpy.random's global generator (numpy.random.rand, randn, ...)"
    return None


def _watched(fn):
    """`random.random()`, `numpy.random.rand()`, `time.time()`, ... for a builtin that draws
    random numbers or reads a clock; None for the rest."""
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", "?")
    if isinstance(owner, _RNG_TYPES):
        mod = "random" if isinstance(owner, random.Random) else "numpy.random"
        return f"{mod}.{name}()"
    if owner is time and name in _CLOCKS:
        return f"time.{name}()"
    if isinstance(owner, types.ModuleType) and owner.__name__.startswith("numpy.random"):
        return f"numpy.random.{name}()"
    return None


def _user_frame(frame):
    return frame is not None and not is_library_module(frame.f_globals.get("__name__"))


def _break(what, frame):
    import linecache
    import os
    file, line = frame.f_code.co_filename, frame.f_lineno
    src = linecache.getline(file, line).strip()
    raise dispatch.GraphBreak(
        f"{os.path.basename(file)}:{line}: {what} draws a random number or reads the clock "
        f"while tracing; the compiled program would repeat the first value on every call" +
        (f"  [`{src}`]" if src else ""))


def _profile(frame, event, arg):
    if event == "c_call":
        what = _watched(arg)
        if what is not None and _user_frame(frame):
            _break(what, frame)
    elif event == "call" and frame.f_code.co_filename == _RANDOM_FILE:
        caller = frame.f_back
        if caller is not None and caller.f_code.co_filename != _RANDOM_FILE and \
                _user_frame(caller):
            _break(f"random.{frame.f_code.co_name}()", caller)


# names whose use in the code a trace reaches turns the watch on (a profile function slows
# tracing down about 3x, so it runs only where the code may draw or read a clock)
_SUSPECT_NAMES = frozenset((
    "random", "time", "randint", "randrange", "choice", "choices", "shuffle",
    "sample", "uniform", "gauss", "normalvariate", "getrandbits", "rand", "randn",
    "random_sample", "integers", "normal", "permutation", "default_rng", "RandomState",
    "Random", "betavariate", "expovariate", "triangular", "binomial", "poisson")) | _CLOCKS


def may_draw(names):
    """Whether code using these names may call a random or clock function."""
    return not _SUSPECT_NAMES.isdisjoint(names)


class watch:
    """While tracing: a call to a watched function from user code is a graph break. Off
    (`enabled` False) where the code reached names none of them; the states of the global
    generators compared after the trace still catch draws from them."""

    def __init__(self, enabled=True):
        self.enabled = enabled

    def __enter__(self):
        self.active = self.enabled and sys.getprofile() is None
        if self.active:
            sys.setprofile(_profile)
        return self

    def __exit__(self, *exc):
        if self.active:
            sys.setprofile(None)


class unwatched:
    """Inside, calls are not watched (code whose result the trace may keep: a function marked
    with `aotgrad.compiler.assume_constant_result`); the watch, if any, after."""

    def __enter__(self):
        self.prev = sys.getprofile()
        if self.prev is _profile:
            sys.setprofile(None)
        return self

    def __exit__(self, *exc):
        if self.prev is _profile:
            sys.setprofile(_profile)
