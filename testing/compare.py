"""compare_with_eager: run a function eagerly and compiled, compare outputs and gradients, and
on a mismatch bisect the compiled program down to the first kernel that goes wrong."""
import copy
import random

import numpy as np

from aotgrad.runtime.tensor import Tensor
from aotgrad.testing.close import assert_close


class CompiledPathNotRun(AssertionError):
    """compare_with_eager's compiled call ran the function eagerly (a graph break, the cache
    size limit, saved-tensor hooks), so it compared eager with eager."""


def _is_module(fn):
    return hasattr(fn, "named_parameters")


def _copy_tensor(t, memo):
    c = memo.get(id(t))
    if c is None:
        leaf = Tensor._make(np.array(t._value, copy=True), t.requires_grad and t.is_leaf)
        if t.requires_grad and not t.is_leaf:  # a non-leaf: a leaf of its own, then history
            leaf.requires_grad = True
            c = leaf.clone()
            c._compare_leaf = leaf
        else:
            c = leaf
        memo[id(t)] = c
    return c


def _copy_args(x, memo):
    """A copy of the arguments: new tensors with copied arrays (the same tensor passed twice
    stays one tensor), containers rebuilt, other objects shared."""
    if isinstance(x, Tensor):
        return _copy_tensor(x, memo)
    if isinstance(x, list):
        return [_copy_args(v, memo) for v in x]
    if isinstance(x, tuple):
        return type(x)(*[_copy_args(v, memo) for v in x]) if hasattr(x, "_fields") else \
            tuple(_copy_args(v, memo) for v in x)
    if isinstance(x, dict):
        return {k: _copy_args(v, memo) for k, v in x.items()}
    return x


def _tensors(x):
    from aotgrad.tracer.pytree import flatten
    return [t for t in flatten(x)[0] if isinstance(t, Tensor)]


def _grad_leaf(t):
    return getattr(t, "_compare_leaf", t)


class _Run:
    """One side of the comparison: its copies of the inputs, and what came out."""

    def __init__(self, fn, args, params):
        self.fn, self.args, self.params = fn, args, params
        self.outputs, self.leaves, self.grads = None, [], {}

    def wrt(self):
        """(name, tensor) for every input and parameter whose gradient is compared."""
        out = []
        for i, t in enumerate(_tensors(self.args)):
            leaf = _grad_leaf(t)
            if leaf.requires_grad:
                out.append((f"argument tensor {i}", leaf))
        out += [(f"parameter {n}", p) for n, p in self.params if p.requires_grad]
        return out


def _call(run, grads, rng_state):
    import aotgrad
    _restore_rng(rng_state)
    for _, t in run.wrt():
        t.grad = None
    out = run.fn(*run.args)
    from aotgrad.tracer.pytree import flatten
    run.outputs = out
    run.leaves = flatten(out)[0]
    diff = [o for o in run.leaves if isinstance(o, Tensor) and o.requires_grad and
            o.dtype.is_floating_point]
    if grads and diff:
        # fixed random cotangents: each output element weighs in the gradient
        rng = np.random.default_rng(1)
        cot = [Tensor._make(np.asarray(rng.standard_normal(o.shape)).astype(o._value.dtype))
               for o in diff]
        aotgrad.autograd.backward(diff, cot)
        run.grads = {n: (None if t.grad is None else np.array(t.grad._value, copy=True))
                     for n, t in run.wrt()}
    return run


def _rng_state():
    import aotgrad
    return aotgrad.get_rng_state(), np.random.get_state(), random.getstate()


def _restore_rng(state):
    import aotgrad
    aotgrad.set_rng_state(state[0])
    np.random.set_state(state[1])
    random.setstate(state[2])


def _compare_runs(comp, eager, rtol, atol, check_dtype, grads):
    kw = dict(rtol=rtol, atol=atol, equal_nan=True, check_dtype=check_dtype)
    co, eo = comp.leaves, eager.leaves
    assert len(co) == len(eo), f"{len(co)} compiled outputs against {len(eo)} eager ones"
    for i, (a, b) in enumerate(zip(co, eo)):
        if isinstance(a, Tensor) or isinstance(b, Tensor):
            assert isinstance(a, Tensor) and isinstance(b, Tensor), \
                f"output {i}: {type(a).__name__} compiled, {type(b).__name__} eagerly"
            assert_close(a, b, msg=f"output {i}: ", **kw)
            assert a.requires_grad == b.requires_grad, \
                f"output {i}: requires_grad={a.requires_grad} compiled, {b.requires_grad} eagerly"
        else:
            assert type(a) is type(b) and (a == b or (a != a and b != b)), \
                f"output {i}: {a!r} compiled, {b!r} eagerly"
    # in-place writes to the arguments and parameters must match too
    for i, (a, b) in enumerate(zip(_tensors(comp.args), _tensors(eager.args))):
        assert_close(a, b, msg=f"argument tensor {i} after the call: ", **kw)
    for (n, a), (_, b) in zip(comp.params, eager.params):
        assert_close(a, b, msg=f"parameter {n} after the call: ", **kw)
    if not grads:
        return
    assert comp.grads.keys() == eager.grads.keys()
    for name in eager.grads:
        a, b = comp.grads[name], eager.grads[name]
        assert (a is None) == (b is None), \
            f"grad of {name}: {'None' if a is None else 'set'} compiled, " \
            f"{'None' if b is None else 'set'} eagerly"
        if a is not None:
            assert_close(a, b, msg=f"grad of {name}: ", **kw)


def _side(fn, args, params, module_copy, memo=None):
    """(fn, args copies, [(name, param)]) for one run."""
    if module_copy:
        fn = copy.deepcopy(fn)
        return fn, _copy_args(args, {}), list(fn.named_parameters())
    return fn, _copy_args(args, memo if memo is not None else {}), params


