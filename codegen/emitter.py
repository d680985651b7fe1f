"""Emitter: Python/Numba source for the kernels of a Schedule, one self-contained module.

A kernel is emitted as a function over C-contiguous arrays (inputs and outputs, reshaped by
the executor to the kernel's *collapsed* domain: adjacent dims that every access treats
alike are merged), runtime constants (`full` values, so a new value does not need new code)
and runtime sizes (so a new batch size does not need new machine code). Index arithmetic
replaces broadcast/transpose/slice/rev/unit reshape. Loops take 1-D row views (`xr = x[i]`)
so the innermost loop is unit-stride and vectorises; blocks of a `prange` index through a
slice of the block. Float32 sums accumulate in float32 within blocks of 4096 and in float64
across blocks. Row max/min use LLVM's maxnum/minnum (vectorisable) and re-check for NaN.
"""
import functools
import hashlib
import math
import re

import numpy as np

from aotgrad.codegen import approx, prelude
from aotgrad.codegen.emit_base import (PAR_MIN, KernelSpec, ParallelForm, PartsLayout, _Scope,
                                       np_name)
from aotgrad.codegen.emit_loops import LoopNestEmitter
from aotgrad.codegen.emit_reductions import ReductionEmitter
from aotgrad.codegen.emit_state import EmitState
from aotgrad.codegen.emit_values import ValueEmitter
from aotgrad.codegen.index import SymbolicSizeInKernel
from aotgrad.codegen.inline import inline_helpers
from aotgrad.codegen.steps import KernelType
from aotgrad.ir.symbolic import hint
from aotgrad.ir.tags import Tag


class KernelEmitter:
    """Emits one fused kernel: an EmitState shared by its values (ValueEmitter, here), its
    reductions (emit_reductions.ReductionEmitter) and its loop nests
    (emit_loops.LoopNestEmitter)."""

    def __init__(self, scheduler, kt, helpers, parallel=None, form=ParallelForm.PARTS):
        self.st = EmitState(kt, helpers, form=form)
        self.parallel = parallel     # None: prange loops when the traced work is large
        self.values = ValueEmitter(scheduler, self.st)
        self.reds = ReductionEmitter(self.st, self.values)
        self.loops = LoopNestEmitter(self.st, self.values, self.reds)

    def build(self):
        st, kt = self.st, self.st.kt
        st.cdom, st.cpart, st.dimmap, st.refmap = self.values.collapse()
        m = len(st.cdom)
        work = math.prod(kt.domain) if kt.domain else 1
        # a heuristic on the traced sizes; a symbolic program asks for both variants and
        # picks one per call (codegen.size_variants)
        st.parallel = hint(work) >= PAR_MIN if self.parallel is None else self.parallel
        if self.parallel and hint(work) < PAR_MIN:
            st.growth = PAR_MIN / max(1, hint(work))
        for P in range(m):
            st.args.size(st.cdom[P])
        st.loopvar = {}
        has_arg = any(Tag.ARG_REDUCTION in r.prim.tags for r in kt.reds)
        if kt.ktype == KernelType.ELEMENTWISE:
            outer = list(range(m - 1))
            inner = [m - 1]
        else:
            outer = [P for P in range(m) if st.cpart[P] == 0]
            inner = [P for P in range(m) if st.cpart[P] == 1]
        if kt.ktype == KernelType.ROWS and not inner:
            inner = []
        st.outer, st.inner = outer, inner
        st.innermost = inner[-1] if inner else None
        body = []
        st.top_scope = _Scope(body, "    ")
        st.row_scope = None
        st.red_vals = {}
        st.rowdep = set()        # names whose value is only known after a reduction
        if kt.ktype == KernelType.ELEMENTWISE and m == 1 or \
                kt.ktype == KernelType.ROWS and not outer and len(inner) == 1 and not has_arg:
            self.loops.blocked(body)
        elif kt.ktype == KernelType.ROWS and not outer and len(inner) > 1 and not has_arg and \
                st.parallel:
            self.loops.full_nest(body)
        elif kt.ktype == KernelType.COLS and len(inner) == 1 and not self.loops.rows_split(outer):
            self.loops.cols_chunked(body)
        else:
            self.loops.nest(body)
        st.parallel = bool(st.parallel_loops)
        sig = st.args.signature()
        done = "    return gerr[0]" if st.checks else "    return 0"
        lines = list(_inlined(tuple(body)))     # approximations pasted in
        parts = None
        if st.parallel and st.form is ParallelForm.PARTS:
            parts, lines = _in_phases(lines, st, done)
            sig = "phase, part, nparts, ws, " + sig
        text = [f"def KERNEL({sig}):", "    _wide()"]
        if st.checks:
            text.append("    gerr = _zeros(1, np.int64)")
        for line in lines:
            text.append(line)
            if "in prange(" in line:    # prange bodies become functions of their own: widen them
                text.append(" " * (len(line) - len(line.lstrip()) + 4) + "_wide()")
        text.append(done)
        source = "\n".join(text) + "\n"
        leaked = _SYMBOL_NAME.search(source)
        if leaked:
            raise SymbolicSizeInKernel(f"kernel text reads the symbolic size {leaked.group(0)} "
                                       f"as a literal ({kt.describe()})")
        spec = KernelSpec(kt, source, st.args.specs, st.parallel, parts)
        spec.checks = sorted(set(st.checks))
        return spec


