"""Compare a compiled function with eager mode: outputs and every gradient."""
import numpy as np

from aotgrad.runtime.tensor import Tensor


def _np(x):
    return x._value if isinstance(x, Tensor) else np.asarray(x)


def assert_close(actual, expected, rtol=None, atol=None, msg=""):
    """numpy.testing-style closeness with dtype-aware default tolerances (like torch's)."""
    a, e = _np(actual), _np(expected)
    if a.shape != e.shape:
        raise AssertionError(f"{msg}shape mismatch: {a.shape} vs {e.shape}")
    if rtol is None:
        rtol, atol = (1.3e-6, 1e-5) if a.dtype == np.float32 else (1e-7, 1e-7)
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, err_msg=msg)


def _leaves(out):
    from aotgrad.tracer.pytree import flatten
    return [x for x in flatten(out)[0] if isinstance(x, Tensor)]


def compare_with_eager(fn, *args, compiled=None, params=(), rtol=None, atol=None, **compile_kw):
    """Run fn eagerly and compiled on the same inputs; compare outputs and the grads of every
    tensor arg and param that requires grad (backward of the sum of float outputs, weighted
    by fixed random cotangents so each output matters). Returns the compiled callable."""
    import aotgrad
    cf = compiled or aotgrad.compile(fn, **compile_kw)
    wrt = [a for a in args if isinstance(a, Tensor) and a.requires_grad] + list(params)
    results = []
    for f in (fn, cf):
        for t in wrt:
            t.grad = None
        out = f(*args)
        outs = _leaves(out)
        diff = [o for o in outs if o.requires_grad]
        grads = []
        if diff:
            rng = np.random.default_rng(1)
            cot = [Tensor._make(rng.standard_normal(o.shape).astype(o._value.dtype)) for o in diff]
            aotgrad.autograd.backward(diff, cot)
            grads = [None if t.grad is None else t.grad._value.copy() for t in wrt]
        results.append(([o._value.copy() for o in outs], grads))
    (eo, eg), (co, cg) = results
    assert len(eo) == len(co), f"{len(eo)} eager outputs vs {len(co)} compiled"
    for i, (a, b) in enumerate(zip(co, eo)):
        assert_close(a, b, rtol, atol, msg=f"output {i}: ")
    for i, (a, b) in enumerate(zip(cg, eg)):
        assert (a is None) == (b is None), f"grad {i}: one of compiled/eager is None"
        if a is not None:
            assert_close(a, b, rtol, atol, msg=f"grad {i}: ")
    return cf
