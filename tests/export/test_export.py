"""aotgrad.export: saved packages run without aotgrad (a subprocess where importing aotgrad
and torch fails) and agree with eager; ONNX files run in onnxruntime and agree with eager;
training exports give eager's gradients. Models: an MLP, a CNN, a transformer block and a
small GPT, at small sizes."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aotgrad
from aotgrad import nn
import aotgrad.nn.functional as F
from aotgrad.testing import assert_close


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False, is_causal=True)[0]
        return x + self.mlp(self.ln2(x))


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.qkv, self.proj = heads, nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.reshape(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // self.heads) ** 0.5)
        mask = aotgrad.tril(aotgrad.ones(t, t, dtype=aotgrad.bool_))
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, c))


class GPTBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=13, dim=16, heads=2, seq=6, layers=2):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.Sequential(*[GPTBlock(dim, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        pos = aotgrad.arange(idx.shape[1])
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def _models():
    aotgrad.manual_seed(0)
    rng = np.random.default_rng(0)
    mlp = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(),
                        nn.Linear(32, 10))
    cnn = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(4, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(32, 10))
    block = Block(16, 2)
    gpt = GPT()
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    labels = rng.integers(0, 10, 4)
    tokens = rng.integers(0, 13, (2, 6))
    return {  # name: (model, example inputs, loss of (model output, target), target)
        "mlp": (mlp, [f32(4, 64)], F.cross_entropy, labels),
        "cnn": (cnn, [f32(4, 1, 8, 8)], F.cross_entropy, labels),
        "block": (block, [f32(2, 5, 16)], F.mse_loss, f32(2, 5, 16)),
        "gpt": (gpt, [tokens], lambda out, y: F.cross_entropy(out.reshape(-1, 13),
                                                              y.reshape(-1)),
                rng.integers(0, 13, (2, 6))),
    }


def _eager(model, inputs):
    with aotgrad.no_grad():
        return model(*[aotgrad.tensor(x) for x in inputs]).numpy()


def _eager_grads(model, loss_fn, inputs, target):
    model.zero_grad()
    loss = loss_fn(model(*[aotgrad.tensor(x) for x in inputs]), aotgrad.tensor(target))
    loss.backward()
    return [loss.item()] + [p.grad.numpy() for p in model.parameters()]


def _train_fn(model, loss_fn):
    def step(*args):
        return loss_fn(model(*args[:-1]), args[-1])
    return step


BLOCKER = textwrap.dedent("""
    import importlib.util, json, sys
    import numpy as np

    class Blocker:   # importing aotgrad or torch fails in this process
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("aotgrad", "torch"):
                raise ImportError(f"{name} is blocked in this test")
    sys.meta_path.insert(0, Blocker())
    for name in ("aotgrad", "torch"):
        try:
            __import__(name)
        except ImportError:
            pass
        else:
            raise SystemExit(f"{name} could be imported")
    jobs = json.load(open(sys.argv[1]))
    for i, (pkg, inputs, out) in enumerate(jobs):
        spec = importlib.util.spec_from_file_location(f"pkg{i}", pkg + "/run.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        args = [np.load(p) for p in inputs]
        res = mod.run(*args)
        res = list(res) if isinstance(res, tuple) else [res]
        np.savez(out, *res)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("aotgrad", "torch"))
    print("ran", len(jobs), "packages;", loaded)
