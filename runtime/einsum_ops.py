"""einsum: Einstein summation over string equations ("ij,jk->ik", "...", implicit output)
or PyTorch's sublist form, decomposed into diagonals, sums, transposes, broadcast products
and dot_general contractions, so it compiles and differentiates through existing prims.

Operands are contracted left to right. A subscript of size 1 in one operand broadcasts
against the same subscript in another (PyTorch's rule); dims covered by an ellipsis
broadcast like numpy's, and are summed when the output names no ellipsis.

>>> import aotgrad
>>> from aotgrad.runtime.einsum_ops import einsum
>>> einsum("ij,j->i", aotgrad.ones(2, 3), aotgrad.tensor([1., 2., 3.])).tolist()
[6.0, 6.0]
"""
import string

from aotgrad.runtime import tprims as tp
from aotgrad.runtime.sizes import hint
from aotgrad.runtime.diag_ops import diagonal
from aotgrad.runtime.op_base import op
from aotgrad.runtime.tensor import Tensor

_LETTERS = string.ascii_lowercase + string.ascii_uppercase


class _Ell:
    """The label of the i-th dim covered by an ellipsis (counted from the left of the
    widest ellipsis); sorts before every letter in an implicit output."""
    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i

    def __eq__(self, other):
        return isinstance(other, _Ell) and other.i == self.i

    def __hash__(self):
        return hash(("...", self.i))


def _sublist_equation(args):
    """einsum(op0, [0, 1], op1, [1, 2], [0, 2]) -> ("ab,bc->ac", [op0, op1])."""
    def term(sub):
        out = []
        for s in sub:
            if s is Ellipsis:
                out.append("...")
            elif isinstance(s, int) and 0 <= s < len(_LETTERS):
                out.append(_LETTERS[s])
            else:
                raise RuntimeError(f"subscript in sublist must be in range [0, 52), "
                                 f"got {s!r}")
        return "".join(out)
    has_out = len(args) % 2 == 1
    ops_ = list(args[0:len(args) - has_out:2])
    terms = [term(s) for s in args[1:len(args) - has_out:2]]
    eq = ",".join(terms)
    return (eq + "->" + term(args[-1]) if has_out else eq), ops_


def _parse_term(term, where):
    labels, i = [], 0
    while i < len(term):
        if term.startswith("...", i):
            if "..." in labels:
                raise RuntimeError(f"found more than one ellipsis ('...') in {where}")
            labels.append("...")
            i += 3
        elif term[i] in _LETTERS:
            labels.append(term[i])
            i += 1
        else:
            raise RuntimeError(f"invalid subscript given at index {i} in {where}: "
                             f"{term[i]!r} (subscripts must be letters in [a-zA-Z])")
    return labels


def _expand_ellipsis(labels, ndim, n_ell, k):
    if "..." not in labels:
        if len(labels) != ndim:
            raise RuntimeError(f"the number of subscripts in the equation "
                               f"({len(labels)}) does not match the number of dimensions "
                               f"({ndim}) for operand {k} and no ellipsis was given")
        return labels
    own = ndim - (len(labels) - 1)
    if own < 0:
        raise RuntimeError(f"the number of subscripts in the equation "
                           f"({len(labels) - 1}) is more than the number of dimensions "
                           f"({ndim}) for operand {k}")
    at = labels.index("...")
    return labels[:at] + [_Ell(n_ell - own + j) for j in range(own)] + labels[at + 1:]


@op("einsum")
def einsum(*args):
    """einsum(equation, *operands), einsum(equation, [operands]) or the sublist form
    einsum(op0, sublist0, op1, sublist1, ..., [output_sublist])."""
    if not args:
        raise TypeError("must specify the equation string and at least one operand")
    if isinstance(args[0], str):
        equation, operands = args[0], list(args[1:])
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = list(operands[0])
    else:
        equation, operands = _sublist_equation(args)
    if not operands:
        raise RuntimeError("must provide at least one operand")
    for k, t in enumerate(operands):
        if not isinstance(t, Tensor):
            raise TypeError(f"operand {k} must be a Tensor, got {type(t).__name__}")
        if t.dtype is not operands[0].dtype:
            raise RuntimeError(f"expected all operands to have the same dtype, got "
                               f"{operands[0].dtype.name} for operand 0 and {t.dtype.name} "
                               f"for operand {k}")
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise RuntimeError(f"more operands were provided than specified in the "
                         f"equation" if len(operands) > len(terms) else
                         f"fewer operands were provided than specified in the "
                         f"equation")
    parsed = [_parse_term(t, f"operand {k}") for k, t in enumerate(terms)]
    n_ell = max([t.ndim - (len(p) - 1) for t, p in zip(operands, parsed) if "..." in p] or [0])
    labels = [_expand_ellipsis(p, t.ndim, n_ell, k)
              for k, (t, p) in enumerate(zip(operands, parsed))]
    out = _output_labels(arrow, rhs, parsed, labels, n_ell)
    sizes = _label_sizes(operands, labels)
    terms = [_prepare(t, lab, sizes) for t, lab in zip(operands, labels)]
    terms = [_sum_unique(t, lab, out, terms[:k] + terms[k + 1:])
             for k, (t, lab) in enumerate(terms)]
    res, lab = terms[0]
    for k in range(1, len(terms)):
        keep = set(out).union(*(set(lb) for _, lb in terms[k + 1:]))
        res, lab = _combine(res, lab, *terms[k], keep, sizes)
    rest = [i for i, lb in enumerate(lab) if lb not in out]
    if rest:
        res = tp.reduce_sum(res, dims=tuple(rest))
        lab = [lb for lb in lab if lb in out]
    perm = tuple(lab.index(lb) for lb in out)
    if perm != tuple(range(len(perm))):
        return tp.transpose(res, perm=perm)
    return res if res is not operands[0] else tp.reshape(res, shape=tuple(res.shape))


