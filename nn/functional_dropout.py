"""`nn.functional.dropout` (the elementwise form; dropout1d/2d live with the layers)."""
from aotgrad.runtime import ops
from aotgrad.runtime.factories import rand
from aotgrad.runtime.ops import op
from aotgrad.nn.functional_activations import _maybe_inplace, _source


# ---- dropout -------------------------------------------------------------------------------
@op("dropout")
def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability p and scale the rest by 1/(1-p) (training only).

    The mask comes from `aotgrad.rand`, a stateless seeded prim: a compiled program draws the
    same mask as eager code for the same seed."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    src = _source(input, inplace)
    if p == 1.0:
        out = ops.mul(src, 0.0)
    else:
        keep = ops.cast(ops.ge(rand(*input.shape, dtype=input.dtype), p), input.dtype)
        out = ops.mul(ops.mul(src, keep), 1.0 / (1.0 - p))
    return _maybe_inplace(input, out, inplace, "dropout")
