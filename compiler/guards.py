"""Guards: the cache key of a call (shapes, dtypes, requires_grad, grad mode, Python values,
which arguments alias, the module's train/eval mode), the state guards a trace recorded
(lifted tensors, the objects on the way to them, plain values read by name, .grad state),
and the words for why a call missed every cached program."""
import builtins
import dataclasses

import numpy as np

from aotgrad.runtime.grad_mode import state as _mode
from aotgrad.runtime.tensor import Tensor
from aotgrad.tracer.reads import same_value
from aotgrad.tracer.trace_result import Role

MISS = object()  # what a specialised call returns when its guards do not hold


def _guard_key(leaves, module, treedef=None):
    key = [_mode.grad_enabled, treedef]
    counters, n_tensors, strided = set(), 0, False
    for x in leaves:
        if isinstance(x, Tensor):
            key.append(_tensor_key(x))
            counters.add(id(x._version_counter))
            n_tensors += 1
            strided = strided or _strided(x)
        elif isinstance(x, (int, float, bool, str, type(None))):
            key.append(("S", type(x).__name__, x))
        else:
            key.append(("O", type(x).__name__, id(x)))
    if len(counters) != n_tensors or strided:
        key.append(alias_pattern(leaves))
    return _with_module(key, module)


def _strided(x):
    """Whether tensor x's array is laid out other than C-contiguously."""
    v = x._value
    return type(v) is np.ndarray and not v.flags.c_contiguous


def alias_pattern(leaves):
    """("A", ((i, j, same), ...), ((i, strides), ...)): tensor leaf i shares memory with the
    earlier leaf j (views share their base's version counter): the same tensor (`same`), or
    a view / the base / a sibling view; and the strides of each tensor leaf that is not
    C-contiguous. Part of the guard key only where arguments alias or one is strided, so
    the common call pays one set; a program traced for one pattern never runs on another,
    except one that never read the arguments' layout (`layout_free_program`)."""
    first, pairs, layouts = {}, [], []
    for i, x in enumerate(leaves):
        if isinstance(x, Tensor):
            j = first.setdefault(id(x._version_counter), i)
            if j != i:
                pairs.append((i, j, x is leaves[j]))
            if _strided(x):
                layouts.append((i, x._value.strides))
    return ("A", tuple(pairs), tuple(layouts))


def layout_free_program(cache, key):
    """For a guard key with strided arguments: the program cached for the same call with
    its arguments C-contiguous (the key without their strides), when its trace never read
    an argument's layout; else None."""
    at = next((k for k in range(2, len(key)) if type(key[k]) is tuple and len(key[k]) == 3
               and key[k][0] == "A"), None)
    if at is None or not key[at][2]:
        return None
    pairs = key[at][1]
    plain = key[:at] + ((("A", pairs, ()),) if pairs else ()) + key[at + 1:]
    prog = cache.get(plain)
    if prog is None or not hasattr(prog, "trace") or prog.trace.layout_read:
        return None
    return prog


def _tensor_key(x):
    v = x._value
    # (dtype.name would be slow); an inference tensor is its own key: eagerly it cannot be
    # saved for backward, and the trace of a normal tensor would save it silently
    return ("T", v.shape, v.dtype, x._requires_grad, x._inference)


def _with_module(key, module):
    if module is not None and hasattr(module, "modules"):
        key.append(tuple(m.training for m in module.modules()))
    return tuple(key)


def _tensor_args_key(args, module):
    """_guard_key(args, module, len(args)) when every argument is a tensor, else None."""
    key = [_mode.grad_enabled, len(args)]
    counters, strided = set(), False
    for x in args:
        if not isinstance(x, Tensor):
            return None
        key.append(_tensor_key(x))
        counters.add(id(x._version_counter))
        strided = strided or _strided(x)
    if len(counters) != len(args) or strided:
        key.append(alias_pattern(args))
    return _with_module(key, module)



_RAISE_LIMIT = ("raise cache_size_limit (now {limit}: aotgrad.compiler.cache_size_limit, or "
                "the compiled function's cache_size_limit attribute)")
_SIZE_REMEDY = ("If this size changes from call to call (a sequence growing by one token per "
                "call, a last batch of another size), pad it to a fixed length, or "
                + _RAISE_LIMIT + ", or compile with dynamic=True (or aotgrad.mark_dynamic the "
                "argument's dim): one program then serves every size.")


