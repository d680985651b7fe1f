"""The two loop structures of a symbolic program's kernel whose work depends on a symbol.

A static program gives a kernel parallel loops (run in parts on threads, codegen.parts) when
its work (the elements of its loop domain) reaches emit_base.PAR_MIN, and serial loops
below: the choice changes the loop nest itself (a column sum in row blocks or in column
chunks, a collapsed nest), not only how the loops run.
A symbolic program cannot make that choice once from the traced sizes: a transformer traced
at a short sequence would run its long sequences on one thread. So such a kernel is emitted
twice, as a static program of a small and of a large size would emit it, and the driver
picks one per call by the work at that call's sizes (codegen.executor): every size runs the
kernel that a static program of that size runs, and gets the same numbers (up to the
order LLVM vectorises a row sum in: on some CPUs it groups the adds differently in a loop
whose length is a constant, a last-bit difference).

Like a static program, a symbolic one compiles up front only the variant its traced sizes
run. The other is compiled on the first call that needs it (in the background with tiered
compilation, codegen.tiers) and that call runs the compiled variant meanwhile, when both
take the same arguments; else both are compiled up front.
"""
import dataclasses
import math

from aotgrad.codegen.emit_base import PAR_MIN, KernelSpec
from aotgrad.codegen.emitter import emit_kernel
from aotgrad.ir.symbolic import SymInt, hint, source


@dataclasses.dataclass(eq=False)
class SmallVariant:
    """The range-loop variant of a kernel: it runs at the calls whose `work` is below
    PAR_MIN elements (the kernel's other variant, with parallel loops, at the others)."""
    spec: KernelSpec
    helpers: set       # the approximation helpers its module needs
    work: SymInt       # the kernel's elements of work, a polynomial of the symbols

    def runs_at_hint(self):
        """Does this variant run at the traced sizes?"""
        return hint(self.work) < PAR_MIN

    def runs_source(self):
        """Python source of the driver's test that this variant runs (symbols as locals)."""
        return f"{source(self.work)} < {PAR_MIN}"


def emit_variants(scheduler, kt, helpers):
    """(the KernelSpec of kernel `kt`, its SmallVariant or None). Without a symbol in its
    work, a kernel is emitted once, as in a static program. Else the spec has parallel loops
    and the SmallVariant serial ones; None when both come out the same (no loop of the
    kernel can run in parallel). `helpers` receives the helpers the spec needs."""
    work = math.prod(kt.domain) if kt.domain else 1
    if not isinstance(work, SymInt):
        return emit_kernel(scheduler, kt, helpers), None
    big_helpers, small_helpers = set(), set()
    spec = emit_kernel(scheduler, kt, big_helpers, parallel=True)
    small = emit_kernel(scheduler, kt, small_helpers, parallel=False)
    if not spec.parallel or small.body == spec.body:
        helpers |= small_helpers
        return small, None
    helpers |= big_helpers
    return spec, SmallVariant(small, small_helpers, work)


def same_arguments(a, b):
    """Do kernel specs a and b take the same arguments (so that one can stand in for the
    other in a driver's call)?"""
    def key(spec):
        return [(x.kind, x.var, tuple(map(str, x.shape or ())), str(x.value), x.dtype)
                for x in spec.args]
    return key(a) == key(b)
