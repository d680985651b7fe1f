"""Executor plan: a flat list of steps over buffers planned ahead of time.

Every materialised value gets a slot. Intermediates live in a workspace allocated once
(on the first call) and shared between values whose lifetimes do not overlap; kernel
arguments that view the workspace are built once, so a call only patches in the graph's
inputs and freshly allocated outputs. One Python call runs the whole program.
"""
import math

import numpy as np

from aotgrad.codegen.scheduler import Kernel


def _dot_plan(node):
    a, b = node.inputs
    (lc, rc), (lb, rb) = node.params["contract"], node.params.get("batch", ((), ()))
    af = [i for i in range(a.ndim) if i not in lc and i not in lb]
    bf = [i for i in range(b.ndim) if i not in rc and i not in rb]
    pa, pb = list(lb) + af + list(lc), list(rb) + list(rc) + bf
    B = [a.shape[i] for i in lb]
    M = math.prod(a.shape[i] for i in af)
    K = math.prod(a.shape[i] for i in lc)
    N = math.prod(b.shape[i] for i in bf)
    sa = tuple(([math.prod(B)] if B else []) + [M, K])
    sb = tuple(([math.prod(B)] if B else []) + [K, N])
    so = tuple(([math.prod(B)] if B else []) + [M, N])
    pa = None if pa == list(range(a.ndim)) else tuple(pa)
    pb = None if pb == list(range(b.ndim)) else tuple(pb)
    return pa, sa, pb, sb, so


