"""The compiled-module cache directory is used only if nobody but the current user can
write to it (numba's cache files there are pickles loaded into the process).

A refused directory (group/other-writable, or owned by another user; configured or the
fallback in the temporary directory) gets one warning and no file, and the program
still runs (its modules go to a private directory of the process).  The fallback is
created private (0700).  Tests run as root here and in CI: another owner is made with
``chown`` when root, else by pretending to be another user.
"""

import os
import stat
import tempfile
import uuid
import warnings

import numpy as np
import pytest

import accel as A
from accel.backends.numba import cache, cachedir


def _unique_source() -> str:
    return f"VALUE = 41 + 1  # {uuid.uuid4().hex}\n"


def _files(d) -> list:
    return sorted(p.name for p in d.rglob("*"))


def _owned_by_someone_else(d, monkeypatch):
    if os.geteuid() == 0:
        os.chown(d, 54321, 54321)
    else:
        uid = os.geteuid()
        monkeypatch.setattr(cachedir, "current_uid", lambda: uid + 1)


@pytest.fixture
def configured(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(d))
    return d


def test_private_configured_dir_is_used(configured):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mod = cache.load(_unique_source())
    assert mod.VALUE == 42
    assert any(n.endswith(".py") for n in _files(configured))


def test_world_writable_dir_is_refused_with_one_warning(configured):
    configured.chmod(0o777)
    with pytest.warns(RuntimeWarning, match=r"writable by its group or by others.*777"):
        assert cache.load(_unique_source()).VALUE == 42
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per directory
        assert cache.load(_unique_source()).VALUE == 42
    assert _files(configured) == []


def test_group_writable_dir_is_refused(configured):
    configured.chmod(0o770)
    with pytest.warns(RuntimeWarning, match="not using the cache directory"):
        assert cache.load(_unique_source(), kind="cuda").VALUE == 42
    assert _files(configured) == []


def test_dir_owned_by_another_user_is_refused(configured, monkeypatch):
    _owned_by_someone_else(configured, monkeypatch)
    with pytest.warns(RuntimeWarning, match="owned by uid"):
        assert cache.load(_unique_source()).VALUE == 42
    assert _files(configured) == []


def test_a_program_runs_on_cpu_without_the_refused_cache(configured):
    configured.chmod(0o777)
    c = float(uuid.uuid4().int % 1000)  # a program no earlier test compiled
    with pytest.warns(RuntimeWarning, match="compiling without a disk cache"):
        out = A.run(lambda a: A.map(lambda v: v * 2.0 + c, a), np.arange(4.0), backend="cpu")
    np.testing.assert_array_equal(out, np.arange(4.0) * 2.0 + c)
    assert _files(configured) == []


def test_the_cuda_backend_checks_its_cache_dir_too(configured):
    from accel.backends.cuda import available
    if not available()[0]:
        pytest.skip(available()[1])
    configured.chmod(0o777)
    c = float(uuid.uuid4().int % 1000)
    with pytest.warns(RuntimeWarning, match="accel cuda backend: not using"):
        out = A.run(lambda a: A.map(lambda v: v * 2.0 + c, a), np.arange(4.0), backend="cuda")
    np.testing.assert_array_equal(out, np.arange(4.0) * 2.0 + c)
    assert _files(configured) == []


@pytest.fixture
def fallback(tmp_path, monkeypatch):
    """A configured directory that cannot be created, and a temporary directory of our
    own: the fallback is ``<tmp>/accel-cpu-<uid>``."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(blocker / "cache"))
    tmp = tmp_path / "tmp"
    tmp.mkdir(mode=0o1777)
    tmp.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp / f"accel-cpu-{os.geteuid()}"


def test_fallback_is_created_private(fallback):
    old = os.umask(0)  # even with a permissive umask
    try:
        assert cache.load(_unique_source()).VALUE == 42
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(fallback).st_mode) == 0o700
    assert any(n.endswith(".py") for n in _files(fallback))


def test_fallback_created_first_by_someone_else_is_refused(fallback, monkeypatch):
    fallback.mkdir(mode=0o700)
    _owned_by_someone_else(fallback, monkeypatch)
    with pytest.warns(RuntimeWarning, match="owned by uid"):
        assert cache.load(_unique_source()).VALUE == 42
    assert _files(fallback) == []


def test_fallback_that_is_a_symlink_is_refused(fallback, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    fallback.symlink_to(target)
    with pytest.warns(RuntimeWarning, match="symlink"):
        assert cache.load(_unique_source()).VALUE == 42
    assert _files(target) == []


def test_configured_dir_made_by_accel_is_private(tmp_path, monkeypatch):
    d = tmp_path / "made" / "here"
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(d))
    old = os.umask(0o002)  # a umask that leaves directories group-writable
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert cache.load(_unique_source()).VALUE == 42
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


def test_numba_version_while_another_thread_imports_numba(monkeypatch):
    """A half-imported ``numba`` module (another thread importing it: the tiered runner's
    receiving thread loads the compiled tier) has no ``__version__`` yet; the version
    comes from the package metadata instead of an ``AttributeError``."""
    import sys
    import types
    from importlib.metadata import version

    from accel.backends.numba.cachedir import numba_version
    monkeypatch.setitem(sys.modules, "numba", types.ModuleType("numba"))
    assert numba_version() == version("numba")
