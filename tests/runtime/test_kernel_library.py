"""The eager kernel library (runtime/kernel_library.py): softmax, log_softmax, layer_norm and
gelu on kernels from the code generator against the numpy kernels (their reference) and
the prims, on awkward shapes (size 1, zero size, non-contiguous inputs, float32/float64),
gradients and a double backward through the reference; the kernels compiled once and
loaded from the disk cache by a second process."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.runtime import eager_kernels
from aotgrad.runtime.kernel_library import library
from aotgrad.testing import assert_close

F = ag.nn.functional

OPS = {
    "softmax": lambda x, w, b: F.softmax(x, -1),
    "log_softmax": lambda x, w, b: F.log_softmax(x, -1),
    "gelu": lambda x, w, b: F.gelu(x),
    "gelu_tanh": lambda x, w, b: F.gelu(x, approximate="tanh"),
    "layer_norm": lambda x, w, b: F.layer_norm(x, tuple(x.shape[-1:]), w, b),
    "layer_norm_plain": lambda x, w, b: F.layer_norm(x, tuple(x.shape[-1:])),
    "layer_norm_2d": lambda x, w, b: F.layer_norm(x, tuple(x.shape[-2:]), eps=1e-3),
}
SHAPES = [(4, 7), (2, 3, 5), (1, 1), (6,), (0, 5), (3, 1)]
# (kernel name, the node's name): what library.info() keys start with
NODE = {"softmax": "SoftmaxBackward0", "log_softmax": "LogSoftmaxBackward0",
        "gelu": "GeluBackward0", "gelu_tanh": "GeluBackward0",
        "layer_norm": "NativeLayerNormBackward0", "layer_norm_plain": "NativeLayerNormBackward0",
        "layer_norm_2d": "NativeLayerNormBackward0"}


def _data(shape, dtype, seed=0, transposed=False):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape[::-1] if transposed else shape).astype(dtype) * 3
    if transposed:
        x = x.T             # a non-contiguous input: the numpy kernel runs
    w = rng.standard_normal(shape[-1:]).astype(dtype)
    b = rng.standard_normal(shape[-1:]).astype(dtype)
    return x, w, b


def _run(name, arrays, mode, monkeypatch, create_graph=False):
    """The op's output and gradients with the generated kernels compiled first ("wait"), or
    the numpy kernels only ("off"), or the prims only ("prims")."""
    with monkeypatch.context() as m:
        m.setenv("AOTGRAD_EAGER_KERNELS", "off" if mode != "wait" else "wait")
        if mode == "prims":
            m.setattr(eager_kernels, "run", lambda *a, **k: None)
        x, w, b = [ag.tensor(a, requires_grad=True) for a in arrays]
        y = OPS[name](x, w, b)
        g = ag.tensor(np.random.default_rng(3).standard_normal(tuple(y.shape)).astype(
            arrays[0].dtype))
        xs = [x, w, b] if name == "layer_norm" else [x]
        grads = ag.autograd.grad(y, xs, g, create_graph=create_graph)
        if create_graph:
            total = sum((gr * gr).sum() for gr in grads)
            return y, grads, ag.autograd.grad(total, xs, allow_unused=True)
        return y, grads


def _close(a, b, dtype):
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
    assert_close(a.detach().numpy(), b.detach().numpy(), equal_nan=True, **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("name", list(OPS))
def test_generated_kernel_equals_the_numpy_kernel_and_the_prims(name, shape, dtype,
                                                                monkeypatch):
    if name == "layer_norm_2d" and len(shape) < 2:
        pytest.skip("normalises two dims")
    arrays = _data(shape, dtype)
    y, gs = _run(name, arrays, "wait", monkeypatch)
    for mode in ("off", "prims"):
        y_ref, gs_ref = _run(name, arrays, mode, monkeypatch)
        _close(y, y_ref, dtype)
        for a, b in zip(gs, gs_ref):
            _close(a, b, dtype)
    assert y.grad_fn.name() == NODE[name]
    if 0 not in shape:   # (an empty input runs the numpy path: nothing to compile)
        keys = [k for k, how in library.info().items() if k[0].startswith(NODE[name])
                and k[1] == np.dtype(dtype).name]
        assert {k[0].split(".")[1].split("[")[0] for k in keys} >= {"forward", "backward"}


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "gelu"])
def test_non_contiguous_input_takes_the_numpy_kernel_with_equal_values(name, monkeypatch):
    arrays = _data((5, 4), np.float32, transposed=True)
    y, gs = _run(name, arrays, "wait", monkeypatch)
    y_ref, gs_ref = _run(name, arrays, "prims", monkeypatch)
    _close(y, y_ref, np.float32)
    for a, b in zip(gs, gs_ref):
        _close(a, b, np.float32)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "gelu"])
def test_double_backward_runs_the_reference(name, monkeypatch):
    arrays = _data((3, 6), np.float64)
    _, gs, gg = _run(name, arrays, "wait", monkeypatch, create_graph=True)
    _, gs_ref, gg_ref = _run(name, arrays, "prims", monkeypatch, create_graph=True)
    for a, b in zip(list(gs) + list(gg), list(gs_ref) + list(gg_ref)):
        if a is None or b is None:
            assert a is None and b is None
        else:
            _close(a, b, np.float64)


def test_nonfinite_rows_as_the_reference(monkeypatch):
    x = np.array([[1., np.inf, 0.], [np.nan, 1., 2.], [-np.inf, -np.inf, 0.],
                  [-0., 0., 5.]], np.float32)
    for name in ("softmax", "log_softmax", "layer_norm_plain", "gelu"):
        y, _ = _run(name, (x, x[0], x[0]), "wait", monkeypatch)
        y_ref, _ = _run(name, (x, x[0], x[0]), "prims", monkeypatch)
        assert np.array_equal(np.isnan(y.detach().numpy()), np.isnan(y_ref.detach().numpy()))
        _close(y, y_ref, np.float32)


def test_weight_only_and_bias_only_layer_norms_are_different_kernels(monkeypatch):
    monkeypatch.setenv("AOTGRAD_EAGER_KERNELS", "wait")
    x, w, b = _data((3, 5), np.float64)
    x = ag.tensor(x)
    for kw in (dict(weight=ag.tensor(w)), dict(bias=ag.tensor(b))):
        y = F.layer_norm(x, (5,), **kw)
        monkeypatch.setenv("AOTGRAD_EAGER_KERNELS", "off")
        y_ref = F.layer_norm(x, (5,), **kw)
        monkeypatch.setenv("AOTGRAD_EAGER_KERNELS", "wait")
        _close(y, y_ref, np.float64)


def test_float32_stays_float32(monkeypatch):
    monkeypatch.setenv("AOTGRAD_EAGER_KERNELS", "wait")
    x = ag.randn(3, 4, requires_grad=True)
    for f in (lambda t: F.softmax(t, -1), F.gelu, lambda t: F.layer_norm(t, (4,))):
        y = f(x)
        (g,) = ag.autograd.grad(y.sum(), [x])
        assert y.dtype == ag.float32 and g.dtype == ag.float32


_SCRIPT = textwrap.dedent("""
    import json, os
    os.environ["AOTGRAD_EAGER_KERNELS"] = "wait"
    import numpy as np, aotgrad as ag
    from aotgrad.runtime.kernel_library import library
    x = ag.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3), requires_grad=True)
    y = ag.nn.functional.softmax(x, -1)
    y.sum().backward()
    print(json.dumps({"|".join(map(str, k[:2])): how for k, how in library.info().items()}))
