"""Helpers of the module-against-PyTorch tests (test_nn_rnn_torch.py,
test_nn_transformer_torch.py, test_nn_new_modules_torch.py): copy the torch module's
state_dict into ours (which checks that the names and shapes match), run the same inputs in
the same dtype, compare outputs and the gradients of the float inputs and every parameter."""
import numpy as np

import aotgrad

TOL = {"float32": dict(atol=2e-5, rtol=1e-4), "float64": dict(atol=1e-10, rtol=1e-9)}


def rng(seed=0):
    return np.random.default_rng(seed)


def load_from_torch(ours, theirs):
    sd = theirs.state_dict()
    ours_keys = set(ours.state_dict())
    assert ours_keys == set(sd), f"state_dict keys differ: {sorted(ours_keys ^ set(sd))}"
    ours.load_state_dict({k: aotgrad.tensor(v.detach().numpy()) for k, v in sd.items()})


def to_np(t):
    return np.asarray(t.detach().numpy()) if hasattr(t, "detach") else np.asarray(t)


def close(a, b, dtype, what):
    if a is None or b is None:
        assert a is None and b is None, f"{what}: {a} vs {b}"
        return
    a, b = to_np(a), to_np(b)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    assert a.dtype == b.dtype, f"{what}: dtype {a.dtype} != {b.dtype}"
    np.testing.assert_allclose(a, b, err_msg=what, **TOL[dtype])


def flatten(out):
    """The tensors of a (possibly nested) output, in order."""
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flatten(o)]
    return [] if out is None else [out]


def compare(torch, ours, theirs, inputs, dtype="float32", call=None, seed=1, load=True,
            params=True, grad_inputs=None):
    """Same weights and inputs -> same outputs, input gradients and parameter gradients.

    `inputs`: numpy arrays (float ones become leaves that require grad) or other objects
    passed as they are; `grad_inputs`: the indices of the float inputs that require grad
    (default all); `call(module, inputs)` runs the module (default module(*inputs))."""
    theirs = theirs.to(getattr(torch, dtype))
    ours = ours.to(getattr(aotgrad, dtype))
    if load:
        load_from_torch(ours, theirs)
    call = call or (lambda m, xs: m(*xs))
    xs_o, xs_t = [], []
    for i, a in enumerate(inputs):
        if isinstance(a, np.ndarray):
            if a.dtype.kind == "f":
                a = a.astype(dtype)
            rg = a.dtype.kind == "f" and (grad_inputs is None or i in grad_inputs)
            xs_o.append(aotgrad.tensor(a, requires_grad=rg))
            xs_t.append(torch.tensor(a, requires_grad=rg))
        else:
            xs_o.append(a)
            xs_t.append(a)
    outs_o, outs_t = flatten(call(ours, xs_o)), flatten(call(theirs, xs_t))
    assert len(outs_o) == len(outs_t)
    r = rng(seed)
    loss_o, loss_t = 0, 0
    for i, (o, t) in enumerate(zip(outs_o, outs_t)):
        close(o, t, dtype, f"output {i}")
        if t.requires_grad:
            g = r.standard_normal(tuple(t.shape)).astype(dtype)
            loss_o = loss_o + (o * aotgrad.tensor(g)).sum()
            loss_t = loss_t + (t * torch.tensor(g)).sum()
    if isinstance(loss_t, int):
        return outs_o, outs_t
    loss_o.backward()
    loss_t.backward()
    for i, (a, b) in enumerate(zip(xs_o, xs_t)):
        if hasattr(b, "requires_grad") and b.requires_grad:
            close(a.grad, b.grad, dtype, f"grad of input {i}")
    if params:
        named_t = dict(theirs.named_parameters())
        for name, p in ours.named_parameters():
            if named_t[name].grad is None:
                assert p.grad is None or not np.any(to_np(p.grad)), name
            else:
                close(p.grad, named_t[name].grad, dtype, f"grad of {name}")
    return outs_o, outs_t
