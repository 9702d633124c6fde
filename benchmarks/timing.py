"""The one timing helper of the benchmark scripts (run as ``python benchmarks/X.py``)."""

from __future__ import annotations

import os
import time

# The scripts time compiled kernels: no calls on the cpu backend's NumPy tier (an explicit
# ACCEL_TIERED in the environment is kept).
os.environ.setdefault("ACCEL_TIERED", "0")


def best(f, *args, repeat=5):
    """The minimum wall time of ``repeat`` calls ``f(*args)`` after one warm-up call
    (compilation and first-touch allocation are not timed)."""
    f(*args)
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f(*args)
        ts.append(time.perf_counter() - t0)
    return min(ts)
