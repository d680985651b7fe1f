"""A tensor that a compiled function writes in place: its new value reaches every holder of its
memory, as eagerly and in PyTorch.

The call hands the tensor the program's new array instead of copying it into the old one only
where nothing else can see the old memory (no view, no other tensor, no numpy array the user
kept, no address handed out); everywhere else the old array is written, so its address stays
the tensor's, as PyTorch's in-place ops keep a tensor's storage. Each test compares with the same code run
eagerly, and calls the compiled function twice (the trace's call and the cached one).
"""
import numpy as np
import pytest

import aotgrad as ag
from aotgrad.testing import assert_close

BACKENDS = ["interpret", "numba"]
P0 = np.array([[0.5, -1.0, 2.0], [3.0, -0.25, 1.5]], np.float32)
Q0 = np.array([[1.0, 2.0, -3.0], [0.5, 4.0, -2.0]], np.float32)


def add_one(p):
    p.add_(1.0)
    return p.sum()


def fresh(a=P0):
    return ag.tensor(a.copy())


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tensor_nothing_else_sees_takes_the_new_array(backend):
    f = ag.compile(add_one, backend=backend)
    p, e = fresh(), fresh()
    for _ in range(2):
        before = id(p._value)
        f(p)
        add_one(e)
        assert_close(p, e, rtol=0, atol=0)
        if backend == "numba":       # the point of the rule: no copy where none is needed
            assert id(p._value) != before
    assert p._version == e._version


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("holder", ["view", "row", "detach", "data", "numpy", "from_numpy"])
def test_every_holder_of_the_memory_sees_the_write(backend, holder):
    f = ag.compile(add_one, backend=backend)
    for run in (f, add_one):
        arr = P0.copy()
        p = ag.from_numpy(arr) if holder == "from_numpy" else ag.tensor(arr)
        seen = {"view": lambda: p.view(-1), "row": lambda: p[1],
                "detach": lambda: p.detach(), "data": lambda: p.data,
                "numpy": lambda: p.numpy(), "from_numpy": lambda: arr}[holder]()
        for k in range(2):
            run(p)
            want = (P0 + (k + 1)).reshape(-1) if holder == "view" else \
                (P0 + (k + 1))[1] if holder == "row" else P0 + (k + 1)
            got = seen if isinstance(seen, np.ndarray) else seen.numpy()
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(p.numpy(), P0 + (k + 1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["data_ptr", "storage", "row_storage", "numpy", "asarray"])
def test_an_address_handed_out_stays_the_tensors(backend, how):
    f = ag.compile(add_one, backend=backend)
    p = fresh()
    addr = {"data_ptr": lambda: p.data_ptr(),
            "storage": lambda: p.untyped_storage().data_ptr(),
            "row_storage": lambda: p[1].untyped_storage().data_ptr(),
            "numpy": lambda: p.numpy().ctypes.data,       # the array itself is dropped
            "asarray": lambda: np.asarray(p).ctypes.data}[how]()
    for k in range(2):
        f(p)
        assert p.data_ptr() == addr
        np.testing.assert_array_equal(p.numpy(), P0 + (k + 1))


def copy_from(p, q):
    p.copy_(q)
    return p.sum()


def write_and_return_new(p, q):
    y = q * 2
    p.copy_(y)
    return y


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_written_value_another_tensor_holds_is_copied(backend):
    """p's new value is q's array, or the returned y's: p must not share memory with either."""
    f, g = ag.compile(copy_from, backend=backend), ag.compile(write_and_return_new,
                                                              backend=backend)
    for _ in range(2):
        p, q = fresh(), fresh(Q0)
        f(p, q)
        q.add_(1.0)
        np.testing.assert_array_equal(p.numpy(), Q0)
        p, q = fresh(), fresh(Q0)
        y = g(p, q)
        y.add_(1.0)
        np.testing.assert_array_equal(p.numpy(), Q0 * 2)
        assert not np.shares_memory(p.numpy(), y.numpy())


def adam_step_program():
    model = ag.nn.Sequential(ag.nn.Linear(3, 4), ag.nn.Tanh(), ag.nn.Linear(4, 1))
    opt = ag.optim.Adam(model.parameters(), lr=0.05)

    def step(x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss
    return model, opt, step


def test_an_optimizer_step_matches_eager_and_keeps_its_state_tensors():
    ag.manual_seed(0)
    m1, o1, s1 = adam_step_program()
    m2, o2, s2 = adam_step_program()
    m2.load_state_dict(m1.state_dict())
    run = ag.compile(s2)
    rng = np.random.default_rng(0)
    x, y = (ag.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((8, 3), (8, 1)))
    held = None
    for k in range(4):
        assert_close(run(x, y), s1(x, y), rtol=1e-5, atol=1e-6)
        for a, b in zip(m1.parameters(), m2.parameters()):
            assert_close(b, a, rtol=1e-5, atol=1e-6)
        if k == 1:   # the user keeps a moment's array: later steps must write into it
            st = o2.state[next(iter(m2.parameters()))]
            held = st["exp_avg"].numpy()
        if held is not None:
            st = o2.state[next(iter(m2.parameters()))]
            np.testing.assert_array_equal(held, st["exp_avg"].numpy())
            ref = o1.state[next(iter(m1.parameters()))]["exp_avg"]
            assert_close(ag.tensor(held), ref, rtol=1e-5, atol=1e-6)
