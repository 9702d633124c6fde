"""The one timing helper of the benchmark scripts (run as ``python benchmarks/X.py``)."""

from __future__ import annotations

import time


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
