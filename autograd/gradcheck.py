"""gradcheck and gradgradcheck: analytical Jacobians against central finite differences,
as in `torch.autograd.gradcheck`.

>>> x = aotgrad.randn(3, dtype=aotgrad.float64, requires_grad=True)
>>> aotgrad.autograd.gradcheck(lambda x: (x * x).tanh(), (x,))
True

The numerical Jacobian perturbs each element of each input that requires grad by +-eps;
the analytical one runs one backward per output element. Both are laid out like
PyTorch's: one row per input element, one column per output element. A mismatch names the
output index and the input's position in `inputs`, and shows both Jacobians.
"""
import warnings

import numpy as np

from aotgrad.autograd.gradcheck_undefined import undefined_grad_problem
from aotgrad.runtime.autograd_api import grad as _grad
from aotgrad.runtime.grad_mode import enable_grad, no_grad
from aotgrad.runtime.tensor import Tensor

__all__ = ["gradcheck", "gradgradcheck", "GradcheckError", "get_numerical_jacobian",
           "get_analytical_jacobian"]


class GradcheckError(RuntimeError):
    """Raised by gradcheck and gradgradcheck when a check fails."""


def _as_tuple(x):
    if isinstance(x, (tuple, list)):
        return tuple(x)
    return (x,)


def _float_outputs(outs):
    return [(j, o) for j, o in enumerate(outs)
            if isinstance(o, Tensor) and o.dtype.is_floating_point]


def _numerical(func, inputs, diff_idx, eps):
    """{(output j, input i): (numel_in, numel_out) float64 array} by central differences.
    func runs in the caller's grad mode, as in PyTorch (it may register hooks on its
    intermediates); the perturbed outputs must keep the outputs' shapes and dtypes."""
    outs = _as_tuple(func(*inputs))
    float_outs = _float_outputs(outs)
    jac = {}
    for i in diff_idx:
        x = inputs[i]
        orig = x._value
        work = np.array(orig, copy=True)
        x._value = work
        cols = {j: np.zeros((work.size, o.numel())) for j, o in float_outs}
        try:
            for k in range(work.size):
                idx = np.unravel_index(k, work.shape)
                v = work[idx]
                # the outputs' values are copied at once: an output that is a view of the
                # input would otherwise read the restored input
                work[idx] = v - eps
                lo = _values(func, inputs, float_outs)
                work[idx] = v + eps
                hi = _values(func, inputs, float_outs)
                work[idx] = v
                for j, _ in float_outs:
                    cols[j][k] = ((hi[j] - lo[j]) / (2 * eps)).reshape(-1)
        finally:
            x._value = orig
        for j, _ in float_outs:
            jac[(j, i)] = cols[j]
    return outs, jac


def _forward_jacobian(func, inputs, diff_idx):
    """{(output j, input i): (numel_in, numel_out) array} by forward-mode AD, one basis
    tangent per element of each input."""
    from aotgrad.autograd import forward_ad
    from aotgrad.runtime.factories import tensor
    jac = {}
    for i in diff_idx:
        x = inputs[i]
        n = x.numel()
        for k in range(n):
            basis = np.zeros(n, dtype=x.dtype.np)
            basis[k] = 1
            with forward_ad.dual_level(), no_grad():
                args = list(inputs)   # (every checked input is dual, as in PyTorch: the
                for i2 in diff_idx:   # others with a zero tangent)
                    t2 = basis.reshape(tuple(x.shape)) if i2 == i else \
                        np.zeros(tuple(inputs[i2].shape), inputs[i2].dtype.np)
                    args[i2] = forward_ad.make_dual(inputs[i2].detach(),
                                                    tensor(t2, dtype=inputs[i2].dtype))
                for j, o in _float_outputs(_as_tuple(func(*args))):
                    col = jac.setdefault((j, i), np.zeros((n, o.numel())))
                    t = forward_ad.unpack_dual(o).tangent
                    if t is not None:
                        col[k] = np.asarray(t._value, np.float64).reshape(-1)
    return jac


