"""What a trace can read besides its arguments, found by walking from the function.

The tracer cannot see attribute loads, so it over-approximates them by the names the code
uses: from the function's globals and closure cells (and a compiled module, and objects
passed as arguments), it follows attributes and dict entries whose names or constant keys
appear in the code reached (the function, helpers it names, methods of the objects it
reaches, modules' forward), every entry of a module's parameter/buffer/submodule slots and
every item of a list or tuple. What it finds serves three ends:

- guards: the identity of each object on the path to a tensor the trace lifted (a rebound
  `o.w`, `d["w"]`, `self.fc` or global makes the program trace again), and the value of
  each plain Python value read by name (`self.cfg.scale`, a global float, a tuple);
- rollback: a snapshot of every dict, list and object `__dict__` reached, restored when a
  trace is abandoned (a graph break), so that state created while tracing (optimizer
  moments, `state["step"]`, attributes set in `forward`) never becomes real;
- a check that the function does not change a plain Python value it can reach (a counter
  incremented per call), which the compiled program could not repeat.

Limits: objects with `__slots__` and no `__dict__`, numpy arrays, and state reached only
through calls the walk does not follow (library functions, properties) are not guarded.
"""
import collections
import random
import sys
import types

import numpy as np

from aotgrad.ir.core import is_aotgrad_module
from aotgrad.runtime.tensor import Tensor

_PLAIN_SCALARS = (bool, int, float, complex, str, bytes, type(None), np.generic)
_MAX_NODES = 20000       # objects visited per walk
_MAX_ITEMS = 10000       # entries of one dict or list looked at
_MAX_DEPTH = 10
_LIBRARIES = ("numpy", "numba", "networkx", "scipy", "torch", "llvmlite", "sklearn")
_MISSING = object()


def _is_plain(v, depth=0):
    """A value the trace may have specialised to: a number, string, None, or a short
    tuple/list of them."""
    if isinstance(v, _PLAIN_SCALARS):
        return True
    if type(v) in (tuple, list) and len(v) <= 64 and depth < 3:
        return all(_is_plain(x, depth + 1) for x in v)
    return False


def _frozen(v):
    return list(v) if type(v) is list else v


def same_value(a, b):
    """The guard's comparison of a plain value: same type and equal (NaN equals NaN)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    try:
        eq = a == b
        if isinstance(eq, np.ndarray):
            return False
        return bool(eq) or (a != a and b != b)
    except Exception:
        return False


CONSTANT_RESULT = "_aotgrad_constant_result"  # set on a function whose result the trace bakes in


def is_library_module(name):
    """Code of this module is not the user's: the walk does not follow its functions."""
    if not name:
        return False
    top = name.split(".")[0]
    if is_aotgrad_module(name):
        return True
    if top == "aotgrad":  # its tests, examples, benchmarks
        return False
    return top in _LIBRARIES or top in getattr(sys, "stdlib_module_names", ()) or \
        top == "builtins"


class Hop:
    """One step of a path: `container[key]` (a dict, a list, an object's __dict__, a class
    __dict__), or a closure cell (key None); `value` is what it held during the walk."""
    __slots__ = ("container", "key", "value", "path", "parent", "by_name")

    def __init__(self, container, key, value, path, parent, by_name):
        self.container, self.key, self.value = container, key, value
        self.path, self.parent, self.by_name = path, parent, by_name


def read_hop(container, key):
    """What `container[key]` holds now (_MISSING where nothing)."""
    if key is None:  # a closure cell
        try:
            return container.cell_contents
        except ValueError:
            return _MISSING
    if type(container) is list:
        return container[key] if key < len(container) else _MISSING
    try:
        return container.get(key, _MISSING)
    except TypeError:  # an unhashable key can no longer be found
        return _MISSING


