"""Source-level inlining of the float32 approximations (codegen.approx) into kernel bodies.

Kernels get the approximations' statements pasted in rather than calls to `_ijit`
functions: numba's inline="always" re-translates and re-types the callee at every call
site, a large share of a cold program's compile time, and the pasted text gives the same
IR. Locals are renamed per call site; a helper calling another helper is expanded in turn
(helpers nest a few levels deep, whatever the program). The pasted text then goes through
codegen.text_cse, which shares what two pasted helpers compute alike.
"""
import ast
import copy
import functools
import re

from aotgrad.codegen.approx import APPROXIMATED, HELPERS
from aotgrad.codegen.text_cse import shared_subexpressions

INLINED = APPROXIMATED + ("_tanh_small",)
_CALL_LINE = re.compile(r"^(\s*)(\w+) = (\w+)\((.*)\)$")


@functools.lru_cache(maxsize=None)
def _helper_ast(name):
    """(parameter names, body statements, locals) of helper `name`."""
    src = next(s for n, (_, s) in HELPERS.items() if f"def {name}(" in s)
    fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and
              n.name == name)
    params = [a.arg for a in fn.args.args]
    local = set(params) | {t.id for st in fn.body for t in ast.walk(st)
                           if isinstance(t, ast.Name) and isinstance(t.ctx, ast.Store)}
    return params, fn.body, frozenset(local)


class _Rename(ast.NodeTransformer):
    """Locals get the call site's prefix, and each reassignment a name of its own (`p`,
    `p_1`, ...: every pasted value keeps its name, so equal values can be shared)."""

    def __init__(self, prefix, local, params):
        self.prefix, self.local, self.version = prefix, local, {}
        self.seen = set(params)       # names assigned so far (parameters count)

    def _name(self, name):
        k = self.version.get(name, 0)
        return self.prefix + name + (f"_{k}" if k else "")

    def visit_Name(self, node):
        if node.id in self.local:
            return ast.copy_location(ast.Name(self._name(node.id), node.ctx), node)
        return node

    def statement(self, st):
        """`st` renamed: loads read the current versions, then a reassigned store gets a new one."""
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and \
                isinstance(st.targets[0], ast.Name) and st.targets[0].id in self.local:
            name = st.targets[0].id
            st.value = self.visit(st.value)
            if name in self.seen:
                self.version[name] = self.version.get(name, 0) + 1
            self.seen.add(name)
            st.targets = [ast.Name(self._name(name), ast.Store())]
            return st
        return self.visit(st)


class _Inliner:
    def __init__(self):
        self.n = 0

    def expand(self, name, target, arg, ind, out):
        """Append to `out` the lines computing `target = name(arg)` (arg: source text)."""
        self.n += 1
        params, body, local = _helper_ast(name)
        pre = f"_{name.strip('_')}{self.n}_"
        out.append(f"{ind}{pre}{params[0]} = {arg}")
        ren = _Rename(pre, local, params)
        for st in body:
            st = ren.statement(copy.deepcopy(st))
            if isinstance(st, ast.Return):
                st = ast.Assign([ast.Name(target, ast.Store())], st.value)
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
                continue                                   # a docstring
            self.hoist(st, ind, out)
            out.append(ind + ast.unparse(ast.fix_missing_locations(st)))

    def hoist(self, st, ind, out):
        """Expand each call of an inlined helper inside `st` into a local of its own."""
        for node in ast.walk(st):
            for field, value in ast.iter_fields(node):
                if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and \
                        value.func.id in INLINED:
                    self.hoist(value, ind, out)
                    self.n += 1
                    tmp = f"_v{self.n}"
                    self.expand(value.func.id, tmp, ast.unparse(value.args[0]), ind, out)
                    setattr(node, field, ast.Name(tmp, ast.Load()))


def inline_helpers(lines):
    """Kernel source lines with each `t = helper(arg)` line of an approximation replaced
    by the helper's statements, then common subexpressions shared (`shared_subexpressions`)."""
    out, inl = [], _Inliner()
    for line in lines:
        m = _CALL_LINE.match(line)
        if m and m.group(3) in INLINED:
            inl.expand(m.group(3), m.group(2), m.group(4), m.group(1), out)
        else:
            out.append(line)
    return shared_subexpressions(out)