def compare_with_eager(fn, *args, compiled=None, params=(), rtol=None, atol=None, grads=True,
                       expect_graph_break=False, check_dtype=True, bisect=True, **compile_kw):
    """Run `fn(*args)` eagerly and compiled and assert that they agree.

    Each run gets its own copies of the tensor arguments (an in-place write in one run does
    not reach the other; the same tensor passed twice stays one tensor in each copy), and of
    `fn` itself when it is a Module (its parameters are compared too). Tensors in `params`
    (closed over by fn) are shared: their values and grads are restored before each run. The
    random generators (aotgrad's, numpy's, Python's) are reset to the same state before each
    run. Compared: every output (values, dtypes, requires_grad; NaN equals NaN), the
    arguments and parameters after the call (in-place writes), and with grads=True the
    gradients of every input and parameter that requires grad, from a backward of the float
    outputs weighted by fixed random cotangents. Tolerances: assert_close's (dtype defaults
    unless rtol/atol are given).

    The compiled call must run a compiled program: a graph break (or any other eager
    fallback) fails with CompiledPathNotRun unless `expect_graph_break` (True, or the
    reason as a string); then it fails if the call did compile, so a fix shows.

    On a mismatch of the Numba backend the compiled program is replayed kernel by kernel
    against the reference prims (testing.bisect) and the error names the first kernel whose
    outputs diverge, its IR nodes and their user source lines (bisect=False skips this).

    `compiled`: an already compiled function of fn (then compile_kw is not used); otherwise
    compile_kw go to aotgrad.compile (backend=, memory_budget=, ...). Returns the compiled
    callable."""
    import aotgrad
    module_copy = _is_module(fn) and compiled is None
    params = [(f"{i}", p) for i, p in enumerate(params)]
    saved = [np.array(p._value, copy=True) for _, p in params]
    rng_state = _rng_state()

    def restore_params():
        for (_, p), v in zip(params, saved):
            if p._value.flags.writeable:
                np.copyto(p._value, v)
            else:
                p._value = v.copy()
            p.grad = None

    restore_params()
    eager = _call(_Run(*_side(fn, args, params, module_copy)), grads, rng_state)
    cfn, cargs, cparams = _side(fn, args, params, module_copy)
    cf = compiled or aotgrad.compile(cfn, **compile_kw)
    restore_params()
    n_eager = cf.eager_calls
    from aotgrad.codegen import tiers
    with tiers.compiled_kernels():     # the generated kernels, not their numpy first tier
        comp = _call(_Run(cf, cargs, cparams), grads, rng_state)
    ran_eagerly = cf.eager_calls > n_eager
    try:
        if ran_eagerly and not expect_graph_break:
            why = cf.graph_breaks[-1] if cf.graph_breaks else "see the warning"
            raise CompiledPathNotRun(
                f"compare_with_eager({cf.name}): the compiled call ran eagerly ({why}), so "
                f"eager was compared with eager; pass expect_graph_break='reason' if this is "
                f"expected")
        if expect_graph_break and not ran_eagerly:
            raise AssertionError(f"compare_with_eager({cf.name}): a graph break was expected "
                                 f"({expect_graph_break}) but the call compiled: update the "
                                 f"test")
        try:
            _compare_runs(comp, eager, rtol, atol, check_dtype, grads)
        except AssertionError as e:
            if not bisect or ran_eagerly or cf.backend == "interpret":
                raise
            restore_params()
            kw = dict(compile_kw) if compiled is None else \
                dict(backend=compiled.backend, memory_budget=compiled.memory_budget)
            report = bisect_call(fn if compiled is None else compiled.fn, args, params,
                                 module_copy, grads, rng_state, rtol, atol, kw)
            raise AssertionError(f"{e}\n\nkernel bisection:\n{report}") from None
    except AssertionError as e:
        e.aotgrad_compiled = cf   # the pytest plugin dumps its IR (--aotgrad-dump-on-failure)
        raise
    return cf


def bisect_call(fn, args, params, module_copy, grads, rng_state, rtol, atol, compile_kw):
    """Compile fn afresh, run it once on fresh copies of args while recording what each
    compiled graph got and made, and replay each run kernel by kernel (testing.bisect).
    Returns the report's text."""
    import aotgrad
    from aotgrad.testing.bisect import bisect_compiled_graph
    fn2, args2, params2 = _side(fn, args, params, module_copy)
    cf = aotgrad.compile(fn2, **compile_kw)
    _restore_rng(rng_state)
    runs = []

    def record(which, ins, outs):
        runs.append((which, [np.array(a, copy=True) if isinstance(a, np.ndarray) else a
                             for a in ins]))
    from aotgrad.codegen import tiers
    with tiers.compiled_kernels():     # the generated kernels, not their numpy first tier
        try:
            prog = cf.observe(record, *args2)
        except Exception as e:  # noqa: BLE001 (the comparison's error is what matters)
            return f"(not bisected: {type(e).__name__}: {e})"
        _call(_Run(cf, args2, params2), grads, rng_state)
    if not runs:
        return "(not bisected: the recorded program did not run; the call traced again)"
    reports = [bisect_compiled_graph(prog.compiled_graph(which), ins, rtol, atol)
               for which, ins in runs]
    first = next((r for r in reports if r.first is not None), None)
    if first is not None:
        return str(first)
    return "\n".join(str(r) for r in reports) + (
        "\nno kernel differs from the reference prims on its own inputs: the difference "
        "comes from the traced graph itself (tracing, decomposition, graph passes) or "
        "accumulates across steps; compare fn.ir(...) with eager")
