"""Small things real PyTorch scripts do: format specs on 0-d tensors, math constants, legacy
typed constructors, memory formats, predicates, size= keywords."""
import math

import numpy as np
import pytest

import aotgrad as ag


def test_format_spec_on_0d_tensors():
    loss = ag.tensor(1.23456)
    assert f"{loss:.4f}" == f"{1.23456:.4f}" == "1.2346"
    w = ag.tensor(-0.5, dtype=ag.float64)
    assert "{:+.2f}".format(w) == "-0.50" and format(w) == "-0.5"
    assert f"{ag.tensor(3):d}" == "3" and f"{ag.tensor(7):>4}" == "   7"
    assert f"{ag.tensor(True)}" == "True"
    with pytest.raises(ValueError):
        f"{ag.tensor(3.):d}"                          # a float has no 'd' format
    with pytest.raises(TypeError, match="unsupported format string"):
        f"{ag.ones(2):.2f}"
    with pytest.raises(TypeError, match="unsupported format string"):
        f"{ag.ones(1):.2f}"                           # one element but 1-d: as PyTorch
    assert f"{ag.ones(2)}" == str(ag.ones(2))
    x = ag.tensor(2., requires_grad=True)
    assert f"{x * x:.1f}" == "4.0"                    # no detach needed, as in PyTorch


def test_format_matches_torch(torch):
    for v in (1.23456, -0.5, 1e-8, 12345.678):
        for spec in (".4f", "+.2f", "", ".3e", "10.2f", "g"):
            assert format(ag.tensor(v, dtype=ag.float64), spec) == \
                format(torch.tensor(v, dtype=torch.float64), spec)
    assert format(ag.tensor(5), "03d") == format(torch.tensor(5), "03d")
    for t in (ag, torch):
        with pytest.raises(TypeError):
            format(t.ones(2), ".2f")


def test_constants():
    assert ag.inf == math.inf and math.isnan(ag.nan) and ag.pi == math.pi and ag.e == math.e
    assert ag.newaxis is None
    assert ag.ones(3)[:, ag.newaxis].shape == (3, 1)
    assert ag.isinf(ag.tensor([ag.inf])).item()


def test_constants_match_torch(torch):
    assert (ag.pi, ag.e, ag.inf, ag.newaxis) == (torch.pi, torch.e, torch.inf, torch.newaxis)


def test_predicates():
    x = ag.ones(2)
    assert x.is_floating_point() and ag.is_floating_point(x)
    assert not ag.tensor([1]).is_floating_point()
    assert x.is_complex() is False and ag.is_complex(x) is False
    assert x.is_sparse is False and x.layout is ag.strided
    assert ag.is_tensor(x) and not ag.is_tensor(np.ones(2)) and ag.numel(ag.ones(2, 5)) == 10
    assert not x.is_inference()
    with ag.inference_mode():
        assert ag.ones(1).is_inference()
    assert ag.is_nonzero(ag.tensor([2.])) and not ag.is_nonzero(ag.tensor(0))
    with pytest.raises(RuntimeError, match="ambiguous"):
        ag.is_nonzero(ag.ones(2))
    with pytest.raises(TypeError, match="must be Tensor"):
        ag.numel([1, 2])


def test_memory_formats():
    x = ag.randn(2, 3, 4, 5)
    for fmt in (ag.contiguous_format, ag.preserve_format, ag.channels_last):
        y = x.contiguous(memory_format=fmt)
        np.testing.assert_array_equal(y.numpy(), x.numpy())
        z = x.clone(memory_format=fmt)
        assert z is not x
        np.testing.assert_array_equal(z.numpy(), x.numpy())
    assert x.contiguous(memory_format=ag.contiguous_format) is x
    assert repr(ag.channels_last) == "aotgrad.channels_last"
    with pytest.raises(RuntimeError, match="required rank 4"):
        ag.ones(2, 3).contiguous(memory_format=ag.channels_last)
    with pytest.raises(RuntimeError, match="required rank 5"):
        x.clone(memory_format=ag.channels_last_3d)
    with pytest.raises(TypeError, match="memory format"):
        x.contiguous(memory_format="channels_last")
    assert ag.zeros_like(x, memory_format=ag.preserve_format).shape == x.shape
    assert x.to(memory_format=ag.contiguous_format) is x


def test_legacy_constructors():
    assert ag.FloatTensor(2, 3).shape == (2, 3) and ag.FloatTensor(2, 3).dtype is ag.float32
    assert ag.FloatTensor().shape == (0,)
    assert ag.FloatTensor([1, 2]).tolist() == [1., 2.] and ag.FloatTensor((2, 3)).tolist() == [2., 3.]
    assert ag.DoubleTensor(ag.Size([4])).shape == (4,)
    assert ag.DoubleTensor(np.ones(2, np.float32)).dtype is ag.float64
    assert ag.LongTensor([1, 2]).dtype is ag.int64 and ag.IntTensor(3).dtype is ag.int32
    assert ag.BoolTensor([1, 0]).tolist() == [True, False]
    f = ag.ones(2)
    assert ag.FloatTensor(f) is f
    with pytest.raises(TypeError, match="float64"):
        ag.FloatTensor(ag.ones(2, dtype=ag.float64))
    assert ag.ByteTensor([1, 2]).dtype is ag.uint8
    with pytest.raises(TypeError, match="sequence"):
        ag.FloatTensor(2.5)
    assert isinstance(f, ag.FloatTensor) and not isinstance(f, ag.DoubleTensor)
    assert isinstance(ag.tensor([1]), ag.LongTensor) and not isinstance(np.ones(1), ag.FloatTensor)
    with pytest.raises(AssertionError, match="CUDA"):
        ag.FloatTensor(2, device="cuda")