""")


def test_a_second_process_loads_the_kernels_from_the_disk_cache(tmp_path):
    env = dict(os.environ, AOTGRAD_CACHE_DIR=str(tmp_path / "cache"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    runs = [json.loads(subprocess.run([sys.executable, "-c", _SCRIPT], env=env, check=True,
                                      capture_output=True, text=True, timeout=300)
                       .stdout.strip().splitlines()[-1]) for _ in range(2)]
    first, second = runs
    assert set(first) == set(second) and len(first) == 2     # forward and backward
    assert set(first.values()) == {"new"}
    assert set(second.values()) == {"disk"}


def test_background_mode_chooses_once_per_process(monkeypatch, tmp_path):
    """The default: a kernel not ready at its op's first use (not in memory, not on disk)
    leaves the op on its numpy kernel for the whole process, bit for bit, while it compiles
    in a background thread; a new process (clear()) loads it from the disk cache at first use
    and runs it from the first call."""
    monkeypatch.setenv("AOTGRAD_EAGER_KERNELS", "background")
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))   # (nothing compiled there yet)
    library.clear()
    x = ag.tensor(np.linspace(-3, 3, 12, dtype=np.float64).reshape(3, 4) + 0.25)
    assert library.info() == {}
    numpy_kernel, _ = eager_kernels._gelu_forward([x.numpy()], approximate="none")
    first = F.gelu(x)
    library.wait()
    key, = [k for k, how in library.info().items()
            if k[0] == "GeluBackward0.forward" and k[1] == "float64" and how is not None]
    assert key in library.numpy_keys()
    second = F.gelu(x)             # compiled by now, but not ready at first use: numpy still
    np.testing.assert_array_equal(first.numpy(), numpy_kernel)
    np.testing.assert_array_equal(second.numpy(), numpy_kernel)
    library.clear()                # as a new process: on disk now, loaded at first use
    third = F.gelu(x)
    assert library.info()[key] in ("disk", "memory") and key not in library.numpy_keys()
    generated, = library.shaped_kernel(eager_kernels.ShapedOp(
        key[0], np.float64, key[2], None, key[3]))([x.numpy().reshape(-1)], {"n": 12})
    np.testing.assert_array_equal(third.numpy().reshape(-1), generated)
    assert_close(third.numpy(), numpy_kernel, rtol=1e-12, atol=1e-13)


def test_kernels_off_keeps_the_numpy_path(monkeypatch):
    monkeypatch.setenv("AOTGRAD_EAGER_KERNELS", "off")
    library.clear()
    F.softmax(ag.randn(2, 3), -1)
    assert library.info() == {}


def test_off_turns_off_kernels_already_compiled(monkeypatch):
    x = ag.tensor(np.linspace(-4, 4, 10, dtype=np.float32))
    monkeypatch.setenv("AOTGRAD_EAGER_KERNELS", "wait")
    F.gelu(x)
    monkeypatch.setenv("AOTGRAD_EAGER_KERNELS", "off")
    off = F.gelu(x)
    with monkeypatch.context() as m:
        m.setattr(eager_kernels, "run", lambda *a, **k: None)
        prims = F.gelu(x)
    numpy_kernel, _ = eager_kernels._gelu_forward([x.numpy()], approximate="none")
    np.testing.assert_array_equal(off.numpy(), numpy_kernel)   # the numpy kernel, bit for bit
    assert_close(off.numpy(), prims.numpy(), rtol=1e-6, atol=1e-7)


def test_a_bad_mode_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("AOTGRAD_EAGER_KERNELS", "sometimes")
    library.clear()
    with pytest.raises(ValueError, match="AOTGRAD_EAGER_KERNELS must be one of"):
        F.softmax(ag.randn(2, 3), -1)


POOLS = [((2, 3, 8, 8), dict(kernel_size=2)), ((1, 1, 7, 9), dict(kernel_size=3, stride=2)),
         ((2, 2, 6, 6), dict(kernel_size=2, stride=1)),
         ((3, 1, 9, 9), dict(kernel_size=(2, 3), stride=(2, 3), dilation=2)),
         ((1, 2, 5, 5), dict(kernel_size=2, ceil_mode=True)),     # (ceil_mode pads: numpy)
         ((2, 1, 4, 4), dict(kernel_size=2, padding=1)),          # (padding: numpy)
         ((0, 2, 4, 4), dict(kernel_size=2))]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape,kw", POOLS, ids=lambda v: str(v))
def test_max_pool2d_generated_forward_equals_the_numpy_kernel_bit_for_bit(shape, kw, dtype,
                                                                          monkeypatch):
    """Values, and the gradients of the numpy backward from the generated kernel's tap
    indices, with NaN and ties in windows."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(dtype)
    if x.size:
        x.reshape(-1)[3] = np.nan
        x.reshape(-1)[5] = x.reshape(-1)[4]
    runs = []
    for mode in ("wait", "off"):
        monkeypatch.setenv("AOTGRAD_EAGER_KERNELS", mode)
        xt = ag.tensor(x, requires_grad=True)
        y = F.max_pool2d(xt, **kw)
        g = rng.standard_normal(tuple(y.shape)).astype(dtype) if not runs else runs[0][2]
        y.backward(ag.tensor(g))
        runs.append((y.detach().numpy(), xt.grad.numpy(), g))
    (y1, g1, _), (y2, g2, _) = runs
    assert y1.dtype == y2.dtype and y1.shape == y2.shape
    np.testing.assert_array_equal(y1.view(np.uint8), y2.view(np.uint8))
    np.testing.assert_array_equal(g1, g2)


