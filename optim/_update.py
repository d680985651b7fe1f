"""Element-wise update steps shared by the optimizers.

Each helper rounds like PyTorch's CPU kernel of the same name, so that a float32 run follows
PyTorch's step by step: `addcmul` is self + (value * a) * b, `addcdiv` is
self + (value * a) / b, and `lerp_` switches formula at weight 0.5 as `torch.lerp` does
(start + w * (end - start) below, end - (end - start) * (1 - w) from 0.5 on). They are
written with tensor ops, so an optimizer step traced inside a compiled function records
them like any other op.
"""
from aotgrad.ir import dtypes as dt
from aotgrad.runtime import multi_tensor, ops
from aotgrad.runtime.factories import tensor, zeros_like
from aotgrad.runtime.kernel_library import FlatUpdate, library


def grads_of(group):
    """(parameter, gradient) for each parameter of the group that has a .grad; the gradient
    is negated where the group maximizes."""
    for p in group["params"]:
        if p.grad is not None:
            yield p, (ops.neg(p.grad) if group["maximize"] else p.grad)


def first_step_state(state, p, *moments):
    """A parameter's state on its first step: the step count, then zeroed moments (in
    PyTorch's order of keys, which state_dict() keeps)."""
    if not state:
        state["step"] = new_step()
        for name in moments:
            state[name] = zeros_like(p.detach())
    return state


def new_step():
    """The per-parameter step count: a float32 0-d tensor, as PyTorch keeps it (a compiled
    step reads it as data and need not specialise on it)."""
    return tensor(0.0, dtype=dt.float32)


def as_f64(step):
    """The step count in float64: PyTorch computes its scalar factors as Python floats."""
    return step.to(dt.float64)


def addcmul(x, a, b, value=1.0):
    prod = ops.mul(a, b) if _is_one(value) else ops.mul(ops.mul(a, value), b)
    return ops.add(x, prod)


def addcdiv(x, a, b, value=1.0):
    quot = ops.div(a, b) if _is_one(value) else ops.div(ops.mul(a, value), b)
    return ops.add(x, quot)


def lerp_(x, end, weight):
    """x <- lerp(x, end, weight) in place, for a Python float weight."""
    high = lerp_high(weight)
    return lerp_by_(x, end, 1.0 - weight if high else weight, high)


def lerp_high(weight):
    """Does lerp at this Python float weight take the formula from the end (weight >= 0.5)?"""
    return not weight < 0.5


def moment_factors(lr, b1, b2, eps, wd, decoupled):
    """The step-independent factors of an Adam-family update written with lerp_by_ (NAdam,
    RAdam): the first moment's lerp factor, the second moment's, eps, lr (a number or a 0-d
    tensor), and the weight decay (`decay`, decoupled, or `l2`); and lerp_from_end."""
    high = lerp_high(1 - b1)
    factors = dict(lerp=1.0 - (1 - b1) if high else 1 - b1, b2=b2, one_minus_b2=1 - b2,
                   lr=lr, eps=eps)
    if wd != 0:
        if decoupled:
            factors["decay"] = 1 - lr * wd
        else:
            factors["l2"] = wd
    return factors, high


def lerp_by_(x, end, factor, high):
    """lerp_'s two formulas: x += factor * (end - x) (factor = the weight), or with `high`
    x = end - factor * (end - x) (factor = 1 - weight). `factor` may be a 0-d tensor (a
    fused kernel's scalar), `high` is decided from the Python weight by lerp_high."""
    if not high:
        return x.add_(ops.mul(ops.sub(end, x), factor))
    return x.copy_(ops.sub(end, ops.mul(ops.sub(end, x), factor)))


def _is_one(value):
    return isinstance(value, (int, float)) and value == 1


def check_nonnegative(**values):
    """PyTorch's constructor checks: `Invalid learning rate: -1` and friends."""
    names = {"lr": "learning rate", "eps": "epsilon value"}
    for name, value in values.items():
        if not 0.0 <= value:
            raise ValueError(f"Invalid {names.get(name, name + ' value')}: {value}")


def check_betas(betas):
    for i, b in enumerate(betas):
        if not 0.0 <= b < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {b}")


def weight_decay(p, grad, lr, wd, decoupled):
    """The gradient after weight decay `wd`: decoupled (AdamW's), the parameter shrinks by
    lr * wd in place and the gradient is unchanged; else wd * p is added to the gradient."""
    if wd == 0:
        return grad
    if decoupled:
        p.mul_(1 - lr * wd)
        return grad
    return ops.add(grad, p.detach(), alpha=wd)


def fused_arrays(state, group, pairs, keys, free):
    """(the rows, their flat buffers) of a fused step over `pairs`: a row is (param, grad,
    *state[param][k] for k in keys), its buffers multi_tensor.flat_arrays_of's; None where
    the group must take another path (the fused path is not wanted, lr is a tensor, or a
    buffer is not flat)."""
    if not pairs or not multi_tensor.fused_wanted(group) or \
            not isinstance(group["lr"], (int, float)):
        return None
    rows = [(p, p.grad, *(state[p][k] for k in keys)) for p, _ in pairs]
    arrays = multi_tensor.flat_arrays_of(rows, free=free)
    return None if arrays is None else (rows, arrays)


def split_weight_decay(factors, decoupled):
    """A kernel body's factors with "weight_decay" renamed to what the update reads:
    "decay" (decoupled), "l2" (added to the gradient), or dropped (decoupled is None: no
    weight decay)."""
    wd = factors.pop("weight_decay")
    if decoupled is not None:
        factors["decay" if decoupled else "l2"] = wd
    return factors


def fused_kernels(name, arrays, n_arrays, n_scalars, body, flags):
    """The generated kernel per parameter dtype of a fused step ({dtype: FlatKernel}) for
    `arrays` (multi_tensor.flat_arrays_of's rows), the update `body` over `n_arrays` flat
    buffers and a scalar vector of `n_scalars`; None where one is not compiled yet (or cannot
    be): the step takes another path."""
    kernels = {}
    for row in arrays:
        dtype = row[0].dtype
        if dtype not in kernels:
            kernels[dtype] = library.flat_kernel(FlatUpdate(name, dtype, n_arrays, n_scalars,
                                                            body, flags))
            if kernels[dtype] is None:
                return None
    return kernels


def kernel_factors(scalars, names, present=()):
    """{name: scalars[i]} for the scalar vector of `names` in a kernel body, leaving out the
    names in `present` mapped to False (a factor the flags say is unused)."""
    skip = {k for k, v in dict(present).items() if not v}
    return {name: scalars[i] for i, name in enumerate(names) if name not in skip}
