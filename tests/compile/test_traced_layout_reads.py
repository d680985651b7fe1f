"""A compiled function that reads a tensor's memory layout (stride(), is_contiguous(), a
view that eager mode refuses on some layouts, _is_view()) gives eager's answer for every
call's argument layout, or breaks the graph with a reason: never the answer of the layout
it was traced with. A program that reads no layout serves every layout (one compile)."""
import warnings

import numpy as np
import pytest

import aotgrad
from aotgrad.testing import assert_close
from aotgrad.tracer.trace import GraphBreakError

BACKENDS = ["interpret", "numba"]


def _base():
    return aotgrad.tensor(np.arange(16, dtype=np.float32).reshape(4, 4))


def _layouts():
    """The same function argument in several layouts (with a second argument b that is the
    base or a view of it), in an order that revisits the first."""
    base = _base()
    return [(base, base), (base.t(), base), (base[1:], base), (base[:, 1:], base),
            (base.t(), base), (base, base), (base[::2], base)]


# each reads a layout and picks a branch on it
READS = {
    "stride": lambda a: a.stride() == (1, 4),
    "stride_dim": lambda a: a.stride(1) == 1,
    "is_contiguous": lambda a: a.is_contiguous(),
    "view_stride": lambda a: a[1:3].t().stride()[0] == 1,
    "view_is_contiguous": lambda a: a[:, :2].is_contiguous(),
    "result_view_stride": lambda a: (a * 1)[1:3].t().stride() == (1, 4),
    "result_stride": lambda a: (a + 1).stride()[0] > 1,
}


def _branching(read):
    def f(a, b):
        return a * 2 + b.sum() if read(a) else a * 3
    return f


def _run_all(fn, cf):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (graph breaks and recompiles warn)
        for a, b in _layouts():
            want = fn(a, b)
            got = cf(a, b)
            np.testing.assert_array_equal(got.numpy(), want.numpy(),
                                          err_msg=f"strides {a.stride()}")


@pytest.mark.parametrize("name", list(READS))
def test_layout_read_answers_eagerly_for_each_layout(name):
    fn = _branching(READS[name])
    _run_all(fn, aotgrad.compile(fn, backend="interpret"))


@pytest.mark.parametrize("name", ["stride", "view_stride"])
def test_layout_read_answers_eagerly_numba(name):
    fn = _branching(READS[name])
    _run_all(fn, aotgrad.compile(fn, backend="numba"))


def test_traced_view_strides_are_eager_strides():
    seen = {}

    def f(a):
        v = a[1:3].t()
        seen[aotgrad.compiler.is_compiling()] = (v.stride(), v.is_contiguous(),
                                                 a.t().stride(), a.unsqueeze(1).stride(),
                                                 a.expand(2, 4, 4).stride())
        return v * 2
    a = _base()
    f(a)
    aotgrad.compile(f, backend="interpret", fullgraph=True)(a)
    assert seen[True] == seen[False]
    assert seen[True][0] == (1, 4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_view_of_a_transposed_argument_raises_as_eagerly(backend):
    def f(a):
        return a.view(-1) * 2
    cf = aotgrad.compile(f, backend=backend)
    a = _base()
    np.testing.assert_array_equal(cf(a).numpy(), f(a).numpy())
    with pytest.raises(RuntimeError, match="view size is not compatible") as eager:
        f(a.t())
    with pytest.raises(RuntimeError, match="view size is not compatible") as compiled:
        cf(a.t())
    assert str(compiled.value) == str(eager.value)


def test_view_of_a_result_of_a_transposed_tensor_breaks_the_graph():
    def f(a):
        return (a.t() * 2).view(-1)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        f(_base())
    with pytest.raises(GraphBreakError, match=r"view\(\) of a result computed from a strided"):
        aotgrad.compile(f, backend="interpret", fullgraph=True)(_base())


def test_is_view_breaks_the_graph():
    def f(a):
        return a * 2 if a._is_view() else a * 3
    with pytest.raises(GraphBreakError, match=r"_is_view\(\)"):
        aotgrad.compile(f, backend="interpret", fullgraph=True)(_base())
    cf = aotgrad.compile(f, backend="interpret")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for a, _ in _layouts():
            np.testing.assert_array_equal(cf(a).numpy(), f(a).numpy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_program_that_reads_no_layout_serves_every_layout(backend):
    def f(a, b):
        return (a * b).sum(0) + a.exp()
    cf = aotgrad.compile(f, backend=backend)
    x, y = _base() / 16, _base() / 8   # (no aliasing: that is a guard of its own)
    strided = (y / 1).repeat(1, 2)[:, ::2]
    for a, b in [(x, y), (x.t(), y), (x, y.t()), (x.t(), strided), (x.t(), y.t())]:
        np.testing.assert_allclose(cf(a, b).numpy(), f(a, b).numpy(), rtol=1e-6)
    assert cf.stats.compiles == 1


def test_program_that_reads_a_layout_is_traced_again_for_another_layout():
    fn = _branching(READS["stride"])
    cf = aotgrad.compile(fn, backend="interpret")
    x, y = _base(), _base()
    cf(x, y)
    cf(x.t(), y)
    assert cf.stats.compiles == 2
    cf(x.t(), y)
    assert cf.stats.compiles == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_heads_merged_with_contiguous_compile(backend):
    # the usual multi-head attention: q, k, v are strided views of one projection, and the
    # heads are merged with .transpose(1, 2).contiguous().view(...). A product is
    # C-contiguous eagerly whatever its operands' layouts, so this layout is known while
    # tracing: no graph break, and the strides a reader sees are eager's
    B, T, H, D = 2, 5, 3, 4
    rng = np.random.default_rng(0)
    qkv = aotgrad.tensor(rng.standard_normal((B, T, 3 * H * D)).astype(np.float32))

    def heads(qkv):
        q, k, v = qkv.split(H * D, dim=2)
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1) * D ** -0.5).softmax(dim=-1)
        y = att @ v
        return y.transpose(1, 2).contiguous().view(B, T, H * D), y.stride()

    out, strides = aotgrad.compile(heads, backend=backend, fullgraph=True)(qkv)
    ref, ref_strides = heads(qkv)
    assert_close(out, ref)
    assert strides == ref_strides == (H * T * D, T * D, D, 1)