""")


# training packages compiled and run in the default run (Numba compiles every kernel of a
# package on its first run: the transformer's and GPT's training programs take ~50 s more;
# they run under -m slow, and their exported graphs are checked against eager below anyway)
QUICK_TRAIN = ("mlp", "cnn")


def _run_without_aotgrad(root, jobs):
    """Run packages in a subprocess where aotgrad and torch cannot be imported."""
    with open(root / "jobs.json", "w") as f:
        json.dump(jobs, f)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", BLOCKER, str(root / "jobs.json")],
                          capture_output=True, text=True, timeout=600, cwd=str(root), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"ran {len(jobs)} packages; []" in proc.stdout, proc.stdout
    out = []
    for _, _, path in jobs:
        with np.load(path) as z:
            out.append([z[f"arr_{i}"] for i in range(len(z.files))])
    return out


def _job(root, name, kind, prog, args, precompile=False):
    pkg = root / f"{name}_{kind}"
    prog.save(str(pkg), precompile=precompile)
    if precompile:   # a copy elsewhere (modification times kept) uses the compiled kernels
        import shutil
        pkg = shutil.copytree(pkg, root / f"{name}_{kind} copied")
        assert any(f.endswith(".nbi") for f in os.listdir(pkg / "kernels" / "__pycache__"))
    paths = []
    for j, a in enumerate(args):
        paths.append(str(root / f"{name}_{kind}_in{j}.npy"))
        np.save(paths[-1], a)
    return (str(pkg), paths, str(root / f"{name}_{kind}_out.npz"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every model exported (inference and training), saved, and run once in a subprocess
    where aotgrad and torch cannot be imported (its results, per package)."""
    root = tmp_path_factory.mktemp("export")
    models = _models()
    results, jobs, which = {}, [], []
    for name, (model, inputs, loss_fn, target) in models.items():
        model.eval()
        ep = aotgrad.export(model, *[aotgrad.tensor(x) for x in inputs])
        ept = aotgrad.export(_train_fn(model, loss_fn),
                             *[aotgrad.tensor(x) for x in inputs + [target]], train=True)
        jobs.append(_job(root, name, "infer", ep, inputs, precompile=name == "mlp"))
        which.append((name, "infer"))
        if name in QUICK_TRAIN:
            jobs.append(_job(root, name, "train", ept, inputs + [target]))
            which.append((name, "train"))
        results[name] = dict(model=model, inputs=inputs, target=target, loss_fn=loss_fn,
                             ep=ep, ept=ept, root=root)
    for (name, kind), out in zip(which, _run_without_aotgrad(root, jobs)):
        results[name][kind] = out
    return results


NAMES = ["mlp", "cnn", "block", "gpt"]


@pytest.mark.parametrize("name", NAMES)
def test_package_outputs_equal_eager_without_aotgrad(exported, name):
    r = exported[name]
    want = _eager(r["model"], r["inputs"])
    (got,) = r["infer"]
    assert got.dtype == want.dtype == np.float32
    assert_close(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)


