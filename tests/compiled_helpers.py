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


def fd_hessian(g, x, backend, eps: float = 1e-6):
    """Central differences of the gradient program ``g``: column k is d g / d x_k (``g``
    compiled once, run at every perturbed point)."""
    run = A.compile(g, backend=backend)
    cols = []
    for k in range(x.size):
        e = np.zeros_like(x)
        e.flat[k] = eps
        cols.append((run(x + e) - run(x - e)).reshape(-1) / (2 * eps))
    return np.stack(cols, axis=-1)


def check_second_order(f, x, backend, rtol=1e-5, atol=1e-6):
    """Reverse over reverse (gradient of the sum of the gradient) and forward over
    reverse (a Hessian-vector product) agree with differences of the gradient."""
    g = A.gradientA(f)
    hess = fd_hessian(g, x, backend)
    rr = A.run(A.gradientA(lambda a: A.sum_all(g(a))), x, backend=backend)
    np.testing.assert_allclose(rr.reshape(-1), hess.sum(axis=0), rtol=rtol, atol=atol)
    t = np.linspace(0.3, -0.7, x.size).reshape(x.shape)
    _, fr = A.jvp(g, (x,), (t,), backend=backend)
    np.testing.assert_allclose(fr.reshape(-1), hess @ t.reshape(-1), rtol=rtol, atol=atol)
