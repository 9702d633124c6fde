"""Reduction rewrites on the kernel program (``accel.fusion.reductions``): a sum that an
earlier sum already holds is read from it, and a sum over ``j`` of a sum over ``m`` whose
``j``-dependent factor reads fewer dimensions is summed in the other order.  Each case is
checked against NumPy and the interpreter, and by the folds left in the kernel program."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accel as A
from accel.frontend import arg_type, trace_program
from accel.fusion.fuse import fuse
from accel.fusion.kernels import KFold, KGenerate
from accel.pipeline import optimise


def kernel_steps(f, *args):
    p = optimise(trace_program(f, tuple(arg_type(a, i) for i, a in enumerate(args))))
    return fuse(p).body.steps


def folds(f, *args) -> list:
    """The (outer rank, inner length is a parameter's dim) of every fold, in order."""
    return [s.out.type.rank for s in kernel_steps(f, *args) if isinstance(s, KFold)]


def check(f, expected, *args, rtol=1e-12):
    for backend in ("interpreter", "fused"):
        got = A.run(f, *args, backend=backend)
        got = got if isinstance(got, tuple) else (got,)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=rtol, atol=1e-12, err_msg=backend)


def outer_sum(x, y):
    """sum_n x[n,k,c] * y[n,k,r] as (K, D, D) (r, c), as AD writes the adjoint of L."""
    n, k, d = x.shape
    return A.sum(A.generate((k, d, d, n), lambda i: x[i[3], i[0], i[2]] * y[i[3], i[0], i[1]]))


def diag_sum(x, y, dims=None, points=None):
    n, k, d = x.shape
    kk, dd = (k, d) if dims is None else dims
    return A.sum(A.generate((kk, dd, n if points is None else points),
                            lambda i: x[i[2], i[0], i[1]] * y[i[2], i[0], i[1]]))


@pytest.fixture
def xy():
    rng = np.random.default_rng(0)
    return rng.normal(size=(7, 3, 4)), rng.normal(size=(7, 3, 4))


def test_diagonal_of_a_sum_of_outer_products_reads_that_sum(xy):
    x, y = xy
    full = np.einsum("nkc,nkr->krc", x, y)
    diag = np.einsum("nkd,nkd->kd", x, y)

    def f(x, y):
        return outer_sum(x, y), A.map(lambda v: 2.0 * v, diag_sum(x, y))
    assert folds(f, x, y) == [3]
    check(f, (full, 2 * diag), x, y)

    def g(x, y):  # the diagonal is a result: kept as a generate reading the full sum
        return outer_sum(x, y), diag_sum(x, y)
    steps = kernel_steps(g, x, y)
    assert [s.out.type.rank for s in steps if isinstance(s, KFold)] == [3]
    assert any(isinstance(s, KGenerate) and s.outs[0].type.rank == 2 for s in steps)
    check(g, (full, diag), x, y)


def test_a_shared_sum_used_whole_by_a_conditional_stays_an_array(xy):
    x, y = xy
    full = np.einsum("nkc,nkr->krc", x, y)
    diag = np.einsum("nkd,nkd->kd", x, y)

    def f(x, y, c):
        d = diag_sum(x, y)
        return (outer_sum(x, y), A.map(lambda v: 2.0 * v, d),
                A.acond(A.the(c) > 0.0, d, A.map(lambda v: -v, d)))
    for c, sign in [(1.0, 1), (-1.0, -1)]:
        check(f, (full, 2 * diag, sign * diag), x, y, np.array(c))


def test_sums_that_differ_are_not_shared(xy):
    x, y = xy
    full = np.einsum("nkc,nkr->krc", x, y)

    def fewer_points(x, y):
        return outer_sum(x, y), diag_sum(x, y, points=x.shape[0] - 1)

    def smaller(x, y):  # a (K, D - 1) sum would fit, but its dims are not the full sum's
        return outer_sum(x, y), diag_sum(x, y, dims=(x.shape[1], x.shape[2] - 1))

    def maximum(x, y):
        n, k, d = x.shape
        return outer_sum(x, y), A.maximum(A.generate(
            (k, d, n), lambda i: x[i[2], i[0], i[1]] * y[i[2], i[0], i[1]]))
    prods = x * y
    for f, other in [(fewer_points, np.einsum("nkd->kd", prods[:-1])),
                     (smaller, np.einsum("nkd->kd", prods)[:, :-1]),
                     (maximum, prods.max(axis=0))]:
        assert folds(f, x, y) == [3, 2], f.__name__
        check(f, (full, other), x, y)


