"""Common subexpressions of emitted kernel text, shared by value numbering.

tanh(x) and its derivative (GELU's backward has both), or logistic and its complement,
paste the same exponential, reciprocal and polynomial twice under different local names
(codegen.inline). LLVM does not merge them, so equal right-hand sides are merged here.
"""
import ast
import itertools
import re

# Value numbering runs over each run of plain assignments at one indentation; a repeated
# right-hand side becomes `name = first` (a register copy). A store into an array keeps the
# run going but forgets every value that came from a load (the store may have changed it);
# any other statement, or a call of anything but a pure scalar function, ends the run.
_ASSIGN_LINE = re.compile(r"^(\s*)([A-Za-z_]\w*) = (.+)$")
_PURE_CALLS = frozenset({"abs", "np.floor", "np.sqrt", "np.int32", "np.int64", "np.float32",
                         "np.float64", "_i2f", "_f2i", "_fma", "_radd", "_rmul", "_maxnum", "_minnum",
                         "_imin", "_imax", "max", "min"})


def _pure(tree):
    """Only arithmetic, comparisons, selects, loads and calls of pure scalar functions."""
    return all(ast.unparse(node.func) in _PURE_CALLS for node in ast.walk(tree)
               if isinstance(node, ast.Call))


class _Numbered(ast.NodeTransformer):
    """Names replaced by the value numbers they hold (names not assigned in the run stay)."""

    def __init__(self, number):
        self.number = number

    def visit_Name(self, node):
        return ast.Name(f"%{self.number[node.id]}" if node.id in self.number else node.id,
                        ast.Load())


def shared_subexpressions(lines):
    """`lines` with each assignment whose value an earlier one of the same run (same
    indentation, only plain assignments of pure expressions and stores into arrays
    between) already holds turned into a copy of it."""
    out, indent, number, holder, loads = [], None, {}, {}, set()
    fresh = itertools.count()
    for line in lines:
        if indent is not None and len(line) > len(indent) and line.startswith(indent) and \
                not line[len(indent)].isspace() and _is_store(line.strip()):
            for k in loads:                  # memory changed: loads are not known any more
                holder.pop(k, None)
            loads = set()
            out.append(line)
            continue
        m = _ASSIGN_LINE.match(line)
        tree = None
        if m:
            try:
                tree = ast.parse(m.group(3), mode="eval")
            except SyntaxError:
                tree = None
        if tree is None or m.group(1) != indent or not _pure(tree):
            number, holder = {}, {}          # a new run: nothing known
            indent = m.group(1) if tree is not None and _pure(tree) else None
        if indent is None:
            out.append(line)
            continue
        name = m.group(2)
        key = ast.dump(_Numbered(number).visit(tree))
        for k in [k for k, h in holder.items() if h == name]:
            del holder[k]                    # `name` is about to hold something else
        if key in holder:
            out.append(f"{indent}{name} = {holder[key]}")
            number[name] = number[holder[key]]
            continue
        out.append(line)
        if isinstance(tree.body, ast.Name) and tree.body.id in number:
            number[name] = number[tree.body.id]          # a copy: the same value
            continue
        number[name] = next(fresh)
        holder[key] = name
        if any(isinstance(n, ast.Subscript) for n in ast.walk(tree)):
            loads.add(key)
    return out


def _is_store(text):
    """`a[...] = pure` or `a[...] op= pure`: a store into an array, which ends no run but
    makes the run forget the values it loaded."""
    try:
        st = ast.parse(text).body
    except SyntaxError:
        return False
    if len(st) != 1 or not isinstance(st[0], (ast.Assign, ast.AugAssign)):
        return False
    targets = st[0].targets if isinstance(st[0], ast.Assign) else [st[0].target]
    return all(isinstance(t, ast.Subscript) for t in targets) and _pure(st[0].value)
