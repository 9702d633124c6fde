"""Sums that are multiples of earlier sums (``accel.fusion.reductions._scaled``) and
generates left with one reader at its own index (``accel.fusion.reinline``).

``sum_j c x_j`` with ``c`` independent of ``j`` is ``c * sum_j x_j``: when an earlier sum
already holds ``sum_j x_j``, the later one is read from it, and an array that only that
sum and one elementwise reader read is then computed in the reader.  Reverse mode writes
both in the gradient of a log-sum-exp shifted by its maximum (the adjoint of the maximum
sums the negated softmax).  Each case is checked against NumPy on the interpreter, the
fused NumPy backend and the cpu backend, and by the steps left in the kernel program."""

import numpy as np
import pytest

import accel as A
from accel.frontend import arg_type, trace_program
from accel.fusion.fuse import fuse
from accel.fusion.kernels import KFold, KGenerate
from accel.pipeline import optimise


def kernel_steps(f, *args):
    p = optimise(trace_program(f, tuple(arg_type(a, i) for i, a in enumerate(args))))
    return fuse(p).body.steps


def kinds(f, *args) -> list:
    """``("fold" | "generate", rank of the array written)`` per step."""
    return [("fold", s.out.type.rank) if isinstance(s, KFold) else
            ("generate", s.outs[0].type.rank) for s in kernel_steps(f, *args)
            if isinstance(s, (KFold, KGenerate))]


def check(f, expected, *args, backends=("interpreter", "fused")):
    for backend in backends:
        got = A.run(f, *args, backend=backend)
        got = got if isinstance(got, tuple) else (got,)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12, err_msg=backend)


@pytest.fixture
def x():
    return np.random.default_rng(0).normal(size=(5, 7))


def test_a_scaled_sum_of_an_earlier_sums_source_reads_that_sum(x):
    """Per row: ``sum_j w_i exp(x_ij)`` and ``-sum_j exp(x_ij) / s_i`` from ``sum_j
    exp(x_ij)``; the factors depend on the row, not on ``j``."""
    def f(x, w):
        s = A.sum(A.map(A.exp, x))
        sb = A.replicate((A.All, x.shape[1]), s)
        wb = A.replicate((A.All, x.shape[1]), w)
        return (s, A.sum(A.zip_with(lambda v, c: c * A.exp(v), x, wb)),
                A.sum(A.zip_with(lambda v, t: -A.exp(v) / t, x, sb)))
    w = np.linspace(-1.0, 2.0, 5)
    e = np.exp(x).sum(axis=1)
    assert [k for k in kinds(f, x, w) if k[0] == "fold"] == [("fold", 1)]
    check(f, (e, w * e, -np.ones(5)), x, w)


def test_a_combination_of_earlier_sums_is_read_from_them(x):
    def f(x):
        s1 = A.sum(A.map(A.exp, x))
        s2 = A.sum(A.map(A.sin, x))
        return s1, s2, A.sum(A.map(lambda v: 2.0 * A.exp(v) - A.sin(v) * 3.0, x))
    e, s = np.exp(x).sum(axis=1), np.sin(x).sum(axis=1)
    assert [k for k in kinds(f, x) if k[0] == "fold"] == [("fold", 1), ("fold", 1)]
    check(f, (e, s, 2 * e - 3 * s), x)


def test_sums_that_are_not_multiples_are_kept(x):
    def varying(x):  # the factor x_ij depends on j
        return A.sum(A.map(A.exp, x)), A.sum(A.map(lambda v: v * A.exp(v), x))

    def unmatched(x):  # one term matches, the other (cos) is no earlier sum's source
        return A.sum(A.map(A.exp, x)), A.sum(A.map(lambda v: A.exp(v) + A.cos(v), x))

    def constant(x):  # a term with no j-dependent factor is not an earlier sum
        return A.sum(A.map(A.exp, x)), A.sum(A.map(lambda v: A.exp(v) + 1.0, x))
    e = np.exp(x)
    for f, other in [(varying, (x * e).sum(axis=1)), (unmatched, (e + np.cos(x)).sum(axis=1)),
                     (constant, (e + 1).sum(axis=1))]:
        assert [k for k in kinds(f, x) if k[0] == "fold"] == [("fold", 1)] * 2, f.__name__
        check(f, (e.sum(axis=1), other), x)


def logsumexp_rows(x):
    m = A.maximum(x)
    mb = A.replicate((A.All, x.shape[1]), m)
    s = A.sum(A.zip_with(lambda v, c: A.exp(v - c), x, mb))
    return A.sum_all(A.zip_with(lambda t, c: A.log(t) + c, s, m))


def softmax_rows(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("ties", [False, True])
def test_logsumexp_gradient_computes_the_softmax_where_it_is_used(x, ties):
    """The gradient of a row-wise log-sum-exp: the adjoint of the maximum sums ``-exp(x -
    m) / s`` (read off the primal sum), so the softmax is written once, as the result,
    instead of materialised for that sum and read back.  With ties at the maximum the
    tie-split convention still gives each tied element its share of a zero adjoint."""
    if ties:
        x = x.copy()
        x[:, 3] = x[:, 5] = x.max(axis=1) + 1.0
    grad = A.gradientA(logsumexp_rows, wrt=(0,))
    steps = kinds(grad, x)
    assert [k for k in steps if k == ("generate", 2)] == [("generate", 2)], steps
    assert len([k for k in steps if k[0] == "fold"]) == 3, steps  # max, sum, tie count
    check(grad, (softmax_rows(x),), x, backends=("interpreter", "fused", "cpu"))


def test_a_generate_read_elsewhere_than_at_its_index_stays_materialised(x):
    """After the scaled sum goes, ``exp (x - m) / s`` is still read reversed along the
    rows by the result: computing it there would be the same work, but the rule only
    moves reads at the reader's own index (a reversed read could be a broadcast)."""
    def f(x):
        n = x.shape[1]
        m = A.maximum(x)
        s = A.sum(A.zip_with(lambda v, c: A.exp(v - c), x, A.replicate((A.All, n), m)))
        p = A.zip_with(lambda v, c: A.exp(v[0] - v[1]) / c, A.zip(x, A.replicate((A.All, n), m)),
                       A.replicate((A.All, n), s))
        back = A.backpermute(x.shape, lambda i: (i[0], n - 1 - i[1]), p)
        return A.sum(A.map(lambda v: -v, p)), A.zip_with(lambda u, v: u + 2.0 * v, back, x)
    e = softmax_rows(x)
    steps = kinds(f, x)
    assert steps.count(("generate", 2)) == 2, steps
    check(f, (-np.ones(5), e[:, ::-1] + 2 * x), x)