def test_a_sum_over_an_outer_index_of_another_sum_is_not_shared():
    """``sum_j x[b,a,j] y[b] z[a]`` and ``sum_j x[b,j,a] y[b] z[a]`` read ``x`` with the
    folded index in different places: the second is not the first at another index."""
    rng = np.random.default_rng(3)
    x, y, z = rng.normal(size=(4, 4, 4)), rng.normal(size=4), rng.normal(size=4)

    def f(x, y, z):
        m = x.shape[0]
        first = A.sum(A.generate((m, m, m), lambda i: x[i[1], i[0], i[2]] * y[i[1]] * z[i[0]]))
        second = A.sum(A.generate((m, m, m), lambda i: x[i[1], i[2], i[0]] * y[i[1]] * z[i[0]]))
        return first, second
    assert folds(f, x, y, z) == [2, 2]
    check(f, (np.einsum("baj,b,a->ab", x, y, z), np.einsum("bja,b,a->ab", x, y, z)), x, y, z)


def means_adjoint(lmat, adj, w):
    """sum_n -(sum_r L[k,r,d] adj[n,k,r] + w[k,d] adj[n,k,d]): the GMM means' adjoint."""
    n, k, d = adj.shape
    lt_adj = A.sum(A.generate((n, k, d, d),
                              lambda i: lmat[i[1], i[3], i[2]] * adj[i[0], i[1], i[3]]))
    return A.sum(A.generate((k, d, n), lambda i: -(lt_adj[i[2], i[0], i[1]]
                                                   + w[i[0], i[1]] * adj[i[2], i[0], i[1]])))


def means_expected(lmat, adj, w):
    return -(np.einsum("krd,nkr->kd", lmat, adj) + w * adj.sum(axis=0))


def lmat_adj_w(n, k, d, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(k, d, d)), rng.normal(size=(n, k, d)), rng.normal(size=(k, d))


def test_sum_over_points_of_a_matrix_product_sums_the_points_first():
    args = lmat_adj_w(9, 3, 4)
    # no (N, K, D) fold is left: the points are summed into (K, D), then the rows
    assert folds(means_adjoint, *args) == [2, 2]
    check(means_adjoint, (means_expected(*args),), *args)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 4), st.integers(0, 3), st.integers(0, 3), st.integers(0, 2**16))
def test_reordered_sums_agree_with_numpy_at_any_size(n, k, d, seed):
    args = lmat_adj_w(n, k, d, seed)
    check(means_adjoint, (means_expected(*args),), *args)


def test_sums_that_cannot_be_reordered_are_kept():
    lmat, adj, w = lmat_adj_w(6, 2, 3)

    def inner_also_returned(lmat, adj, w):
        n, k, d = adj.shape
        lt_adj = A.sum(A.generate((n, k, d, d),
                                  lambda i: lmat[i[1], i[3], i[2]] * adj[i[0], i[1], i[3]]))
        return A.sum(A.generate((k, d, n), lambda i: lt_adj[i[2], i[0], i[1]])), lt_adj

    def reads_every_dimension(lmat, adj, w):  # the point-dependent factor reads d too
        n, k, d = adj.shape
        inner = A.sum(A.generate((n, k, d, d), lambda i: lmat[i[1], i[3], i[2]]
                                 * adj[i[0], i[1], i[3]] * adj[i[0], i[1], i[2]]))
        return A.sum(A.generate((k, d, n), lambda i: inner[i[2], i[0], i[1]]))

    def not_a_sum(lmat, adj, w):
        n, k, d = adj.shape
        inner = A.sum(A.generate((n, k, d, d),
                                 lambda i: lmat[i[1], i[3], i[2]] * adj[i[0], i[1], i[3]]))
        return A.maximum(A.generate((k, d, n), lambda i: inner[i[2], i[0], i[1]]))

    lt_adj = np.einsum("krd,nkr->nkd", lmat, adj)
    cases = [(inner_also_returned, (lt_adj.sum(axis=0), lt_adj)),
             (reads_every_dimension,
              (np.einsum("krd,nkr,nkd->kd", lmat, adj, adj),)),
             (not_a_sum, (lt_adj.max(axis=0),))]
    for f, expected in cases:
        assert folds(f, lmat, adj, w) == [3, 2], f.__name__
        check(f, expected, lmat, adj, w)


