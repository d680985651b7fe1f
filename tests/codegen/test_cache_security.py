"""The compile cache holds machine code that is unpickled on load: a directory is used only if
no one but its user can write it or swap it; otherwise a private temporary one (codegen/cache)."""
import os
import stat
import warnings

import pytest

from aotgrad.codegen import cache


@pytest.fixture
def env(monkeypatch):
    monkeypatch.delenv("AOTGRAD_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(cache, "_usable", {})
    return monkeypatch


def _mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def _used_without_warning(d):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return cache.cache_dir()


def _refused(d, why):
    with pytest.warns(RuntimeWarning, match="not using the compile cache directory") as w:
        use = cache.cache_dir()
    msg = str(w[0].message)
    assert repr(str(d)) in msg and why in msg, msg
    assert use != str(d) and os.path.isdir(use)
    assert _mode(use) == 0o700 and os.stat(use).st_uid == os.getuid()
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # once per directory
        assert cache.cache_dir() == use
    return use


def test_a_private_directory_is_created_0700_and_used(env, tmp_path):
    d = tmp_path / "a" / "b" / "cache"
    env.setenv("AOTGRAD_CACHE_DIR", str(d))
    assert _used_without_warning(d) == str(d)
    for p in (d, d.parent, d.parent.parent):     # the whole chain aotgrad made
        assert _mode(p) == 0o700


def test_the_default_honours_xdg_cache_home(env, tmp_path):
    env.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _used_without_warning(None) == str(tmp_path / "xdg" / "aotgrad")
    assert _mode(tmp_path / "xdg") == 0o700 and _mode(tmp_path / "xdg" / "aotgrad") == 0o700


def test_the_default_without_xdg_is_under_home(env, tmp_path):
    env.setenv("HOME", str(tmp_path))
    env.setenv("XDG_CACHE_HOME", "relative/path")  # ignored, as the XDG spec says
    assert _used_without_warning(None) == str(tmp_path / ".cache" / "aotgrad")
    assert _mode(tmp_path / ".cache") == 0o700


@pytest.mark.parametrize("mode,who", [(0o770, "group"), (0o707, "others"),
                                      (0o777, "group and others")])
def test_a_directory_others_can_write_is_refused(env, tmp_path, mode, who):
    d = tmp_path / "cache"
    d.mkdir()
    d.chmod(mode)
    env.setenv("AOTGRAD_CACHE_DIR", str(d))
    _refused(d, f"writable by {who}")


def test_a_directory_of_another_user_is_refused(env, tmp_path):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    env.setenv("AOTGRAD_CACHE_DIR", str(d))
    real_stat, me = os.stat, os.getuid()

    def stat_as_if_owned_by_someone_else(p, *a, **k):
        st = real_stat(p, *a, **k)
        if os.fspath(p) == str(d):
            fields = list(st)
            fields[stat.ST_UID] = me + 1
            return os.stat_result(fields)
        return st

    env.setattr(cache.os, "stat", stat_as_if_owned_by_someone_else)
    _refused(d, f"belongs to another user (uid {me + 1})")


def test_a_parent_others_can_write_is_refused_unless_sticky(env, tmp_path):
    top = tmp_path / "shared"
    top.mkdir()
    top.chmod(0o777)                      # anyone could rename cache/ and put their own
    d = top / "cache"
    env.setenv("AOTGRAD_CACHE_DIR", str(d))
    _refused(d, f"{str(top)!r}, is writable by group and others (without the sticky bit)")
    top.chmod(0o777 | stat.S_ISVTX)       # as /tmp: only the owner may rename its entries
    env.setattr(cache, "_usable", {})
    assert _used_without_warning(d) == str(d)


def test_a_symlink_to_a_directory_others_can_write_is_refused(env, tmp_path):
    target = tmp_path / "open"
    target.mkdir()
    target.chmod(0o777)
    link = tmp_path / "cache"
    link.symlink_to(target)
    env.setenv("AOTGRAD_CACHE_DIR", str(link))
    _refused(link, f"leads to {str(target)!r}")


def test_a_symlink_to_a_private_directory_is_used(env, tmp_path):
    target = tmp_path / "mine"
    target.mkdir(mode=0o700)
    link = tmp_path / "cache"
    link.symlink_to(target)
    env.setenv("AOTGRAD_CACHE_DIR", str(link))
    assert _used_without_warning(link) == str(link)


def test_a_symlink_someone_else_owns_is_refused(env, tmp_path):
    # in a sticky directory such as /tmp its owner can replace it at any time
    target = tmp_path / "mine"
    target.mkdir(mode=0o700)
    link = tmp_path / "cache"
    link.symlink_to(target)
    env.setenv("AOTGRAD_CACHE_DIR", str(link))
    real_lstat, me = os.lstat, os.getuid()

    def lstat_as_if_planted(p, *a, **k):
        st = real_lstat(p, *a, **k)
        if os.fspath(p) == str(link):
            fields = list(st)
            fields[stat.ST_UID] = me + 1
            return os.stat_result(fields)
        return st

    env.setattr(cache.os, "lstat", lstat_as_if_planted)
    _refused(link, "the symlink")


def test_the_suite_uses_a_private_cache_directory():
    d = cache.cache_dir()
    assert cache.unsafe_reason(d) is None
    assert os.stat(d).st_uid == os.getuid() and not _mode(d) & 0o077
