"""What a schedule is made of: steps (a fused kernel, a BLAS product, a reference call, a
strided view, a value check) and the Schedule that lists them.

A *kernel* is one loop nest over a domain D. `elementwise` kernels write outputs of shape
D. `rows` kernels reduce the trailing `k` dims of D (softmax, layer norm, cross-entropy):
per row, one column pass per dependency level of its reductions, then the epilogue writes
full-domain and per-row outputs. `cols` kernels reduce leading dims (bias grads)."""
from enum import Enum
from typing import NamedTuple


class StepKind(str, Enum):
    """What a Step is (a str, so that a report or a test may name it)."""
    KERNEL = "kernel"
    DOT = "dot"
    REFERENCE = "ref"
    VIEW = "view"
    CHECK = "check"


class KernelType(str, Enum):
    """The loop structure of a kernel: see the module docstring."""
    ELEMENTWISE = "elementwise"
    ROWS = "rows"
    COLS = "cols"


class Into(NamedTuple):
    """Where a DOT step stores its result: in the buffer of `root` (a concatenation), as
    root's slice [low, low + size) along `dim` reshaped to the result's shape (a view)."""
    root: object
    dim: int
    low: int
    size: int

    def view(self, root_array, shape):
        """The result's array: a view of `root_array` (a ValueError where numpy would have
        to copy)."""
        part = root_array[(slice(None),) * self.dim + (slice(self.low, self.low + self.size),)]
        return part.reshape(tuple(shape), copy=False)


class Step:
    """One step of a program (`kind`: a StepKind; a CHECK step checks values at run time
    and its output is its input: an alias, like a view).

    nodes: the IR nodes it computes; inputs / outputs: the values it reads and stores.
    out_view: a DOT step that writes its result into a transposed view of its output
    (attention's heads going back to (batch, seq, heads, dim)): (result var, permutation).
    view_expr: a VIEW step that is a strided view of `inputs[0]` (numpy suffix text), read
    in place by BLAS. route: a REFERENCE step run by a library kernel (codegen.routes).
    into: an Into, a DOT step whose result is a slice of a concatenation's buffer."""

    def __init__(self, kind, nodes=(), outputs=()):
        self.kind, self.nodes, self.outputs = kind, list(nodes), list(outputs)
        self.inputs = []
        self.out_view = None
        self.view_expr = None
        self.route = None
        self.into = None


class Kernel(Step):
    """A fused loop nest over `domain` (see KernelType). The scheduler's analysis of its
    expressions (`Scheduler.analyse`) fills leaf_refs (the (value, index) pairs read from
    memory), node_index (value computed here -> the indices it is computed at) and
    internal_red_refs (reads of its own reductions' results); row_outputs are the outputs
    of a rows/cols kernel written once per row."""

    def __init__(self, ktype, domain, k=0):
        super().__init__(StepKind.KERNEL)
        self.ktype = ktype          # a KernelType
        self.domain = tuple(domain)
        self.k = k                  # rows: trailing reduced dims; cols: leading reduced dims
        self.reds = []              # reduction nodes computed here
        self.col_reds = []          # of those, column sums riding along a rows kernel
        self.merged_from = 1
        self.leaf_refs = []
        self.node_index = {}
        self.internal_red_refs = []
        self.row_outputs = []

    @property
    def rowshape(self):
        if self.ktype == KernelType.ROWS:
            return self.domain[:len(self.domain) - self.k]
        if self.ktype == KernelType.COLS:
            return self.domain[self.k:]
        return self.domain

    def key(self):
        return (self.ktype, self.domain, self.k)

    def describe(self):
        ops = sorted({n.prim.name for n in self.nodes})
        what = {KernelType.ELEMENTWISE: "elementwise",
                KernelType.ROWS: f"row-reduction over last {self.k} dim(s)",
                KernelType.COLS: f"column-reduction over first {self.k} dim(s)"}[self.ktype]
        return (f"{what} over {list(self.domain)}: {len(self.nodes)} nodes "
                f"({', '.join(ops)}) -> {', '.join(v.name for v in self.outputs)}")


def produced(st):
    """The values step st produces: its outputs and (a kernel's) reduction results."""
    if isinstance(st, Kernel):
        return list(st.outputs) + [r.outputs[0] for r in st.reds]
    return list(st.outputs)


def col_reds(kt):
    """Reductions over leading dims in kernel kt (all of them for a `cols` kernel)."""
    if not isinstance(kt, Kernel):
        return []
    return list(kt.reds) if kt.ktype == KernelType.COLS else list(kt.col_reds)


def col_outputs(kt):
    return {r.outputs[0] for r in col_reds(kt)}


class Schedule:
    def __init__(self, graph):
        self.graph = graph
        self.steps = []
        self.refused = []       # (what, reason)
        self.materialised = set()