def test_type_method():
    x = ag.ones(2)
    assert x.type() == "torch.FloatTensor" and x.double().type() == "torch.DoubleTensor"
    assert x.type(ag.float64).dtype is ag.float64
    assert x.type("torch.LongTensor").dtype is ag.int64
    assert x.type(ag.DoubleTensor).dtype is ag.float64
    with pytest.raises(AssertionError, match="CUDA"):
        x.type("torch.cuda.FloatTensor")


def test_legacy_and_type_match_torch(torch):
    for name in ("FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "BoolTensor"):
        ours, theirs = getattr(ag, name), getattr(torch, name)
        assert ours(2, 3).shape == tuple(theirs(2, 3).shape)
        np.testing.assert_array_equal(ours([1, 0, 3]).numpy(), theirs([1, 0, 3]).numpy())
        assert ours([1, 0]).type() == theirs([1, 0]).type()
        assert ours.dtype.name == str(theirs.dtype).replace("torch.", "")


def test_size_keyword():
    assert ag.empty(size=(2, 3)).shape == (2, 3) and ag.zeros(size=[4]).shape == (4,)
    assert ag.ones(size=(1, 2)).sum().item() == 2
    assert ag.rand(size=(3,)).shape == (3,) and ag.randn(size=(2, 2)).shape == (2, 2)
    with pytest.raises(TypeError, match="both"):
        ag.zeros(2, size=(3,))


def test_default_dtype():
    assert ag.get_default_dtype() is ag.float32
    ag.set_default_dtype(ag.float32)
    with pytest.raises(NotImplementedError, match="float32"):
        ag.set_default_dtype(ag.float64)
    with pytest.raises(TypeError, match="floating-point"):
        ag.set_default_dtype(ag.int64)
    assert ag.dtype is type(ag.float32)


def test_jit_compiler_and_typename():
    assert ag.jit.is_scripting() is False and ag.jit.is_tracing() is False

    @ag.jit.script
    def f(x):
        return x * 2

    @ag.jit.ignore(drop=False)
    def g(x):
        return x + 1

    assert f(ag.ones(1)).item() == 2 and g(ag.ones(1)).item() == 2
    with pytest.raises(NotImplementedError, match="TorchScript"):
        ag.jit.trace(f, ag.ones(1))
    def h(x):  # is_compiling() is True while the compiled function traces
        return x * 2 if ag.compiler.is_compiling() else x * 3

    assert h(ag.ones(1)).item() == 3
    assert ag.compile(h, backend="interpret")(ag.ones(1)).item() == 2
    assert ag.typename(ag.ones(1)) == "torch.FloatTensor" and ag.typename(3) == "int"
    assert ag.typename(ag.ones(1).long()) == "torch.LongTensor"
    assert ag.typename(ag.nn.Linear(1, 1)).endswith(".Linear")


def test_jit_and_typename_match_torch(torch):
    for x in (1.5, [1, 2]):
        assert ag.typename(ag.tensor(x)) == torch.typename(torch.tensor(x))
    assert ag.typename("s") == torch.typename("s")
    assert ag.jit.is_scripting() == torch.jit.is_scripting()
    assert ag.compiler.is_compiling() == torch.compiler.is_compiling()


def test_tensor_class_as_legacy_constructor():
    assert ag.Tensor(2, 3).shape == (2, 3) and ag.Tensor(2, 3).sum().item() == 0
    assert ag.Tensor([1, 2]).dtype is ag.float32 and ag.Tensor().shape == (0,)
    assert ag.Tensor(ag.Size([4])).shape == (4,)
    assert ag.Tensor([1, 2], dtype=ag.int64).dtype is ag.int64
    assert ag.Tensor([1.], requires_grad=True).requires_grad
    w = ag.nn.Parameter(ag.Tensor(3, 2))
    assert w.shape == (3, 2) and w.requires_grad
    with pytest.raises(AssertionError, match="CUDA"):
        ag.Tensor(2, device="cuda")


def test_tensor_class_constructor_matches_torch(torch):
    for args in ((2, 3), ([1, 2],), ([[1.5], [2.5]],), ()):
        ours, theirs = ag.Tensor(*args), torch.Tensor(*args)
        assert ours.shape == tuple(theirs.shape) and ours.type() == theirs.type()
        if ours.numel() and not all(isinstance(a, int) for a in args):
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
