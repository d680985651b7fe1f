"""The first tier of a cold kernel: its IR nodes run with numpy's reference impls.

Numba compiles a generated kernel in 0.3-1.5 s, so a cold program of tens of kernels spent
seconds compiling before its first call could run. Instead, a kernel whose machine code is
not in the cache runs as a `ReferenceKernel` first: a Python callable with the compiled
kernel's arguments that evaluates the kernel's nodes with the same numpy impls eager mode
uses and writes the results into the kernel's output buffers. Products stay on the
program's BLAS calls. The kernel is compiled in the background meanwhile (codegen.tiers)
and swapped into the driver between two calls.

A reference kernel computes what eager mode computes: its values may differ from the
compiled kernel's in the last bits (the compiled one uses vectorisable exp/tanh and sums in
blocks), as two backends of one program may.
"""
import time

import numpy as np

from aotgrad.codegen.steps import Kernel


class ReferenceKernel:
    """Callable as the compiled kernel of `spec` is (same arguments, in the same order):
    reads its "in" arrays, evaluates `step.nodes`, writes its "out" arrays; returns 0 (no
    failed index check: the reference impls raise their own errors). `seconds`: how long
    its last call took (the background compile does the kernels that cost most first)."""

    def __init__(self, step, spec):
        self.name = spec.name
        self.nodes = list(step.nodes)
        self.reads = [(i, a.var) for i, a in enumerate(spec.args) if a.kind == "in"]
        self.writes = [(i, a.var) for i, a in enumerate(spec.args) if a.kind == "out"]
        self.seconds = 0.0

    def __call__(self, *args):
        t0 = time.perf_counter()
        env = {}
        for i, v in self.reads:
            env[v] = args[i].reshape(v.shape)
        for n in self.nodes:
            outs = n.prim.impl(*[env[v] for v in n.inputs], **n.params)
            if n.prim.multiple_results:
                env.update(zip(n.outputs, outs))
            else:
                env[n.outputs[0]] = outs
        values = [(args[i], np.asarray(env[v])) for i, v in self.writes]
        # an output buffer may be an input's buffer (the plan reuses dead buffers): every
        # value that could read from an output buffer is copied before the first write
        outs = [o for o, _ in values]
        values = [(o, val.copy() if any(np.may_share_memory(val, x) for x in outs) else val)
                  for o, val in values]
        for o, val in values:
            o[...] = val.reshape(o.shape)
        self.seconds = time.perf_counter() - t0
        return 0


def reference_kernel(step, spec):
    """A ReferenceKernel for the Kernel step `step` emitted as `spec`, or None where its
    nodes read a value that is neither one of its arrays nor computed in it (then it is
    compiled up front)."""
    if not isinstance(step, Kernel):
        return None
    known = {a.var for a in spec.args if a.kind == "in"}
    for n in step.nodes:
        if any(v not in known for v in n.inputs):
            return None
        known.update(n.outputs)
    if any(a.var not in known for a in spec.args if a.kind == "out"):
        return None
    return ReferenceKernel(step, spec)