def _output_labels(arrow, rhs, parsed, labels, n_ell):
    ell = [_Ell(j) for j in range(n_ell)]
    if arrow:
        p = _parse_term(rhs, "the output")
        seen = set()
        for lb in p:
            if lb in seen:
                raise RuntimeError(f"output subscript {lb} appears more than once in "
                                 f"the output")
            seen.add(lb)
            if lb != "..." and not any(lb in q for q in parsed):
                raise RuntimeError(f"output subscript {lb} does not appear in the "
                                 f"equation for any input operand")
        if "..." in p:
            at = p.index("...")
            return p[:at] + ell + p[at + 1:]
        return p
    counts = {}
    for q in parsed:
        for lb in q:
            if lb != "...":
                counts[lb] = counts.get(lb, 0) + 1
    return ell + sorted(lb for lb, c in counts.items() if c == 1)


def _label_sizes(operands, labels):
    sizes = {}
    for k, (t, lab) in enumerate(zip(operands, labels)):
        for lb, n in zip(lab, t.shape):
            m = sizes.get(lb, 1)
            if n != 1 and m != 1 and n != m:
                what = "dimension covered by the ellipsis" if isinstance(lb, _Ell) else \
                    f"subscript {lb}"
                raise RuntimeError(f"operands do not broadcast: "
                                   f"{what} has size {n} for operand "
                                   f"{k}, which does not broadcast with size {m}")
            sizes[lb] = max(m, n) if 0 not in (m, n) else 0
    return sizes


def _prepare(t, lab, sizes):
    """Diagonals for repeated subscripts; size-1 dims that broadcast against a larger one
    dropped (summed: they hold one element)."""
    lab = list(lab)
    while len(set(lab)) != len(lab):
        lb = next(x for x in lab if lab.count(x) > 1)
        i = lab.index(lb)
        j = lab.index(lb, i + 1)
        if t.shape[i] != t.shape[j]:
            raise RuntimeError(f"subscript {lb} is repeated for operand but the "
                               f"sizes don't match, {hint(t.shape[i])} != {hint(t.shape[j])}")
        t = diagonal(t, 0, i, j)
        lab = [x for k, x in enumerate(lab) if k not in (i, j)] + [lb]
    drop = [i for i, lb in enumerate(lab) if t.shape[i] == 1 and sizes[lb] != 1]
    if drop:
        t = tp.reshape(t, shape=tuple(n for i, n in enumerate(t.shape) if i not in drop))
        lab = [lb for i, lb in enumerate(lab) if i not in drop]
    return t, lab


def _sum_unique(t, lab, out, others):
    """Sum the subscripts no other operand and not the output names."""
    other = set().union(*(set(lb) for _, lb in others)) if others else set()
    dims = tuple(i for i, lb in enumerate(lab) if lb not in out and lb not in other)
    if len(others) == 0 or not dims:
        return t, lab
    return tp.reduce_sum(t, dims=dims), [lb for i, lb in enumerate(lab) if i not in dims]


def _combine(a, la, b, lb, keep, sizes):
    """The product of two terms, summed over the shared subscripts not kept: a broadcast
    multiply when nothing is summed, else one dot_general (kept shared subscripts batch)."""
    shared = [x for x in la if x in lb]
    contract = [x for x in shared if x not in keep]
    if not contract:
        union = la + [x for x in lb if x not in la]
        shape = tuple(sizes[x] for x in union)
        order = sorted(range(len(lb)), key=lambda i: union.index(lb[i]))
        if order != list(range(len(lb))):
            b = tp.transpose(b, perm=tuple(order))
        a = tp.broadcast_in_dim(a, shape=shape, dims=tuple(range(len(la))))
        b = tp.broadcast_in_dim(b, shape=shape, dims=tuple(sorted(union.index(x) for x in lb)))
        return tp.mul(a, b), union
    batch = [x for x in shared if x in keep]
    r = tp.dot_general(a, b, contract=(tuple(la.index(x) for x in contract),
                                       tuple(lb.index(x) for x in contract)),
                       batch=(tuple(la.index(x) for x in batch),
                              tuple(lb.index(x) for x in batch)))
    free_a = [x for x in la if x not in shared]
    free_b = [x for x in lb if x not in shared]
    return r, batch + free_a + free_b
