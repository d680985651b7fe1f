"""Devices as PyTorch names them: aotgrad.device, Tensor.to/cpu/cuda, device= keywords, the
default device, and the cuda/accelerator/backends namespaces of a CPU-only build."""
import pickle

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close


def test_device_objects_compare_hash_and_print():
    cpu = ag.device("cpu")
    assert repr(cpu) == "device(type='cpu')" and str(cpu) == "cpu"
    assert cpu.type == "cpu" and cpu.index is None
    assert ag.device("cpu:0") == ag.device("cpu", 0) != cpu
    assert repr(ag.device("cpu", 0)) == "device(type='cpu', index=0)"
    assert repr(ag.device("cuda:1")) == "device(type='cuda', index=1)"
    assert ag.device(cpu) == cpu and ag.device("cuda").index is None
    assert len({cpu, ag.device("cpu"), ag.device("cpu:0")}) == 2
    assert cpu != "cpu"          # as in PyTorch: a device never equals a string
    assert pickle.loads(pickle.dumps(ag.device("cpu", 0))) == ag.device("cpu:0")


@pytest.mark.parametrize("bad, err", [("foo", RuntimeError), ("cpu:x", RuntimeError),
                                      (1.5, TypeError)])
def test_device_parse_errors(bad, err):
    with pytest.raises(err):
        ag.device(bad)
    with pytest.raises(RuntimeError, match="must not be negative"):
        ag.device("cpu", -1)


def test_tensor_device_and_to_overloads():
    x = ag.ones(2, 3)
    assert x.device == ag.device("cpu") and x.device.type == "cpu"
    assert x.to("cpu") is x and x.to(ag.device("cpu")) is x and x.to("cpu:0") is x
    assert x.cpu() is x and x.to(ag.float32) is x
    assert x.to("cpu", copy=True) is not x
    c = x.to(ag.float32, copy=True)
    c.add_(1)
    assert x.sum().item() == 6          # the copy has its own storage
    assert x.to(ag.float64).dtype is ag.float64
    assert x.to("cpu", ag.float64).dtype is ag.float64
    assert x.to(ag.device("cpu"), ag.int64, False, True).dtype is ag.int64
    assert x.to(ag.ones(1, dtype=ag.float64)).dtype is ag.float64
    assert x.to(dtype=ag.int32, device="cpu", non_blocking=True).dtype is ag.int32
    assert x.to(ag.float64, True).dtype is ag.float64     # non_blocking positional
    with pytest.raises(TypeError, match="invalid combination"):
        x.to(ag.float64, ag.float32)
    with pytest.raises(TypeError, match="invalid combination"):
        x.to("cpu", device="cpu")


def test_to_keeps_autograd():
    x = ag.tensor([1., 2.], requires_grad=True)
    y = x.to("cpu", ag.float64)
    (y * y).sum().backward()
    assert x.grad.dtype is ag.float32 and x.grad.tolist() == [2., 4.]


def test_cuda_requests_raise_clearly():
    x = ag.ones(2)
    for call in (lambda: x.cuda(), lambda: x.to("cuda"), lambda: x.to("cuda:0"),
                 lambda: ag.zeros(2, device="cuda"), lambda: ag.tensor([1.], device="cuda"),
                 lambda: ag.nn.Linear(2, 2).to("cuda"), lambda: ag.nn.Linear(2, 2).cuda(),
                 lambda: ag.set_default_device("cuda"), lambda: ag.cuda.current_device(),
                 lambda: x.to(0)):
        with pytest.raises(AssertionError, match="CUDA.*CPU only"):
            call()
    with pytest.raises(RuntimeError, match="mps"):
        x.to("mps")


FACTORIES = [
    lambda d: ag.tensor([1.], device=d), lambda d: ag.as_tensor([1.], device=d),
    lambda d: ag.zeros(2, device=d), lambda d: ag.ones(2, device=d),
    lambda d: ag.empty(2, device=d), lambda d: ag.full((2,), 3., device=d),
    lambda d: ag.arange(3, device=d), lambda d: ag.linspace(0, 1, 3, device=d),
    lambda d: ag.logspace(0, 1, 3, device=d), lambda d: ag.eye(2, device=d),
    lambda d: ag.rand(2, device=d), lambda d: ag.randn(2, device=d),
    lambda d: ag.randint(0, 3, (2,), device=d), lambda d: ag.randperm(3, device=d),
    lambda d: ag.zeros_like(ag.ones(2), device=d), lambda d: ag.ones_like(ag.ones(2), device=d),
    lambda d: ag.empty_like(ag.ones(2), device=d), lambda d: ag.rand_like(ag.ones(2), device=d),
    lambda d: ag.randn_like(ag.ones(2), device=d),
    lambda d: ag.full_like(ag.ones(2), 1., device=d),
]


