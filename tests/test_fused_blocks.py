"""The NumPy evaluator (``backends/fused.py``) evaluates a large fold's or scan's source
a block of rows at a time: the same values as the whole source, for folds and scans of
rank 1-3, tuple elements, row counts that are not a multiple of the block, ``fold1``."""

from __future__ import annotations

import numpy as np
import pytest

import accel as A
from accel.backends import fused


def _rowsum(a):
    return A.sum(A.map(lambda v: A.sin(v) * v, a))


def _scan(a):
    return A.scanl(lambda p, q: 0.5 * p + q, 0.0, a)


def _argmax(a):  # a fold of (value, index) pairs, no initial value
    pairs = A.generate(a.shape, lambda ix: (a[ix], A.to_float(ix[-1])))
    return A.fold1(lambda p, q: A.cond(p[0] >= q[0], p, q), pairs)


def _cube(a):  # a rank-3 source with a transcendental, summed over its last dimension
    n = a.shape[0]
    return A.sum(A.generate((n, n, a.shape[1]), lambda ix: A.exp(a[ix[0], ix[2]]
                                                                 - a[ix[1], ix[2]])))


@pytest.mark.parametrize("f, shape", [(_rowsum, (13, 7)), (_rowsum, (5, 4, 3)),
                                      (_scan, (11, 6)), (_argmax, (9, 5)), (_cube, (7, 4))])
@pytest.mark.parametrize("block", [1, 10, 1 << 40])
def test_sources_in_blocks_of_rows_give_the_whole_sources_values(f, shape, block,
                                                                  monkeypatch):
    monkeypatch.setattr(fused, "BLOCK_ELEMENTS", block)
    x = np.random.default_rng(8).standard_normal(shape)
    got, want = A.run(f, x, backend="fused"), A.run(f, x, backend="interpreter")
    if not isinstance(want, tuple):
        got, want = (got,), (want,)
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=1e-14, atol=1e-14)


def _then(p, q):
    """Affine maps ``x -> a x + b`` composed, ``p`` first: associative, not commutative."""
    return (q[0] * p[0], q[0] * p[1] + q[1])


def _affine_scans(a, b):
    pairs = A.generate(a.shape, lambda ix: (a[ix], b[ix]))
    one = (1, 0)
    return (A.scanl(_then, one, pairs), A.scanr(lambda x, acc: _then(acc, x), one, pairs),
            A.scanl1(_then, pairs), A.scanr1(lambda x, acc: _then(acc, x), pairs))


@pytest.mark.parametrize("shape", [(1,), (63,), (64,), (65,), (300,), (3, 129), (2, 2, 70)])
def test_long_scans_of_a_combination_that_is_no_ufunc_scan_by_doubling(shape, monkeypatch):
    """Rows of at least ``SCAN_DOUBLING_MIN`` scan in log2 steps over whole rows: on
    integers the same values as the interpreter's sequential scan, in both directions,
    with and without a seed, at lengths around every power of two that matters."""
    calls = []
    doubling = fused.scan_by_doubling
    monkeypatch.setattr(fused, "scan_by_doubling",
                        lambda *a: calls.append(1) or doubling(*a))
    rng = np.random.default_rng(len(shape) * 1000 + shape[-1])
    a = rng.choice(np.array([-1, 1], dtype=np.int64), size=shape)
    b = rng.integers(-3, 4, size=shape).astype(np.int64)
    got, want = A.run(_affine_scans, a, b, backend="fused"), \
        A.run(_affine_scans, a, b, backend="interpreter")
    for g, w in zip(got, want):
        for gk, wk in zip(g, w):
            np.testing.assert_array_equal(gk, wk)
    assert len(calls) == (4 if shape[-1] >= 64 else 2 if shape[-1] == 63 else 0)


def test_a_cumulative_sums_gradient_on_numpy_scans_by_doubling():
    """The reverse scan of a cumulative sum's gradient composes affine maps (pairs): on
    10^5 floats it agrees with the compiled kernels up to reassociation."""
    def f(x):
        return A.sum_all(A.map(A.sin, A.scanl1(lambda p, q: p + q, x)))
    x = np.random.default_rng(3).standard_normal(100_000) * 0.01
    g = A.gradientA(f)
    got, want = A.run(g, x, backend="fused"), A.run(g, x, backend="cpu")
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-11 * len(x) * np.abs(want).max())
