"""Fusion: kernel counts of characteristic programs, and parity of the fused kernel
program (NumPy evaluator, backend "fused") with the unfused interpreter."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accel as A
from accel.fusion.fuse import fuse
from accel.fusion.kernels import count_loops
from accel.frontend import arg_type, trace_program
from accel.pipeline import optimise


def kernels(f, *args) -> int:
    c = A.compile(f, backend="fused")
    c(*args)
    return c.stats(*args)["kernels"]


def test_chain_feeding_sum_is_one_kernel():
    def f(a, b):
        x = A.map(A.sin, a)
        y = A.zip_with(lambda u, v: u * v + 1, x, A.backpermute(b.shape, lambda i: i, b))
        return A.sum(A.map(lambda v: v * v, y))
    x = np.arange(6.0)
    assert kernels(f, x, x) == 1
    np.testing.assert_allclose(A.run(f, x, x, backend="fused"),
                               np.sum((np.sin(x) * x + 1) ** 2))


def test_thesis_example_gradient_is_one_elementwise_kernel():
    g = A.gradientA(lambda a: A.sum_all(A.map(lambda x: 2 * x + 3 * x * x, a)))
    x = np.linspace(-1, 1, 7)
    assert kernels(g, x) == 1
    np.testing.assert_allclose(A.run(g, x, backend="fused"), 2 + 6 * x)


def test_dot_product_gradient_is_at_most_two_kernels():
    g = A.gradientA(lambda a, b: A.sum_all(A.zip_with(lambda u, v: u * v, a, b)))
    x, y = np.arange(5.0), np.arange(5.0) + 2
    assert kernels(g, x, y) <= 2
    ga, gb = A.run(g, x, y, backend="fused")
    np.testing.assert_allclose(ga, y)
    np.testing.assert_allclose(gb, x)


def test_shared_expensive_array_is_materialised_once():
    def f(a):
        e = A.map(lambda v: A.exp(A.sin(v)), a)
        return A.zip_with(lambda u, v: u + v, e, A.map(lambda v: v * 2, e))
    p = optimise(trace_program(f, (arg_type(np.zeros(3), 0),)))
    assert count_loops(fuse(p).body) == 2


PROGRAMS = [
    lambda a: A.map(lambda v: v * 2, a),
    lambda a: A.sum(A.map(A.cos, a)),
    lambda a: A.scanl(lambda p, q: 2 * p + q, 0.0, a),
    lambda a: A.scanr1(lambda p, q: p - q, a),
    lambda a: A.fold1(lambda p, q: A.max(p, q), A.map(lambda v: v + 1, a)),
    lambda a: A.permute(lambda p, q: p + q, A.fill((3,), 0.0), lambda i: i % 3,
                        A.map(lambda v: v * v, a)),
    lambda a: A.reshape((2, A.size(a) // 2), A.map(A.exp, a)),
    lambda a: A.replicate((2, A.All), A.map(A.sin, a)),
    lambda a: A.slice(A.replicate((3, A.All), a), (1, A.All)),
    lambda a: A.acond(A.the(A.sum(a)) > 0, A.map(A.sin, a), A.map(A.cos, a)),
    lambda a: A.awhile(lambda s: A.unit(A.the(A.sum(s)) < 50.0),  # terminates: s grows
                       lambda s: A.map(lambda v: abs(v) * 2 + 1, s), a),
    lambda a: A.generate((A.size(a),), lambda i: A.cond(i > 0, a[i - 1], a[i]) * 2),
    A.gradientA(lambda a: A.the(A.product(A.map(A.sin, a)))),
    A.gradientA(lambda a: A.the(A.maximum(a))),
    A.gradientA(lambda a: A.sum_all(A.replicate((2, A.All), A.map(A.exp, a)))),
    A.gradientA(lambda a: A.the(A.acond(A.the(A.sum(a)) > 0, A.sum(A.map(A.sin, a)),
                                        A.sum(A.map(A.cos, a))))),
]


@pytest.mark.parametrize("k", range(len(PROGRAMS)))
@settings(deadline=None, max_examples=8)
@given(xs=st.lists(st.floats(-2, 2, width=32), min_size=2, max_size=8).filter(
    lambda v: len(v) % 2 == 0))
def test_fused_matches_interpreter(k, xs):
    x = np.array(xs)
    want = A.run(PROGRAMS[k], x, backend="interpreter")
    got = A.run(PROGRAMS[k], x, backend="fused")
    if not isinstance(want, tuple):
        want, got = (want,), (got,)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
