"""The user's list of globals that a weights-only load may build (PyTorch's
`torch.serialization.add_safe_globals` / `safe_globals`).

An entry is an object (a class or function, matched by its `__module__` and `__qualname__`)
or a pair `(object, "module.name")` naming where the pickle finds it."""
import contextlib
import threading

_state = threading.local()


def _entries():
    if not hasattr(_state, "entries"):
        _state.entries = []
    return _state.entries


def add_safe_globals(safe_globals):
    """Allow these globals in `aotgrad.load(..., weights_only=True)`."""
    _entries().extend(safe_globals)


def get_safe_globals():
    """The globals added by `add_safe_globals` (and `safe_globals` blocks now active)."""
    return list(_entries())


def clear_safe_globals():
    _entries().clear()


@contextlib.contextmanager
def safe_globals(safe_globals):
    """`with aotgrad.serialization.safe_globals([MyConfig]): aotgrad.load(f)`: allowed
    within the block only."""
    entries = _entries()
    n = len(entries)
    entries.extend(safe_globals)
    try:
        yield
    finally:
        del entries[n:]


def lookup(module, name):
    """The allowed object the pickle names `module.name`, or None."""
    full = f"{module}.{name}"
    for entry in _entries():
        if isinstance(entry, tuple):
            obj, qualified = entry
            if qualified == full:
                return obj
        elif f"{getattr(entry, '__module__', '')}.{getattr(entry, '__qualname__', '')}" == full:
            return entry
    return None
