"""Reverse AD beyond the thesis: scans, permute, general folds, higher order, and the
dot-product test <t, vjp(ct)> = <jvp(t), ct>.  Oracles: forward mode and finite
differences through ``A.check_grad``."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accel as A
from accel.ad.forward.driver import jvp

B = "interpreter"
SETTINGS = settings(deadline=None, max_examples=5, suppress_health_check=[HealthCheck.too_slow])


def sq(s):
    return A.sum_all(A.map(lambda v: v * v * 1.3 + v, s))


def positive(shape):
    n = int(np.prod(shape))
    return st.lists(st.floats(0.3, 1.7), min_size=n, max_size=n).map(
        lambda xs: np.array(xs).reshape(shape))


CASES = {
    "scanl_plus": (lambda x: sq(A.scanl(lambda p, q: p + q, 0.5, x)), [(5,)]),
    "scanl_general": (lambda x: sq(A.scanl(lambda p, q: p * q + A.sin(q), 0.5, x)), [(5,)]),
    "scanr_general": (lambda x: sq(A.scanr(lambda q, p: p * q + A.sin(q), 0.5, x)), [(5,)]),
    "scanl1_general": (lambda x: sq(A.scanl1(lambda p, q: p * q + A.sin(q), x)), [(2, 4)]),
    "scanr1_general": (lambda x: sq(A.scanr1(lambda q, p: 2 * p - q * p, x)), [(4,)]),
    "scan_tuple": (lambda x: sq(A.map(lambda t: t[0] + 2 * t[1], A.scanl(
        lambda p, q: (p[0] * q[0], p[0] * q[1] + p[1]), (1.0, 0.0),
        A.zip(x, A.map(A.cos, x))))), [(4,)]),
    "scan_z_indexes": (lambda x: sq(A.scanl(lambda p, q: p * q, x[2], x)), [(4,)]),
    # sums (an identity Jacobian): the adjoint is a suffix sum of the direct adjoints
    "scanl1_plus_rows": (lambda x: sq(A.scanl1(lambda p, q: p + q, x)), [(3, 4)]),
    "scanr_plus": (lambda x: sq(A.scanr(lambda q, p: q + p, x[1], x)), [(5,)]),
    "scanr1_plus": (lambda x: sq(A.scanr1(lambda q, p: p + q, A.map(A.sin, x))), [(1,)]),
    "scan_pair_sums": (lambda x: sq(A.map(lambda t: t[0] * t[1], A.scanl(
        lambda p, q: (p[0] + q[0], q[1] + p[1]), (0.5, 1.0), A.zip(x, A.map(A.cos, x))))),
        [(4,)]),
    "fold_tuple_complex_mul": (lambda x: A.the(A.map(lambda t: t[0] * t[1], A.fold(
        lambda p, q: (p[0] * q[0] - p[1] * q[1], p[0] * q[1] + p[1] * q[0]), (1.0, 0.0),
        A.zip(x, A.map(A.sin, x))))), [(4,)]),
    "fold_indexing_operator": (lambda x: A.the(A.fold(lambda p, q: p * x[1] + q, 0.0, x)),
                               [(4,)]),
    "permute_plus": (lambda x, d: sq(A.permute(lambda p, q: p + q, d,
                                               lambda i: i % 3,
                                               A.map(A.sin, x))), [(5,), (3,)]),
    "permute_plus_ignore": (lambda x, d: sq(A.permute(
        lambda p, q: p + q, d, lambda i: A.cond(i % 2 == 0, (i % 3,), A.ignore), x)),
        [(5,), (3,)]),
    "permute_max": (lambda x, d: sq(A.permute(A.max, d, lambda i: i % 3, x)), [(5,), (3,)]),
    "permute_min": (lambda x, d: sq(A.permute(A.min, d, lambda i: i % 3, x)), [(5,), (3,)]),
    "permute_mul": (lambda x, d: sq(A.permute(lambda p, q: p * q, d, lambda i: i % 3, x)),
                    [(5,), (3,)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
@SETTINGS
@given(data=st.data())
def test_new_rules_agree_with_forward_and_fd(name, data):
    f, shapes = CASES[name]
    xs = [data.draw(positive(s)) for s in shapes]
    if "max" in name or "min" in name:  # keep away from ties (a kink): values 0.6 apart
        start = np.cumsum([0] + [x.size for x in xs])  # (a draw is within 1.4 of 1)
        xs = [x + 2.0 * (start[k] + np.arange(x.size).reshape(x.shape))
              for k, x in enumerate(xs)]
    report = A.check_grad(f, *xs, backend=B, rtol=1e-4, atol=1e-6)
    assert report.ok, report


def test_sum_scans_are_reversed_as_scalar_suffix_sums():
    """``scanl1 (+)``'s adjoint is ``scanr1 (+)`` of the direct adjoints: a scan of
    scalars (the general rule scans (adjoint, Jacobian) pairs), to second order."""
    from accel.frontend import arg_type, trace_program
    from accel.fusion.fuse import fuse
    from accel.fusion.kernels import KScan
    from accel.pipeline import optimise

    def f(x):
        return A.sum_all(A.map(A.sin, A.scanl1(lambda p, q: p + q, x)))
    x = np.linspace(-1.0, 2.0, 7)
    g = A.gradientA(f)
    kp = fuse(optimise(trace_program(g, (arg_type(x, 0),))))
    scans = [s for s in kp.body.steps if isinstance(s, KScan)]
    assert len(scans) == 2 and all(s.out.type.elt == A.float64 for s in scans)
    want = np.cumsum(np.cos(np.cumsum(x))[::-1])[::-1]
    for backend in ("interpreter", "cpu"):
        np.testing.assert_allclose(A.run(g, x, backend=backend), want, rtol=1e-12)
    report = A.check_grad(lambda a: A.sum_all(A.map(lambda v: v * v, A.gradientA(f)(a))), x,
                          backend=B, rtol=1e-5, atol=1e-7)
    assert report.ok, report


def test_permute_ties_and_zeros():
    g = A.run(A.gradientA(lambda x, d: A.sum_all(A.permute(A.max, d, lambda i: 0, x)),
                          wrt=(0, 1)), np.array([1.0, 2.0, 2.0]), np.array([2.0]), backend=B)
    np.testing.assert_allclose(g[0], [0, 1 / 3, 1 / 3])
    np.testing.assert_allclose(g[1], [1 / 3])
    g = A.run(A.gradientA(lambda x, d: A.sum_all(A.permute(lambda p, q: p * q, d,
                                                             lambda i: 0, x)), wrt=(0, 1)),
              np.array([1.0, 0.0, 3.0]), np.array([2.0]), backend=B)
    np.testing.assert_allclose(g[0], [0, 6, 0])
    np.testing.assert_allclose(g[1], [0])


@pytest.mark.parametrize("order", ["rr", "fr", "rf", "ff"])
@pytest.mark.parametrize("case", ["square", "exp"])
def test_second_derivatives_all_four_combinations(order, case):
    x = np.array([0.3, -0.7, 1.1])
    a0 = 1.7
    if case == "square":
        f = lambda a: A.sum_all(A.map(lambda v: v * v, a))  # noqa: E731
        want = np.full(3, 2.0)
    else:
        f = lambda a: A.sum_all(A.map(lambda v: A.exp(a0 * v), a))  # noqa: E731
        want = a0 ** 2 * np.exp(a0 * x)

    def jv(a):  # directional derivative along ones (a scalar)
        return jvp(f, (a,), (A.fill(a.shape, 1.0),))[1]

    if order == "rr":
        got = A.run(A.gradientA(lambda a: A.sum_all(A.gradientA(f)(a))), x, backend=B)
    elif order == "fr":
        got = jvp(A.gradientA(f), (x,), (np.ones(3),), backend=B)[1]
    elif order == "rf":
        got = A.run(A.gradientA(jv), x, backend=B)
    else:
        got = np.array([float(A.run(lambda a, e: jvp(
            lambda b: jvp(f, (b,), (e,))[1], (a,), (e,))[1], x, np.eye(3)[k], backend=B))
            for k in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-10)


def test_hessian_vector_product_matches_fd_of_gradients():
    f = lambda a: A.sum_all(A.zip_with(lambda u, v: A.sin(u) * v, a, A.scanl1(  # noqa: E731
        lambda p, q: p * q, a)))
    x = np.array([0.4, 0.9, 1.2, 0.7])
    v = np.array([0.3, -0.2, 0.5, 0.1])
    g = A.gradientA(f)
    hvp = jvp(g, (x,), (v,), backend=B)[1]
    h = 1e-5
    fd = (A.run(g, x + h * v, backend=B) - A.run(g, x - h * v, backend=B)) / (2 * h)
    np.testing.assert_allclose(hvp, fd, rtol=1e-6, atol=1e-8)
    rr = A.run(A.gradientA(lambda a, w: A.sum_all(A.zip_with(lambda p, q: p * q,
                                                           A.gradientA(f)(a), w)), wrt=0),
               x, v, backend=B)
    np.testing.assert_allclose(rr, fd, rtol=1e-6, atol=1e-8)


DOT_CASES = [
    lambda a: A.map(A.sin, a),
    lambda a: (A.scanl(lambda p, q: p * q + 1, 0.5, a), A.sum(a)),
    lambda a: A.permute(A.max, A.fill((2,), 0.1), lambda i: i % 2, a),
    lambda a: A.fold1(lambda p, q: p * q, A.replicate((2, A.All), a)),
    lambda a: A.backpermute((3,), lambda i: 2 - i, A.reshape((3,), A.map(A.exp, a))),
    lambda a: A.acond(A.the(A.sum(a)) > 0, A.map(A.cos, a), A.map(A.sin, a)),
]


@pytest.mark.parametrize("k", range(len(DOT_CASES)))
def test_dot_product_vjp_jvp(k):
    f = DOT_CASES[k]
    rng = np.random.default_rng(k)
    x = rng.uniform(0.2, 1.0, size=3)
    t = rng.normal(size=3)
    outs, pb = A.vjp(f, x)
    outs_t = outs if isinstance(outs, tuple) else (outs,)
    cts = tuple(rng.normal(size=np.shape(o)) for o in outs_t)
    (xbar,) = pb(cts if isinstance(outs, tuple) else cts[0])
    _, tout = jvp(f, (x,), (t,), backend=B)
    tout = tout if isinstance(tout, tuple) else (tout,)
    lhs = float(np.dot(t, xbar))
    rhs = sum(float(np.sum(a * b)) for a, b in zip(tout, cts))
    assert lhs == pytest.approx(rhs, rel=1e-10, abs=1e-12)


def _awhile_prog(limit, every=None):
    def f(a, b):
        st = A.awhile(lambda s: A.unit(A.the(A.sum(A.map(abs, s))) < limit),
                      lambda s: A.zip_with(lambda u, v: u * v + 0.1 * A.sin(u), s, b), a,
                      checkpoint=every)
        return A.sum_all(A.map(lambda v: v * v, st))
    return f


@pytest.mark.parametrize("limit,iters", [(0.5, 0), (1.1, 1), (6.0, "many")])
@pytest.mark.parametrize("every", [None, 1, 3])
def test_awhile_reverse_with_tape_and_checkpoints(limit, iters, every):
    x, w = np.array([0.3, 0.5, 0.2]), np.array([1.1, 0.9, 1.2])
    f = _awhile_prog(limit, every)
    report = A.check_grad(f, x, w, backend=B, rtol=1e-5, atol=1e-8)
    assert report.ok, report


def test_awhile_tuple_state_counter():
    def f(a, b):
        st = A.awhile(lambda s: A.unit(A.the(s[1]) < 4),
                      lambda s: (A.zip_with(lambda u, v: u * v + A.sin(u), s[0], b),
                                 A.unit(A.the(s[1]) + 1)), (a, A.unit(0)))
        return A.sum_all(A.map(lambda v: v * v, st[0]))
    assert A.check_grad(f, np.array([0.3, 0.5]), np.array([1.1, 0.9]), backend=B)


@pytest.mark.parametrize("start", [5.0, 2.9, 0.3])  # 0, 1 and several iterations
def test_while_reverse_recomputes(start):
    def f(a):
        return A.sum_all(A.map(lambda v: A.while_(
            lambda s: s < 3.0, lambda s: s * 1.5 + 0.1 * A.sin(s), v), a))
    assert A.check_grad(f, np.array([start, start + 0.01]), backend=B)


def test_while_body_reading_outer_variables_and_data_dependent_trip_count():
    def f(a):
        return A.sum_all(A.map(lambda v: A.while_(
            lambda s: s[0] < 4.0, lambda s: (s[0] * v + 0.2, s[1] + 1), (v, 0))[0], a))
    assert A.check_grad(f, np.array([1.2, 1.5, 2.5]), backend=B)


@pytest.mark.parametrize("name", ["scanr_general", "permute_max", "fold_tuple_complex_mul",
                                  "permute_plus_ignore"])
def test_new_rules_on_the_cpu_backend(name):
    f, shapes = CASES[name]
    rng = np.random.default_rng(7)
    xs = [rng.uniform(0.3, 1.7, size=s) + np.arange(int(np.prod(s))).reshape(s) * 0.37
          + 0.11 * k for k, s in enumerate(shapes)]
    report = A.check_grad(f, *xs, backend="cpu", rtol=1e-4, atol=1e-6)
    assert report.ok, report


def test_awhile_reverse_on_the_cpu_backend():
    x, w = np.array([0.3, 0.5, 0.2]), np.array([1.1, 0.9, 1.2])
    assert A.check_grad(_awhile_prog(6.0, 2), x, w, backend="cpu", rtol=1e-5, atol=1e-8)
