"""aotgrad's logs: traces, recompiles, graph breaks, cache hits and misses, and the failures
of background and helper-process compiles (recovered from, so never raised: logged)."""
import io
import logging
import os
import sys
import warnings

import numpy as np
import pytest

import aotgrad as ag
from aotgrad.utils import log as aglog

from test_package_conventions import run_python
from aotgrad.testing import assert_close


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.DEBUG, logger="aotgrad")
    return caplog


def _messages(caplog, level, name):
    return [r.getMessage() for r in caplog.records if r.levelno == level and r.name == name]


def test_trace_and_recompile_are_logged(logs):
    cf = ag.compile(lambda x: (x * 2).sum(), backend="interpret", dynamic=False)
    cf(ag.ones(3))
    cf(ag.ones(3))                 # a hit: nothing new
    cf(ag.ones(4))                 # another shape: a recompile
    got = _messages(logs, logging.INFO, "aotgrad.compiler")
    assert len(got) == 2
    assert "tracing" in got[0] and "recompiling" in got[1]


def test_automatic_dynamic_is_logged_once(logs):
    cf = ag.compile(lambda x: (x * 2).sum(), backend="interpret")
    cf(ag.ones(3))
    cf(ag.ones(4))                 # the size changed: traced again with that dim symbolic
    cf(ag.ones(5))                 # served by the symbolic program: nothing new
    got = _messages(logs, logging.INFO, "aotgrad.compiler")
    assert len(got) == 3, got
    assert "tracing" in got[0]
    assert "automatic dynamic" in got[1] and "dim 0" in got[1]
    assert "symbolic" in got[2]


def test_graph_break_is_logged(logs):
    def f(x):
        if x.sum() > 0:
            return x * 2
        return x * 3
    cf = ag.compile(f, backend="interpret")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_close(cf(ag.ones(3)).numpy(), 2 * np.ones(3), rtol=1e-7, atol=0, equal_nan=True,
                     check_dtype=False)
    assert any("graph break" in m and "bool(Tensor)" in m
               for m in _messages(logs, logging.INFO, "aotgrad.compiler"))


def test_cache_miss_then_hit_is_logged(logs, tmp_path, monkeypatch):
    from aotgrad.codegen import cache
    monkeypatch.setenv("AOTGRAD_CACHE_DIR", str(tmp_path))
    source = "VALUE = 12345  # test_cache_miss_then_hit_is_logged\n"
    mod, how = cache.load_module(source)
    assert how == "new" and mod.VALUE == 12345
    assert any("cache miss" in m for m in _messages(logs, logging.INFO, "aotgrad.codegen.cache"))
    sys.modules.pop(mod.__name__)
    logs.clear()
    mod, how = cache.load_module(source)
    sys.modules.pop(mod.__name__)
    assert how == "disk"
    assert any("cache hit" in m for m in _messages(logs, logging.DEBUG, "aotgrad.codegen.cache"))


def test_failed_background_compile_is_logged(logs):
    from aotgrad.codegen import tiers

    def job():
        raise RuntimeError("no parallel variant today")
    tiers.submit(job)
    assert tiers.wait(timeout=30)
    rec = [r for r in logs.records if r.name == "aotgrad.codegen.tiers"]
    assert rec and rec[0].levelno == logging.WARNING
    assert "no parallel variant today" in logs.text


class _DeadHelper:
    """A helper process that has exited: it takes the task, answers nothing."""
    pid = 4242

    def __init__(self):
        self.stdin, self.stdout = io.StringIO(), io.StringIO("")

    def poll(self):
        return 1


def test_dead_compile_helper_is_logged(logs):
    import queue
    from aotgrad.codegen import parallel_compile
    todo, done, broken = queue.Queue(), [], set()
    todo.put(parallel_compile.Unit("m.py", "m", "k", "sig"))
    helper = _DeadHelper()
    parallel_compile._feed(helper, todo, done, broken)
    assert broken == {helper} and done == []
    assert any("4242 exited" in m
               for m in _messages(logs, logging.WARNING, "aotgrad.codegen.parallel_compile"))


def test_configure_sets_level_and_one_handler():
    logger = logging.getLogger("aotgrad")
    before_level, before_handlers = logger.level, list(logger.handlers)
    try:
        assert aglog.configure("DEBUG") is logger
        aglog.configure("info")
        assert logger.level == logging.INFO
        assert sum(isinstance(h, aglog._StderrHandler) for h in logger.handlers) == 1
        with pytest.raises(ValueError, match="AOTGRAD_LOG: unknown level 'loud'"):
            aglog.configure("loud")
    finally:
        logger.setLevel(before_level)
        logger.handlers[:] = before_handlers


def test_aotgrad_log_environment_switch():
    code = ("import aotgrad\n"
            "f = aotgrad.compile(lambda x: x + 1, backend='interpret')\n"
            "f(aotgrad.ones(2))\n")
    on = run_python(code, AOTGRAD_LOG="info")
    assert on.returncode == 0, on.stderr
    assert "[aotgrad INFO aotgrad.compiler] compile(<lambda>): tracing" in on.stderr
    off = run_python(code, AOTGRAD_LOG="")
    assert off.returncode == 0 and "aotgrad" not in off.stderr, off.stderr
