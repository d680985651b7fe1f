"""The disk cache of a symbolic program's kernels has no symbolic size in its keys: a fresh
process that compiles the same function with dynamic=True serves another size with no
Numba compile (every kernel module loaded from disk), and equals eager there."""
import os
import subprocess
import sys
import textwrap

_CHILD = textwrap.dedent("""
    import sys
    import aotgrad
    import aotgrad.nn.functional as F
    from aotgrad import nn
    from aotgrad.codegen import cache
    from aotgrad.testing import assert_close

    aotgrad.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    loss = lambda x, t: F.cross_entropy(model(x), t)
    f = aotgrad.compile(loss, dynamic=True)
    n = int(sys.argv[1])
    x, t = aotgrad.randn(n, 6), aotgrad.randint(0, 3, (n,))
    xc = x.clone().requires_grad_(True)
    out = f(xc, t)
    out.backward()
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    xe = x.clone().requires_grad_(True)
    ref = loss(xe, t)
    ref.backward()
    assert_close(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    assert_close(xc.grad.numpy(), xe.grad.numpy(), rtol=1e-5, atol=1e-6)
    for g, p in zip(grads, model.parameters()):
        assert_close(g, p.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert f.stats.compiles == 1
    print("LOADS", sorted(cache.stats.loads.items()), "COMPILED", cache.stats.compiled)
""")


def _child(cache_dir, n):
    env = dict(os.environ, AOTGRAD_CACHE_DIR=str(cache_dir))
    r = subprocess.run([sys.executable, "-c", _CHILD, str(n)], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    loads, compiled = r.stdout.split("LOADS")[-1].split("COMPILED")
    return eval(loads), int(compiled)


def _modules(cache_dir):
    return sorted(p.name for p in cache_dir.glob("aotgrad_gen_*.py"))


def test_a_fresh_process_serves_another_size_with_no_compile(tmp_path):
    loads, compiled = _child(tmp_path, 5)
    assert compiled > 0 and dict(loads).get("new", 0) > 0
    modules = _modules(tmp_path)
    loads, compiled = _child(tmp_path, 11)
    assert compiled == 0, loads
    assert [how for how, _ in loads] == ["disk"]
    assert _modules(tmp_path) == modules       # no module keyed by the new size
