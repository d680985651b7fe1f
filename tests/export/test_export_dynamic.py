"""aotgrad.export(..., dynamic_dims=...): programs with symbolic sizes. The saved package runs
without aotgrad (a subprocess where importing aotgrad and torch fails) at several sizes and
agrees with eager; a size that breaks a relation the program relies on is refused with an
error naming the input, the dim and the relation; ONNX graphs take dim_params and agree
with eager in onnxruntime at several sizes."""
import io
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aotgrad
from aotgrad import nn
from aotgrad.testing import assert_close

RUNNER = textwrap.dedent("""
    import importlib.util, json, sys
    import numpy as np

    class Blocker:   # importing aotgrad or torch fails in this process
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("aotgrad", "torch"):
                raise ImportError(f"{name} is blocked in this test")
    sys.meta_path.insert(0, Blocker())
    mods = {}
    for pkg, inputs, out in json.load(open(sys.argv[1])):
        if pkg not in mods:
            spec = importlib.util.spec_from_file_location(f"pkg{len(mods)}", pkg + "/run.py")
            mods[pkg] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mods[pkg])
        try:
            res = mods[pkg].run(*[np.load(p) for p in inputs])
        except ValueError as e:
            open(out + ".err", "w").write(str(e))
            continue
        np.savez(out, *(list(res) if isinstance(res, tuple) else [res]))
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("aotgrad", "torch"))
    print("loaded", loaded)
""")


def _run_packages(root, jobs):
    """jobs: (package dir, [arrays]) -> per job: the list of outputs, or the error text."""
    spec = []
    for k, (pkg, arrays) in enumerate(jobs):
        paths = [str(root / f"job{k}_in{j}.npy") for j in range(len(arrays))]
        for p, a in zip(paths, arrays):
            np.save(p, a)
        spec.append((str(pkg), paths, str(root / f"job{k}_out.npz")))
    with open(root / "jobs.json", "w") as f:
        json.dump(spec, f)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(root / "jobs.json")],
                          capture_output=True, text=True, timeout=600, cwd=str(root), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "loaded []" in proc.stdout, proc.stdout
    out = []
    for _, _, path in spec:
        if os.path.exists(path + ".err"):
            out.append(open(path + ".err").read())
        else:
            with np.load(path) as z:
                out.append([z[f"arr_{i}"] for i in range(len(z.files))])
    return out


def _mlp():
    aotgrad.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _pairs(x):
    """A reshape whose factor depends on a symbolic dim: the program needs s1 % 2 == 0."""
    return x.reshape(x.shape[0], -1, 2).sum(-1) * 2.0


def _eager(fn, *arrays):
    out = fn(*[aotgrad.tensor(a) for a in arrays])
    return out.detach().numpy()


def _eager_grads(model, loss_fn, x):
    model.zero_grad()
    loss = loss_fn(aotgrad.tensor(x))
    loss.backward()
    return [loss.item()] + [p.grad.numpy() for p in model.parameters()]


def _rand(*shape, seed=0):
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


def test_exported_program_prints_symbols_and_records_guards():
    ep = aotgrad.export(_mlp(), aotgrad.randn(5, 8), dynamic_dims={0: 0})
    text = str(ep)
    assert "f32[s0,8]" in text and "float32[s0,4]" in text
    m = ep.manifest()
    assert m["inputs"][0]["shape"] == ["s0", 8] and m["inputs"][0]["dynamic_dims"] == [0]
    assert m["symbols"] == ["s0"] and m["symbol_dims"] == {"s0": [0, 0]}
    ep2 = aotgrad.export(_pairs, aotgrad.randn(3, 6), dynamic_dims=[(0, 1)])
    assert ep2.symbols == ("s0", "s1")
    assert ep2.guards and all(g.check({"s0": 3, "s1": 6}) for g in ep2.guards)
    assert not all(g.check({"s0": 3, "s1": 7}) for g in ep2.guards)
    assert "guard" in str(ep2)


