"""Scatters whose targets ignore part of their domain sum over it first
(``accel.fusion.scatter_sums``): the kernel program gets a fold over the ignored
components and a permute over the rest; values match NumPy and the interpreter on the
fused and cpu backends, for user permutes and for the adjoints reverse AD scatters
(a parameter read through a computed index, broadcast over points), to second order."""

import numpy as np
import pytest

import accel as A
from accel.frontend import arg_type, trace_program
from accel.fusion.fuse import fuse
from accel.fusion.kernels import KFold, KPermute
from accel.pipeline import optimise

RNG = np.random.default_rng(11)


def steps(f, *args):
    p = optimise(trace_program(f, tuple(arg_type(a, i) for i, a in enumerate(args))))
    return fuse(p).body.steps


def permutes(f, *args):
    """The source rank of every permute of ``f``'s kernel program."""
    return [len(s.target.params[0].type.items) for s in steps(f, *args)
            if isinstance(s, KPermute)]


def binned(x):
    """out[b] = sum over rows n and columns k with k % 3 == b of x[n, k]."""
    return A.permute(lambda a, b: a + b, A.fill((3,), 0.0), lambda ix: (ix[1] % 3,), x)


def binned_expected(x):
    return np.array([x[:, b::3].sum() for b in range(3)])


@pytest.mark.parametrize("backend", ["interpreter", "fused", "cpu"])
def test_a_permute_ignoring_rows_sums_them_first(backend):
    x = RNG.standard_normal((6, 7))
    assert permutes(binned, x) == [1]
    assert any(isinstance(s, KFold) for s in steps(binned, x))
    np.testing.assert_allclose(A.run(binned, x, backend=backend), binned_expected(x),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", ["fused", "cpu"])
def test_an_empty_summed_dimension_keeps_the_defaults(backend):
    x = np.zeros((0, 7))
    np.testing.assert_array_equal(A.run(binned, x, backend=backend), np.zeros(3))


def test_targets_that_read_every_component_keep_the_scatter():
    """A target (or its keep condition) that reads a component is not summed over it."""
    x = RNG.standard_normal((6, 7))

    def kept_by_row(x):
        return A.permute(lambda a, b: a + b, A.fill((3,), 0.0),
                         lambda ix: A.cond(ix[0] > 2, (ix[1] % 3,), A.ignore), x)

    def not_a_sum(x):
        return A.permute(lambda a, b: A.max(a, b), A.fill((3,), -1e9),
                         lambda ix: (ix[1] % 3,), x)
    assert permutes(kept_by_row, x) == [2]
    assert permutes(not_a_sum, x) == [2]
    np.testing.assert_allclose(A.run(kept_by_row, x), binned_expected(x[3:]), rtol=1e-12)
    np.testing.assert_allclose(A.run(not_a_sum, x),
                               [x[:, b::3].max() for b in range(3)], rtol=1e-12)


def table_loss(w, x):
    """A parameter table read through a computed index, broadcast over the points:
    sum_n sum_k tanh(w[(3 k + 1) % m] * x[n, k])."""
    n, k = x.shape
    m = w.shape[0]
    return A.sum_all(A.generate((n, k), lambda ix: A.tanh(w[(3 * ix[1] + 1) % m]
                                                          * x[ix[0], ix[1]])))


def test_a_gathered_parameter_broadcast_over_points_scatters_per_column():
    w, x = RNG.standard_normal(5), RNG.standard_normal((40, 8))
    g = A.gradientA(table_loss, wrt=0)
    assert permutes(g, w, x) == [1]  # the points are summed before the scatter
    want = np.zeros(5)
    t = 1.0 - np.tanh(w[(3 * np.arange(8) + 1) % 5] * x) ** 2
    np.add.at(want, (3 * np.arange(8) + 1) % 5, (t * x).sum(axis=0))
    for backend in ("interpreter", "cpu"):
        np.testing.assert_allclose(A.run(g, w, x, backend=backend), want, rtol=1e-10)
    assert A.check_grad(table_loss, w, x[:6], wrt=0, backend="cpu")


def test_second_order_through_a_summed_scatter():
    """The gradient (a summed scatter) differentiates again: a Hessian-vector product by
    reverse-of-reverse matches forward-of-reverse and the interpreter."""
    w, x = RNG.standard_normal(5), RNG.standard_normal((7, 8))
    v = RNG.standard_normal(5)

    def hv(w, x, v):
        g = A.gradientA(table_loss, wrt=0)(w, x)
        return A.sum(A.zip_with(lambda a, b: a * b, g, v))
    rr = A.gradientA(hv, wrt=0)
    got = A.run(rr, w, x, v)
    np.testing.assert_allclose(got, A.run(rr, w, x, v, backend="interpreter"), rtol=1e-10)
    _, fr = A.jvp(A.gradientA(table_loss, wrt=0), (w, x), (v, np.zeros_like(x)))
    np.testing.assert_allclose(got, fr, rtol=1e-9, atol=1e-12)
