"""Checkpoints written by torch.save (zip format) read by aotgrad.load: a model's and an
optimizer's state_dict, Parameters, views, shared tensors; in a process where torch cannot be
imported; refused globals; a torch Adam state continuing in aotgrad like in torch."""
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import aotgrad
from aotgrad import nn, optim
from aotgrad.testing import assert_close


def _torch_model(torch):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4),
                            torch.nn.Linear(4, 2))
    m(torch.randn(5, 3))  # BatchNorm running stats and num_batches_tracked (int64)
    return m


def test_state_dict_of_a_torch_model_loads_into_an_aotgrad_model(torch, tmp_path):
    tm = _torch_model(torch)
    torch.save(tm.state_dict(), tmp_path / "m.pt")
    sd = aotgrad.load(tmp_path / "m.pt")
    assert list(sd) == list(tm.state_dict())
    for k, v in tm.state_dict().items():
        assert str(sd[k].dtype).split(".")[-1] == str(v.dtype).split(".")[-1], k
        assert not sd[k].requires_grad
        np.testing.assert_array_equal(sd[k].numpy(), v.numpy())
    am = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    am.load_state_dict(sd)
    am.eval(), tm.eval()
    x = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    assert_close(am(aotgrad.tensor(x)).detach().numpy(), tm(torch.tensor(x)).detach().numpy(),
                 rtol=1e-5, atol=1e-6, equal_nan=True)


def test_parameters_views_shared_tensors_and_containers(torch, tmp_path):
    base = torch.arange(20, dtype=torch.float64).reshape(4, 5)
    t = torch.ones(3)
    obj = {"p": torch.nn.Parameter(torch.full((2,), 2.0)),
           "frozen": torch.nn.Parameter(torch.ones(1), requires_grad=False),
           "view": base[1:, ::2].t(), "scalar": torch.tensor(7),
           "flags": torch.tensor([True, False]),
           "i32": torch.arange(3, dtype=torch.int32),
           "same": [t, t], "meta": (1, 2.5, "x", None, True), "size": torch.Size([2, 3]),
           "dtype": torch.float64, "grad": torch.zeros(2, requires_grad=True)}
    torch.save(obj, tmp_path / "o.pt")
    out = aotgrad.load(tmp_path / "o.pt")
    assert type(out["p"]) is nn.Parameter and out["p"].requires_grad
    assert type(out["frozen"]) is nn.Parameter and not out["frozen"].requires_grad
    np.testing.assert_array_equal(out["view"].numpy(), obj["view"].numpy())
    assert out["view"].dtype == aotgrad.float64 and tuple(out["view"].shape) == (3, 3)
    assert out["scalar"].dtype == aotgrad.int64 and out["scalar"].ndim == 0
    assert out["flags"].tolist() == [True, False] and out["i32"].dtype == aotgrad.int32
    assert out["same"][0] is out["same"][1]
    assert out["meta"] == (1, 2.5, "x", None, True)
    assert out["size"] == aotgrad.Size([2, 3]) and out["dtype"] is aotgrad.float64
    assert out["grad"].requires_grad and out["grad"].is_leaf


def test_reads_a_torch_checkpoint_in_a_process_without_torch(torch, tmp_path):
    tm = _torch_model(torch)
    opt = torch.optim.Adam(tm.parameters())
    tm(torch.randn(5, 3)).sum().backward()
    opt.step()
    torch.save({"model": tm.state_dict(), "optim": opt.state_dict()}, tmp_path / "ck.pt")
    np.savez(tmp_path / "ref.npz", **{k: v.numpy() for k, v in tm.state_dict().items()},
             exp_avg=opt.state_dict()["state"][0]["exp_avg"].numpy())
    script = (
        "import sys; sys.modules['torch'] = None\n"  # any `import torch` now fails
        "import numpy as np, aotgrad\n"
        f"ck = aotgrad.load({str(tmp_path / 'ck.pt')!r})\n"
        f"ref = np.load({str(tmp_path / 'ref.npz')!r})\n"
        "for k, v in ck['model'].items():\n"
        "    assert (v.numpy() == ref[k]).all() and v.numpy().dtype == ref[k].dtype, k\n"
        "assert (ck['optim']['state'][0]['exp_avg'].numpy() == ref['exp_avg']).all()\n"
        "assert ck['optim']['param_groups'][0]['params'] == list(range(6))\n"
        "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


class Unknown:
    pass


def test_other_globals_in_a_torch_checkpoint_are_refused(torch, tmp_path):
    torch.save({"obj": Unknown()}, tmp_path / "u.pt")
    with pytest.raises(pickle.UnpicklingError, match="Unknown"):
        aotgrad.load(tmp_path / "u.pt")
    with aotgrad.serialization.safe_globals([Unknown]):
        assert type(aotgrad.load(tmp_path / "u.pt")["obj"]) is Unknown
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pt")  # a whole module: not supported
    with pytest.raises(pickle.UnpicklingError, match="torch.nn.modules.linear.Linear"):
        aotgrad.load(tmp_path / "module.pt")


def test_torch_adam_state_continues_in_aotgrad_like_in_torch(torch, tmp_path):
    torch.manual_seed(0)
    tm = torch.nn.Linear(3, 2).double()
    topt = torch.optim.Adam(tm.parameters(), lr=0.1)
    x, y = torch.randn(8, 3, dtype=torch.float64), torch.randn(8, 2, dtype=torch.float64)
    for _ in range(3):
        topt.zero_grad()
        ((tm(x) - y) ** 2).mean().backward()
        topt.step()
    torch.save({"model": tm.state_dict(), "optim": topt.state_dict()}, tmp_path / "ck.pt")
    ck = aotgrad.load(tmp_path / "ck.pt")
    am = nn.Linear(3, 2).double()
    am.load_state_dict(ck["model"])
    aopt = optim.Adam(am.parameters(), lr=0.1)
    aopt.load_state_dict(ck["optim"])
    ax, ay = aotgrad.tensor(x.numpy()), aotgrad.tensor(y.numpy())
    for _ in range(3):
        topt.zero_grad()
        ((tm(x) - y) ** 2).mean().backward()
        topt.step()
        aopt.zero_grad()
        ((am(ax) - ay) ** 2).mean().backward()
        aopt.step()
    assert_close(am.weight.detach().numpy(), tm.weight.detach().numpy(), rtol=1e-12, atol=0,
                 equal_nan=True)
