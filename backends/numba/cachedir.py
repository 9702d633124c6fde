"""Where generated modules and numba's compiled kernels are kept, and whether that place
is safe to load code from.

numba's ``cache=True`` files (``__pycache__/*.nbi``, ``*.nbc``) are pickles that are
loaded into the process, and the generated modules next to them are executed: whoever can
write to the cache directory can run code in every accel process that uses it.  So, as
pip does with its cache and ssh with ``~/.ssh``, a directory is used only if it is owned
by the current user and writable by nobody else.  A directory that fails the check is
refused: accel then warns once and keeps its modules in a private directory of this
process (``tempfile.mkdtemp``: mode 0700, an unpredictable name, removed at exit), which
is compiling without a disk cache: nothing is shared with other processes.

When the configured directory (``$ACCEL_CACHE_DIR``, or the per-user one under
``$XDG_CACHE_HOME``/``~/.cache``) cannot be created or written, the fallback is
``accel-<kind>-<uid>`` in the system's temporary directory, created with mode 0700.  It
must be a real directory (not a symlink) and pass the same check: in a shared ``/tmp``
another user may have created it first.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
import threading
import warnings
from pathlib import Path

_lock = threading.Lock()
_warned: set = set()  # directories already refused (each is warned about once)
_private: dict = {}  # backend kind -> this process's private directory


def cache_dir(kind: str = "cpu") -> Path:
    """``$ACCEL_CACHE_DIR`` or ``$XDG_CACHE_HOME/accel/<version>-numba<version>/<kind>``
    (``kind`` is the backend: ``cpu`` or ``cuda``; file names carry it too)."""
    d = os.environ.get("ACCEL_CACHE_DIR")
    if d:
        return Path(d)
    import accel
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "accel" / f"{accel.__version__}-numba{numba_version()}" / kind


def numba_version() -> str:
    """numba's version, without importing numba when it is not loaded yet (about 0.4 s:
    a first call on the NumPy tier needs no numba, ``backends.cpu.tiered``)."""
    import sys
    mod = sys.modules.get("numba")
    v = getattr(mod, "__version__", None)  # (None while another thread imports numba)
    if v is not None:
        return v
    try:
        from importlib.metadata import version
        return version("numba")
    except Exception:  # noqa: BLE001 - no metadata: ask numba itself
        import numba
        return numba.__version__


def current_uid() -> int | None:
    """The effective user id (None where the platform has none: no owner check)."""
    return os.geteuid() if hasattr(os, "geteuid") else None


def unsafe_reason(d: Path, follow_symlinks: bool = True) -> str | None:
    """Why ``d`` must not hold code this process loads, or None if it may.

    Refused: not a directory (or a symlink, unless ``follow_symlinks``), owned by another
    user, or writable by its group or by others.
    """
    try:
        st = os.stat(d, follow_symlinks=follow_symlinks)
    except OSError as e:
        return f"cannot stat it ({e.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is a symlink" if stat.S_ISLNK(st.st_mode) else "it is not a directory"
    uid = current_uid()
    if uid is not None and st.st_uid != uid:
        return f"it is owned by uid {st.st_uid}, not by the current user (uid {uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"it is writable by its group or by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _writable(d: Path) -> bool:
    try:  # a directory made here is private whatever the umask (002 is common)
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(d, os.W_OK)


def _fallback(kind: str) -> Path:
    uid = current_uid()
    d = Path(tempfile.gettempdir()) / f"accel-{kind}-{uid if uid is not None else 0}"
    try:
        d.mkdir(mode=0o700)
        os.chmod(d, 0o700)  # whatever the umask (it can only have removed bits)
    except OSError:
        pass  # it exists already, or cannot be made: the check decides
    return d


def _private_dir(kind: str) -> Path:
    d = _private.get(kind)
    if d is None:
        d = _private[kind] = Path(tempfile.mkdtemp(prefix=f"accel-{kind}-"))
        atexit.register(shutil.rmtree, d, True)
    return d


def usable_dir(kind: str = "cpu") -> Path:
    """The directory to keep ``kind``'s generated modules in (see the module docstring):
    the configured one, else the fallback in the temporary directory, else (when the one
    chosen is refused, with a warning) a private directory of this process."""
    d, follow = cache_dir(kind), True
    if not _writable(d):
        d, follow = _fallback(kind), False
    why = unsafe_reason(d, follow_symlinks=follow)
    if why is None:
        return d
    with _lock:
        if d not in _warned:
            _warned.add(d)
            warnings.warn(f"accel {kind} backend: not using the cache directory {d}: {why}; "
                          "compiling without a disk cache (make the directory private to "
                          "you, e.g. chmod 700, or set ACCEL_CACHE_DIR)",
                          RuntimeWarning, stacklevel=2)
        return _private_dir(kind)
