"""PyTorch-style tensor printing: `tensor([1., 2.], grad_fn=<AddBackward0>)`."""
import numpy as np

from aotgrad.ir import dtypes as dt


def _format_array(a):
    if a.dtype.kind == "f":
        finite = a[np.isfinite(a)]
        if finite.size and np.all(finite == np.round(finite)) and np.abs(finite).max() < 1e8:
            body = np.array2string(a, separator=", ", formatter={
                "float_kind": lambda v: (f"{v:.0f}." if np.isfinite(v) else str(v))},
                threshold=1000, edgeitems=3)
        else:
            body = np.array2string(a, separator=", ", precision=4, suppress_small=True,
                                   threshold=1000, edgeitems=3,
                                   floatmode="fixed" if finite.size and
                                   np.abs(finite).max() < 1e4 and
                                   (np.abs(finite[finite != 0]).min() if
                                    (finite != 0).any() else 1) > 1e-4 else "maxprec")
    elif a.dtype.kind == "b":
        body = np.array2string(a, separator=", ", formatter={"bool": lambda v: str(bool(v))})
    else:
        body = np.array2string(a, separator=", ", threshold=1000, edgeitems=3)
    return body.replace("\n", "\n       ")


def tensor_repr(t):
    v = t._value
    if not isinstance(v, np.ndarray):  # traced
        return f"TracedTensor({v.name}: {v.dtype.short}[{','.join(map(str, v.shape))}])"
    extras = []
    default = {dt.float32, dt.int64, dt.bool_}
    if t.dtype not in default or v.size == 0:
        if v.size == 0:
            extras.append(f"size={tuple(v.shape)}")
        if t.dtype not in default:
            extras.append(f"dtype={t.dtype!r}")
    if t.grad_fn is not None:
        extras.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    body = _format_array(v) if v.size else "[]"
    return "tensor(" + body + "".join(", " + e for e in extras) + ")"
