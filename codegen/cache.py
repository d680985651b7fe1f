"""On-disk cache of generated modules.

A module's file is named by a hash of its source, the aotgrad version, the codegen version
and the numba version; it is imported under that stable name and registered in
`sys.modules`, so numba's `cache=True` stores machine code next to it (`__pycache__`) and a
second process starts warm. Writes are atomic (temp file + rename). An entry whose text does
not match its name, or whose numba cache cannot be loaded, is removed and rebuilt.

`AOTGRAD_CACHE_DIR` overrides the default `$XDG_CACHE_HOME/aotgrad` (`~/.cache/aotgrad`
without XDG_CACHE_HOME); the directories aotgrad creates for it are private (mode 0700).

Trust: numba's cached machine code is unpickled when a kernel loads, so whoever can write
the cache directory can run code in this process. A directory is used only if it belongs
to this user and no one else can write it or swap it (the checks ssh and pip make): the
directory itself (after symlinks) is owned by the user and not writable by group or
others; each directory above it, and each symlink on the way, is owned by the user or root,
and one that others can write has the sticky bit (as /tmp), so they cannot rename what is
in it. Otherwise, or where the directory cannot be created or written, a private temporary
directory is used instead (a warning, once, says which directory and why): compiling still
works, it is only not kept for the next process.
"""
import atexit
import collections
import contextlib
import dataclasses
import glob
import hashlib
import logging
import os
import sys
import shutil
import stat
import tempfile
import warnings

import numba

from aotgrad._version import __version__
from aotgrad.codegen.compile_worker import import_file

log = logging.getLogger(__name__)

CODEGEN_VERSION = "1"
_PREFIX = "aotgrad_gen_"


_VERSION_KEY = f"aotgrad={__version__} codegen={CODEGEN_VERSION} numba={numba.__version__}"


_usable = {}   # configured dir -> the dir actually used (itself, or a temporary fallback)


def default_cache_dir():
    """`$AOTGRAD_CACHE_DIR`, else `$XDG_CACHE_HOME/aotgrad`, else `~/.cache/aotgrad`."""
    d = os.environ.get("AOTGRAD_CACHE_DIR")
    if d:
        return d
    xdg = os.environ.get("XDG_CACHE_HOME")
    if not xdg or not os.path.isabs(xdg):   # the XDG spec: a relative path is ignored
        xdg = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(xdg, "aotgrad")


def _make_private(d):
    """Create `d` and the missing directories above it, each with mode 0700."""
    d = os.path.abspath(d)
    missing = []
    while not os.path.lexists(d):
        missing.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    for p in reversed(missing):
        try:
            os.mkdir(p, 0o700)
        except FileExistsError:   # another process made it meanwhile: checked below
            pass


def unsafe_reason(d):
    """None if the existing directory `d` can be trusted with machine code (see the module
    docstring), else why not."""
    uid = os.getuid()
    path = os.path.abspath(d)
    # symlinks on the way: one someone else owns can be pointed elsewhere later
    p = os.sep
    for part in path.split(os.sep)[1:]:
        p = os.path.join(p, part)
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode) and st.st_uid not in (uid, 0):
            return f"the symlink {p!r} belongs to another user (uid {st.st_uid})"
    real = os.path.realpath(path)
    st = os.stat(real)
    where = "" if real == path else f" ({path!r} leads to {real!r})"
    if not stat.S_ISDIR(st.st_mode):
        return f"it is not a directory{where}"
    if st.st_uid != uid:
        return f"it belongs to another user (uid {st.st_uid}){where}"
    if st.st_mode & 0o022:
        return f"it is writable by {_who(st.st_mode)}{where}"
    p = os.path.dirname(real)
    while True:
        st = os.stat(p)
        if st.st_uid not in (uid, 0):
            return f"the directory above it, {p!r}, belongs to another user (uid {st.st_uid})"
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            return f"the directory above it, {p!r}, is writable by {_who(st.st_mode)} " \
                   f"(without the sticky bit)"
        parent = os.path.dirname(p)
        if parent == p:
            return None
        p = parent


def _who(mode):
    return " and ".join(w for w, bit in (("group", 0o020), ("others", 0o002)) if mode & bit)


