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
