"""Concatenations traced as sums of zero pads (the gradient of `split`/`narrow`: attention's
q, k and v gradients going back into the qkv projection's gradient) as slice copies.

`split`'s VJP pads each part's gradient with zeros to the whole length and adds the pads:
`add(add(pad(dv), pad(dk)), pad(dq))`. Fused into a loop, every element of the sum read
each part at a clamped index and selected between it and the fill, a loop that did not
vectorise. When the pads tile the dim exactly (no overlap, no gap), every element of the sum
is one part's element plus zeros, which is that element `+ 0.0` (so -0.0 becomes +0.0 and
NaN stays NaN, as in the sum): each part is copied into its slice of the result by one
vectorised loop.

Only a sum that a product reads is routed (it is stored for BLAS anyway); one read by fused
loops alone stays in them. `concat_roots` finds the sums (the scheduler then makes each a
step that reads the parts), `parts` lists a root's parts and offsets, `step_lines` writes
the driver's calls. Where every part is a product's result (attention's gradients), the
products write into their slices themselves and no copy runs
(blas_layout.products_written_into_concatenations).
"""
import math

from numba import njit

from aotgrad.codegen.emit_base import PartsLayout
from aotgrad.codegen.parts import NO_WORKSPACE, PartsKernel
from aotgrad.codegen.symbols import by_size
from aotgrad.ir import prims

# elements per part from which its copy runs in parts on threads (codegen.parts)
PARALLEL_MIN = 1 << 17


def _pad_part(n):
    """(input, dim, low) of a +0.0 pad along one dim (no interior padding, no cut), else
    None. (A -0.0 fill keeps -0.0 in the sum, where the copies' + 0.0 would not.)"""
    if n.prim is not prims.pad or n.params["value"] != 0 or \
            math.copysign(1.0, n.params["value"]) < 0:
        return None
    moved = [(d, lo, hi) for d, (lo, hi, it) in enumerate(n.params["config"])
             if (lo, hi, it) != (0, 0, 0)]
    if len(moved) != 1:
        return None
    d, lo, hi = moved[0]
    if lo < 0 or hi < 0 or n.params["config"][d][2] != 0:
        return None
    return n.inputs[0], d, lo


def parts(root, producers):
    """([(part, low)] in order of low, dim) when `root` is a tree of `add`s over zero pads
    along one dim that tile it exactly; else None. Walks the tree without recursion."""
    out = root.outputs[0]
    # (symbolic sizes: the tiling must hold for every value, and outside a trace a symbolic
    # comparison is True only when it provably holds)
    if root.prim is not prims.add or not out.dtype.is_floating_point:
        return None
    found, stack, dim = [], [root], None
    while stack:
        n = stack.pop()
        if n.prim is prims.add:
            for v in n.inputs:
                p = producers.get(v)
                if p is None or tuple(v.shape) != tuple(out.shape):
                    return None
                stack.append(p)
            continue
        part = _pad_part(n)
        if part is None or n.outputs[0].dtype is not out.dtype:
            return None
        x, d, lo = part
        if dim is None:
            dim = d
        if d != dim:
            return None
        found.append((x, lo))
    found.sort(key=lambda p: p[1])
    end = 0
    for x, lo in found:
        if lo != end:
            return None
        end += x.shape[dim]
    if end != out.shape[dim] or len(found) < 2:
        return None
    return found, dim


def _tree_nodes(root, producers):
    stack, nodes = [root], []
    while stack:
        n = stack.pop()
        nodes.append(n)
        if n.prim is prims.add:
            stack.extend(producers[v] for v in n.inputs)
    return nodes


def concat_roots(graph, producers, users):
    """The roots of the concatenations in `graph` that a product reads (stored for BLAS
    anyway; a sum that only fused loops read stays in their loops): the largest such trees
    whose inner adds and pads are read by nothing else (they are then never computed)."""
    outs = set(graph.outputs)
    roots, inner = [], set()
    for n in reversed(graph.nodes):     # the outermost add of a tree first
        if n in inner or not any(u.prim is prims.dot_general
                                 for u in users.get(n.outputs[0], ())):
            continue
        if parts(n, producers) is None:
            continue
        tree = _tree_nodes(n, producers)
        if any(len(users.get(m.outputs[0], ())) != 1 or m.outputs[0] in outs
               for m in tree[1:]):
            continue
        roots.append(n)
        inner.update(tree)
    return set(roots)


def _rows(shape, dim):
    """A shape viewed as (rows before dim, elements from dim on)."""
    return math.prod(shape[:dim]), math.prod(shape[dim:])


def step_lines(node, found, dim, shaped, bind):
    """The driver's lines writing each part into its slice of the result."""
    out = node.outputs[0]
    post = math.prod(out.shape[dim + 1:])
    o = shaped(out, _rows(out.shape, dim))
    zero = bind(out.dtype.np.type(0), "_c")
    lines = []
    for x, lo in found:
        fn = by_size(math.prod(x.shape), PARALLEL_MIN, place, place_threads, bind, "_kc")
        lines.append(f"{fn}({shaped(x, _rows(x.shape, dim))}, {o}, "
                     f"{lo * post}, {zero})")
    return lines


@njit(cache=True, nogil=True, error_model="numpy")
def place_parts(phase, part, nparts, ws, src, out, off, zero):
    """`place`'s rows of share `part` of `nparts` (a kernel in parts, codegen.parts)."""
    n = src.shape[0]
    for p in range(n * part // nparts, n * (part + 1) // nparts):
        s, o = src[p], out[p, off:off + src.shape[1]]
        for i in range(s.size):
            o[i] = s[i] + zero
    return 0


place_threads = PartsKernel(place_parts, PartsLayout(loops=1, shared=False, final=False))


@njit(cache=True, nogil=True, error_model="numpy")
def place(src, out, off, zero):
    """out[p, off:off + src.shape[1]] = src[p] + zero (a +0.0 of out's dtype) for every
    row p, on the calling thread (place_parts in one part)."""
    return place_parts(1, 0, 1, NO_WORKSPACE, src, out, off, zero)