WORKSPACE_ALIGN = 64    # bytes: each shared buffer starts a cache line of its own


def _in_phases(lines, st, done):
    """(PartsLayout, lines) of a kernel body in ParallelForm.PARTS (see PartsLayout): the
    top-level parallel loops each run in a phase of their own, after the serial code before
    them; the shared partials are views of the workspace `ws`."""
    segments, loops, current = [[]], [], None
    headers = iter(st.parallel_loops)
    expected = next(headers, None)
    for line in lines:
        top = line.startswith("    ") and not line.startswith("     ")
        if top and expected is not None and line.startswith("    for ") and \
                line.endswith(f" in {expected}:"):
            current = [line]
            loops.append(current)
            segments.append([])
            expected = next(headers, None)
        elif current is not None and not top:
            current.append(line)
        else:
            current = None
            segments[-1].append(line)
    if expected is not None or len(loops) != len(st.parallel_loops):
        raise AssertionError(f"parallel loop {expected!r} is not at the kernel's top level")
    out = list(segments[0])
    if st.shared:
        out.append("    _w0 = 0")
        for k, (name, shape, dtype) in enumerate(st.shared):
            count = " * ".join(f"({d})" for d in shape.strip("()").split(", "))
            size = f"{count} * {np.dtype(dtype.np).itemsize}"
            out.append(f"    _w{k + 1} = _w{k} + ({size} + {WORKSPACE_ALIGN - 1}) "
                       f"// {WORKSPACE_ALIGN} * {WORKSPACE_ALIGN}")
        out += ["    if phase == 0:", f"        return _w{len(st.shared)}"]
        for k, (name, shape, dtype) in enumerate(st.shared):
            out.append(f"    {name} = _view(ws, _w{k}, {shape}, {np_name(dtype)})")
    for k, loop in enumerate(loops):
        out.append(f"    if phase == {k + 1}:")
        out += ["    " + line for line in loop]
        out.append("    " + done)
        out += segments[k + 1]
    final = any(line.strip() for line in segments[-1])
    return PartsLayout(len(loops), bool(st.shared), final), out


# a symbol's name in kernel text: a size formatted as a literal (kernel locals never
# take this form); such a kernel would differ per size, so it is refused
_SYMBOL_NAME = re.compile(r"\bs\d+\b")


@functools.lru_cache(maxsize=4096)
def _inlined(body):
    """inline_helpers of a kernel body (a tuple of lines), remembered: the steps of
    an unrolled loop emit the same body many times, and pasting the approximations is the
    slowest part of emitting one."""
    return tuple(inline_helpers(list(body)))


def emit_kernel(scheduler, kt, helpers, parallel=None, form=ParallelForm.PARTS):
    """The KernelSpec of kernel `kt`; `parallel` forces its loops to be parallel (True) or
    serial (False) whatever its size; `form` says how parallel loops run."""
    return KernelEmitter(scheduler, kt, helpers, parallel, form).build()


def module_source(specs, helpers):
    """The module text: prelude, helpers, then each distinct kernel once (deduplicated)."""
    parts = [prelude.PRELUDE, approx.helper_source(helpers)]
    by_body = {}
    for s in specs:
        h = hashlib.sha1(s.body.encode()).hexdigest()[:12]
        if h not in by_body:
            name = f"k_{h}"
            by_body[h] = name
            deco = "@_pjit" if s.parallel and s.parts is None else "@_jit"
            parts.append(f"\n\n{deco}\n" + s.body.replace("def KERNEL(", f"def {name}(", 1))
        s.name = by_body[h]
    return "".join(parts)