def test_exported_program_at_several_sizes_equals_eager():
    model = _mlp()
    ep = aotgrad.export(model, aotgrad.randn(5, 8), dynamic_dims={"input": [0]})
    for b in (2, 5, 11):
        x = _rand(b, 8)
        assert_close(ep(x), _eager(model, x), rtol=1e-5, atol=1e-6)
    ep2 = aotgrad.export(_pairs, aotgrad.randn(3, 6), dynamic_dims={0: (0, 1)})
    for shape in ((2, 4), (5, 10)):
        x = _rand(*shape)
        assert_close(ep2(x), _eager(_pairs, x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"input 'x' dim 1 \(s1 = 7\).*relation"):
        ep2(_rand(3, 7))
    # a dim the program matched against a parameter's size is pinned by a guard
    pinned = aotgrad.export(model, aotgrad.randn(5, 8), dynamic_dims={0: [0, 1]})
    assert pinned.manifest()["inputs"][0]["shape"] == ["s0", 8]
    assert_close(pinned(_rand(3, 8)), _eager(model, _rand(3, 8)), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"input 'input' dim 1 \(s1 = 9\).*s1 - 8"):
        pinned(_rand(3, 9))


def test_saved_packages_serve_several_sizes_without_aotgrad(tmp_path):
    model = _mlp()
    infer = aotgrad.export(model, aotgrad.randn(5, 8), dynamic_dims={0: 0}).save(
        str(tmp_path / "mlp"))
    pairs = aotgrad.export(_pairs, aotgrad.randn(3, 6), dynamic_dims={0: [0, 1]}).save(
        str(tmp_path / "pairs"))

    def loss_fn(x):
        return (model(x) ** 2).mean()
    train = aotgrad.export(loss_fn, aotgrad.randn(5, 8), dynamic_dims={0: 0},
                           train=True).save(str(tmp_path / "train"))
    aotgrad.manual_seed(0)
    block = _Block().eval()   # batch and sequence length symbolic, causal mask from arange
    blk = aotgrad.export(block, aotgrad.randn(2, 6, 16), dynamic_dims={0: [0, 1]}).save(
        str(tmp_path / "block"))
    batches = (3, 6, 13)
    jobs = [(infer, [_rand(b, 8)]) for b in batches]
    jobs += [(pairs, [_rand(*s)]) for s in ((2, 4), (4, 12))]
    jobs += [(train, [_rand(b, 8)]) for b in (3, 7)]
    jobs += [(pairs, [_rand(3, 7)]), (infer, [_rand(1, 8)]), (infer, [_rand(4, 5)])]
    jobs += [(blk, [_rand(*s)]) for s in ((2, 5, 16), (3, 9, 16))]
    got = _run_packages(tmp_path, jobs)
    for (_, (x,)), out in zip(jobs[10:], got[10:]):
        assert isinstance(out, list), out
        assert_close(out[0], _eager(block, x), rtol=1e-5, atol=1e-5)
    for (_, (x,)), out in zip(jobs[:5], got[:5]):
        fn = model if x.shape[1] == 8 else _pairs
        assert isinstance(out, list), out
        assert_close(out[0], _eager(fn, x), rtol=1e-5, atol=1e-6)
    for (_, (x,)), out in zip(jobs[5:7], got[5:7]):
        want = _eager_grads(model, loss_fn, x)
        assert isinstance(out, list), out
        assert len(out) == len(want)
        assert_close(float(out[0]), want[0], rtol=1e-5, atol=0)
        for g, w in zip(out[1:], want[1:]):
            assert_close(g, w, rtol=1e-4, atol=1e-6)
    guard, small, static = got[7:10]
    assert "input 'x' dim 1 (s1 = 7)" in guard and "relation the program relies on" in guard
    assert "% (2*s0)" in guard  # the relation itself
    assert "input 'input' dim 0 has size 1" in small and "sizes >= 2" in small
    assert "input 'input' has shape (4, 5)" in static and "[s0,8]" in static


@pytest.fixture
def ort():
    pytest.importorskip("onnx")
    return pytest.importorskip("onnxruntime")


def _session(ort, proto):
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


class _Block(nn.Module):
    """A transformer block with a causal mask built from the sequence length."""

    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 32), nn.GELU(), nn.Linear(32, dim))

    def forward(self, x):
        t = x.shape[1]
        causal = aotgrad.arange(t).unsqueeze(0) > aotgrad.arange(t).unsqueeze(1)
        h = self.ln(x)
        x = x + self.attn(h, h, h, need_weights=False, attn_mask=causal)[0]
        return x + self.mlp(x)


def test_onnx_symbolic_dims_are_dim_params_and_run_at_several_sizes(ort):
    model = _mlp()
    proto = aotgrad.export(model, aotgrad.randn(5, 8), dynamic_dims={0: {0: "batch"}}).to_onnx()
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 8]
    dims = proto.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 4]
    sess = _session(ort, proto)
    for b in (3, 9):
        x = _rand(b, 8)
        assert_close(sess.run(None, {"input": x})[0], _eager(model, x), rtol=1e-5, atol=1e-6)
    aotgrad.manual_seed(0)
    block = _Block().eval()
    ep = aotgrad.export(block, aotgrad.randn(2, 6, 16), dynamic_dims={0: [0, 1]})
    assert ep.symbols == ("s0", "s1")
    sess = _session(ort, ep.to_onnx())
    for shape in ((2, 5, 16), (3, 9, 16)):
        x = _rand(*shape)
        want = _eager(block, x)
        assert_close(ep(x), want, rtol=1e-5, atol=1e-5)
        assert_close(sess.run(None, {"x": x})[0], want, rtol=1e-4, atol=1e-5)


def test_onnx_export_takes_dynamic_axes(ort):
    model = _mlp()
    f = io.BytesIO()
    proto = aotgrad.onnx.export(model, (aotgrad.randn(5, 8),), f, input_names=["x"],
                                output_names=["y"],
                                dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})
    assert proto.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    sess = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"])
    for b in (2, 7):
        x = _rand(b, 8)
        assert_close(sess.run(None, {"x": x})[0], _eager(model, x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="dynamic_axes names 'z'"):
        aotgrad.onnx.export(model, (aotgrad.randn(5, 8),), io.BytesIO(), input_names=["x"],
                            output_names=["y"], dynamic_axes={"z": [0]})


def test_symbols_are_read_from_the_right_input_when_a_tensor_is_passed_twice():
    def f(a, b, c):
        return a * 2 + b + c.sum()
    x = aotgrad.randn(4, 3)
    ep = aotgrad.export(f, x, x, aotgrad.randn(5, 3), dynamic_dims={0: 0, 2: 0})
    assert [i.name for i in ep.user_inputs] == ["a", "c"]   # one input for the shared tensor
    assert ep.manifest()["symbol_dims"] == {"s0": [0, 0], "s1": [1, 0]}
    a, c = _rand(6, 3), _rand(7, 3)
    assert_close(ep(a, c), _eager(f, a, a, c), rtol=1e-5, atol=1e-6)
