"""Helpers for tests of compiled programs: the runner behind a ``Compiled`` and a
comparison with the interpreter (the oracle)."""

from __future__ import annotations

import numpy as np

import accel as A


def runner_of(prog):
    """The one runner ``prog`` (an ``A.compile`` result called on one signature) made."""
    (runner,) = [r for _, r in prog._cache.values()]
    return runner


def same_as_interpreter(prog, f, *args, tol: float = 1e-12, want=None):
    """``prog(*args)``, checked equal to the interpreter's ``f(*args)`` (shapes too);
    ``want``: that result, computed before."""
    got = prog(*args)
    if want is None:
        want = A.run(f, *args, backend="interpreter")
    if not isinstance(want, tuple):
        got, want = (got,), (want,)
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    return got