def test_a_sum_reading_past_the_inner_sum_still_fails():
    """Summing over more points than the inner sum has reads it out of bounds; summed in
    the other order nothing would (the point-dependent factor clamps its index)."""
    def f(lmat, adj, w):
        n, k, d = adj.shape
        last = n - 1
        inner = A.sum(A.generate((n, k, d, d), lambda i: lmat[i[1], i[3], i[2]]
                                 * adj[A.min(i[0], last), i[1], i[3]]))
        return A.sum(A.generate((k, d, n + 1), lambda i: inner[i[2], i[0], i[1]]))
    args = lmat_adj_w(5, 2, 3)
    assert folds(f, *args) == [3, 2]
    for backend in ("interpreter", "fused"):
        with pytest.raises(A.OutOfBoundsError):
            A.run(f, *args, backend=backend)


def test_reordered_sums_on_the_cpu_backend():
    args = lmat_adj_w(40, 3, 5)
    np.testing.assert_allclose(A.run(means_adjoint, *args, backend="cpu"),
                               means_expected(*args), rtol=1e-12)


# --------------------------------------------------------------------------- nested sums


def window_sums(img, ker):
    """A 2-D convolution as a user writes it: the sum over the window of a 4-D generate,
    one ``sum`` per window dimension."""
    kh, kw = ker.shape
    oh, ow = img.shape[0] - kh + 1, img.shape[1] - kw + 1
    prods = A.generate((oh, ow, kh, kw),
                       lambda ix: img[ix[0] + ix[2], ix[1] + ix[3]] * ker[ix[2], ix[3]])
    return A.sum(A.sum(prods))


def window_expected(img, ker):
    kh, kw = ker.shape
    oh, ow = img.shape[0] - kh + 1, img.shape[1] - kw + 1
    return sum(ker[a, b] * img[a:a + oh, b:b + ow] for a in range(kh) for b in range(kw))


def test_a_sum_of_a_sum_is_one_sum_over_both_dimensions():
    rng = np.random.default_rng(3)
    img, ker = rng.normal(size=(9, 11)), rng.normal(size=(3, 4))
    steps = [s for s in kernel_steps(window_sums, img, ker) if isinstance(s, KFold)]
    assert len(steps) == 1 and steps[0].out.type.rank == 2
    check(window_sums, (window_expected(img, ker),), img, ker)
    np.testing.assert_allclose(A.run(window_sums, img, ker, backend="cpu"),
                               window_expected(img, ker), rtol=1e-12, atol=1e-12)

    def three(x):  # three nested sums: one sum over the last three dimensions
        return A.sum(A.sum(A.sum(A.map(lambda v: v * v, x))))
    x = rng.normal(size=(2, 3, 4, 5))
    assert folds(three, x) == [1]
    check(three, ((x * x).sum(axis=(1, 2, 3)),), x)


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(0, 3), st.integers(0, 3),
       st.integers(0, 2**16))
def test_merged_window_sums_agree_with_numpy_at_any_size(h, w, kh, kw, seed):
    rng = np.random.default_rng(seed)
    img, ker = rng.normal(size=(h + kh, w + kw)), rng.normal(size=(kh + 1, kw + 1))
    check(window_sums, (window_expected(img, ker),), img, ker)


def test_nested_sums_that_cannot_be_merged_are_kept():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 4, 5))

    def inner_also_returned(x):
        inner = A.sum(x)
        return A.sum(inner), inner

    def outer_not_a_sum(x):
        return A.maximum(A.sum(x))

    def outer_over_more_rows(x):  # reads past the inner sum: must still fail
        inner = A.sum(x)
        return A.sum(A.generate((3, 5), lambda i: inner[i[0], i[1]]))

    assert folds(inner_also_returned, x) == [2, 1]
    check(inner_also_returned, (x.sum(axis=(1, 2)), x.sum(axis=2)), x)
    assert folds(outer_not_a_sum, x) == [2, 1]
    check(outer_not_a_sum, (x.sum(axis=2).max(axis=1),), x)
    assert len(folds(outer_over_more_rows, x)) == 2
    for backend in ("interpreter", "fused"):
        with pytest.raises(A.OutOfBoundsError):
            A.run(outer_over_more_rows, x, backend=backend)