class Plan:
    def __init__(self, graph, schedule, kernel_fns, reuse_outputs=False):
        self.graph, self.schedule = graph, schedule
        self.kernel_fns = kernel_fns     # step -> (fn, KernelSpec)
        self.reuse_outputs = reuse_outputs
        self.slot = {}
        for v in graph.inputs:
            self._slot(v)
        self.alias = {}                  # view var -> base var (shares memory)
        self.buffers = []                # (dtype, size) per workspace buffer
        self.buf_of = {}                 # var -> workspace buffer index
        self._plan()
        self._ready = False

    def _slot(self, v):
        if v not in self.slot:
            self.slot[v] = len(self.slot)
        return self.slot[v]

    def _base(self, v):
        while v in self.alias:
            v = self.alias[v]
        return v

    def _plan(self):
        g, steps = self.graph, self.schedule.steps
        outs = set(g.outputs)
        ins = set(g.inputs)
        for st in steps:
            if st.kind == "view":
                self.alias[st.outputs[0]] = st.inputs[0]
        last = {}
        for i, st in enumerate(steps):
            for v in st.inputs:
                last[self._base(v)] = i
        for v in g.outputs:
            last[self._base(v)] = len(steps)
        free = {}
        self.out_alloc = []   # vars allocated fresh per call
        self.copy_outputs = []
        for i, st in enumerate(steps):
            for v in st.outputs:
                self._slot(v)
                if st.kind in ("ref", "view"):
                    continue
                if v in outs and not self.reuse_outputs:
                    self.out_alloc.append(v)
                    continue
                key = (v.dtype.np.str, math.prod(v.shape))
                pool = free.get(key)
                if pool:
                    b = pool.pop()
                else:
                    b = len(self.buffers)
                    self.buffers.append(key)
                self.buf_of[v] = b
            for v in set(st.inputs) | set(st.outputs):
                bv = self._base(v)
                if last.get(bv, -1) <= i and bv in self.buf_of and bv not in outs:
                    free.setdefault((bv.dtype.np.str, math.prod(bv.shape)), []).append(
                        self.buf_of[bv])
                    last[bv] = 1 << 60   # release once
        for v in g.outputs:
            if v in self.alias and self._base(v) not in ins and \
                    self._base(v) not in self.out_alloc:
                self.copy_outputs.append(v)
        self.out_slots = [self.slot.get(v) if v in self.slot else self._slot(v)
                          for v in g.outputs]
        self.in_slots = [self.slot[v] for v in g.inputs]
        self.in_avals = [(v.shape, v.dtype.np) for v in g.inputs]

    def workspace_bytes(self):
        return sum(np.dtype(d).itemsize * n for d, n in self.buffers)

    # -- building the runnable steps -------------------------------------------------------
    def prepare(self):
        ws = [np.empty(n, dtype=np.dtype(d)) for d, n in self.buffers]
        self.env0 = [None] * len(self.slot)
        fixed_vars = {}
        for v, b in self.buf_of.items():
            arr = ws[b][:math.prod(v.shape)].reshape(v.shape)
            self.env0[self.slot[v]] = arr
            fixed_vars[v] = arr
        self.out_alloc_spec = [(self.slot[v], v.shape, v.dtype.np) for v in self.out_alloc]
        self.runs = [self._make(st, fixed_vars) for st in self.schedule.steps]
        self.copy_slots = [self.slot[v] for v in self.copy_outputs]
        self._ready = True

    def _make(self, st, fixed):
        slot = self.slot
        if isinstance(st, Kernel):
            fn, spec = self.kernel_fns[st]
            args, patches = [], []
            for pos, a in enumerate(spec.args):
                if a.kind == "size":
                    args.append(a.value)
                elif a.kind == "const":
                    args.append(a.dtype.np.type(a.value))
                else:
                    shp = a.shape
                    if a.var in fixed:
                        args.append(fixed[a.var].reshape(shp))
                    else:
                        args.append(None)
                        patches.append((pos, slot[a.var], shp))
            if spec.checks:
                names = sorted({n.prim.name for n in st.nodes if n.prim.name in
                                ("gather", "scatter_add")})
                msg = f"{'/'.join(names) or 'gather'}(): {'; '.join(spec.checks)}"
                fn = self._checked(fn, msg)
            if not patches:
                def run(env, fn=fn, args=tuple(args)):
                    fn(*args)
            else:
                def run(env, fn=fn, args=args, patches=tuple(patches)):
                    a = list(args)
                    for pos, s, shp in patches:
                        a[pos] = env[s].reshape(shp)
                    fn(*a)
            return run
        n = st.nodes[0]
        if st.kind == "dot":
            pa, sa, pb, sb, so = _dot_plan(n)
            ia, ib, io = slot[n.inputs[0]], slot[n.inputs[1]], slot[n.outputs[0]]
            mm = np.matmul

            def run(env):
                a, b = env[ia], env[ib]
                if pa is not None:
                    a = a.transpose(pa)
                if pb is not None:
                    b = b.transpose(pb)
                mm(a.reshape(sa), b.reshape(sb), out=env[io].reshape(so))
            return run
        if st.kind == "view":
            i, o, shp = slot[n.inputs[0]], slot[n.outputs[0]], n.params["shape"]

            def run(env):
                env[o] = env[i].reshape(shp)
            return run
        # reference step: the prim's numpy implementation
        impl, params = n.prim.impl, n.params
        ins = [slot[v] for v in n.inputs]
        outs = [slot[v] for v in n.outputs]
        multi = n.prim.multiple_results

        def run(env):
            r = impl(*[env[s] for s in ins], **params)
            if not multi:
                r = (r,)
            for s, x in zip(outs, r):
                env[s] = np.ascontiguousarray(x)
        return run

    @staticmethod
    def _checked(fn, msg):
        def call(*args):
            if fn(*args):
                raise IndexError(msg)
        return call

    def __call__(self, *arrays):
        if not self._ready:
            self.prepare()
        if len(arrays) != len(self.in_slots):
            raise TypeError(f"{self.graph.name}: expected {len(self.in_slots)} arrays, "
                            f"got {len(arrays)}")
        env = list(self.env0)
        for s, a, (shape, d) in zip(self.in_slots, arrays, self.in_avals):
            if type(a) is not np.ndarray or a.dtype != d or a.shape != shape or \
                    not (a.flags.c_contiguous and a.flags.writeable):
                a = self._normalise(a, shape, d)
            env[s] = a
        for s, shape, d in self.out_alloc_spec:
            env[s] = np.empty(shape, d)
        for run in self.runs:
            run(env)
        for s in self.copy_slots:
            env[s] = env[s].copy()
        return [env[s] for s in self.out_slots]

    def _normalise(self, a, shape, d):
        a = np.asarray(a)
        if a.shape != tuple(shape):
            raise ValueError(f"{self.graph.name}: input of shape {a.shape} where the program "
                             f"was compiled for {tuple(shape)}")
        if a.dtype != d:
            raise TypeError(f"{self.graph.name}: input of dtype {a.dtype} where the program "
                            f"was compiled for {d}")
        return np.array(a, order="C", copy=True) if not a.flags.writeable or \
            not a.flags.c_contiguous else a