def remedy(change, limit):
    """The advice after a recompile or cache_size_limit warning, for what changed: sizes have
    dynamic shapes; a dtype, a Python value or a mode only the limit."""
    if change is None or change.what == "size":
        return _SIZE_REMEDY.format(limit=limit)
    return f"If the {change.what} changes from call to call, " + \
        _RAISE_LIMIT.format(limit=limit) + "."


@dataclasses.dataclass(frozen=True)
class _Change:
    """Why a call missed every cached program, in words: `text` names the argument (by
    parameter name) and what changed (old -> new); `cause` is what it warns once for (the
    argument and the dimension, not the sizes); `what` changed, for the advice; `warn`: a
    recompile for this reason is worth a warning (a size, dtype or Python value; not grad
    mode, requires_grad or train/eval, which take a bounded number of programs)."""
    text: str
    cause: tuple
    what: str
    warn: bool = True


def recompile_cause(cache, key, fn, args, kwargs):
    """The difference between `key` and the cached key it is closest to, as a _Change (None
    when no cached key has the same structure)."""
    best = None
    for old in reversed(list(cache)):  # the latest of equally close keys
        if len(old) != len(key) or old[1] != key[1]:
            continue
        diffs = [i for i, (a, b) in enumerate(zip(old, key)) if a != b]
        if best is None or len(diffs) < len(best[1]):
            best = (old, diffs)
    if best is None or not best[1]:
        return None
    from aotgrad.tracer.arg_names import leaf_names
    old, diffs = best
    n_leaves = len(key) - 2
    names = None
    for i in diffs:
        a, b = old[i], key[i]
        if i == 0:
            return _Change(f"grad mode changed ({a} -> {b})", ("grad_mode",), "grad mode",
                           warn=False)
        if not (isinstance(a, tuple) and isinstance(b, tuple) and a and b and a[0] == b[0]
                and a[0] in ("T", "S") and i - 2 < n_leaves):
            continue
        if names is None:
            names = leaf_names(fn, args, kwargs)
        j = i - 2
        name = f"argument '{names[j]}'" if j < len(names) else f"argument {j}"
        if a[0] == "S":
            return _Change(f"{name} changed value ({a[2]!r} -> {b[2]!r}); the trace "
                           f"specialises to each Python value", (names[j], "value"), "value")
        if len(a[1]) != len(b[1]):
            return _Change(f"{name} changed its number of dimensions ({len(a[1])} -> "
                           f"{len(b[1])}: shape {tuple(a[1])} -> {tuple(b[1])})",
                           (names[j], "ndim"), "shape")
        dims = [d for d, (p, q) in enumerate(zip(a[1], b[1])) if p != q]
        if dims:
            said = ", ".join(f"dim {d} ({a[1][d]} -> {b[1][d]})" for d in dims)
            return _Change(f"{name} changed size in {said}", (names[j], tuple(dims)), "size")
        if a[2] != b[2]:
            return _Change(f"{name} changed dtype ({a[2]} -> {b[2]})", (names[j], "dtype"),
                           "dtype")
        if a[3] != b[3]:
            return _Change(f"{name} changed requires_grad ({a[3]} -> {b[3]})",
                           (names[j], "requires_grad"), "requires_grad", warn=False)
        if a[4] != b[4]:
            return _Change(f"{name} changed whether it is an inference tensor ({a[4]} -> "
                           f"{b[4]})", (names[j], "inference"), "inference flag", warn=False)
    return _Change("the module's train/eval mode or the arguments' aliasing or memory "
                   "layout changed",
                   ("other",), "mode", warn=False)



def lifted_ok(prog, leaves):
    """Lifted tensors are read at call time; their shapes/dtypes/requires_grad are guards,
    and so is the .grad state the program reads or writes, the object each place on the
    way to one holds (a parameter slot, attribute, dict entry, global, closure cell), and
    each plain Python value the trace read by name."""
    return prog.state_check(leaves)


