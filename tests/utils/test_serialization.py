"""aotgrad.save / aotgrad.load without PyTorch: containers and scalars keep their types,
tensors their dtype, shape, values and requires_grad, shared tensors stay shared, the file is
a zip of JSON + safetensors that loads without unpickling, arbitrary objects need
weights_only=False or an allowed global, and resuming training from a checkpoint gives the
parameters of an uninterrupted run."""
import copy
import io
import json
import math
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

import aotgrad
from aotgrad import nn, optim


def _round_trip(obj, **load_kw):
    buf = io.BytesIO()
    aotgrad.save(obj, buf)
    buf.seek(0)
    return aotgrad.load(buf, **load_kw)


def _same_structure(a, b):
    assert type(a) is type(b), (a, b)
    if isinstance(a, aotgrad.Tensor):
        assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
        assert a.requires_grad == b.requires_grad
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same_structure(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same_structure(x, y)
    elif isinstance(a, (float, np.floating)) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b
        if isinstance(a, float):
            assert math.copysign(1, a) == math.copysign(1, b)


def test_nested_containers_and_scalars_keep_their_types():
    obj = {
        "ints": {0: 1, 1: -2, 10 ** 30: "big key"},
        "od": OrderedDict([("z", 1), ("a", 2)]),
        "tuple": (1, 2.5, None, True, False, "x"),
        "list": [[], [{}], ()],
        "floats": [float("nan"), float("inf"), -float("inf"), -0.0, 1e-300],
        "text": "héllo ∑",
        "set": {1, 2, 3},
        "frozen": frozenset({"a"}),
        "bytes": b"\x00\xffabc",
        "complex": 1 + 2j,
        "dtype": aotgrad.float64,
        "size": aotgrad.Size([2, 3]),
        (1, "tuple key"): None,
        "numpy": [np.float32(0.25), np.int64(-3), np.bool_(True), np.float64("nan")],
    }
    _same_structure(obj, _round_trip(obj))
    arr = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = _round_trip({"arr": arr})["arr"]
    assert out.dtype == np.int32 and (out == arr).all()


@pytest.mark.parametrize("dtype", [aotgrad.float32, aotgrad.float64, aotgrad.int32,
                                   aotgrad.int64, aotgrad.bool])
def test_tensors_keep_dtype_shape_and_values(dtype):
    base = aotgrad.arange(24).reshape(2, 3, 4).to(dtype)
    obj = {"t": base, "scalar": aotgrad.tensor(3).to(dtype),
           "empty": aotgrad.zeros(0, 5, dtype=dtype),
           "transposed": base.transpose(0, 2), "strided": base[:, ::2, 1:]}
    _same_structure(obj, _round_trip(obj))


def test_requires_grad_and_parameters_are_preserved_state_dict_tensors_are_detached():
    lin = nn.Linear(3, 2)
    x = aotgrad.randn(4, requires_grad=True)
    out = _round_trip({"x": x, "w": lin.weight, "sd": lin.state_dict()})
    assert out["x"].requires_grad and out["x"].is_leaf
    assert type(out["w"]) is nn.Parameter and out["w"].requires_grad
    assert all(not v.requires_grad and type(v) is aotgrad.Tensor for v in out["sd"].values())
    frozen = nn.Parameter(aotgrad.ones(2), requires_grad=False)
    assert not _round_trip(frozen).requires_grad


def test_one_tensor_under_two_names_loads_as_one():
    t = aotgrad.randn(3)
    out = _round_trip({"a": t, "b": [t, (t,)]})
    assert out["a"] is out["b"][0] is out["b"][1][0]


def test_tied_weights_share_one_storage_and_load_into_the_model():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Linear(4, 4, bias=False)
            self.out = nn.Linear(4, 4, bias=False)
            self.out.weight = self.emb.weight

    m = Tied()
    sd = m.state_dict()
    buf = io.BytesIO()
    aotgrad.save(sd, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as z:
        from safetensors.numpy import load as st_load
        assert len(st_load(z.read("tensors.safetensors"))) == 1  # stored once
    buf.seek(0)
    loaded = aotgrad.load(buf)
    assert np.shares_memory(loaded["emb.weight"].numpy(), loaded["out.weight"].numpy())
    m2 = Tied()
    m2.load_state_dict(loaded)
    np.testing.assert_array_equal(m2.out.weight.detach().numpy(), m.emb.weight.detach().numpy())


def test_paths_and_file_objects(tmp_path):
    obj = {"w": aotgrad.randn(2, 2)}
    for target in (str(tmp_path / "a.pt"), tmp_path / "b.pt"):
        aotgrad.save(obj, target)
        _same_structure(obj, aotgrad.load(target))
    with open(tmp_path / "c.pt", "wb") as f:
        aotgrad.save(obj, f)
    with open(tmp_path / "c.pt", "rb") as f:
        _same_structure(obj, aotgrad.load(f))


def test_file_is_a_zip_of_json_and_safetensors_without_pickles(tmp_path):
    m = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    opt = optim.Adam(m.parameters())
    m(aotgrad.randn(4, 2)).sum().backward()
    opt.step()
    path = tmp_path / "ck.pt"
    aotgrad.save({"model": m.state_dict(), "optim": opt.state_dict()}, path)
    with zipfile.ZipFile(path) as z:
        assert sorted(z.namelist()) == ["checkpoint.json", "tensors.safetensors"]
        doc = json.loads(z.read("checkpoint.json"))
    assert doc["format"] == "aotgrad-checkpoint" and doc["version"] == 1
    n_params = len(list(m.parameters()))  # each with step, exp_avg, exp_avg_sq
    assert len(doc["tensors"]) == len(m.state_dict()) + 3 * n_params


class Config:  # a user's class: pickled at save time
    def __init__(self, depth):
        self.depth = depth


def test_arbitrary_objects_need_weights_only_false_or_an_allowed_global():
    buf = io.BytesIO()
    aotgrad.save({"cfg": Config(3), "w": aotgrad.ones(2)}, buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match=r"Weights only load failed.*Config"):
        aotgrad.load(buf)
    buf.seek(0)
    assert aotgrad.load(buf, weights_only=False)["cfg"].depth == 3
    buf.seek(0)
    with aotgrad.serialization.safe_globals([Config]):
        assert aotgrad.load(buf)["cfg"].depth == 3
    assert Config not in aotgrad.serialization.get_safe_globals()
    aotgrad.serialization.add_safe_globals([Config])
    try:
        buf.seek(0)
        assert aotgrad.load(buf)["cfg"].depth == 3
    finally:
        aotgrad.serialization.clear_safe_globals()


def test_whole_module_with_weights_only_false():
    m = nn.Sequential(nn.Linear(2, 3), nn.Tanh())
    m2 = _round_trip(m, weights_only=False)
    x = aotgrad.randn(5, 2)
    np.testing.assert_array_equal(m(x).detach().numpy(), m2(x).detach().numpy())


def test_map_location():
    t = aotgrad.randn(3)
    assert _round_trip(t, map_location="cpu").tolist() == t.tolist()
    assert _round_trip(t, map_location={"cuda:0": "cpu"}).tolist() == t.tolist()
    doubled = _round_trip([t, t], map_location=lambda x, loc: x * 2)
    assert doubled[0] is doubled[1] and doubled[0].tolist() == (t * 2).tolist()
    with pytest.raises(RuntimeError, match="no CUDA device"):
        _round_trip(t, map_location="cuda")


def test_safetensors_file_loads_as_a_dict_of_tensors(tmp_path):
    from safetensors.numpy import save_file
    save_file({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, str(tmp_path / "m.safetensors"))
    out = aotgrad.load(tmp_path / "m.safetensors")
    assert out["w"].dtype == aotgrad.float32 and out["w"].tolist() == [[0, 1, 2], [3, 4, 5]]


def test_unknown_files_raise_clearly(tmp_path):
    (tmp_path / "x.pt").write_bytes(pickle.dumps({"a": 1}))
    with pytest.raises(RuntimeError, match="not a checkpoint aotgrad can read"):
        aotgrad.load(tmp_path / "x.pt")


def _train(model, opt, sched, batches):
    for x, y in batches:
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        sched.step()


@pytest.mark.parametrize("make_opt", [lambda p: optim.Adam(p, lr=0.05),
                                      lambda p: optim.SGD(p, lr=0.05, momentum=0.9),
                                      lambda p: optim.RMSprop(p, lr=0.01, centered=True)],
                         ids=["Adam", "SGD", "RMSprop"])
def test_resuming_from_a_checkpoint_matches_not_stopping(tmp_path, make_opt):
    aotgrad.manual_seed(0)
    batches = [(aotgrad.randn(8, 3), aotgrad.randn(8, 1)) for _ in range(10)]
    model = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    init = copy.deepcopy(model.state_dict())

    def fresh():
        m = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
        m.load_state_dict(init)
        o = make_opt(m.parameters())
        return m, o, optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)

    m1, o1, s1 = fresh()
    _train(m1, o1, s1, batches)

    m2, o2, s2 = fresh()
    _train(m2, o2, s2, batches[:4])
    aotgrad.save({"model": m2.state_dict(), "optim": o2.state_dict(),
                  "sched": s2.state_dict(), "epoch": 4}, tmp_path / "ck.pt")
    del m2, o2, s2
    ck = aotgrad.load(tmp_path / "ck.pt")
    m3, o3, s3 = fresh()
    m3.load_state_dict(ck["model"])
    o3.load_state_dict(ck["optim"])
    s3.load_state_dict(ck["sched"])
    _train(m3, o3, s3, batches[ck["epoch"]:])
    for a, b in zip(m1.parameters(), m3.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


def test_lbfgs_state_round_trips_through_a_checkpoint():
    A = aotgrad.tensor([[3.0, 1.0], [1.0, 2.0]], dtype=aotgrad.float64)

    def run(x, opt):
        def closure():
            opt.zero_grad()
            loss = 0.5 * (x * (A @ x)).sum() + (x ** 4).sum()
            loss.backward()
            return loss
        opt.step(closure)

    x1 = aotgrad.tensor([1.0, -1.5], dtype=aotgrad.float64, requires_grad=True)
    o1 = optim.LBFGS([x1], max_iter=3, history_size=2)
    run(x1, o1)
    ck = _round_trip({"x": x1.detach(), "optim": o1.state_dict()})
    x2 = ck["x"].clone().requires_grad_(True)
    o2 = optim.LBFGS([x2], max_iter=3, history_size=2)
    o2.load_state_dict(ck["optim"])
    run(x1, o1)
    run(x2, o2)
    np.testing.assert_array_equal(x1.detach().numpy(), x2.detach().numpy())
