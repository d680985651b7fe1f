"""The row machine's installation and loading (its code: codegen.row_vm): compiled once per
installation, in helper processes (one signature per register dtype), kept in `_machine`
beside the code (`machine_dir`), and loaded in each process by a background thread; until
it is loaded, `machine()` is None and cold kernels run on numpy blocks (codegen.first_tier)."""
import logging
import os
import threading

from aotgrad.codegen.row_vm import machine_source

log = logging.getLogger(__name__)

_INSTALLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_machine")


def _purge_others(d, keep):
    """Remove the machines of earlier versions of this code from the installation's
    directory (only this version's source can be loaded here)."""
    from aotgrad.codegen import cache
    for name in os.listdir(d):
        stem = name.split(".", 1)[0]
        if name.endswith(".py") and stem.startswith("aotgrad_gen_") and stem != keep:
            cache.purge(stem, d)


def machine_dir():
    """Where the machine's module and its machine code live: `_machine` beside this file
    (the installation), else, where the installation is read-only, the kernel cache."""
    d = _INSTALLED
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    from aotgrad.codegen import cache
    return cache.cache_dir()


def signature_descriptions():
    """`run_rows`'s signatures, as codegen.compile_worker describes one: float32 registers,
    then float64 ones (the `registers` argument, an empty array of their dtype)."""
    return [[["size"]] * 3 + [["array", "uint8", 1], ["array", "int64", 2],
                              ["array", "int64", 1], ["array", "float64", 1],
                              ["array", dtype, 1], ["array", "int64", 1],
                              ["array", "int64", 1], ["array", "float64", 2]] + [["size"]] * 3
            for dtype in ("float32", "float64")]


class _Machine:
    """The machine of this process: None until loaded (`machine()`), loaded once by a
    background thread that compiles it in a helper process where numba's cache does not
    hold it yet (once per installation: the first process to need it holds a lock on the
    machine's directory meanwhile, so others wait for its work instead of repeating it)."""

    def __init__(self):
        self.fn = None
        self.started = False
        self.failed = None
        self.lock = threading.Lock()
        self.ready = threading.Event()


_machine = _Machine()


def enabled():
    """AOTGRAD_ROW_MACHINE=0 keeps cold kernels on numpy (codegen.first_tier)."""
    return os.environ.get("AOTGRAD_ROW_MACHINE", "1").strip() != "0"


def machine():
    """`run_rows` where it is loaded in this process, else None (and its loading starts)."""
    fn = _machine.fn
    if fn is None and not _machine.started:
        request()
    return fn


def request():
    """Start loading the machine in the background (once per process)."""
    with _machine.lock:
        if _machine.started or not enabled():
            return
        _machine.started = True
    threading.Thread(target=_load, daemon=True, name="aotgrad-row-machine").start()


def wait(timeout=None):
    """Block until the machine is loaded (True) or failed or `timeout` passed (False)."""
    request()
    return _machine.ready.wait(timeout) and _machine.fn is not None


def _load():
    from aotgrad.codegen import cache, parallel_compile, tiers
    from aotgrad.codegen.compile_worker import numba_signature
    try:
        source, d = machine_source(), machine_dir()
        mod, _ = cache.load_module(source, directory=d)
        if d == _INSTALLED:
            _purge_others(d, mod.__name__)
        if not cache.has_machine_code(source, "run_rows", directory=d):
            with cache.dir_lock(d, exclusive=True, name=".machine.lock"):
                if not cache.has_machine_code(source, "run_rows", directory=d):
                    # one after the other: two helpers saving numba's index of the same
                    # function at once could each drop the other's entry
                    for sig in signature_descriptions():
                        unit = parallel_compile.Unit(mod.__file__, mod.__name__, "run_rows",
                                                     sig, len(source))
                        tiers.track([unit], tiers.Priority.FIRST_TIER)
                        try:
                            parallel_compile.compile_in_helpers([unit], d)
                        finally:
                            tiers.untrack(unit)
        if not tiers.begin_load():          # the interpreter is exiting
            return
        try:
            # numba's cache, filled by the helper (or compiled here where none could run)
            for sig in signature_descriptions():
                mod.run_rows.compile(numba_signature(sig))
        finally:
            tiers.end_load()
        _machine.fn = mod.run_rows
    except Exception as e:      # the first tier stays on numpy: correct, only slower
        _machine.failed = e
        log.warning("the row machine did not load (%s: %s); cold kernels stay on numpy",
                    type(e).__name__, e)
    finally:
        _machine.ready.set()