@pytest.mark.parametrize("i", range(len(FACTORIES)))
def test_factories_take_device(i):
    for d in ("cpu", "cpu:0", ag.device("cpu"), None):
        assert FACTORIES[i](d).device == ag.device("cpu")
    with pytest.raises(AssertionError, match="CUDA"):
        FACTORIES[i]("cuda")


def test_default_device():
    assert ag.get_default_device() == ag.device("cpu")
    ag.set_default_device("cpu:0")
    try:
        assert ag.get_default_device() == ag.device("cpu", 0)
    finally:
        ag.set_default_device(None)
    assert ag.get_default_device() == ag.device("cpu")
    with ag.device("cpu"):
        assert ag.zeros(1).device.type == "cpu"


def test_namespaces_of_a_cpu_only_build():
    assert ag.cuda.is_available() is False and ag.cuda.device_count() == 0
    ag.cuda.manual_seed(0)
    ag.cuda.manual_seed_all(0)
    ag.cuda.empty_cache()
    assert ag.accelerator.is_available() is False
    assert ag.accelerator.current_accelerator() is None and ag.accelerator.device_count() == 0
    with pytest.raises(RuntimeError, match="accelerator"):
        ag.accelerator.current_device_index()
    assert ag.backends.mps.is_available() is False and ag.backends.mps.is_built() is False
    assert ag.backends.cudnn.is_available() is False
    import aotgrad.backends.cudnn as cudnn
    cudnn.benchmark, cudnn.deterministic = True, True
    try:
        assert ag.backends.cudnn.benchmark is True
    finally:
        cudnn.benchmark, cudnn.deterministic = False, False
    assert ag.backends.mkldnn.is_available() in (True, False)
    assert ag.backends.openmp.is_available() is True
    assert ag.backends.cpu.get_cpu_capability() in ("AVX512", "AVX2", "DEFAULT")
    assert ag.backends.cuda.matmul.allow_tf32 is False


def test_device_module_predicates():
    x = ag.ones(2)
    assert not x.is_cuda and x.is_cpu and not x.is_meta and x.get_device() == -1
    assert x.pin_memory() is x and not x.is_pinned()


def test_devices_match_torch(torch):
    for spec in ("cpu", "cpu:0", "cuda", "cuda:1"):
        assert repr(ag.device(spec)) == repr(torch.device(spec))
        assert str(ag.device(spec)) == str(torch.device(spec))
    assert repr(ag.zeros(1).device) == repr(torch.zeros(1).device)
    assert (ag.device("cpu") == ag.device("cpu", 0)) == (torch.device("cpu") ==
                                                         torch.device("cpu", 0))
    for call in (lambda m: m.zeros(1).cuda(), lambda m: m.zeros(1, device="cuda")):
        with pytest.raises(AssertionError) as ours:
            call(ag)
        with pytest.raises(AssertionError) as theirs:
            call(torch)
        assert str(theirs.value) in str(ours.value)
    assert ag.cuda.is_available() == torch.cuda.is_available()
    assert ag.accelerator.is_available() == torch.accelerator.is_available()
    assert ag.backends.mps.is_available() == torch.backends.mps.is_available()


def test_num_threads():
    n = ag.get_num_threads()
    assert n >= 1
    try:
        ag.set_num_threads(1)
        assert ag.get_num_threads() == 1
        x = ag.randn(64, 64)
        assert_close((x @ x).numpy(), x.numpy() @ x.numpy(), rtol=1e-5, atol=0, equal_nan=True)
    finally:
        ag.set_num_threads(n)
    assert ag.get_num_threads() == n
    with pytest.raises(RuntimeError, match="positive"):
        ag.set_num_threads(0)
    assert ag.get_num_interop_threads() >= 1


def test_no_cuda_error_is_both_assertion_and_runtime_error():
    with pytest.raises(AssertionError):
        ag.ones(1).cuda()
    with pytest.raises(RuntimeError, match="CPU only"):
        ag.ones(1).to("cuda")


def test_cpu_namespace():
    assert ag.cpu.is_available() and ag.cpu.device_count() == 1
    ag.cpu.synchronize()
    with ag.cpu.amp.autocast():
        assert (ag.ones(2, 2) @ ag.ones(2, 2)).dtype is ag.bfloat16
    assert not ag.is_autocast_enabled()
