"""The tests' one comparison against PyTorch, exposed as the `vs_torch` fixture (conftest.py).

`vs_torch` is a `TorchOracle` bound to the torch module (the test skips where torch is not
installed):
- `vs_torch.same(case)`: `case(M)` builds the same computation with M = aotgrad or torch;
  both run and their results agree (tensors by `assert_close`: dtype, shape, the dtype's
  default tolerances, NaN == NaN), or both raise: the same error class and, with
  `exact_error`, the same text;
- `vs_torch.grads(fn, *arrays)`: one op's value, dtype and input gradients, tight;
- `vs_torch.both(fn)`: `fn(M, nn)` run on each library, the pair returned for the test to
  compare (with `close`, `error_text`, `same_text`);
- `vs_torch.module(ours, theirs, inputs)`: a module and its torch counterpart with the same
  weights and inputs give the same outputs, input gradients and parameter gradients.

The functions that need no torch (`close`, `normal`, `leaf`, `comparable`, `to_numpy`,
`error_text`, `same_text`) are imported from this module."""
import re
import warnings

import numpy as np

import aotgrad
from aotgrad import nn
from aotgrad.testing import assert_close

# the default tolerances of module comparisons (a module's outputs go through many ops)
MODULE_TOLERANCES = {"float32": dict(atol=2e-5, rtol=1e-4), "float64": dict(atol=1e-10, rtol=1e-9)}

# op-level comparisons (`TorchOracle.grads`): one op's value and input gradients, tight
ELEMENTWISE_TOLERANCES = {np.dtype(np.float32): dict(rtol=2e-6, atol=1e-6),
                          np.dtype(np.float64): dict(rtol=1e-10, atol=1e-12)}

# the user's line aotgrad appends to an error: ` (at file.py:12: `source`)`
_USER_LINE = re.compile(r" \(at [^\s:]+:\d+: `.*`\)")


def to_numpy(t):
    """A tensor of either library (detached), or anything array-like, as a numpy array."""
    return np.asarray(t.detach().numpy()) if hasattr(t, "detach") else np.asarray(t)


def normal(*shape, seed=0, dtype=np.float32):
    """Seeded standard-normal inputs, the same for both libraries."""
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def leaf(M, *values):
    """A 1-d leaf of library M that requires grad."""
    return M.tensor(list(values), requires_grad=True)


def close(ours, ref, what="", atol=None, rtol=None):
    """`ours` and `ref` (tensors of either library, arrays, None; `ref` may be Python numbers,
    compared in ours' dtype) agree: None only with None, otherwise `assert_close` (dtype and
    shape checked, NaN == NaN); without atol/rtol the dtype's default tolerances."""
    if ours is None or ref is None:
        assert ours is None and ref is None, f"{what}: {ours} vs {ref}"
        return
    if not isinstance(ref, (list, tuple, int, float)):  # (numbers: compared in ours' dtype)
        ref = to_numpy(ref)
    if (atol is None) != (rtol is None):  # one given: the other from the dtype's defaults
        tol = aotgrad.testing.default_tolerances(to_numpy(ours).dtype)
        rtol, atol = (tol[0] if rtol is None else rtol), (tol[1] if atol is None else atol)
    assert_close(to_numpy(ours), ref, rtol=rtol, atol=atol, equal_nan=True,
                 msg=f"{what}: " if what else "")


def comparable(r):
    """A library-free form of a result (tensors -> numpy arrays of their dtype, nested
    containers kept), compared by `same`."""
    if r is None or isinstance(r, (bool, int, float, str)):
        return r
    if isinstance(r, (tuple, list)):
        return [comparable(x) for x in r]
    if isinstance(r, dict):
        return {k: comparable(v) for k, v in r.items()}
    if hasattr(r, "detach"):
        return np.array(r.detach().numpy(), copy=True)
    return repr(r)