class StateWalk:
    """The result of one walk: hops (parents before children), the plain values read by name
    (hop indices), the tensors found (id -> hop indices), and the mutable containers reached
    with a snapshot of each."""

    def __init__(self):
        self.hops, self.values, self.tensors = [], [], {}
        self.snapshots = []   # (container, copy of its items)
        self.roots = []       # objects the paths start from (kept alive: their id is a guard)
        self.rngs = []        # (random generator reached, path, its state)

    # ---- rollback -----------------------------------------------------------------------
    def rollback(self):
        """Put every container reached back as it was (an abandoned trace's state)."""
        for c, snap in self.snapshots:
            if type(c) is list or isinstance(c, list):
                if len(c) != len(snap) or any(a is not b for a, b in zip(c, snap)):
                    c[:] = snap
            elif len(c) != len(snap) or any(c.get(k, _MISSING) is not v
                                            for k, v in snap.items()):
                c.clear()  # (its own methods: an OrderedDict keeps an order of its own)
                c.update(snap)

    def drawn_rngs(self):
        """Paths of the random generators reached whose state changed since the walk."""
        return [path for g, path, st in self.rngs if not _same_state(_rng_state(g), st)]

    def restore_rngs(self):
        for g, _, st in self.rngs:
            _set_rng_state(g, st)

    def changed_values(self):
        """Paths of plain values read by name whose value changed since the walk."""
        out = []
        for i in self.values:
            h = self.hops[i]
            now = read_hop(h.container, h.key)
            # (a list that now holds tensors the function made: an escape, which the
            # runtime makes concrete, and which traces again on the next call)
            if self._chain_holds(h.parent) and not same_value(now, h.value) and \
                    (now is _MISSING or _is_plain(now)):
                out.append(h.path)
        return out

    def _chain_holds(self, i):
        while i is not None:
            h = self.hops[i]
            if h.container is not None and read_hop(h.container, h.key) is not h.value:
                return False
            i = h.parent
        return True

    # ---- guards -------------------------------------------------------------------------
    def guards(self, lifted):
        """[(container, key, expected, is_value, path)] for the lifted tensors found (every
        path to each that ends in a name the code uses, else the first), and the plain values
        read by name, with the identity of each object on the way; parents first."""
        need = set()
        for t in lifted:
            hops = self.tensors.get(id(t), ())
            named = [i for i in hops if self.hops[i].by_name]
            for i in (named or list(hops)[:1]):
                need.add(i)
        need.update(self.values)
        closed = set()
        for i in need:
            while i is not None and i not in closed:
                closed.add(i)
                i = self.hops[i].parent
        value_set = set(self.values)
        return [(h.container, h.key, _frozen(h.value) if i in value_set else h.value,
                 i in value_set, h.path)
                for i, h in ((i, self.hops[i]) for i in sorted(closed))
                if h.container is not None]


    def hook_guards(self):
        """Guards (as `guards`') on the hook lists of the tensors reached that have had hooks
        (a hook removed since changes what a trace can capture)."""
        out = []
        for hops in self.tensors.values():
            h = self.hops[next(iter(hops))]
            d = getattr(h.value, "__dict__", {})
            for attr in ("_hooks", "_post_acc_hooks"):
                if attr in d:
                    out.append((d, attr, list(d[attr]), True, f"{h.path}.{attr}"))
        return out


def walk(fn, arg_leaves=(), arg_names=None):
    """Walk from fn (its globals, closure, the module it is, objects passed as arguments,
    named by `arg_names(i)`). The names the code uses grow as code is found; the walk
    repeats until they settle."""
    names, codes = set(), set()
    for _ in range(4):
        before = len(names)
        result = _walk_once(fn, arg_leaves, names, codes, arg_names)
        if len(names) == before:
            break
    result.names = names  # the names the code reached uses
    return result


def _add_code(code, names, codes):
    if id(code) in codes:
        return
    codes.add(id(code))
    names.update(code.co_names)
    for c in code.co_consts:
        if isinstance(c, (str, int)) and not isinstance(c, bool):
            names.add(c)
        elif isinstance(c, types.CodeType):
            _add_code(c, names, codes)
        elif isinstance(c, tuple):
            names.update(x for x in c if isinstance(x, str))