def _values(func, inputs, float_outs):
    """{output j: a float64 copy of its value} for func(*inputs)."""
    outs = _as_tuple(func(*inputs))
    for j, o in float_outs:
        p = outs[j] if j < len(outs) else None
        if not isinstance(p, Tensor) or tuple(p.shape) != tuple(o.shape):
            raise AssertionError("Expected `func` to return outputs with the same shape when "
                                 "inputs are perturbed.")
        if p.dtype is not o.dtype:
            raise AssertionError("Expected `func` to return outputs with the same dtype when "
                                 "inputs are perturbed.")
    return {j: np.array(outs[j]._value, np.float64, copy=True) for j, _ in float_outs}


def _analytical(func, inputs, diff_idx, check_grad_dtypes):
    """{(output j, input i): (numel_in, numel_out) array} by one backward per output element,
    computed twice (the second for the reentrancy check)."""
    from aotgrad.runtime.factories import tensor
    with enable_grad():
        outs = _as_tuple(func(*inputs))
    diff_inputs = [inputs[i] for i in diff_idx]
    jacs = ({}, {})
    for j, o in _float_outputs(outs):
        n_out = o.numel()
        for rep in range(2):
            for i in diff_idx:
                jacs[rep][(j, i)] = np.zeros((inputs[i].numel(), n_out))
            if not o.requires_grad:
                continue
            for k in range(n_out):
                basis = np.zeros(n_out, dtype=o.dtype.np)
                basis[k] = 1
                gs = _grad(o, diff_inputs, tensor(basis.reshape(tuple(o.shape)), dtype=o.dtype),
                           retain_graph=True, allow_unused=True)
                for i, g in zip(diff_idx, gs):
                    if g is None:
                        continue
                    if tuple(g.shape) != tuple(inputs[i].shape):
                        raise GradcheckError("Analytical gradient has incorrect size")
                    if check_grad_dtypes and g.dtype is not inputs[i].dtype:
                        raise GradcheckError("Gradient has dtype mismatch")
                    jacs[rep][(j, i)][:, k] = np.asarray(g._value, np.float64).reshape(-1)
    return outs, jacs


def _zero_grad_outputs_give_zeros(outs, diff_inputs):
    """Whether a backward of all-zero grad_outputs gives zero gradients (a backward must be
    linear in grad_output)."""
    from aotgrad.runtime.factories import zeros_like
    tracked = [o for _, o in _float_outputs(outs) if o.requires_grad]
    if not tracked:
        return True
    gs = _grad(tracked, diff_inputs, [zeros_like(o) for o in tracked], retain_graph=True,
               allow_unused=True)
    return all(g is None or not np.any(np.asarray(g._value) != 0) for g in gs)


def _fmt(m):
    from aotgrad.runtime.factories import tensor
    return repr(tensor(m))


def _fail(msg, raise_exception):
    if raise_exception:
        raise GradcheckError(msg)
    return False


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
              nondet_tol=0.0, check_undefined_grad=True, check_grad_dtypes=False,
              check_batched_grad=False, check_batched_forward_grad=False,
              check_forward_ad=False, check_backward_ad=True, fast_mode=False, masked=None):
    """Check the gradients of `func` at `inputs` (a Tensor or a tuple, of which the tensors
    with requires_grad=True are checked) against finite differences, elementwise
    |analytical - numerical| <= atol + rtol * |numerical|. Returns True, or raises a
    GradcheckError (returns False with raise_exception=False). Use float64 inputs.

    `check_forward_ad=True` also checks the forward-mode Jacobian (autograd.forward_ad, one
    basis tangent per input element) against the same finite differences;
    `check_backward_ad=False` skips the reverse-mode check. `check_undefined_grad` (on by
    default, as in PyTorch) checks that the backward copes with outputs that get no
    gradient (autograd/gradcheck_undefined.py). The batched and fast-mode checks of PyTorch
    are accepted and not run.
    """
    inputs = _as_tuple(inputs)
    diff_idx = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not diff_idx:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but "
                         "none of them have requires_grad=True.")
    for i in diff_idx:
        if inputs[i].dtype.name != "float64":
            warnings.warn(f"Input #{i} requires gradient and is not a double precision floating "
                          f"point or complex. This check will likely fail if all the inputs are "
                          f"not of double precision floating point or complex. ", stacklevel=2)
    for i in diff_idx:
        v = inputs[i]._value
        if isinstance(v, np.ndarray) and any(st == 0 and n > 1
                                             for st, n in zip(v.strides, v.shape)):
            raise RuntimeError(f"The {i}th input has a dimension with stride 0. gradcheck only "
                               f"supports inputs that are non-overlapping to be able to compute "
                               f"the numerical gradients correctly. You should call .contiguous "
                               f"on the input before passing it to gradcheck.")
    if not check_backward_ad and not check_forward_ad:
        raise AssertionError("Expected at least one of check_forward_ad or check_backward_ad "
                             "to be True")
    outs, numerical = _numerical(func, inputs, diff_idx, eps)
    if check_backward_ad:
        ok = _check_backward(func, inputs, diff_idx, numerical, rtol, atol, nondet_tol,
                             check_grad_dtypes, raise_exception)
        if ok is not True:
            return ok
        if check_undefined_grad:
            problem = undefined_grad_problem(func, inputs, diff_idx)
            if problem is not None:
                if raise_exception:
                    raise GradcheckError(problem[0]) from problem[1]
                return False
    if check_forward_ad:
        forward = _forward_jacobian(func, inputs, diff_idx)
        for j, o in _float_outputs(outs):
            for i in diff_idx:
                f, n = forward.get((j, i)), numerical[(j, i)]
                if f is None:
                    f = np.zeros_like(n)
                if not np.allclose(f, n, rtol=rtol, atol=atol, equal_nan=False):
                    return _fail(f"Jacobian computed with forward mode mismatch for output {j} "
                                 f"with respect to input {i},\nnumerical:{_fmt(n)}\n"
                                 f"analytical:{_fmt(f)}\n", raise_exception)
    return True