def _match(ours, ref, path="result", rtol=None, atol=None):
    if isinstance(ours, np.ndarray) or isinstance(ref, np.ndarray):
        assert isinstance(ours, np.ndarray) and isinstance(ref, np.ndarray), \
            f"{path}: {ours!r} vs {ref!r}"
        assert_close(ours, ref, rtol=rtol, atol=atol, equal_nan=True, msg=f"{path}: ")
    elif isinstance(ours, (list, tuple)) and isinstance(ref, (list, tuple)):
        assert len(ours) == len(ref), f"{path}: {len(ours)} items vs {len(ref)}: {ours} vs {ref}"
        for i, (a, b) in enumerate(zip(ours, ref)):
            _match(a, b, f"{path}[{i}]", rtol, atol)
    elif isinstance(ours, dict) and isinstance(ref, dict):
        assert ours.keys() == ref.keys(), f"{path}: keys {list(ours)} vs {list(ref)}"
        for k in ref:
            _match(ours[k], ref[k], f"{path}[{k!r}]", rtol, atol)
    elif isinstance(ours, str) and isinstance(ref, str):  # messages: without our user line
        assert _USER_LINE.sub("", ours) == ref, f"{path}: {ours!r} vs {ref!r}"
    else:
        if type(ref) in (bool, int, float):  # Python numbers: of the same type (True is not 1)
            assert type(ours) is type(ref), f"{path}: {ours!r} vs {ref!r}"
        nan = isinstance(ours, float) and isinstance(ref, float) and ours != ours and ref != ref
        assert nan or ours == ref, f"{path}: {ours!r} vs {ref!r}"


def _outcome(fn, M):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ("ok", comparable(fn(M)))
    except Exception as e:  # the error class and its first line, library names unified
        msg = str(e).replace("torch.", "aotgrad.").split("\n")[0]
        return ("err", type(e).__name__ if isinstance(e, (ValueError, TypeError))
                else "RuntimeError", msg)


def same_text(ours, theirs):
    """Messages equal with the library names taken out, and without the user's line that
    aotgrad appends to an error (` (at file.py:12: `source`)`)."""
    ours = _USER_LINE.sub("", ours)
    return ours.replace("aotgrad", "LIB") == theirs.replace("torch", "LIB")