def _walk_once(fn, arg_leaves, names, codes, arg_names):
    w = StateWalk()
    queue = collections.deque()
    seen = set()
    n_nodes = [0]

    def edge(container, key, value, path, parent, by_name, read):
        """container[key] holds value: record a hop; plain values read by name are
        guarded, tensors are noted, other objects are visited later."""
        if isinstance(value, Tensor):
            w.hops.append(Hop(container, key, value, path, parent, by_name))
            w.tensors.setdefault(id(value), []).append(len(w.hops) - 1)
            return
        if _is_plain(value):
            if read:  # (a list as it is now: it may change in place)
                w.hops.append(Hop(container, key, _frozen(value), path, parent, by_name))
                if type(value) is list:
                    w.snapshots.append((value, list(value)))
                w.values.append(len(w.hops) - 1)
            return
        if isinstance(value, _RNGS):  # a generator the function may draw from
            if id(value) not in seen:
                seen.add(id(value))
                w.rngs.append((value, path, _rng_state(value)))
            return
        if id(value) in seen or isinstance(value, (np.ndarray, type(len))) or \
                n_nodes[0] >= _MAX_NODES:
            return
        seen.add(id(value))
        n_nodes[0] += 1
        w.hops.append(Hop(container, key, value, path, parent, by_name))
        queue.append((value, len(w.hops) - 1, path))

    def function(f):
        code = getattr(f, "__code__", None)
        if code is None or is_library_module(getattr(f, "__module__", None)) or \
                getattr(f, CONSTANT_RESULT, False):  # (what it reads is no state of the program)
            return
        _add_code(code, names, codes)
        g = getattr(f, "__globals__", None)
        if g is not None:
            for name in code.co_names:
                if name in g:
                    edge(g, name, g[name], name, None, True, True)
        for name, cell in zip(code.co_freevars, getattr(f, "__closure__", None) or ()):
            try:
                edge(cell, None, cell.cell_contents, name, None, True, True)
            except ValueError:  # an empty cell
                pass

    def methods(obj):
        """Code of the methods of obj's class the reached code names (and forward)."""
        for klass in type(obj).__mro__:
            if klass is object or klass.__module__ == "builtins":
                continue
            for name, m in list(klass.__dict__.items()):
                if name != "forward" and name not in names:
                    continue
                if isinstance(m, (staticmethod, classmethod)):
                    m = m.__func__
                if isinstance(m, types.FunctionType):
                    _add_code(m.__code__, names, codes)

    # roots
    if isinstance(fn, types.MethodType):
        edge(None, None, fn.__self__, "self", None, True, False)
        w.roots.append(fn.__self__)
        fn = fn.__func__
    if isinstance(fn, types.FunctionType):
        function(fn)
    else:
        edge(None, None, fn, "self", None, True, False)
        w.roots.append(fn)
    for i, x in enumerate(arg_leaves):
        if not isinstance(x, Tensor) and not _is_plain(x) and x is not None:
            w.roots.append(x)
            edge(None, None, x, arg_names(i) if arg_names else f"argument {i}", None, True,
                 False)

    def visit(obj, idx, path):
        depth = path.count(".") + path.count("[")
        if depth > _MAX_DEPTH:
            return
        if isinstance(obj, types.ModuleType):
            if is_library_module(obj.__name__):
                return
            d = obj.__dict__
            for name in names:
                if isinstance(name, str) and name in d:
                    edge(d, name, d[name], f"{path}.{name}", idx, True, True)
            return
        if isinstance(obj, types.MethodType):
            edge(None, None, obj.__self__, path + ".__self__", None, False, False)
            obj = obj.__func__
        if isinstance(obj, types.FunctionType):
            function(obj)
            return
        if isinstance(obj, type):
            if is_library_module(obj.__module__):
                return
            d = obj.__dict__
            for name in names:
                if isinstance(name, str) and name in d:
                    edge(d, name, d[name], f"{path}.{name}", idx, True, True)
            return
        if isinstance(obj, dict):
            w.snapshots.append((obj, dict(obj)))
            # an entry mirrored by a tensor the program reads at call time (an optimizer
            # group's lr) is not baked into the trace: no value guard
            mirrored = getattr(obj, "__dict__", {}).get("_mirrors") or ()
            for k, (key, v) in enumerate(list(obj.items())):
                if k >= _MAX_ITEMS:
                    break
                named = _hashable_in(key, names) and key not in mirrored
                if named or isinstance(key, Tensor) or not _is_plain(v):
                    edge(obj, key, v, f"{path}[{_key_text(key)}]", idx, named, named)
        elif isinstance(obj, list):
            w.snapshots.append((obj, list(obj)))
            for k, v in enumerate(obj[:_MAX_ITEMS]):
                edge(obj, k, v, f"{path}[{k}]", idx, False, False)
        elif isinstance(obj, tuple):
            for k, v in enumerate(obj[:_MAX_ITEMS]):
                if not _is_plain(v):
                    edge(None, None, v, f"{path}[{k}]", idx, False, False)
        d = getattr(obj, "__dict__", None)
        if type(d) is not dict:
            return
        methods(obj)
        w.snapshots.append((d, dict(d)))
        slots = hasattr(obj, "named_modules")  # a module: its parameter/buffer/module slots
        for name, v in list(d.items()):
            if slots and name in ("_parameters", "_buffers", "_modules"):
                w.snapshots.append((v, dict(v)))
                for k, m in list(v.items()):
                    edge(v, k, m, f"{path}.{k}", idx, k in names, False)
            elif name in names or name == "__wrapped__":  # (a wrapper: what it calls)
                edge(d, name, v, f"{path}.{name}", idx, True, name != "__wrapped__")

    while queue:
        obj, idx, path = queue.popleft()
        try:
            visit(obj, idx, path)
        except Exception:  # an object whose state cannot be read plainly: not followed
            pass
    return w


_RNGS = (np.random.Generator, np.random.RandomState, random.Random)


def _rng_state(g):
    if isinstance(g, np.random.Generator):
        return g.bit_generator.state
    return g.get_state() if isinstance(g, np.random.RandomState) else g.getstate()


def _set_rng_state(g, st):
    if isinstance(g, np.random.Generator):
        g.bit_generator.state = st
    elif isinstance(g, np.random.RandomState):
        g.set_state(st)
    else:
        g.setstate(st)


def _same_state(a, b):
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def _key_text(key):
    """A dict key in a path: its repr if short and plain, else its type (a tensor key's repr
    would format its values)."""
    if isinstance(key, (str, int, float, bool, type(None))):
        return repr(key)
    return f"<{type(key).__name__} key>"


def _hashable_in(key, names):
    try:
        return key in names
    except TypeError:
        return False