def _check_backward(func, inputs, diff_idx, numerical, rtol, atol, nondet_tol,
                    check_grad_dtypes, raise_exception):
    """The reverse-mode checks: Jacobians against the numerical ones, zero grad_outputs give
    zero gradients, and a second backward gives the same values."""
    grad_outs, (analytical, again) = _analytical(func, inputs, diff_idx, check_grad_dtypes)
    for j, o in _float_outputs(grad_outs):
        if not o.requires_grad:
            if any(np.any(numerical[(j, i)] != 0) for i in diff_idx):
                return _fail("Numerical gradient for function expected to be zero",
                             raise_exception)
            continue
        for i in diff_idx:
            a, n = analytical[(j, i)], numerical[(j, i)]
            if not np.allclose(a, n, rtol=rtol, atol=atol, equal_nan=False):
                return _fail(f"Jacobian mismatch for output {j} with respect to input {i},\n"
                             f"numerical:{_fmt(n)}\nanalytical:{_fmt(a)}\n", raise_exception)
    for key, a in analytical.items():
        if np.max(np.abs(a - again[key]), initial=0.0) > nondet_tol:
            return _fail(f"Backward is not reentrant, i.e., running backward with same input and "
                         f"grad_output multiple times gives different values, although "
                         f"analytical gradient matches numerical gradient. The tolerance for "
                         f"nondeterminism was {nondet_tol}.", raise_exception)
    if not _zero_grad_outputs_give_zeros(grad_outs, [inputs[i] for i in diff_idx]):
        return _fail("backward not multiplied by grad_output", raise_exception)
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True, nondet_tol=0.0,
                  check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
                  check_fwd_over_rev=False, check_rev_over_rev=True, fast_mode=False,
                  masked=False):
    """Check second derivatives: gradcheck of the function
    (inputs, grad_outputs) -> autograd.grad(func(inputs), inputs, grad_outputs,
    create_graph=True). Random float64 `grad_outputs` (requiring grad) are made when not
    given.

    >>> x = aotgrad.randn(3, dtype=aotgrad.float64, requires_grad=True)
    >>> aotgrad.autograd.gradgradcheck(lambda x: x ** 3, (x,))
    True
    """
    from aotgrad.runtime.factories import rand_like
    inputs = _as_tuple(inputs)
    diff_idx = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if grad_outputs is None:  # (func runs under the caller's grad mode, as in PyTorch)
        outs = _as_tuple(func(*inputs))
        grad_outputs = tuple((rand_like(o) * 2 - 1).requires_grad_(True)
                             for o in outs if isinstance(o, Tensor) and o.dtype.is_floating_point)
    else:
        grad_outputs = _as_tuple(grad_outputs)
    n_in = len(inputs)

    def first_derivative(*args):
        xs, gos = args[:n_in], args[n_in:]
        with enable_grad():
            outs = _as_tuple(func(*xs))
        pairs = [(o, g) for o, g in zip([o for o in outs if isinstance(o, Tensor) and
                                         o.dtype.is_floating_point], gos) if o.requires_grad]
        if not pairs:
            return ()
        diff = [xs[i] for i in diff_idx]
        with enable_grad():
            gs = _grad([o for o, _ in pairs], diff, [g for _, g in pairs], create_graph=True,
                       allow_unused=True)
        return tuple(g for g in gs if g is not None)

    return gradcheck(first_derivative, inputs + tuple(grad_outputs), eps=eps, atol=atol,
                     rtol=rtol, raise_exception=raise_exception, nondet_tol=nondet_tol,
                     check_undefined_grad=check_undefined_grad,
                     check_grad_dtypes=check_grad_dtypes, check_backward_ad=check_rev_over_rev,
                     fast_mode=fast_mode)