def error_text(fn):
    """`"ErrorClass: message"` of what `fn()` raises (None when it returns), the class being
    the public one a PyTorch user catches: the runtime's internal subclasses (the engine's
    SavedTensorModifiedError) count as their builtin base (RuntimeError)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the message is what is compared
        public = next(c for c in type(e).__mro__ if not c.__module__.startswith("aotgrad.runtime"))
        return f"{public.__name__}: {e}"
    return None


def _flatten(out):
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flatten(o)]
    return [] if out is None else [out]


def _value_and_grads(M, fn, arrays, grad):
    ts = [M.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
    out = fn(M, *ts)
    if isinstance(out, tuple):
        out = out[0]
    value = np.asarray(out.detach().numpy())
    grads = []
    if grad and out.requires_grad:
        w = np.linspace(1.0, 2.0, max(out.numel(), 1))[:out.numel()].reshape(tuple(out.shape))
        (out * M.tensor(w.astype(value.dtype))).sum().backward()
        grads = [np.asarray(t.grad.numpy()) if t.grad is not None else
                 np.zeros(t.shape, value.dtype) for t in ts if t.requires_grad]
    return value, str(out.dtype).split(".")[-1].rstrip("_"), grads


class TorchOracle:
    """PyTorch as the reference of a test (the `vs_torch` fixture)."""

    def __init__(self, torch):
        self.torch = torch

    def same(self, case, exact_error=False, rtol=None, atol=None):
        """case(aotgrad) and case(torch) give the same result (tensors within rtol/atol, by
        default the dtype's; Python numbers of the same type), or the same error class (and,
        with exact_error, text: ours may add detail after PyTorch's or name the op first)."""
        ours, ref = _outcome(case, aotgrad), _outcome(case, self.torch)
        assert ours[0] == ref[0], (ours, ref)
        if ours[0] == "ok":
            _match(ours[1], ref[1], rtol=rtol, atol=atol)
        else:
            assert ours[1] == ref[1], (ours, ref)
            if exact_error:
                # ours may name the op first; PyTorch's own message sometimes does too
                texts = {ours[2], re.sub(r"^[\w.]+: ", "", ours[2])}
                assert any(t.startswith(ref[2]) or ref[2].startswith(t) for t in texts), \
                    (ours, ref)

    def both(self, fn):
        """(fn(aotgrad, aotgrad.nn), fn(torch, torch.nn))."""
        return fn(aotgrad, nn), fn(self.torch, self.torch.nn)

    def grads(self, fn, *arrays, grad=True, rtol=None, atol=None):
        """fn(M, *tensors) (its first output where it returns several) on aotgrad and torch,
        the float arrays as leaves that require grad (with `grad`): the same value, dtype
        and input gradients under the same upstream weights, NaN positions exactly.
        Tolerances: ELEMENTWISE_TOLERANCES of the inputs' widest float dtype unless given."""
        floats = [a.dtype for a in arrays if a.dtype.kind == "f"]
        tol = ELEMENTWISE_TOLERANCES.get(max(floats, key=lambda d: d.itemsize) if floats
                                         else np.dtype(np.float64))
        if np.dtype(np.float32) in floats:
            tol = ELEMENTWISE_TOLERANCES[np.dtype(np.float32)]
        tol = dict(rtol=tol["rtol"] if rtol is None else rtol,
                   atol=tol["atol"] if atol is None else atol)
        v_t, d_t, g_t = _value_and_grads(self.torch, fn, arrays, grad)
        v_a, d_a, g_a = _value_and_grads(aotgrad, fn, arrays, grad)
        assert d_a == d_t, f"dtype {d_a} != torch's {d_t}"
        close(v_a, v_t, "value", **tol)
        assert len(g_a) == len(g_t)
        for i, (a, t) in enumerate(zip(g_a, g_t)):
            close(a, t, f"grad of input {i}", **tol)

    def load_state(self, ours, theirs):
        """Copy the torch module's state_dict into ours (the names and shapes must match)."""
        sd = theirs.state_dict()
        keys = set(ours.state_dict())
        assert keys == set(sd), f"state_dict keys differ: {sorted(keys ^ set(sd))}"
        ours.load_state_dict({k: aotgrad.tensor(v.detach().numpy()) for k, v in sd.items()})

    def module(self, ours, theirs, inputs, dtype="float32", call=None, seed=1, load=True,
               params=True, grad_inputs=None, atol=None, rtol=None):
        """Same weights and inputs -> same outputs, input gradients and parameter gradients
        (MODULE_TOLERANCES of the dtype); returns both outputs.

        `inputs`: numpy arrays (float ones become leaves that require grad) or other objects
        passed as they are; `grad_inputs`: the indices of the float inputs that require grad
        (default all); `call(module, inputs)` runs the module (default module(*inputs));
        atol/rtol replace the dtype's MODULE_TOLERANCES."""
        torch, tol = self.torch, dict(MODULE_TOLERANCES[dtype])
        tol.update({k: v for k, v in (("atol", atol), ("rtol", rtol)) if v is not None})
        theirs = theirs.to(getattr(torch, dtype))
        ours = ours.to(getattr(aotgrad, dtype))
        if load:
            self.load_state(ours, theirs)
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
        outs_o, outs_t = _flatten(call(ours, xs_o)), _flatten(call(theirs, xs_t))
        assert len(outs_o) == len(outs_t)
        r = np.random.default_rng(seed)
        loss_o, loss_t = 0, 0
        for i, (o, t) in enumerate(zip(outs_o, outs_t)):
            close(o, t, f"output {i}", **tol)
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
                close(a.grad, b.grad, f"grad of input {i}", **tol)
        if params:
            named_t = dict(theirs.named_parameters())
            for name, p in ours.named_parameters():
                if named_t[name].grad is None:
                    assert p.grad is None or not np.any(to_numpy(p.grad)), name
                else:
                    close(p.grad, named_t[name].grad, f"grad of {name}", **tol)
        return outs_o, outs_t
