"""Small autograd surfaces PyTorch's autograd suite relies on: backward from a GradientEdge
alone, a node's `_input_metadata`, and autograd.Function's vmap attributes."""
import numpy as np

import aotgrad as ag
from aotgrad.testing import assert_close


def test_backward_from_a_gradient_edge_alone(torch):
    grads = []
    for T in (ag, torch):
        x = T.tensor([1.0, 2.0], requires_grad=True)
        tmp = x.sin().cos().sum()
        edge = T.autograd.graph.get_gradient_edge(tmp)
        T.autograd.backward(edge, retain_graph=True)
        first = x.grad.clone()
        del tmp
        T.autograd.backward(edge)   # the edge keeps the graph alive
        grads.append((first.numpy(), x.grad.numpy()))
    for a, b in zip(*grads):
        assert_close(a, b, rtol=1e-6, atol=0, equal_nan=True)


def test_grad_fn_input_metadata_describes_the_forward_outputs(torch):
    for T in (ag, torch):
        x = T.rand(2, requires_grad=True)
        m = (x * x).grad_fn._input_metadata[0]
        assert tuple(m.shape) == (2,) and m.dtype == T.float32
        v, _ = T.var_mean(T.rand(3, 4, requires_grad=True, dtype=T.float64), dim=0)
        meta = v.grad_fn._input_metadata
        assert [tuple(a.shape) for a in meta] == [(4,), (4,)]
        assert meta[1].dtype == T.float64


def test_function_vmap_attributes(torch):
    for T in (ag, torch):
        class Square(T.autograd.Function):
            @staticmethod
            def forward(x):
                return x * x

            @staticmethod
            def setup_context(ctx, inputs, output):
                ctx.save_for_backward(inputs[0])

            @staticmethod
            def backward(ctx, g):
                x, = ctx.saved_tensors
                return 2 * x * g
        assert Square.generate_vmap_rule is False
        assert callable(Square.vmap)


def test_a_node_hook_removed_during_backward_still_runs_that_pass(torch):
    counts = []
    for T in (ag, torch):
        a = T.rand(3, requires_grad=True)
        b = a * 2
        n, handles = [0], []

        def remover(go):
            for h in handles:
                h.remove()

        def counter(go):
            n[0] += 1
        b.grad_fn.register_prehook(remover)
        handles.append(b.grad_fn.register_prehook(counter))
        b.sum().backward(retain_graph=True)
        b.sum().backward()
        counts.append(n[0])
    assert counts[0] == counts[1] == 1


def test_volatile_is_false_with_a_warning(torch):
    import pytest
    for T in (ag, torch):
        with pytest.warns(UserWarning, match="volatile"):
            assert T.ones(2).volatile is False


def test_numpy_of_a_tensor_that_requires_grad_under_no_grad(torch):
    import pytest
    for T in (ag, torch):
        x = T.ones(2, requires_grad=True)
        with pytest.raises(RuntimeError, match="Can't call numpy"):
            x.numpy()
        with T.no_grad():
            assert x.numpy().tolist() == [1.0, 1.0]
            assert np.asarray(x).tolist() == [1.0, 1.0]


def test_grad_dtype_none_keeps_a_custom_functions_gradient_dtype(torch):
    import pytest
    for T in (ag, torch):
        class Up(T.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g.to(T.float64)
        d = T.tensor([1.0, 2.0], requires_grad=True)
        Up.apply(d).sum().backward()
        assert d.grad.dtype == T.float32
        e = T.tensor([1.0, 2.0], requires_grad=True)
        e.grad_dtype = None
        Up.apply(e).sum().backward()
        assert e.grad.dtype == T.float64
        with pytest.raises(RuntimeError, match="Cannot set grad_dtype"):
            e.grad_dtype = T.float32
        e.grad_dtype = T.float64   # the gradient's own dtype: allowed


def test_deleting_autograd_attributes_raises(torch):
    import pytest
    for T in (ag, torch):
        x = T.ones(2, requires_grad=True)
        with pytest.raises(RuntimeError):   # (`del x.requires_grad` is not refused here)
            del x.data
        del x.grad
        assert x.grad is None and x.requires_grad


def test_unsafe_preserve_version_counter(torch):
    for T in (ag, torch):
        x = T.ones(2, requires_grad=True).clone()
        x.add_(1)
        with T.autograd._unsafe_preserve_version_counter(x):
            x.mul_(2)
        assert x._version == 1
        y = x * x                  # saves x
        with T.autograd._unsafe_preserve_version_counter((x,)):
            x.mul_(1)
        y.sum().backward()         # no "modified by an inplace operation" error


def test_profiler_enabled_and_profiler_util_events(torch):
    for T in (ag, torch):
        assert not T.autograd._profiler_enabled()
        with T.autograd.profiler.profile():
            assert T.autograd._profiler_enabled()
        assert callable(T.autograd.kineto_available)
        P = T.autograd.profiler_util
        avg = P.FunctionEventAvg()
        avg.add(P.FunctionEvent(id=0, node_id=0, name="f", thread=0, start_us=10, end_us=15))
        avg.add(P.FunctionEvent(id=1, node_id=0, name="f", thread=0, start_us=20, end_us=30))
        assert (avg.key, avg.count, avg.cpu_time_total, avg.cpu_time) == ("f", 2, 15, 7.5)


def test_set_data_of_a_tensor_that_requires_grad_must_stay_float(torch):
    import pytest
    for T in (ag, torch):
        a = T.tensor(1.0, requires_grad=True)
        a.data = T.tensor(2.0)
        assert a.item() == 2.0
        with pytest.raises(RuntimeError, match="must be floating point or complex dtype"):
            a.data = T.tensor(3, dtype=T.int64)


def test_checkpoint_recompute_that_saves_fewer_tensors_raises(torch):
    import pytest
    for T in (ag, torch):
        calls = [0]

        def fewer(x):
            calls[0] += 1
            return x.sin().exp().sin() if calls[0] == 1 else x.sin().exp()
        a = T.randn(1, requires_grad=True)
        with pytest.raises(RuntimeError, match="A different number of tensors was saved"):
            T.utils.checkpoint.checkpoint(fewer, a, use_reentrant=False).backward()


def test_uniform_and_normal_fill_in_place(torch):
    import pytest
    for T in (ag, torch):
        T.manual_seed(0)
        x = T.empty(2000)
        v = x._version
        assert x.uniform_(-2.0, 3.0) is x and x._version > v
        assert float(x.min()) >= -2.0 and float(x.max()) < 3.0 and abs(float(x.mean()) - 0.5) < 0.2
        assert x.normal_(1.0, 0.5) is x and abs(float(x.mean()) - 1.0) < 0.1
        with pytest.raises(RuntimeError):
            T.ones(2, requires_grad=True).uniform_()
