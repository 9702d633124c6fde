"""Matrix-product folds on the NumPy evaluator (``backends/contract_numpy.py``): the
``fused`` backend and the cpu backend's NumPy tier compute a fold that
``fusion.contraction`` recognises with one ``einsum``, and fall back to the fold's
source when the operands do not fit the fold's extents."""

from __future__ import annotations

import numpy as np
import pytest

import accel as A
from accel.backends import contract_numpy, fused


@pytest.fixture
def products(monkeypatch):
    """Counts the folds the fused evaluator computed as matrix products."""
    hits = []
    real = contract_numpy.matrix_product

    def spy(s, aenv):
        v = real(s, aenv)
        hits.append(v is not None)
        return v
    monkeypatch.setattr(fused, "matrix_product", spy)
    return hits


def _mul(x, y):
    return x * y


def matmul(a, b):
    n, m = a.shape[0], b.shape[1]
    return A.sum(A.generate((n, m, a.shape[1]), lambda ix: a[ix[0], ix[2]] * b[ix[2], ix[1]]))


def matmul_transposed(a, b):  # a^T b, both read along their rows
    n, m = a.shape[1], b.shape[1]
    return A.sum(A.generate((n, m, a.shape[0]), lambda ix: a[ix[2], ix[0]] * b[ix[2], ix[1]]))


def batched(a, b):  # out[k, r] = 3 * sum_c a[k, r, c] * b[k, c]
    return A.sum(A.generate((a.shape[0], a.shape[1], a.shape[2]),
                            lambda ix: 3.0 * a[ix[0], ix[1], ix[2]] * b[ix[0], ix[2]]))


def matvec_replicate(a, b):  # b a vector; sum over a's columns
    return A.sum(A.zip_with(_mul, a, A.replicate((a.shape[0], A.All), b)))


def scaled_rows(a, b):  # out[i, j] = sum_k a[i, k] * b[k, j] / z[i], z from the elements
    z = A.sum(A.map(lambda v: v * v + 1.0, a))
    n, m = a.shape[0], b.shape[1]
    return A.sum(A.generate((n, m, a.shape[1]),
                            lambda ix: a[ix[0], ix[2]] / z[ix[0]] * b[ix[2], ix[1]]))


CASES = [(matmul, (7, 5), (5, 4)), (matmul_transposed, (6, 3), (6, 4)),
         (batched, (4, 3, 5), (4, 5)), (matvec_replicate, (6, 5), (5,)),
         (scaled_rows, (5, 4), (4, 3))]


@pytest.mark.parametrize("f, sa, sb", CASES, ids=[c[0].__name__ for c in CASES])
def test_matrix_products_are_one_einsum_and_agree(f, sa, sb, products):
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    want = A.run(f, a, b, backend="interpreter")
    np.testing.assert_allclose(A.run(f, a, b, backend="fused"), want, rtol=1e-13, atol=1e-13)
    assert any(products), "no fold was computed as a matrix product"
    g = A.gradientA(lambda x, y: A.sum_all(A.map(lambda v: v * v, f(x, y))), wrt=(0, 1))
    for got, w in zip(A.run(g, a, b, backend="fused"), A.run(g, a, b, backend="interpreter")):
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12)


def test_operands_wider_than_the_fold_fall_back_to_its_source(products):
    """``zip_with`` of a (6, 7) matrix and a replicated length-5 vector folds over the
    meet, 5 columns: ``a``'s dimensions do not equal the extents it is read at."""
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((6, 7)), rng.standard_normal(5)
    got = A.run(matvec_replicate, a, b, backend="fused")
    np.testing.assert_allclose(got, a[:, :5] @ b, rtol=1e-13)
    assert products and not any(products)


def test_the_numpy_tier_of_a_large_product_does_not_materialise_its_source(products):
    """512 x 512 x 512: the source would be 1 GiB of doubles."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((512, 512)), rng.standard_normal((512, 512))
    np.testing.assert_allclose(A.run(matmul, a, b, backend="fused"), a @ b, rtol=1e-12,
                               atol=1e-12)
    assert products == [True]
