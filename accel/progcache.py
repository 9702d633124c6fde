"""A disk cache of the compiler's work on a program: a program seen before skips it.

Why: with numba's kernels already in the disk cache, a fresh process still spent about a
second before the first result of the ADBench GMM gradient, in reverse-mode AD,
simplification and fusion of a program it had compiled before (issue 22).  Tracing is
cheap and cannot be skipped (it is how the program is known), so the cache is keyed by
what tracing produced:

* ``pipeline`` keys the optimised program and its fused kernel program by the traced
  program, the backend and ``check_bounds``;
* ``accel.ad.api`` keys a derivative program by the program differentiated and the
  request (which parameters, with the value or not, the mode).

A key (``key``) is a text made of: the program's ``fingerprint`` (its structure up to the
names of its binders, every constant by value: scalars by ``repr``, arrays by dtype,
shape and the sha256 of their bytes, user source locations kept by nodes for error
messages), the request's parts, and ``code_version`` (the sha256 of every source file
of ``accel`` and ``accel.backends``, and the NumPy and Python versions), so equal
programs share an entry across processes and a changed program, constant, dtype, rank,
option or compiler never finds another's.  An entry's file is named by the sha256 of
its key text, stores that text in full and is used only if it matches; an unreadable,
truncated or mismatched entry is ignored (and replaced by the rebuilt one), never
trusted.  Entries are pickles, so they live in the
directory whose ownership ``backends.numba.cachedir`` checks (``$ACCEL_CACHE_DIR``,
subdirectory ``programs``); a refused directory means no program cache for the process.

Names: programs keep the globally fresh names they had in the process that stored them;
an entry records that process's name counter and loading it advances this process's
past it (``nodes.reserve_names``), so later fresh names never capture a loaded one.

``ACCEL_PROGRAM_CACHE=0`` turns the cache off (the test suite does, except its own tests
of the cache).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import sys
import tempfile
from pathlib import Path

from .ast import nodes as N
from .ast.alpha import alpha_key

#: Bumped when the format of an entry changes.
FORMAT = 1


def enabled() -> bool:
    """On unless ``$ACCEL_PROGRAM_CACHE`` is ``0``/``off``/``no``/``false``."""
    v = os.environ.get("ACCEL_PROGRAM_CACHE", "1").strip().lower()
    return v not in ("0", "off", "no", "false")


def fingerprint(prog) -> str:
    """The sha256 of ``prog``'s structure up to binder names (module docstring)."""
    h = hashlib.sha256()
    parts = []
    for x in alpha_key(prog):
        if isinstance(x, N.Use):
            x = x.key()  # dtype, shape, sha256 of the bytes
        elif isinstance(x, type):
            x = x.__name__
        parts.append(repr(x))
        if len(parts) >= 4096:
            h.update("\x00".join(parts).encode())
            parts = []
    h.update("\x00".join(parts).encode())
    return h.hexdigest()


_version: str | None = None


def code_version() -> str:
    """The sha256 of the compiler's sources and the NumPy and Python versions (once per
    process)."""
    global _version
    if _version is None:
        import importlib.util

        import numpy as np
        h = hashlib.sha256(f"{FORMAT} {np.__version__} {sys.version}".encode())
        roots = [Path(__file__).parent]
        spec = importlib.util.find_spec("accel.backends")
        if spec is not None and spec.submodule_search_locations:
            roots += [Path(p) for p in spec.submodule_search_locations]
        for root in dict.fromkeys(roots):
            for path in sorted(root.rglob("*.py")):
                try:
                    data = path.read_bytes()
                except OSError:
                    data = b"?"
                h.update(str(path.relative_to(root)).encode() + b"\x00" + data + b"\x00")
        _version = h.hexdigest()
    return _version


def key(kind: str, prog, *parts) -> str:
    """The text an entry of ``kind`` for ``prog`` and the request ``parts`` is keyed by."""
    return "\n".join([kind, fingerprint(prog), *map(repr, parts), code_version()])


def _directory() -> Path | None:
    from .backends.numba.cachedir import unsafe_reason, usable_dir
    d = usable_dir("cpu") / "programs"
    try:
        d.mkdir(mode=0o700, exist_ok=True)
    except OSError:
        return None
    return d if unsafe_reason(d, follow_symlinks=False) is None else None


def _path(text: str) -> Path | None:
    d = _directory()
    return None if d is None else d / (hashlib.sha256(text.encode()).hexdigest() + ".pkl")


def load(text: str):
    """The value stored under the key ``text``, or None (no entry, or a bad one)."""
    try:
        path = _path(text)
        if path is None:
            return None
        with open(path, "rb") as f:
            entry = pickle.load(f)
        if not isinstance(entry, dict) or entry.get("key") != text:
            return None
        N.reserve_names(int(entry["names"]))
        return entry["value"]
    except Exception:  # noqa: BLE001 - missing, truncated, corrupted: recompute
        return None


def store(text: str, value) -> None:
    """Keep ``value`` under the key ``text`` (atomically; failures are ignored)."""
    tmp = None
    try:
        path = _path(text)
        if path is None:
            return
        data = pickle.dumps({"key": text, "names": N.names_used(), "value": value},
                            protocol=pickle.HIGHEST_PROTOCOL)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pkl")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        tmp = None
    except Exception:  # noqa: BLE001 - a cache that cannot be written is no cache
        pass
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