def test_max_pool2d_as_torch(torch, monkeypatch):
    monkeypatch.setenv("AOTGRAD_EAGER_KERNELS", "wait")
    x = np.random.default_rng(1).standard_normal((2, 3, 9, 9)).astype(np.float32)
    out = []
    for M in (ag, torch):
        xt = M.tensor(x, requires_grad=True)
        y = M.nn.functional.max_pool2d(xt, 3, 2)
        (y * y).sum().backward()
        out.append((y.detach().numpy(), xt.grad.numpy()))
    for a, b in zip(*out):
        np.testing.assert_array_equal(a, b)


AVG_POOLS = POOLS[:5] + [
    ((2, 1, 5, 4), dict(kernel_size=3, padding=1)),
    ((2, 1, 5, 4), dict(kernel_size=3, padding=1, count_include_pad=False)),
    ((1, 2, 7, 7), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                        count_include_pad=False)),
    ((2, 2, 6, 6), dict(kernel_size=2, divisor_override=3)),
    ((0, 2, 4, 4), dict(kernel_size=2)), ((3, 4, 4), dict(kernel_size=2))]
AVG_POOLS = [(s, {k: v for k, v in kw.items() if k != "dilation"}) for s, kw in AVG_POOLS]


def _avg_pool(x, kw, mode, monkeypatch, M=ag):
    with monkeypatch.context() as m:
        m.setenv("AOTGRAD_EAGER_KERNELS", "off" if mode == "prims" else mode)
        if mode == "prims":
            m.setattr(eager_kernels, "run", lambda *a, **k: None)
        xt = M.tensor(x, requires_grad=True)
        y = M.nn.functional.avg_pool2d(xt, **kw)
        (y * y).sum().backward()
        return y.detach().numpy(), xt.grad.numpy(), y.grad_fn.name()


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("shape,kw", AVG_POOLS, ids=lambda v: str(v))
def test_avg_pool2d_kernels_equal_the_prims(shape, kw, dtype, monkeypatch):
    """The generated forward (no padding) and the numpy kernel against the prims: values
    and gradients, with padding, ceil_mode, count_include_pad and divisor_override."""
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    ref = _avg_pool(x, kw, "prims", monkeypatch)
    tol = dict(rtol=2e-6, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    for mode in ("wait", "off"):
        got = _avg_pool(x, kw, mode, monkeypatch)
        for a, b in zip(got[:2], ref[:2]):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert_close(a, b, **tol)
        assert got[2] == "AvgPool2DBackward0"


def test_avg_pool2d_as_torch(torch, monkeypatch):
    x = np.random.default_rng(2).standard_normal((2, 3, 9, 9))
    for kw in (dict(kernel_size=3, stride=2), dict(kernel_size=2, padding=1, ceil_mode=True,
                                                   count_include_pad=False)):
        got = _avg_pool(x, kw, "wait", monkeypatch)
        want = _avg_pool(x, kw, "wait", monkeypatch, M=torch)
        for a, b in zip(got[:2], want[:2]):
            assert_close(a, b, rtol=1e-12, atol=1e-13)
        assert got[2] == want[2]
