"""autograd.graph.saved_tensors_hooks / save_on_cpu / disable_saved_tensors_hooks and
nn.Module full backward hooks, against PyTorch and closed forms."""
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad import nn
from aotgrad.autograd.graph import (disable_saved_tensors_hooks, save_on_cpu,
                                    saved_tensors_hooks)
from aotgrad.nn.modules.module import (register_module_full_backward_hook,
                                       register_module_full_backward_pre_hook)
from aotgrad.testing import assert_close


def _x(shape=(3,), seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _both(torch, a, requires_grad=True):
    return (ag.tensor(a, requires_grad=requires_grad),
            torch.tensor(a, requires_grad=requires_grad))


# ---- saved tensor hooks ---------------------------------------------------------------------
def _recording_hooks(log, lib):
    def pack(t):
        log.append(("pack", tuple(t.shape), bool(t.requires_grad), lib.is_grad_enabled()))
        return ("box", t.detach())

    def unpack(p):
        log.append(("unpack", p[0]))
        return p[1]
    return pack, unpack


def test_pack_and_unpack_run_where_pytorch_runs_them(torch):
    a, b = _x((3,), 1), _x((3,), 2)
    logs, grads = [], []
    for lib in (ag, torch):
        x, w = lib.tensor(a, requires_grad=True), lib.tensor(b, requires_grad=True)
        log = []
        pack, unpack = _recording_hooks(log, lib)
        with saved_tensors_hooks(pack, unpack) if lib is ag else \
                torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            y = (x * w).exp().sum()      # mul saves x and w, exp its result
            with lib.no_grad():
                (x * w).exp()            # nothing is saved under no_grad
            lib.tensor(a).exp()          # nor when no input requires grad
        n_packed = len(log)
        y.backward()
        logs.append((log[:n_packed], sorted(log[n_packed:])))
        grads.append((x.grad.numpy().copy(), w.grad.numpy().copy()))
    assert logs[0] == logs[1]
    assert len(logs[0][0]) == 3 and all(not e[3] for e in logs[0][0])  # pack under no_grad
    assert logs[0][1] == [("unpack", "box")] * 3
    for g, gt in zip(*grads):
        assert_close(g, gt, rtol=1e-6, atol=0, equal_nan=True)
    e = np.exp(a * b)  # closed form
    assert_close(grads[0][0], e * b, rtol=1e-6, atol=0, equal_nan=True)
    assert_close(grads[0][1], e * a, rtol=1e-6, atol=0, equal_nan=True)


def test_saved_accessors_go_through_unpack_and_keep_graph_position(torch):
    res = []
    for lib in (ag, torch):
        x = lib.tensor(_x(), requires_grad=True)
        calls = []
        ctx = (saved_tensors_hooks if lib is ag else torch.autograd.graph.saved_tensors_hooks)(
            lambda t: t.detach(), lambda t: calls.append(1) or t)
        with ctx:
            y = x.exp()
            z = x * x
        r, s = y.grad_fn._saved_result, z.grad_fn._saved_self
        res.append((len(calls), r is y, r.grad_fn is y.grad_fn, s is x, s.requires_grad,
                    s.grad_fn is None))
    assert res[0] == res[1] == (2, False, True, False, True, True)


def test_innermost_hooks_win(torch):
    orders = []
    for lib in (ag, torch):
        graph = ag.autograd.graph if lib is ag else torch.autograd.graph
        log = []
        x = lib.tensor(_x(), requires_grad=True)
        with graph.saved_tensors_hooks(lambda t: ("outer", t.detach()),
                                       lambda p: log.append(p[0]) or p[1]):
            with graph.saved_tensors_hooks(lambda t: ("inner", t.detach()),
                                           lambda p: log.append(p[0]) or p[1]):
                y = x.exp().sum()
            z = x.exp().sum()
        y.backward()
        z.backward()
        orders.append(log)
    assert orders[0] == orders[1] == ["inner", "outer"]


def test_hooks_on_custom_function_save_for_backward(torch):
    def make(lib):
        class F(lib.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                out = x * y
                ctx.save_for_backward(x, None, out)
                return out

            @staticmethod
            def backward(ctx, g):
                x, none, out = ctx.saved_tensors
                assert none is None
                return g * out / x, None
        return F
    res = []
    for lib in (ag, torch):
        graph = ag.autograd.graph if lib is ag else torch.autograd.graph
        log = []
        x = lib.tensor(_x(), requires_grad=True)
        with graph.saved_tensors_hooks(
                lambda t: log.append(("pack", t.grad_fn is not None)) or t.detach(),
                lambda t: log.append("unpack") or t):
            o = make(lib).apply(x, lib.ones(3) * 3)
        o.sum().backward()
        res.append((log, x.grad.numpy().copy()))
    assert res[0][0] == res[1][0] == [("pack", False), ("pack", True), "unpack", "unpack"]
    # d(3x)/dx
    assert_close(res[0][1], np.full(3, 3.0), rtol=1e-6, atol=0, equal_nan=True, check_dtype=False)
    assert_close(res[0][1], res[1][1], rtol=1e-6, atol=0, equal_nan=True)


def test_hooked_saves_skip_the_version_check_like_pytorch(torch):
    # with hooks, what unpack returns is used as is: an in-place change after the save is
    # not detected (save_on_cpu() on CPU keeps the tensor itself), a copy protects from it
    a = _x((4,), 3)
    for pin_memory, factor in ((False, 4.0), (True, 2.0)):
        out = []
        for lib in (ag, torch):
            graph = ag.autograd.graph if lib is ag else torch.autograd.graph
            x = lib.tensor(a, requires_grad=True)
            b = x * 1
            with graph.save_on_cpu(pin_memory=pin_memory):
                c = b * b
            with lib.no_grad():
                pass
            b.mul_(2)
            c.sum().backward()
            out.append(x.grad.numpy().copy())
        assert_close(out[0], out[1], rtol=1e-6, atol=0, equal_nan=True)
        assert_close(out[0], factor * a, rtol=1e-6, atol=0, equal_nan=True)


def test_without_hooks_the_version_check_still_fires():
    x = ag.tensor(_x(), requires_grad=True)
    b = x * 1
    c = b * b
    b.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()


def test_unpack_errors_match_pytorch(torch):
    for lib in (ag, torch):
        graph = ag.autograd.graph if lib is ag else torch.autograd.graph
        x = lib.tensor(_x(), requires_grad=True)
        with graph.saved_tensors_hooks(lambda t: t.detach(), lambda t: 3):
            y = x.exp()
        with pytest.raises(TypeError, match="Output of saved tensor unpack_hook expected to "
                                            "be a Tensor but got result of type int"):
            y.sum().backward()
        # a tensor of another shape is not checked at unpack: the backward formula fails
        with graph.saved_tensors_hooks(lambda t: t.detach(), lambda t: lib.ones(5)):
            y = x.exp()
        with pytest.raises((RuntimeError, ValueError), match="3.*5|5.*3"):
            y.sum().backward()
        # pack may not modify its input in place
        b = x * 1

        def bad(t):
            t.add_(1)
            return t
        with pytest.raises(RuntimeError, match="pack hook is modifying its input in place"):
            with graph.saved_tensors_hooks(bad, lambda t: t):
                b.exp()
        # after backward the packed values are freed
        with graph.saved_tensors_hooks(lambda t: t.detach(), lambda t: t):
            y = x.exp()
        y.sum().backward()
        with pytest.raises(RuntimeError, match="backward through the graph a second time"):
            y.grad_fn._saved_result


def test_retain_graph_unpacks_again_and_double_backward(torch):
    res = []
    for lib in (ag, torch):
        graph = ag.autograd.graph if lib is ag else torch.autograd.graph
        x = lib.tensor(_x(), requires_grad=True)
        n = [0]
        with graph.saved_tensors_hooks(lambda t: t.detach(),
                                       lambda t: n.__setitem__(0, n[0] + 1) or t):
            y = (x * x * x).sum()
        g, = lib.autograd.grad(y, x, create_graph=True)
        g.sum().backward()
        res.append((n[0], g.detach().numpy().copy(), x.grad.numpy().copy()))
    a = _x()
    assert res[0][0] == res[1][0]
    assert_close(res[0][1], 3 * a * a, rtol=1e-5, atol=0, equal_nan=True)
    assert_close(res[0][2], 6 * a, rtol=1e-5, atol=0, equal_nan=True)
    assert_close(res[0][2], res[1][2], rtol=1e-5, atol=0, equal_nan=True)


def test_unpacked_dtype_change_is_cast_back(torch):
    x = ag.tensor(_x(), requires_grad=True)
    with saved_tensors_hooks(lambda t: t.detach(), lambda t: t.double()):
        y = x.exp()
    y.sum().backward()
    assert x.grad.dtype == ag.float32
    assert_close(x.grad.numpy(), np.exp(_x()), rtol=1e-6, atol=0, equal_nan=True)


def test_disable_saved_tensors_hooks(torch):
    for lib in (ag, torch):
        graph = ag.autograd.graph if lib is ag else torch.autograd.graph
        with graph.disable_saved_tensors_hooks("no hooks here"):
            with pytest.raises(RuntimeError, match="^no hooks here$"):
                with graph.save_on_cpu():
                    pass
            with graph.disable_saved_tensors_hooks("inner"):
                with pytest.raises(RuntimeError, match="^inner$"):
                    with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                        pass
            with pytest.raises(RuntimeError, match="^no hooks here$"):  # restored
                with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                    pass
        # disabling while hooks are active raises; the hooks stay usable afterwards
        with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            with pytest.raises(RuntimeError, match="^busy$"):
                with graph.disable_saved_tensors_hooks("busy"):
                    pass
            with graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                pass
        with graph.saved_tensors_hooks(lambda t: t, lambda t: t):  # enabled again
            pass


def test_compile_under_saved_tensors_hooks_breaks_the_graph():
    f = ag.compile(lambda x: (x.exp() * x).sum(), backend="interpret")
    x = ag.tensor(_x(), requires_grad=True)
    n = [0, 0]
    with saved_tensors_hooks(lambda t: n.__setitem__(0, n[0] + 1) or t.detach(),
                             lambda t: n.__setitem__(1, n[1] + 1) or t):
        with pytest.warns(UserWarning, match="saved_tensors_hooks.*running this call eagerly"):
            y = f(x)
    y.backward()
    assert n == [3, 3]  # exp saves its result, mul both operands
    a = _x()
    assert_close(x.grad.numpy(), np.exp(a) * (a + 1), rtol=1e-6, atol=0, equal_nan=True)


# ---- module full backward hooks -------------------------------------------------------------
def _linears(torch, nin=3, nout=2):
    m = nn.Linear(nin, nout)
    tm = torch.nn.Linear(nin, nout)
    with torch.no_grad():
        tm.weight.copy_(torch.tensor(m.weight.detach().numpy()))
        tm.bias.copy_(torch.tensor(m.bias.detach().numpy()))
    return m, tm


def _shapes(gs):
    return [None if g is None else tuple(g.shape) for g in gs]


def test_full_backward_hook_and_pre_hook_on_linear(torch):
    m, tm = _linears(torch)
    a = _x((4, 3), 5)
    results = []
    for mod, lib in ((m, ag), (tm, torch)):
        log = []
        mod.register_full_backward_pre_hook(
            lambda mm, go: log.append(("pre", _shapes(go))) or (go[0] * 2,))
        mod.register_full_backward_hook(
            lambda mm, gi, go: log.append(("hook", _shapes(gi), _shapes(go),
                                           gi[0].numpy().copy())) or (gi[0] * 10,))
        x = lib.tensor(a, requires_grad=True)
        out = mod(x)
        assert out.grad_fn.name() == "BackwardHookFunctionBackward"
        out.sum().backward()
        results.append((log, x.grad.numpy().copy(), mod.weight.grad.numpy().copy()))
    (log, gx, gw), (tlog, tgx, tgw) = results
    assert [e[:3] for e in log] == [e[:3] for e in tlog] == \
        [("pre", [(4, 2)]), ("hook", [(4, 3)], [(4, 2)])]
    w = m.weight.detach().numpy()
    # closed form
    assert_close(log[1][3], 2 * np.ones((4, 2)) @ w, rtol=1e-5, atol=0, equal_nan=True,
                 check_dtype=False)
    assert_close(gx, 20 * np.ones((4, 2)) @ w, rtol=1e-5, atol=0, equal_nan=True, check_dtype=False)
    # pre-hook doubled it
    assert_close(gw, 2 * np.ones((2, 4)) @ a, rtol=1e-5, atol=0, equal_nan=True, check_dtype=False)
    assert_close(gx, tgx, rtol=1e-5, atol=0, equal_nan=True)
    assert_close(gw, tgw, rtol=1e-5, atol=0, equal_nan=True)


def _multi(lib):
    class T(lib.nn.Module):
        def forward(self, a, k, b):
            return a * b * k, b.detach() * 2, 5
    return T()


def test_multiple_inputs_non_tensors_and_outputs(torch):
    a, bv = _x((3,), 6), _x((3,), 7)
    res = []
    for lib in (ag, torch):
        mod = _multi(lib)
        log = []

        def hook(mm, gi, go):
            log.append((_shapes(gi), _shapes(go), [None if g is None else g.numpy().copy()
                                                   for g in gi]))
            return (gi[0] * 10, gi[1], gi[2])
        mod.register_full_backward_hook(hook)
        x = lib.tensor(a, requires_grad=True)
        o = mod(x, 2.0, lib.tensor(bv))
        assert o[2] == 5 and o[1].grad_fn is None
        o[0].sum().backward()
        res.append((log, x.grad.numpy().copy()))
    (log, gx), (tlog, tgx) = res
    assert [e[:2] for e in log] == [e[:2] for e in tlog] == \
        [([(3,), None, (3,)], [(3,), None, None])]
    # the tensor that needs no gradient gets a zero gradient, as in PyTorch
    assert_close(log[0][2][2], np.zeros(3), rtol=1e-7, atol=0, equal_nan=True, check_dtype=False)
    assert_close(log[0][2][0], 2 * bv, rtol=1e-6, atol=0, equal_nan=True)
    assert_close(gx, 20 * bv, rtol=1e-6, atol=0, equal_nan=True)
    assert_close(gx, tgx, rtol=1e-6, atol=0, equal_nan=True)


def test_unused_output_gives_none_grad_output(torch):
    seen = []
    for lib in (ag, torch):
        class T2(lib.nn.Module):
            def forward(self, a):
                return a * 2, a * 3
        mod = T2()
        mod.register_full_backward_hook(lambda mm, gi, go: seen.append([g is None for g in go]))
        x = lib.tensor(_x(), requires_grad=True)
        mod(x)[0].sum().backward()
    assert seen == [[False, True], [False, True]]


def test_wrong_number_of_returned_grads(torch):
    for lib in (ag, torch):
        x = lib.tensor(_x(), requires_grad=True)
        mod = _multi(lib)
        mod.register_full_backward_hook(lambda mm, gi, go: (None,))
        with pytest.raises(RuntimeError, match="Backward hook returned an invalid number of "
                                               "grad_input, got 1, but expected 3"):
            mod(x, 2.0, lib.ones(3))[0].sum().backward()
        mod = _multi(lib)
        mod.register_full_backward_pre_hook(lambda mm, go: (None,))
        with pytest.raises(RuntimeError, match="Backward pre hook returned an invalid number "
                                               "of grad_output, got 1, but expected 3"):
            mod(x, 2.0, lib.ones(3))[0].sum().backward()


def test_no_input_requires_grad_fires_on_outputs_with_warning(torch):
    for lib in (ag, torch):
        mod = lib.nn.Linear(3, 2)
        log = []
        mod.register_full_backward_hook(lambda mm, gi, go: log.append((gi, _shapes(go))))
        out = mod(lib.tensor(_x((4, 3))))
        with pytest.warns(UserWarning, match="Full backward hook is firing when gradients are "
                                             "computed with respect to module outputs"):
            out.sum().backward()
        assert log == [((None,), [(4, 2)])]
        mod.register_full_backward_hook(lambda mm, gi, go: (lib.ones(4, 3),))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(RuntimeError, match="no input requires gradient should always "
                                                   "return None"):
                mod(lib.tensor(_x((4, 3)))).sum().backward()


def test_order_prepend_remove_and_global_hooks(torch):
    res = []
    for lib in (ag, torch):
        reg_h = register_module_full_backward_hook if lib is ag else \
            torch.nn.modules.module.register_module_full_backward_hook
        reg_p = register_module_full_backward_pre_hook if lib is ag else \
            torch.nn.modules.module.register_module_full_backward_pre_hook
        log = []
        mod = lib.nn.Linear(3, 2)
        h1 = mod.register_full_backward_hook(lambda *a: log.append("h1"))
        mod.register_full_backward_hook(lambda *a: log.append("h0"), prepend=True)
        mod.register_full_backward_pre_hook(lambda *a: log.append("p1"))
        mod.register_full_backward_pre_hook(lambda *a: log.append("p0"), prepend=True)
        gh = reg_h(lambda m, gi, go: log.append("g:" + type(m).__name__))
        gp = reg_p(lambda m, go: log.append("gp:" + type(m).__name__))
        x = lib.tensor(_x((2, 3)), requires_grad=True)
        mod(x).sum().backward()
        log.append("|")
        h1.remove()
        gh.remove()
        gp.remove()
        mod(x).sum().backward()
        res.append(log)
    assert res[0] == res[1] == ["gp:Linear", "p0", "p1", "g:Linear", "h0", "h1", "|",
                                "p0", "p1", "h0"]


def test_no_hooks_under_no_grad_and_hooks_in_a_sequential(torch):
    m, tm = _linears(torch)
    res = []
    for mod, lib in ((m, ag), (tm, torch)):
        log = []
        mod.register_full_backward_hook(lambda *a: log.append("h"))
        with lib.no_grad():
            out = mod(lib.tensor(_x((2, 3)), requires_grad=True))
        assert out.grad_fn is None
        seq = lib.nn.Sequential(mod, lib.nn.Tanh())
        x = lib.tensor(_x((2, 3)), requires_grad=True)
        seq(x).sum().backward()
        res.append((log, x.grad.numpy().copy()))
    assert res[0][0] == res[1][0] == ["h"]
    assert_close(res[0][1], res[1][1], rtol=1e-5, atol=0, equal_nan=True)


def test_in_place_on_hooked_output_or_input_raises(torch):
    for lib in (ag, torch):
        mod = lib.nn.Linear(3, 2)
        mod.register_full_backward_hook(lambda *a: None)
        x = lib.tensor(_x((2, 3)), requires_grad=True)
        out = mod(x)
        with pytest.raises(RuntimeError, match="view"):
            out.add_(1)

        class M(lib.nn.Module):
            def forward(self, a):
                a.mul_(2)
                return a * 3
        mm = M()
        mm.register_full_backward_hook(lambda *a: None)
        with pytest.raises(RuntimeError, match="view"):
            mm(x * 1)


def test_non_tensor_output_warns_and_hooks_do_not_fire(torch):
    for lib in (ag, torch):
        class D(lib.nn.Module):
            def forward(self, a):
                return {"a": a * 2}
        log = []
        d = D()
        d.register_full_backward_hook(lambda *a: log.append("h"))
        x = lib.tensor(_x(), requires_grad=True)
        with pytest.warns(UserWarning, match="module output should be a Tensor or a tuple of "
                                             "Tensors but received <class 'dict'>"):
            r = d(x)
        r["a"].sum().backward()
        assert log == []
        assert_close(x.grad.numpy(), np.full(3, 2.0), rtol=1e-7, atol=0, equal_nan=True,
                     check_dtype=False)


def test_compile_with_full_backward_hooks_is_a_clear_graph_break():
    mod = nn.Linear(3, 2)
    seen = []
    mod.register_full_backward_hook(lambda m, gi, go: seen.append(tuple(gi[0].shape)))
    x = ag.tensor(_x((4, 3)), requires_grad=True)
    f = ag.compile(lambda x: mod(x).sum(), backend="interpret")
    with pytest.warns(UserWarning, match="Linear with full backward hooks.*running this call "
                                         "eagerly"):
        f(x).backward()
    assert seen == [(4, 3)]
    with pytest.raises(ag.compiler.GraphBreakError if hasattr(ag, "compiler") else RuntimeError,
                       match="Linear with full backward hooks"):
        ag.compile(lambda x: mod(x).sum(), backend="interpret", fullgraph=True)(x)
    with ag.no_grad():  # nothing to hook: it compiles
        y = ag.compile(lambda x: mod(x).sum(), backend="interpret", fullgraph=True)(x)
    w, b = mod.weight.detach().numpy(), mod.bias.detach().numpy()
    assert_close(y.item(), (_x((4, 3)) @ w.T + b).sum(), rtol=1e-5, atol=0, equal_nan=True)


def test_compiled_function_called_inside_saved_tensors_hooks_runs_eagerly():
    # compiled outside the hooks, then called inside them: the hooks must see the saved
    # tensors (a compiled program would hide them), with the same values and gradients
    import warnings
    import aotgrad as ag

    def f(x, w):
        return (x @ w).tanh().sum()

    cf = ag.compile(f, backend="interpret")
    x = ag.tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    w = ag.tensor(np.linspace(0.5, -0.5, 12, dtype=np.float32).reshape(3, 4),
                  requires_grad=True)
    cf(x, w).backward()
    g0 = w.grad.numpy().copy()
    w.grad = None
    packed = []
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with ag.autograd.graph.saved_tensors_hooks(lambda t: packed.append(t) or t,
                                                   lambda t: t):
            loss = cf(x, w)
        loss.backward()
    assert packed, "no tensor was packed"
    assert any("saved_tensors_hooks" in str(r.message) for r in rec)
    assert_close(w.grad.numpy(), g0, rtol=1e-6, atol=0, equal_nan=True)
