"""aotgrad.distributed, DistributedDataParallel and DistributedSampler.

The MPI tests launch `mpiexec -n K python tests/distributed/mpi_checks.py SCENARIO` (one launch runs many
checks: every collective against numpy, DDP against one process on the whole batch, eager
and compiled); they are marked `mpi` and skip where mpi4py or mpiexec is missing (install
the `distributed` extra).
"""
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

import aotgrad
import aotgrad.distributed as dist
from aotgrad.utils.data import DistributedSampler, TensorDataset
from repo_paths import REPO_ROOT

HERE = os.path.dirname(os.path.abspath(__file__))


def _env():
    root = os.path.dirname(os.path.dirname(os.path.abspath(aotgrad.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def test_import_aotgrad_does_not_import_mpi4py():
    code = ("import sys, aotgrad, aotgrad.distributed, aotgrad.nn.parallel\n"
            "from aotgrad.utils.data import DistributedSampler\n"
            "print('mpi4py' in sys.modules, aotgrad.distributed.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_queries_before_init_process_group_raise():
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="has not been initialized"):
        dist.get_rank()
    with pytest.raises(ValueError, match="has not been initialized"):
        dist.all_reduce(aotgrad.ones(2))
    with pytest.raises(ValueError, match="backend 'nccl' is not available"):
        dist.init_process_group("nccl")
    with pytest.raises(RuntimeError, match="init_process_group has not been called"):
        DistributedSampler(TensorDataset(aotgrad.arange(4)))
    from aotgrad.nn.parallel import DistributedDataParallel
    with pytest.raises(ValueError, match="has not been initialized"):
        DistributedDataParallel(aotgrad.nn.Linear(2, 2))


@pytest.mark.parametrize("n,replicas,drop_last", [(10, 3, False), (10, 3, True), (2, 3, False),
                                                  (9, 3, True), (7, 4, False)])
def test_distributed_sampler_shards(n, replicas, drop_last):
    ds = TensorDataset(aotgrad.arange(n))
    for shuffle in (False, True):
        samplers = [DistributedSampler(ds, replicas, r, shuffle=shuffle, seed=5,
                                       drop_last=drop_last) for r in range(replicas)]
        for s in samplers:
            s.set_epoch(1)
        shards = [list(s) for s in samplers]
        size = n // replicas if drop_last and n % replicas else -(-n // replicas)
        assert all(len(x) == len(s) == size for x, s in zip(shards, samplers))
        merged = [i for x in shards for i in x]
        if drop_last:
            assert len(set(merged)) == len(merged)
        else:
            assert set(merged) == set(range(n))
        assert shards == [list(s) for s in samplers]          # the same order twice
        if shuffle and n > 3:
            samplers[0].set_epoch(2)
            again = list(DistributedSampler(ds, replicas, 0, seed=5, drop_last=drop_last))
            assert list(samplers[0]) != again or n < 6        # another epoch, another order
    with pytest.raises(ValueError, match="Invalid rank 3"):
        DistributedSampler(ds, num_replicas=3, rank=3)


@pytest.mark.torch
def test_distributed_sampler_matches_torch_in_order(torch):
    from torch.utils.data.distributed import DistributedSampler as TorchSampler
    for n, replicas, drop_last in [(10, 3, False), (10, 3, True), (2, 3, False), (7, 4, False)]:
        ds = list(range(n))
        for r in range(replicas):
            ours = DistributedSampler(ds, replicas, r, shuffle=False, drop_last=drop_last)
            theirs = TorchSampler(ds, replicas, r, shuffle=False, drop_last=drop_last)
            assert list(ours) == list(theirs) and len(ours) == len(theirs)


@pytest.mark.parametrize("compiled", [False, True])
def test_post_accumulate_hooks_fire_before_the_lower_layers_backward(compiled):
    # what DDP's overlap rests on: a layer's gradients reach their hooks (which start the
    # buckets' all-reduces) before the backward of the layer below runs, eagerly and with
    # each layer compiled on its own
    layers = [aotgrad.nn.Linear(4, 4) for _ in range(3)]
    stages = [aotgrad.compile(m, backend="interpret") if compiled else m for m in layers]
    log = []
    for k, layer in enumerate(layers):
        for name, p in layer.named_parameters():
            p.register_post_accumulate_grad_hook(lambda t, k=k, n=name: log.append(f"{k}.{n}"))
    for _ in range(2):   # (the second time too: the leaves' nodes are older than the rest)
        log.clear()
        h = aotgrad.randn(2, 4, requires_grad=True)
        for k, stage in enumerate(stages):
            h = stage(h)
            # (eagerly, the layer's last node: its backward starts there)
            h.grad_fn.register_prehook(lambda g, k=k: log.append(f"backward {k}"))
        h.sum().backward()
        for k in (2, 1):
            assert log.index(f"{k}.weight") < log.index(f"backward {k - 1}"), log
            assert log.index(f"{k}.bias") < log.index(f"backward {k - 1}"), log


# ---- under mpiexec -------------------------------------------------------------------------

def _mpiexec():
    pytest.importorskip("mpi4py")
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    exe = shutil.which("mpiexec", path=path)
    if exe is None:
        pytest.skip("no mpiexec (pip install 'aotgrad[distributed]')")
    return exe


def _launch(ranks, scenario, *args, timeout=300):
    cmd = [_mpiexec(), "-n", str(ranks), sys.executable, os.path.join(HERE, "mpi_checks.py"),
           scenario, *args]
    start = time.monotonic()
    out = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)
    return out, time.monotonic() - start


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_collectives_and_ddp_under_mpiexec(ranks):
    out, _ = _launch(ranks, "all")
    assert out.returncode == 0, out.stdout + out.stderr
    # (the ranks' lines may interleave in mpiexec's forwarded output)
    assert sorted(re.findall(r"ok all (\d)", out.stdout)) == [str(r) for r in range(ranks)], \
        out.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("scenario,message", [
    ("raise", "rank 1 of 2 raised ValueError: rank one fails on purpose"),
    ("unused_error", "Parameters which did not receive grad for rank 1: extra.weight, "
                     "extra.bias"),
    ("timeout", "rank 0: all_reduce did not complete within the timeout of 0:00:03"),
])
def test_a_failing_rank_ends_the_job(scenario, message):
    # the other rank sleeps 60 s or waits in a collective: only the abort ends the job early
    out, seconds = _launch(2, scenario, "3", timeout=120)
    assert out.returncode != 0
    assert message in out.stderr, out.stderr
    assert "aborts the job (MPI_Abort)" in out.stderr
    assert seconds < 30, seconds


def test_an_aborting_rank_waits_until_its_message_has_left_the_pipe():
    # the launcher kills every rank once it sees MPI_Abort: output still in the pipe is lost
    import threading
    from aotgrad.distributed.process_group import _wait_until_read
    r, w = os.pipe()
    with os.fdopen(w, "w") as stream, os.fdopen(r, "r") as reader:
        stream.write("rank 0 failed\n")
        read_at = []

        def launcher():
            time.sleep(0.3)
            read_at.append((time.monotonic(), reader.readline()))

        thread = threading.Thread(target=launcher)
        thread.start()
        _wait_until_read(stream, limit=10.0)
        returned = time.monotonic()
        thread.join()
    assert read_at[0][1] == "rank 0 failed\n"
    assert returned >= read_at[0][0] - 0.05


@pytest.mark.mpi
def test_train_ddp_example_matches_one_process():
    exe = _mpiexec()
    script = os.path.join(REPO_ROOT, "examples", "train_ddp.py")
    out = subprocess.run([exe, "-n", "2", sys.executable, script, "--quick"], env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    found = re.search(r"largest loss difference (\S+), largest parameter difference (\S+),",
                      out.stdout)
    assert found, out.stdout
    loss_diff, param_diff = map(float, found.groups())
    assert loss_diff < 1e-5 and param_diff < 1e-5, out.stdout
    assert "2 ranks x 32 samples per step" in out.stdout


@pytest.mark.mpi
def test_init_process_group_checks_in_a_singleton_process():
    pytest.importorskip("mpi4py")
    code = r'''
import sys, datetime, aotgrad, aotgrad.distributed as dist
hook = sys.excepthook
for bad, kwargs in ((ValueError, {"world_size": 4}), (ValueError, {"rank": 2}),
                    (ValueError, {"init_method": "tcp://h:1"})):
    try:
        dist.init_process_group("mpi", **kwargs)
    except bad as e:
        print("refused:", e)
dist.init_process_group(timeout=datetime.timedelta(seconds=5))
assert sys.excepthook is not hook and dist.get_world_size() == 1 and dist.get_rank() == 0
try:
    dist.init_process_group()
except RuntimeError as e:
    print("twice:", e)
t = aotgrad.ones(3)
dist.all_reduce(t, op=dist.ReduceOp.AVG)
dist.destroy_process_group()
assert sys.excepthook is hook and not dist.is_initialized()
print("done")
'''
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("refused:") == 3 and "world_size=4" in out.stdout
    assert "twice: trying to initialize the default process group twice!" in out.stdout
    assert out.stdout.strip().endswith("done")
    # srun started 4 tasks but this MPI formed a world of one: refused, with the fix
    env = dict(_env(), SLURM_STEP_NUM_TASKS="4", SLURM_PROCID="0")
    out = subprocess.run([sys.executable, "-c", "import aotgrad.distributed as d\n"
                          "d.init_process_group()"], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0 and "srun started 4 tasks but MPI sees a world of 1" in \
        out.stderr and "--mpi=pmi2" in out.stderr, out.stderr


@pytest.mark.mpi
@pytest.mark.slow
def test_train_ddp_example_compiled_with_numba_matches_one_process():
    exe = _mpiexec()
    script = os.path.join(REPO_ROOT, "examples", "train_ddp.py")
    out = subprocess.run([exe, "-n", "2", sys.executable, script, "--quick", "--compile"],
                         env=_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    found = re.search(r"largest loss difference (\S+), largest parameter difference (\S+),",
                      out.stdout)
    assert found and max(map(float, found.groups())) < 1e-5, out.stdout
    assert "DDP compiled (numba)" in out.stdout


@pytest.mark.mpi
@pytest.mark.slow
def test_train_ddp_example_whole_step_compiled_with_numba_matches_one_process():
    # the whole training step of the DDP model in one Numba program, its buckets'
    # all-reduces steps of that program: no graph break, the one-process run's curve
    exe = _mpiexec()
    script = os.path.join(REPO_ROOT, "examples", "train_ddp.py")
    out = subprocess.run([exe, "-n", "2", sys.executable, script, "--quick", "--compile-step"],
                         env=_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    found = re.search(r"largest loss difference (\S+), largest parameter difference (\S+),",
                      out.stdout)
    assert found and max(map(float, found.groups())) < 1e-5, out.stdout
    assert "DDP in a compiled whole step (numba, 0 eager calls)" in out.stdout, out.stdout


@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["overlap_numba", "compiled_hooks_numba", "16bit_numba",
                                      "buffers_numba"])
def test_compiled_ddp_with_numba_under_mpiexec(scenario):
    # DDP(compile(model)) whose Numba backward hands out each gradient mid-program; a
    # compiled whole step with the built-in comm hooks, one of 16-bit buckets (the program
    # holds them in float32), one broadcasting buffers, each in a Numba program
    out, _ = _launch(2, scenario, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(re.findall(rf"ok {scenario} (\d)", out.stdout)) == ["0", "1"], out.stdout


@pytest.mark.mpi
def test_bench_distributed_runs_and_reports_the_overlap():
    exe = _mpiexec()
    script = os.path.join(REPO_ROOT, "benchmarks", "bench_distributed.py")
    out = subprocess.run([exe, "-n", "2", sys.executable, script, "--quick", "--no-compile",
                          "--reps", "2", "--bucket-cap-mb", "0.01"], env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all_reduce float32 SUM" in out.stdout, out.stdout
    found = re.search(r"eager: grads .* in (\d+) buckets", out.stdout)
    assert found and int(found.group(1)) > 1, out.stdout
    # several buckets: the first starts while the eager backward still computes
    window = re.search(r"computed on for (\S+) ms after the first bucket", out.stdout)
    assert window and float(window.group(1)) > 0, out.stdout