def _deprecated_warning(name):
    warnings.warn(f"`{name}` is deprecated (it was never meant to be public, in PyTorch "
                  f"either); use gradcheck or autograd.functional.jacobian", FutureWarning,
                  stacklevel=3)


def get_numerical_jacobian(fn, inputs, target=None, eps=1e-3, grad_out=1.0):
    """Deprecated, as in PyTorch: the finite-difference Jacobians of `fn(inputs)` (fn takes
    the tuple of inputs; only its first output counts) with respect to each input that
    requires grad, each of shape (input numel, output numel)."""
    _deprecated_warning("get_numerical_jacobian")
    if grad_out != 1.0:
        raise ValueError("Expected grad_out to be 1.0. get_numerical_jacobian no longer "
                         "supports values of grad_out != 1.0.")
    inputs = _as_tuple(inputs)
    targets = inputs if target is None else _as_tuple(target)  # the tensors to perturb
    diff_idx = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad
                and any(x is t for t in targets)]
    outs, jac = _numerical(lambda *a: fn(a), inputs, diff_idx, eps)
    from aotgrad.runtime.factories import tensor
    first = _float_outputs(outs)[0][0]
    return tuple(tensor(jac[(first, i)], dtype=inputs[i].dtype) for i in diff_idx)


def get_analytical_jacobian(inputs, output, nondet_tol=0.0, grad_out=1.0):
    """Deprecated, as in PyTorch: the backward-mode Jacobians of `output` with respect to
    each input that requires grad (shape (input numel, output numel)), and whether the
    backward is reentrant (same result twice), the gradient sizes and the dtypes are right:
    `(jacobians, reentrant, correct_grad_sizes, correct_grad_types)`."""
    _deprecated_warning("get_analytical_jacobian")
    if grad_out != 1.0:
        raise ValueError("Expected grad_out to be 1.0. get_analytical_jacobian no longer "
                         "supports values of grad_out != 1.0.")
    from aotgrad.runtime.factories import tensor
    inputs = _as_tuple(inputs)
    diff = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
    n_out = output.numel()
    runs, sizes_ok, types_ok = [], True, True
    for _ in range(2):
        jacs = [np.zeros((x.numel(), n_out)) for x in diff]
        for k in range(n_out):
            basis = np.zeros(n_out, dtype=output.dtype.np)
            basis[k] = 1
            gs = _grad(output, diff, tensor(basis.reshape(tuple(output.shape)),
                                            dtype=output.dtype),
                       retain_graph=True, allow_unused=True)
            for jac, g, x in zip(jacs, gs, diff):
                if g is None:
                    continue
                if tuple(g.shape) != tuple(x.shape):
                    sizes_ok = False
                    continue
                if g.dtype is not x.dtype:
                    types_ok = False
                jac[:, k] = np.asarray(g._value, np.float64).reshape(-1)
        runs.append(jacs)
    reentrant = all(np.max(np.abs(a - b), initial=0.0) <= nondet_tol
                    for a, b in zip(*runs))
    return (tuple(tensor(j, dtype=x.dtype) for j, x in zip(runs[0], diff)), reentrant,
            sizes_ok, types_ok)