def make_state_check(tr):
    """`check(leaves) -> bool`: lifted_ok's guards as straight-line code."""
    g = {"MISS": MISS, "same_value": same_value}
    lines = ["def check(leaves):"]
    grads = [(f"gt{i}", t, init, read) for i, (t, init, read) in enumerate(tr.grad_guards)]
    grads += [(f"leaves[{k}]", None, init, read) for k, init, read in tr.arg_grad_guards]
    for i, (t, obj, init, read) in enumerate(grads):
        if obj is not None:
            g[t] = obj
        g[f"gi{i}"] = init
        lines += [f"    if ({t}._grad is None) is not {init is None}" +
                  (f" or {t}._grad is not gi{i}" if read else "") + ":",
                  "        return False"]
    for i, (t, v, requires_grad) in enumerate(tr.lifted_guards):
        g[f"lt{i}"], g[f"ld{i}"] = t, v.dtype.np
        lines += [f"    a = lt{i}._value",
                  f"    if a.shape != {tuple(v.shape)!r} or (a.dtype is not ld{i} and "
                  f"a.dtype != ld{i}) or lt{i}.requires_grad != {bool(requires_grad)}:",
                  "        return False"]
    lines += ["    try:", "        pass"]
    for i, (where, key, expected, is_value, _) in enumerate(tr.identity_guards):
        g[f"c{i}"], g[f"k{i}"], g[f"e{i}"] = where, key, expected
        now = f"c{i}.cell_contents" if key is None else \
            f"c{i}[k{i}]" if type(where) is list else f"c{i}.get(k{i}, MISS)"
        if is_value:
            lines += [f"        v = {now}",
                      f"        if v is not e{i} and not same_value(v, e{i}):",
                      "            return False"]
        else:
            lines += [f"        if {now} is not e{i}:", "            return False"]
    lines += ["    except (ValueError, IndexError):  # an emptied cell, a shorter list",
              "        return False", "    return True"]
    exec(builtins.compile("\n".join(lines) + "\n", "<state guards>", "exec"), g)
    return g["check"]


def guard_holds(where, key, expected, is_value):
    if key is None:  # a closure cell
        try:
            now = where.cell_contents
        except ValueError:
            return False
    elif type(where) is list:
        now = where[key] if key < len(where) else MISS
    else:
        now = where.get(key, MISS)
    return now is expected or (is_value and same_value(now, expected))


def failed_guard(prog, leaves):
    """What the first state guard that fails now saw, in words (for the recompile warning)."""
    for k, init, _ in prog.trace.arg_grad_guards:
        if (leaves[k]._grad is None) is not (init is None):
            return (f"argument {k}'s .grad was {'None' if init is None else 'set'} at the trace "
                    f"and is {'set' if init is None else 'None'} now (backward() inside the "
                    f"function accumulates into a .grad that is set)")
    for where, key, expected, is_value, path in prog.trace.identity_guards:
        if not guard_holds(where, key, expected, is_value):
            if is_value:
                return f"{path} (a Python value, {expected!r} at the trace) changed"
            what = "tensor" if isinstance(expected, Tensor) else "object"
            return f"{path}: another {what} took its place since the trace"
    return None


def aliases_lifted(prog, leaves):
    """For a program that writes in place: the index of a tensor input that shares memory
    (a version counter) with a lifted tensor (a parameter, a closed-over tensor), or None.
    The trace saw them apart; a write through one would not show through the other."""
    counters = {id(t._version_counter): t for kind, t in prog.trace.roles if kind is Role.LIFTED}
    if not counters:
        return None
    for i, x in enumerate(leaves):
        if isinstance(x, Tensor) and id(x._version_counter) in counters:
            return i
    return None


@dataclasses.dataclass(eq=False)
class BreakRetry:
    """When a guard key whose trace broke (its calls run eagerly) is traced again: at once
    once a value or object the function read by name (a global flag, a module attribute)
    is not what it was at the break; else after `wait` eager calls, doubling up to
    MAX_WAIT, for causes no guard sees (a hook removed, state outside the function's
    reach). `read_guards`: guard_holds' arguments (and a path), taken at the break."""
    read_guards: list
    wait: int = 8
    calls: int = 0
    MAX_WAIT = 1024

    def due(self):
        """Called on each eager call of the key: trace it again now?"""
        self.calls += 1
        if self.calls >= self.wait:
            self.calls, self.wait = 0, min(2 * self.wait, self.MAX_WAIT)
            return True
        return not all(guard_holds(*g[:4]) for g in self.read_guards)