def _check_grads(got, want):
    assert len(got) == len(want)
    assert_close(got[0], want[0], rtol=1e-4, atol=0, equal_nan=True)
    for g, w in zip(got[1:], want[1:]):
        assert_close(g, w, rtol=1e-3, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("name", NAMES)
def test_training_export_gives_eager_loss_and_gradients(exported, name):
    r = exported[name]
    want = _eager_grads(r["model"], r["loss_fn"], r["inputs"], r["target"])
    _check_grads(r["ept"](*r["inputs"], r["target"]), want)   # the graph, reference prims


@pytest.mark.parametrize("name", QUICK_TRAIN)
def test_training_package_gradients_equal_eager(exported, name):
    r = exported[name]
    want = _eager_grads(r["model"], r["loss_fn"], r["inputs"], r["target"])
    got = r["train"]
    assert r["ept"].output_names[0] == "loss"
    assert r["ept"].output_names[1:] == ["grad.model." + n for n, _ in
                                         r["model"].named_parameters()]
    _check_grads(got, want)


@pytest.mark.slow
def test_training_packages_of_the_transformer_and_gpt_equal_eager(exported, tmp_path):
    names = [n for n in NAMES if n not in QUICK_TRAIN]
    jobs = [_job(tmp_path, n, "train", exported[n]["ept"],
                 exported[n]["inputs"] + [exported[n]["target"]]) for n in names]
    for name, got in zip(names, _run_without_aotgrad(tmp_path, jobs)):
        r = exported[name]
        _check_grads(got, _eager_grads(r["model"], r["loss_fn"], r["inputs"], r["target"]))


def test_exported_program_names_its_state_and_prints_as_the_ir(exported):
    ep = exported["mlp"]["ep"]
    names = [(i.name, i.kind.name) for i in ep.inputs]
    assert names[0] == ("input", "USER")
    assert names[1:3] == [("0.weight", "PARAMETER"), ("0.bias", "PARAMETER")]
    text = str(ep)
    assert "parameter  0.weight -> p_0_weight: float32[32,64]" in text
    assert "prims.dot_general" in text
    # the graph part is the IR's printed form: it runs with the reference prims
    from aotgrad.ir.printer import load_graph_source
    graph_src = text[text.index("def "):]
    run = load_graph_source(graph_src)
    x = exported["mlp"]["inputs"][0]
    (out,) = run(x, *[i.value for i in ep.inputs[1:]])
    assert_close(out, _eager(exported["mlp"]["model"], [x]), rtol=1e-5, atol=1e-6, equal_nan=True)


def test_load_exported_runs_a_copied_package_and_checks_shapes(exported, tmp_path):
    import shutil
    r = exported["cnn"]
    src = r["root"] / "cnn_infer"
    dst = tmp_path / "some other name"
    shutil.copytree(src, dst)
    f = aotgrad.load_exported(str(dst))
    x = r["inputs"][0]
    assert_close(f(aotgrad.tensor(x)), _eager(r["model"], [x]), rtol=1e-4, atol=1e-5,
                 equal_nan=True)
    with pytest.raises(ValueError, match=r"input 'input' has shape \(2, 1, 8, 8\); the "
                                         r"program was exported for shape \(4, 1, 8, 8\)"):
        f(x[:2])
    with pytest.raises(TypeError, match="dtype float64"):
        f(x.astype(np.float64))
    with open(dst / "manifest.json") as fh:
        m = json.load(fh)
    assert m["inputs"] == [{"name": "input", "shape": [4, 1, 8, 8], "dtype": "float32",
                            "dynamic_dims": []}]
    assert m["outputs"][0]["shape"] == [4, 10]


def test_precompile_compiles_into_each_package_of_the_same_program(exported, tmp_path):
    """Saving one program twice with precompile in one process compiles the kernels into
    both packages: the second must not find the first's module and skip its own cache."""
    ep = exported["mlp"]["ep"]
    for sub in ("first", "second"):
        pkg = tmp_path / sub
        ep.save(str(pkg), precompile=True)
        cached = os.listdir(pkg / "kernels" / "__pycache__")
        assert any(f.endswith(".nbi") for f in cached), (sub, cached)


def test_bad_dynamic_dims_are_clear_errors():
    m = nn.Linear(3, 2)
    with pytest.raises(TypeError, match="dynamic_dims for argument 0 is 'batch'"):
        aotgrad.export(m, aotgrad.randn(4, 3), dynamic_dims={0: "batch"})
    with pytest.raises(IndexError, match="dim 2 out of range"):
        aotgrad.export(m, aotgrad.randn(4, 3), dynamic_dims={0: 2})
    with pytest.raises(ValueError, match="sizes 0 and 1 are specialised"):
        aotgrad.export(m, aotgrad.randn(1, 3), dynamic_dims={0: 0})
    with pytest.raises(ValueError, match="'y', which is not an argument"):
        aotgrad.export(m, aotgrad.randn(4, 3), dynamic_dims={"y": 0})


def test_random_ops_and_state_writes_are_refused_clearly():
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    with pytest.raises(aotgrad.export.ExportError, match="random numbers"):
        aotgrad.export(m, aotgrad.randn(4, 3))
    bn = nn.BatchNorm1d(3)
    with pytest.raises(aotgrad.export.ExportError, match="in place"):
        aotgrad.export(bn, aotgrad.randn(4, 3))
    bn.eval()
    ep = aotgrad.export(bn, aotgrad.randn(4, 3))
    # the running statistics (num_batches_tracked is not read in eval mode)
    assert [(i.name, i.kind.name) for i in ep.inputs[1:]] == [
        ("weight", "PARAMETER"), ("bias", "PARAMETER"), ("running_mean", "BUFFER"),
        ("running_var", "BUFFER")]


def test_standalone_reference_prims_match_the_ir_prims():
    from aotgrad.export.standalone.reference import IMPLS
    from aotgrad.ir import prims
    from aotgrad.ir import dtypes as dt
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    idx = rng.integers(0, 4, (3, 2, 5))
    xn = np.where(rng.random(x.shape) < 0.2, np.nan, np.round(x)).astype(np.float32)  # ties, NaN
    cases = {
        "dot_general": ((x, x), dict(contract=((2,), (2,)), batch=((0,), (0,)))),
        "gather": ((x, idx), dict(dim=1)),
        "scatter_add": ((x, idx, rng.standard_normal((3, 2, 5)).astype(np.float32)),
                        dict(dim=1)),
        "pad": ((x,), dict(config=((1, 0, 1), (0, 2, 0), (0, 0, 0)), value=-1.0)),
        "concatenate": ((x, x), dict(dim=1)),
        "rev": ((x,), dict(dims=(0, 2))),
        "reduce_sum": ((x,), dict(dims=(1,))), "reduce_max": ((x,), dict(dims=(0, 2))),
        "reduce_min": ((x,), dict(dims=(1,))), "reduce_prod": ((x,), dict(dims=(2,))),
        "argmax": ((x,), dict(dim=1)), "argmin": ((x,), dict(dim=0)),
        "cumsum": ((x,), dict(dim=2)), "argsort": ((x,), dict(dim=1, descending=True)),
        "cumprod": ((x,), dict(dim=1)), "logcumsumexp": ((x,), dict(dim=2)),
        "cumargmax": ((xn,), dict(dim=2)), "cumargmin": ((xn,), dict(dim=1)),
        "searchsorted": ((np.sort(x, axis=-1), xn), dict(right=True)),
        "broadcast_in_dim": ((x[:, :1],), dict(shape=(2, 3, 4, 5), dims=(1, 2, 3))),
        "reshape": ((x,), dict(shape=(12, 5))), "transpose": ((x,), dict(perm=(2, 0, 1))),
        "slice": ((x,), dict(start=(0, 1, 0), limit=(3, 4, 5), strides=(2, 1, 3))),
        "convert_element_type": ((x,), dict(dtype=dt.int32)),
        "iota": ((), dict(shape=(3, 4), dim=1, dtype=dt.int64)),
        "full": ((), dict(shape=(2, 3), value=2.5, dtype=dt.float32)),
    }
    assert set(cases) == set(IMPLS)
    for name, (args, params) in cases.items():
        want = prims.PRIMS[name].impl(*args, **params)
        plain = {k: (v.np if isinstance(v, dt.DType) else v) for k, v in params.items()}
        got = IMPLS[name](*args, **plain)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        np.testing.assert_array_equal(got, want, err_msg=name)   # (NaN equal to NaN)


# ---- ONNX -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ort():
    pytest.importorskip("onnx")
    return pytest.importorskip("onnxruntime")


def _run_onnx(ort, model_proto, feeds):
    sess = ort.InferenceSession(model_proto.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.parametrize("name", NAMES)
def test_onnxruntime_equals_eager(exported, ort, name, tmp_path):
    r = exported[name]
    path = tmp_path / f"{name}.onnx"
    proto = r["ep"].to_onnx(str(path))
    assert path.exists()
    import onnx
    onnx.checker.check_model(onnx.load(str(path)))
    # graph inputs are the user's inputs alone; parameters are initializers
    assert [i.name for i in proto.graph.input] == [i.name for i in r["ep"].user_inputs]
    inits = {i.name for i in proto.graph.initializer}
    assert {n for n, _ in r["model"].named_parameters()} <= inits
    (got,) = _run_onnx(ort, proto, {i.name: x for i, x in zip(r["ep"].user_inputs,
                                                               r["inputs"])})
    assert_close(got, _eager(r["model"], r["inputs"]), rtol=1e-4, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("name", NAMES)
def test_onnx_training_graph_gives_eager_loss_and_gradients(exported, ort, name):
    r = exported[name]
    proto = r["ept"].to_onnx()
    feeds = {i.name: x for i, x in zip(r["ept"].user_inputs, r["inputs"] + [r["target"]])}
    got = _run_onnx(ort, proto, feeds)
    want = _eager_grads(r["model"], r["loss_fn"], r["inputs"], r["target"])
    assert [o.name for o in proto.graph.output] == r["ept"].output_names
    assert_close(got[0], want[0], rtol=1e-4, atol=0, equal_nan=True)
    for g, w in zip(got[1:], want[1:]):
        assert_close(g, w, rtol=1e-3, atol=1e-5, equal_nan=True)


def test_onnx_export_function_takes_pytorchs_arguments(ort, tmp_path):
    aotgrad.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Dropout(0.5), nn.Linear(4, 2))
    model.train()
    x = aotgrad.randn(3, 5)
    path = tmp_path / "m.onnx"
    aotgrad.onnx.export(model, (x,), str(path), input_names=["features"],
                        output_names=["scores"])
    assert model.training          # exported in eval mode (dropout off), mode restored
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["features"]
    assert [o.name for o in sess.get_outputs()] == ["scores"]
    model.eval()
    (got,) = sess.run(None, {"features": x.numpy()})
    assert_close(got, _eager(model, [x.numpy()]), rtol=1e-5, atol=1e-6, equal_nan=True)
    with open(tmp_path / "f.onnx", "wb") as fh:   # a file object, a lone tensor for args
        aotgrad.onnx.export(model, x, fh)
    # dynamic_axes: the batch dim is a dim_param, the graph serves another batch size
    aotgrad.onnx.export(model, (x,), str(path), input_names=["features"],
                        dynamic_axes={"features": {0: "b"}})
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x7 = aotgrad.randn(7, 5).numpy()
    (got,) = sess.run(None, {"features": x7})
    assert_close(got, _eager(model, [x7]), rtol=1e-5, atol=1e-6, equal_nan=True)


def test_onnx_unsupported_prim_names_the_prim_and_the_line(ort):
    def f(x):
        return aotgrad.erfinv(x.tanh() * 0.5)    # the line the error names
    ep = aotgrad.export(f, aotgrad.randn(4))
    with pytest.raises(aotgrad.export.ExportError,
                       match=r"prims\.erfinv \(from test_export\.py:\d+: `return aotgrad\.erfinv"):
        ep.to_onnx()


def test_import_aotgrad_loads_neither_onnx_nor_numba():
    root = os.path.dirname(os.path.dirname(os.path.abspath(aotgrad.__file__)))
    code = ("import sys, aotgrad\n"
            "assert callable(aotgrad.export) and callable(aotgrad.load_exported)\n"
            "import aotgrad.onnx\n"
            "from aotgrad.onnx import export, TrainingMode\n"
            "from aotgrad.export import ExportedProgram, ExportError\n"
            "print(sorted(m for m in ('onnx', 'onnxruntime', 'numba') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_export_example_runs_and_all_three_agree(tmp_path, capsys, example):
    res = example("export_model").main(
        ["--quick", "--steps", "20", "--reps", "3", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert res["agree"] and res["worst_diff"] < 1e-4
    assert "package run by a Python that cannot import aotgrad" in out
    assert f"all {len(res['ms'])} agree: True" in out
    assert {"eager", "package"} <= set(res["ms"])
    assert os.path.isfile(os.path.join(res["package"], "run.py"))


def test_package_with_several_outputs_an_input_returned_and_a_constant(tmp_path):
    scale = aotgrad.tensor([0.5, -2.0, 3.0])      # closed over: a constant of the program

    def f(x, idx):
        y = (x * scale).exp()
        return x, y, y.sum(1).gather(0, idx), x.flip(0)

    x = aotgrad.randn(2, 3)
    idx = aotgrad.tensor([1, 0, 1])
    ep = aotgrad.export(f, x, idx)
    assert [(i.name, i.kind.name) for i in ep.inputs] == [
        ("x", "USER"), ("idx", "USER"), ("constant0", "CONSTANT")]
    g = aotgrad.load_exported(ep.save(str(tmp_path / "pkg")))
    xs, ids = x.numpy(), idx.numpy()
    got = g(xs, ids)
    want = [t.numpy() for t in f(x, idx)]
    assert isinstance(got, tuple) and len(got) == 4
    for a, b in zip(got, want):
        assert_close(a, b, rtol=1e-6, atol=0, equal_nan=True)
    assert not np.shares_memory(got[0], xs)        # an input returned comes back as a copy
    with pytest.raises(IndexError, match="out of range|out of bounds"):
        g(xs, np.array([1, 0, 5]))                 # the index check runs in the package


@pytest.mark.parametrize("opset", [13, 18])
def test_onnx_opsets_old_and_new(exported, ort, opset):
    r = exported["block"]          # layer norm and softmax: ReduceMax's axes changed at 18
    proto = r["ep"].to_onnx(opset=opset)
    assert proto.opset_import[0].version == opset
    (got,) = _run_onnx(ort, proto, {"x": r["inputs"][0]})
    assert_close(got, _eager(r["model"], r["inputs"]), rtol=1e-4, atol=1e-5, equal_nan=True)
    if opset < 16:   # cross-entropy's backward scatters with ScatterElements' reduction
        with pytest.raises(aotgrad.export.ExportError, match=r"prims\.scatter_add .*opset 16"):
            exported["mlp"]["ept"].to_onnx(opset=opset)
    with pytest.raises(ValueError, match="opset 12 is not supported"):
        r["ep"].to_onnx(opset=12)


def test_data_dependent_shapes_and_16_bit_floats_are_clear_errors():
    def positives(x):
        return x[x > 0]                                  # a data-dependent shape

    with pytest.raises(aotgrad.export.ExportError,
                       match=r"test_export\.py:\d+: boolean mask indexing \(data-dependent "
                             r"shape\)  \[`return x\[x > 0\]"):
        aotgrad.export(positives, aotgrad.randn(4))
    with pytest.raises(aotgrad.export.ExportError, match="float16/bfloat16"):
        aotgrad.export(lambda x: x * 2, aotgrad.randn(4).half())


def test_package_runs_reference_steps_scans_and_sorts(tmp_path):
    def f(x):
        values, where = x.cummax(1)
        return x.cumsum(1) * values + x.cumprod(0), where, x.argsort(1), x.logcumsumexp(0)

    x = aotgrad.randn(3, 5)
    ep = aotgrad.export(f, x)
    got = aotgrad.load_exported(ep.save(str(tmp_path / "scans")))(x.numpy())
    for a, b in zip(got, f(x)):
        assert_close(a, b.numpy(), rtol=1e-5, atol=1e-6, equal_nan=True)
