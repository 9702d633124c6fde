"""One log line when a compilation takes long, so that a user sees why a call waits.

A cold program costs seconds to minutes of numba compilation (README, "Measured
performance"); a silent pause that long looks like a hang.  :func:`watch` starts a timer
when a compilation starts; if it is still running after ``$ACCEL_COMPILE_LOG`` seconds
(default 2), one line is logged on the ``accel`` logger at WARNING level (so that
Python's last-resort handler prints it to stderr when the application configured no
logging), and nothing else: no progress bar, no second line.  ``ACCEL_COMPILE_LOG=0``
turns it off (the test suite does, in ``tests/conftest.py``).  The timer is a daemon
thread that the caller cancels when the compilation ends.
"""

from __future__ import annotations

import logging
import os
import threading

from accel.fusion.kernels import count_loops

LOG = logging.getLogger("accel")
DEFAULT_SECONDS = 2.0


def threshold() -> float | None:
    """Seconds after which a running compilation is logged (None: never)."""
    v = os.environ.get("ACCEL_COMPILE_LOG", "").strip().lower()
    if v in ("", "1", "on", "yes", "true"):
        return DEFAULT_SECONDS
    if v in ("off", "no", "false"):
        return None
    try:
        s = float(v)
    except ValueError:
        return DEFAULT_SECONDS
    return s if s > 0 else None


class _Nothing:
    def cancel(self) -> None:
        pass


def watch(source: str, kp, background: bool = False):
    """A started timer (``.cancel()`` it when the compilation ends) that logs one line
    if the compilation of the module ``source`` (of the kernel program ``kp``) is still
    running after :func:`threshold` seconds (``source`` None: a timer that never logs)."""
    secs = threshold()
    if secs is None or source is None:
        return _Nothing()
    from accel.backends.numba.cache import source_hash
    what = (f"accel cpu backend: numba has been compiling a program's kernels for over "
            f"{secs:g} s (a program of {count_loops(kp.body)} kernels, module "
            f"{source_hash(source)[:12]})")
    if background:
        what += ("; calls run on NumPy until it finishes (ACCEL_TIERED=0 or "
                 "compiled.wait() to wait for the compiled kernels instead)")
    else:
        what += "; kept in the disk cache for later runs"
    t = threading.Timer(secs, LOG.warning, args=(what,))
    t.daemon = True
    t.name = "accel-compile-log"
    t.start()
    return t