def _writable(d):
    try:
        _make_private(d)
        fd, probe = tempfile.mkstemp(dir=d, prefix=".tmp_probe_")
        os.close(fd)
        os.unlink(probe)
        return None
    except OSError as e:
        return f"it is not writable ({e.strerror or e})"


def cache_dir():
    """The directory generated modules and numba's machine code live in."""
    d = default_cache_dir()
    use = _usable.get(d)
    if use is None or not os.path.isdir(use):
        why = _writable(d)
        if why is None:
            try:
                why = unsafe_reason(d)
            except OSError as e:
                why = f"it cannot be checked ({e.strerror or e})"
        if why is None:
            use = d
        else:
            use = tempfile.mkdtemp(prefix="aotgrad-cache-")   # mode 0700
            atexit.register(shutil.rmtree, use, True)
            warnings.warn(f"aotgrad: not using the compile cache directory {d!r}: {why}. "
                          f"Using {use!r} for this process (compiled kernels are not kept; "
                          f"set AOTGRAD_CACHE_DIR to a private directory of yours to keep "
                          f"them)", RuntimeWarning, stacklevel=2)
        _usable[d] = use
    return use


@dataclasses.dataclass
class CacheStats:
    """What this process asked of the cache since the last `reset()`: modules by how they
    were found ('memory', 'disk', 'new', 'rebuilt') and kernels numba compiled here (not
    loaded from its disk cache or from memory). A second trace whose kernels are unchanged
    adds only 'memory' loads and no compile."""
    loads: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    compiled: int = 0

    def reset(self):
        self.loads.clear()
        self.compiled = 0


stats = CacheStats()


def has_machine_code(source, kernel, on_disk=None, directory=None):
    """Is the kernel `kernel` of the module for `source` compiled: in this process (its
    dispatcher holds an overload), or in numba's disk cache (index and data written)? A
    module that is only imported does not count: the background thread imports a parallel
    variant before a helper process has compiled it, and taking that for compiled made a
    second trace compile the variant again, here, while the helper did the same.
    `on_disk`: the set `compiled_on_disk()` returned (one listing of the directory for
    many questions), else the directory (`directory`, default the cache) is looked at now."""
    name = module_name(source)
    mod = sys.modules.get(name)
    if mod is not None and getattr(getattr(mod, kernel, None), "overloads", None):
        return True
    if on_disk is not None:
        return name in on_disk
    stem = os.path.join(directory or cache_dir(), "__pycache__", name + ".")
    return bool(glob.glob(stem + "*.nbi")) and bool(glob.glob(stem + "*.nbc"))


def compiled_on_disk():
    """The names of the generated modules whose machine code numba's disk cache holds
    (index and data written), from one listing of the directory. (Each generated module
    holds one kernel.)"""
    index, data = set(), set()
    try:
        with os.scandir(os.path.join(cache_dir(), "__pycache__")) as it:
            for e in it:
                if e.name.startswith(_PREFIX):
                    if e.name.endswith(".nbi"):
                        index.add(e.name.split(".", 1)[0])
                    elif e.name.endswith(".nbc"):
                        data.add(e.name.split(".", 1)[0])
    except OSError:
        pass
    return index & data


def module_name(source):
    h = hashlib.sha256((_VERSION_KEY + "\n" + source).encode()).hexdigest()[:24]
    return _PREFIX + h


def _header(name):
    return f"# generated by aotgrad.codegen ({_VERSION_KEY}); module {name}\n"


def _write_atomic(path, text):
    d = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp_", suffix=".py")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def purge(name, directory=None):
    """Remove a module's source and numba cache files (and forget it in this process)."""
    d = directory or cache_dir()
    sys.modules.pop(name, None)
    for p in [os.path.join(d, name + ".py")] + \
            glob.glob(os.path.join(d, "__pycache__", name + ".*")):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


