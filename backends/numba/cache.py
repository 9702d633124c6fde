"""Generated modules on disk and in memory.

A module's file is named by the sha256 of its source text, so a file's name says
what it must contain.  It is written only if absent (temp file, then an atomic
``os.link``/``os.replace``) and never rewritten while correct: numba's cache index
is keyed on the source file's stamp, so rewriting would invalidate the compiled
kernels that ``cache=True`` stored next to it (``__pycache__``).  A file whose text
does not match its name (corrupted, truncated) is deleted and written again.

The module is executed under a stable name registered in ``sys.modules`` *before*
its body runs (numba locates the module of a cached function through it; see
NUMBA_NOTES.md section 3).  An in-memory dict maps the source hash to the module, so
a program prepared twice in one process compiles once.  Which directory holds the files,
and the check that nobody else can write to it, are in ``cachedir``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from pathlib import Path

from accel.errors import BackendError

from .cachedir import cache_dir, usable_dir

__all__ = ["cache_dir", "clear_memory_cache", "load", "module_name", "source_hash"]

_modules: dict = {}  # module name (backend kind + sha256) -> module
_lock = threading.RLock()


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def _write_new(path: Path, source: str) -> None:
    """Create ``path`` with ``source`` unless it exists (atomically; never rewrites)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".py")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(source)
        try:
            os.link(tmp, path)  # fails if the file exists: never replace a good file
        except FileExistsError:
            pass
        except OSError:
            if not path.exists():
                os.replace(tmp, path)
                tmp = None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _ensure_file(path: Path, source: str) -> None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = None
    except (OSError, UnicodeDecodeError):
        text = ""
    if text == source:
        return
    if text is not None:  # corrupted: replace it (this invalidates numba's index, as it must)
        try:
            path.unlink()
        except FileNotFoundError:
            pass
    _write_new(path, source)


def _exec(name: str, path: Path, source: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # before executing: numba's cache needs to find the module
    try:
        code = compile(source, str(path), "exec")
        exec(code, mod.__dict__)  # noqa: S102 - our own generated source
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def module_name(source: str, kind: str = "cpu") -> str:
    """The name of ``source``'s module (and of its file in the cache directory)."""
    return f"accel_{kind}_{source_hash(source)[:32]}"


def load(source: str, kind: str = "cpu"):
    """The module for ``source`` (from memory, from disk, or written now); ``kind`` names
    the backend (module name ``accel_<kind>_<hash>``, cache directory ``<kind>``)."""
    name = module_name(source, kind)
    with _lock:
        mod = _modules.get(name)
        if mod is not None:
            return mod
        path = usable_dir(kind) / f"{name}.py"
        _ensure_file(path, source)
        try:
            mod = _exec(name, path, source)
        except Exception as e:  # e.g. a corrupted file raced in: rebuild once
            try:
                path.unlink()
            except OSError:
                pass
            _write_new(path, source)
            try:
                mod = _exec(name, path, source)
            except Exception as e2:
                raise BackendError(f"{kind} backend: cannot load generated module {path}: "
                                   f"{e2}") from e
        _modules[name] = mod
        return mod


def clear_memory_cache() -> None:
    """Forget the in-memory modules (for tests: the next ``load`` uses the disk)."""
    with _lock:
        for name in list(_modules):
            sys.modules.pop(name, None)
        _modules.clear()
