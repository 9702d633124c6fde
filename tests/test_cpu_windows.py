"""Windows of a generate's index (``backends/cpu/branches.window``): reads at shifted
indices guarded by ``0 <= i + d < n``, as a stencil's or a convolution's adjoint (and a
user's bounds-checked neighbours) write them.  The loop runs the interior with every
test decided and the border, where some test fails, as written: these tests check the
values at every position relative to the border, for windows wider than the array, in
tiles and parallel chunks, against NumPy and the unsplit evaluation."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accel as A
from accel.ast import nodes as N
from accel.ast.types import float64
from accel.backends.cpu import prepare_kernels
from accel.backends.cpu.branches import window
from accel.backends.fused import evaluate
from accel.fusion.fuse import fuse
from accel.fusion.kernels import KGenerate
from accel.pipeline import arg_type, optimise, trace_program
from kernel_builders import P, at, av, dim, f64, ix_lam, kprog, sh

_BORDER_LOOP = re.compile(r"range\(\w+ - wb\d+ \+ wa\d+ - \w+\)")


def _int(v: int) -> N.Const:
    return N.Const(v, N.int64)


def _neighbours(offsets, weights):
    """``o[i] = sum_d (if 0 <= i + d < size x then w_d * x[i + d] else 0)``, the shifted
    index bound by a ``let`` as reverse mode writes it."""
    x, o = av(float64, 1, "x"), av(float64, 1, "o")

    def body(i):
        total = f64(0.0)
        for d, wt in zip(offsets, weights):
            j = N.Var(N.fresh("j"), N.int64)
            test = P("and", P("ge", j, _int(0)), P("lt", j, dim(x, 0)))
            term = N.Let(j, P("add", i, _int(d)),
                         N.Cond(test, P("mul", f64(wt), at(x, j)), f64(0.0)))
            total = P("add", total, term)
        return total
    return kprog((x,), [KGenerate((o,), sh(dim(x, 0)), ix_lam(1, body))], o)


def _numpy_neighbours(x, offsets, weights):
    out = np.zeros_like(x)
    n = x.shape[0]
    for d, wt in zip(offsets, weights):
        lo, hi = max(0, -d), min(n, n - d)
        if lo < hi:
            out[lo:hi] += wt * x[lo + d:hi + d]
    return out


def test_window_is_found_through_lets_and_only_for_both_sides():
    """Tests of ``i + c`` from below and above make a window; one side only, a scaled
    index or a bound read from an element do not."""
    kp = _neighbours((-1, 2), (1.0, 2.0))
    f = kp.body.steps[0].f
    tests, lower, upper = window(f, 0)
    assert len(tests) == 4 and len(lower) == 2 and len(upper) == 2
    assert sorted(s for _, s in lower) == [-2, 1] and sorted(s for _, s in upper) == [-2, 1]
    x = av(float64, 1, "x")
    one_sided = ix_lam(1, lambda i: N.Cond(P("lt", i, dim(x, 0)), at(x, i), f64(0.0)))
    assert window(one_sided, 0) is None
    scaled = ix_lam(1, lambda i: N.Cond(
        P("and", P("ge", P("mul", i, _int(2)), _int(0)), P("lt", P("mul", i, _int(2)),
                                                            dim(x, 0))),
        at(x, i), f64(0.0)))
    assert window(scaled, 0) is None
    n = av(N.int64, 1, "n")
    read_bound = ix_lam(1, lambda i: N.Cond(
        P("and", P("ge", i, _int(1)), P("lt", i, at(n, 0))), at(x, i), f64(0.0)))
    assert window(read_bound, 0) is None


@pytest.mark.parametrize("offsets", [(-1, 0, 1), (-3, 2), (0, 5), (-4, -2)])
def test_a_window_over_elements_matches_numpy_everywhere(offsets, small_parallel):
    """Rank 1: lengths below, at and above the window's width, and long enough for
    parallel chunks whose bounds fall in either border or the interior."""
    weights = tuple(1.0 + k for k in range(len(offsets)))
    kp = _neighbours(offsets, weights)
    r = prepare_kernels(kp)
    assert _BORDER_LOOP.search(r.source()), r.source()
    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 3, 4, 5, 6, 9, 300, 70001):
        x = rng.standard_normal(n)
        got = r([x])
        np.testing.assert_allclose(got, _numpy_neighbours(x, offsets, weights),
                                   rtol=1e-15, atol=1e-15)
        np.testing.assert_allclose(got, evaluate(kp, [x]), rtol=1e-15, atol=1e-15)
    assert r.stats()["launches"].get("g_parallel", 0) >= 1


def _stencil(u):
    h, w = u.shape[0] - 2, u.shape[1] - 2

    def lap(ix):
        i, j = ix[0] + 1, ix[1] + 1
        return u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j]
    return A.sum_all(A.map(lambda v: v * v, A.generate((h, w), lap)))


def _stencil_grad(u):
    c = u[1:-1, 1:-1]
    lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c
    d = 2.0 * lap
    g = np.zeros_like(u)
    g[:-2, 1:-1] += d
    g[2:, 1:-1] += d
    g[1:-1, :-2] += d
    g[1:-1, 2:] += d
    g[1:-1, 1:-1] -= 4.0 * d
    return g


@pytest.fixture(scope="module")
def stencil_grad():
    u = np.zeros((5, 5))
    kp = fuse(optimise(trace_program(A.gradientA(_stencil), (arg_type(u, 0),))))
    return prepare_kernels(kp, tiered=False)


@pytest.mark.parametrize("shape", [(2, 2), (3, 3), (4, 7), (5, 3), (33, 40), (70, 600)])
def test_a_stencils_adjoint_in_tiles_matches_numpy(stencil_grad, shape):
    """The 5-point stencil's gradient is a rank-2 generate of guarded shifted reads: its
    rows inside the window run the columns split, the border rows as written; shapes
    with no interior, one, and several row (32) and column (256) tiles."""
    assert _BORDER_LOOP.search(stencil_grad.source())
    u = np.random.default_rng(shape[0] * 1000 + shape[1]).standard_normal(shape)
    got = stencil_grad([u])
    np.testing.assert_allclose(got, _stencil_grad(u), rtol=1e-12, atol=1e-12)


_SHIFTED: dict = {}


def _shifted_programs(di: int, dj: int):
    """A user's ``generate`` over planes reading a neighbour at ``(di, dj)`` with explicit
    bounds checks (``A.cond``), compiled with its gradient (once per shift)."""
    if (di, dj) not in _SHIFTED:
        def f(u):
            def at_(ix):
                p, i, j = ix
                ok = (i + di >= 0) & (i + di < u.shape[1]) & (j + dj >= 0) \
                    & (j + dj < u.shape[2])
                return A.cond(ok, u[p, i + di, j + dj] * 2.0, 0.0) + u[p, i, j]
            return A.generate(u.shape, at_)

        def loss(v):
            return A.sum_all(A.map(lambda e: e * e, f(v)))
        _SHIFTED[di, dj] = (A.compile(f, backend="cpu"),
                            A.compile(A.gradientA(loss), backend="cpu"),
                            A.compile(A.gradientA(loss), backend="interpreter"))
    return _SHIFTED[di, dj]


@pytest.mark.parametrize("di, dj", [(-1, 2), (3, -3), (0, 1)])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(1, 40), w=st.integers(1, 300), b=st.integers(1, 3),
       seed=st.integers(0, 2**16))
def test_user_written_bounds_checked_neighbours(di, dj, h, w, b, seed):
    """The user's program and its gradient agree with NumPy and the interpreter."""
    f, grad, grad_ref = _shifted_programs(di, dj)
    u = np.random.default_rng(seed).standard_normal((b, h, w))
    want = u.copy()
    i0, i1, j0, j1 = max(0, -di), min(h, h - di), max(0, -dj), min(w, w - dj)
    if i0 < i1 and j0 < j1:
        want[:, i0:i1, j0:j1] += 2.0 * u[:, i0 + di:i1 + di, j0 + dj:j1 + dj]
    np.testing.assert_allclose(f(u), want, rtol=1e-15, atol=1e-15)
    np.testing.assert_allclose(grad(u), grad_ref(u), rtol=1e-12, atol=1e-12)
