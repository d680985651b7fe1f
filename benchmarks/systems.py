"""The systems a workload runs on, each as `prepare(workload, arrays) -> Step`.

A Step is called with no arguments and runs one forward + backward (gradients of the loss
with respect to the workload's `grad` inputs), returning an opaque result that is complete
when the call returns (JAX results are blocked on). `step.readout(result)` turns it into
`(loss: float, {name: np.ndarray grad})` for the cross-check.

    step = SYSTEMS["aotgrad_compiled"].prepare(WORKLOADS["W5"], arrays)
    loss, grads = step.readout(step())

torch and jax are optional: `available()` says why a system cannot run here.
"""
import importlib


class Step:
    def __init__(self, run, readout, info=None, settle=None):
        self.run, self.readout = run, readout
        self.info = info or (lambda: None)  # after a call: what the system compiled (or None)
        # after the first call: wait for compiles the system finishes in the background
        self.settle = settle or (lambda: None)

    def __call__(self):
        return self.run()


class System:
    """A column of the table. `modules` are imported lazily; a missing one makes the
    system unavailable (reported, never an error)."""

    def __init__(self, name, label, modules, prepare, uses_numpy):
        self.name, self.label, self.modules = name, label, modules
        self._prepare, self.uses_numpy = prepare, uses_numpy

    def available(self):
        for m in self.modules:
            try:
                importlib.import_module(m)
            except Exception as e:  # ImportError, or a broken install
                return False, f"{m} not importable: {type(e).__name__}: {e}"
        return True, ""

    def versions(self):
        out = {}
        for m in self.modules:
            mod = importlib.import_module(m)
            out[m] = getattr(mod, "__version__", "?")
        return out

    def prepare(self, wl, arrays):
        return self._prepare(wl, arrays)


def _torchlike(T, wl, arrays, wrap):
    """Tensors for aotgrad or torch (same API); grads are set to None before every step,
    like `optimizer.zero_grad(set_to_none=True)`."""
    tensors = []
    leaves = []
    for name in wl.names:
        t = T.from_numpy(arrays[name].copy())
        if name in wl.grad:
            t.requires_grad_(True)
            leaves.append((name, t))
        tensors.append(t)
    fn = wrap(lambda *a: wl.fn(T, *a))
    info = settle = None
    if hasattr(fn, "ir"):  # aotgrad.compile: module cache hits, compile time per program
        def info():
            return _program_info(fn.ir(*tensors).schedule_report())

        def settle():   # cold kernels start on numpy; their compiles finish in the background
            from aotgrad.codegen import wait_for_parallel_kernels
            wait_for_parallel_kernels(timeout=600)

    def run():
        for _, t in leaves:
            t.grad = None
        loss = fn(*tensors)
        loss.backward()
        return loss

    def readout(loss):
        return float(loss.item()), {n: (None if t.grad is None else t.grad.detach().numpy())
                                    for n, t in leaves}
    return Step(run, readout, info, settle)


def _program_info(report):
    """{forward|backward|inference: {cache, compile_s, steps, kernels}} from the program's
    schedule report ("# ---- forward ----" then "program ...: N steps, K kernels ...
    [disk|new|...], compile 0.12s")."""
    import re
    out, which = {}, None
    for line in report.splitlines():
        m = re.match(r"# ---- (\w+) ----", line)
        if m:
            which = m.group(1)
            continue
        m = re.match(r"program .*?: (\d+) steps, (\d+) kernels.*\[(\w+)\], compile ([\d.]+)s",
                     line)
        if m and which:
            out[which] = {"steps": int(m.group(1)), "kernels": int(m.group(2)),
                          "cache": m.group(3), "compile_s": float(m.group(4))}
    return out or None


def _aotgrad_eager(wl, arrays):
    import aotgrad
    return _torchlike(aotgrad, wl, arrays, lambda f: f)


def _aotgrad_compiled(wl, arrays):
    import aotgrad
    return _torchlike(aotgrad, wl, arrays, lambda f: aotgrad.compile(f, backend="numba"))


def _torch_eager(wl, arrays):
    import torch
    return _torchlike(torch, wl, arrays, lambda f: f)


def _torch_compile(wl, arrays):
    import torch
    return _torchlike(torch, wl, arrays, lambda f: torch.compile(f))


def _jax_jit(wl, arrays):
    import jax
    import jax.numpy as jnp
    import numpy as np
    args = []
    for name in wl.names:
        a = arrays[name]
        args.append(jnp.asarray(a.astype(np.int32) if a.dtype == np.int64 else a))
    argnums = tuple(wl.names.index(n) for n in wl.grad)
    f = jax.jit(jax.value_and_grad(wl.jax_fn, argnums=argnums))

    def run():
        return jax.block_until_ready(f(*args))

    def readout(out):
        loss, grads = out
        return float(loss), {n: np.asarray(g) for n, g in zip(wl.grad, grads)}
    return Step(run, readout)


SYSTEMS = {s.name: s for s in [
    System("aotgrad_eager", "aotgrad eager", ["aotgrad"], _aotgrad_eager, True),
    System("aotgrad_compiled", "aotgrad compiled", ["aotgrad", "numba"], _aotgrad_compiled,
           True),
    System("torch_eager", "PyTorch eager", ["torch"], _torch_eager, False),
    System("torch_compile", "torch.compile", ["torch"], _torch_compile, False),
    System("jax_jit", "jax.jit(value_and_grad)", ["jax", "jaxlib"], _jax_jit, False),
]}
REFERENCE = "aotgrad_eager"
