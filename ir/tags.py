"""Facts about a prim, held as tags on the Prim itself (`Tag.VIEW in prims.reshape.tags`).

A module that needs to know which prims are views, reductions, ... asks the prim's tags
instead of keeping its own set of prim names, so a new prim states its facts once, where it
is defined (ir/prims.py, ir/linalg_prims.py).

Every prim has exactly one *kind* tag (`Prim.kind`: what sort of computation it is, which
the partitioner's cost model and report use); any number of the other tags state facts.
Tags are `str` enums: `"pointwise" in prim.tags` holds too.
"""
import enum


class Tag(enum.StrEnum):
    # ---- kinds: exactly one per prim
    POINTWISE = "pointwise"      # one output element from the same element of each input
    REDUCTION = "reduction"      # reductions and scans along dims
    SHAPE = "shape"              # moves, repeats or pads elements without arithmetic
    CONTRACTION = "contraction"  # dot_general (a BLAS call)
    RANDOM = "random"            # draws from a seed input
    INDEX = "index"              # takes or computes integer positions
    CREATION = "creation"        # makes an array from its params alone
    CHECK = "check"              # passes its input through once its values pass a check
    LINALG = "linalg"            # a LAPACK call over a stack of matrices
    # exchanges values with the other processes of a group (a communication library call
    # the program makes, in the order of the graph: never moved, merged or recomputed)
    COMMUNICATION = "communication"

    # ---- facts
    # Each output element is an input element at a re-mapped index (no arithmetic): tracing
    # replays it on an eager layout probe, and kernels read it through index arithmetic.
    VIEW = "view"
    # The reference implementation may return a numpy view of its first input (eagerly the
    # result shares memory with it).
    SHARES_MEMORY = "shares_memory"
    # A compiled program may hand out its first input's buffer as the result (a view, or a
    # pass-through), so a result made by it may alias a graph input.
    MAY_ALIAS_INPUT = "may_alias_input"
    # Reduces the dims listed in the param `dims` away.
    AXIS_REDUCTION = "axis_reduction"
    # Reduces the one dim of the param `dim` away, to the index of its extreme value.
    ARG_REDUCTION = "arg_reduction"
    # Reads or writes at positions taken from an integer input; kernels check their bounds.
    BOUNDS_CHECKED = "bounds_checked"
    # Has no derivative: its output is integer/bool, or constant in its inputs.
    NON_DIFFERENTIABLE = "non_differentiable"


KINDS = frozenset({Tag.POINTWISE, Tag.REDUCTION, Tag.SHAPE, Tag.CONTRACTION, Tag.RANDOM,
                   Tag.INDEX, Tag.CREATION, Tag.CHECK, Tag.LINALG, Tag.COMMUNICATION})


def reduced_dims(prim, params):
    """The input dims a reduction prim removes (a tuple), or None when `prim` removes none:
    argmax/argmin name one dim (`dim`), the other reductions several (`dims`)."""
    if Tag.AXIS_REDUCTION in prim.tags:
        return tuple(params["dims"])
    if Tag.ARG_REDUCTION in prim.tags:
        return (params["dim"],)
    return None
