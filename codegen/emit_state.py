"""The mutable state of emitting one kernel, shared explicitly by the parts of the emitter
(values, reductions, loop nests) instead of living as attributes of one mixin object."""
from dataclasses import dataclass, field

import numba

from aotgrad.codegen.approx import APPROXIMATED
from aotgrad.codegen.emit_args import KernelArgs
from aotgrad.codegen.emit_base import ParallelForm, _Scope, np_name


@dataclass(eq=False)
class EmitState:
    kt: object                   # the scheduler's Kernel being emitted
    helpers: set                 # names of the approximation helpers the module needs
    args: KernelArgs = field(default_factory=KernelArgs)
    tmp: int = 0                 # counter behind `fresh`
    checks: list = field(default_factory=list)   # index-check messages (error flag `gerr`)
    # the collapsed domain (set by ValueEmitter.collapse)
    cdom: list = None            # collapsed loop sizes
    cpart: list = None           # per collapsed dim: 0 a row (outer) dim, 1 a reduced one
    dimmap: dict = None          # domain dim -> collapsed dim
    refmap: dict = None          # access key -> (collapsed shape, collapsed index)
    # the loop structure (set by KernelEmitter.build)
    parallel: bool = False
    form: ParallelForm = ParallelForm.PARTS
    parallel_loops: list = field(default_factory=list)   # their range texts, in order
    # PARTS: buffers that the parts of a parallel loop share (partials combined after it):
    # (name, shape source, ir dtype), in the workspace the caller passes
    shared: list = field(default_factory=list)
    # a symbolic kernel's prange variant traced below PAR_MIN elements of work: how much
    # its symbolic sizes grow up to the smallest call it runs at (codegen.size_variants),
    # so that its size heuristics decide there, as a static program of that size does
    growth: float = 1.0
    outer: list = None           # collapsed dims the row index decodes to
    inner: list = None           # collapsed dims looped inside a row
    innermost: int = None
    loopvar: dict = field(default_factory=dict)   # collapsed dim -> its index expression
    # where lines go: the kernel's top level, the current row, the views hoisted above the
    # innermost loop and the innermost loop's body
    top_scope: _Scope = None
    row_scope: _Scope = None
    view_scope: _Scope = None
    inner_scope: _Scope = None
    slice_mode: bool = False     # the innermost loop indexes a slice `lo:hi` of each row
    jvar: str = "j"              # the innermost loop's variable
    # reductions
    red_vals: dict = field(default_factory=dict)       # reduction output -> result name
    red_vals_acc: dict = field(default_factory=dict)   # reduction -> accumulator name
    rowdep: set = field(default_factory=set)  # names only known after a reduction
    # a row kernel's scratch buffers (ValueEmitter.plan_row_cache)
    cache_buf: dict = field(default_factory=dict)      # value -> its row buffer's name
    cache_ready: set = field(default_factory=set)      # values stored by an earlier pass
    cache_pending: set = field(default_factory=set)    # values the current pass stores
    pass_active: bool = False    # emitting a column pass that uses the scratch buffers
    # vectorisable approximations (exp, tanh, ...) emitted so far: a loop whose body added
    # one is a long chain of dependent operations (`interleave_hint`)
    approx_uses: int = 0

    red_outs: frozenset = field(init=False)   # the reductions' outputs: fixed while emitting

    def __post_init__(self):
        self.red_outs = frozenset(r.outputs[0] for r in self.kt.reds)

    def fresh(self, p="t"):
        """A new local name with prefix p."""
        self.tmp += 1
        return f"{p}{self.tmp}"

    def need(self, h):
        self.helpers.add(h)
        if h in APPROXIMATED:
            self.approx_uses += 1

    def interleave_hint(self, approx_before):
        """The line that ends an innermost loop body to have LLVM interleave it
        (prelude.INTERLEAVE vectors per iteration), or None: loops that call an
        approximation, in kernels large enough for threads (a small kernel gains nothing
        for the compile time). LLVM interleaves a loop with a reduction by itself, as many
        vectors as its register estimate allows, which varies with the body: a sum then
        adds in a different order in two kernels that compute the same values (a symbolic
        program's variant and the static program of that size). The fixed count fixes the
        order."""
        if not self.parallel or self.approx_uses == approx_before:
            return None
        return "_interleave()"

    def rng(self, n):
        """The loop range over n: prange in a parallel kernel, or its part's share of it
        (ParallelForm.PARTS). Called for the top-level parallel loops only."""
        if not self.parallel:
            return f"range({n})"
        if self.form is ParallelForm.PRANGE:
            text = f"prange({n})"
        else:
            text = f"range(({n}) * part // nparts, ({n}) * (part + 1) // nparts)"
        self.parallel_loops.append(text)
        return text

    def partials(self, body, name, shape, dtype):
        """Allocate `name` (shape source `shape`, an ir dtype; zeroed), written by the
        iterations of a parallel loop and read after it: in ParallelForm.PARTS the parts
        share it, a view of the caller's workspace (KernelEmitter.build places it)."""
        if self.parallel and self.form is ParallelForm.PARTS:
            self.shared.append((name, shape, dtype))
        else:
            body.append(f"    {name} = _zeros({shape}, {np_name(dtype)})")

    def thread_rows(self):
        """(rows, index source) of a per-thread scratch buffer: one row per numba thread
        indexed by its thread id, or in PARTS one row (each part call allocates its own)."""
        if self.parallel and self.form is ParallelForm.PRANGE:
            return max(1, numba.config.NUMBA_NUM_THREADS), "numba.get_thread_id()"
        return 1, "0"