@contextlib.contextmanager
def dir_lock(d, exclusive, name=".lock"):
    """A lock on directory `d`, held (shared) while a process writes and imports a module,
    and (exclusive) while cache_clear deletes: numba needs the module's file while it is
    imported, so another process's cache_clear must not delete it in between. Another
    `name` is another lock on the same directory (codegen.row_vm holds one while it
    compiles the row machine, so another process waits for it, without stopping the loads
    of kernels from the same directory). Without flock: no lock."""
    fd = None
    try:
        import fcntl
        fd = os.open(os.path.join(d, name), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    except (ImportError, OSError):
        pass
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)


def load_module(source, fresh=False, directory=None):
    """Import the generated module for `source` from `directory` (default: the cache);
    returns (module, how) with how in ('memory', 'disk', 'new', 'rebuilt')."""
    name = module_name(source)
    if not fresh and name in sys.modules:
        log.debug("module %s: already loaded", name)
        if directory is None:
            stats.loads["memory"] += 1
        return sys.modules[name], "memory"
    d = directory or cache_dir()
    with dir_lock(d, exclusive=False):
        mod, how = _load_module(name, source, d, fresh)
    if directory is None:               # (`stats` counts the kernel cache's modules)
        stats.loads[how] += 1
    return mod, how


def _write_file(name, source, d):
    """(path, how) of module `name`'s file in `d`, written unless it holds `source` already:
    how is 'disk' (there), 'new' or 'rebuilt' (written)."""
    path = os.path.join(d, name + ".py")
    text = _header(name) + source
    how = "disk"
    try:
        with open(path, encoding="utf-8") as f:
            ok = f.read() == text
        if not ok:
            purge(name, d)
            how = "rebuilt"
    except FileNotFoundError:
        how = "new"
    except (OSError, UnicodeDecodeError):
        purge(name, d)
        how = "rebuilt"
    if how != "disk":
        _write_atomic(path, text)
    return path, how


def _load_module(name, source, d, fresh):
    path, how = _write_file(name, source, d)
    text = _header(name) + source
    if fresh:
        sys.modules.pop(name, None)
    try:
        mod = import_file(name, path)
    except Exception as e:
        log.warning("cached module %s did not import (%s: %s); rebuilding it", path,
                    type(e).__name__, e)
        purge(name, d)
        _write_atomic(path, text)
        mod, how = import_file(name, path), "rebuilt"
    if how == "disk":
        log.debug("module %s: cache hit in %s", name, d)
    else:
        log.info("module %s: cache %s in %s", name, "miss" if how == "new" else
                 "entry rebuilt", d)
    return mod, how


def cache_info():
    """Size report of the cache directory: dir, modules, files, bytes."""
    d = cache_dir()
    files = [p for p in glob.glob(os.path.join(d, "**", "*"), recursive=True)
             if os.path.isfile(p)]
    mods = glob.glob(os.path.join(d, _PREFIX + "*.py"))
    return {"dir": d, "modules": len(mods), "files": len(files),
            "bytes": sum(os.path.getsize(p) for p in files)}


STALE_TEMP_SECONDS = 3600   # a temporary file this old was left by a process that died


def _in_flight(path, now):
    """A temporary file another process may be writing right now (ours `.tmp_*`, numba's
    `<file>.tmp.<uuid>`); deleting it would make that process's rename fail."""
    name = os.path.basename(path)
    if not (name.startswith(".tmp_") or ".tmp." in name):
        return False
    try:
        return now - os.path.getmtime(path) < STALE_TEMP_SECONDS
    except OSError:
        return False


def cache_clear():
    """Delete every cached module and its numba cache; returns the bytes freed. Temporary
    files other processes may be writing are left alone (unless older than an hour)."""
    import time
    d = cache_dir()
    now, freed = time.time(), 0
    with dir_lock(d, exclusive=True):
        for p in glob.glob(os.path.join(d, _PREFIX + "*.py")) + \
                glob.glob(os.path.join(d, "__pycache__", _PREFIX + "*")) + \
                glob.glob(os.path.join(d, ".tmp_*")):
            if _in_flight(p, now):
                continue
            try:
                size = os.path.getsize(p)
                os.unlink(p)
                freed += size
            except FileNotFoundError:
                pass
    for name in [n for n in sys.modules if n.startswith(_PREFIX)]:
        del sys.modules[name]
    return freed
