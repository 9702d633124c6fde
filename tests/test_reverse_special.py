"""Special cases of reverse-mode AD: untaken branches, kinks, gradientE over tuples,
errors, higher order, vjp and the dot-product test."""

import numpy as np
import pytest

import accel as A

B = "interpreter"


def run(f, *args):
    return A.run(f, *args, backend=B)


def test_untaken_branch_out_of_bounds_is_never_evaluated():
    x = np.array([1.0, 2.0, 3.0])

    def f(a):
        return A.sum_all(A.generate((5,), lambda i: A.cond(i < 3, a[i] * a[i], 0.0)))
    np.testing.assert_allclose(run(A.gradientA(f), x), 2 * x)

    def g(a):  # the else branch would read a[10]
        big = A.the(A.sum(a)) > 0
        return A.the(A.acond(big, A.sum(A.map(A.exp, a)),
                             A.unit(a[10])))
    np.testing.assert_allclose(run(A.gradientA(g), x), np.exp(x))


def test_gradientE_over_array_of_tuples_bundle_adjustment_shape():
    rng = np.random.default_rng(3)
    n, k = 4, 15
    data = rng.uniform(0.5, 1.5, size=(n, k))
    w = np.arange(1, k + 1, dtype=np.float64)

    def objective(p):
        total = A.sin(p[0]) * float(w[0])
        for j in range(1, k):
            total = total + A.sin(p[j]) * float(w[j])
        return total

    def prog(d):
        tuples = A.generate((n,), lambda i: tuple(d[i, j] for j in range(k)))
        return A.map(lambda p: A.gradientE(objective)(p), tuples)

    out = run(prog, data)
    assert isinstance(out, tuple) and len(out) == k
    for j in range(k):
        np.testing.assert_allclose(out[j], w[j] * np.cos(data[:, j]))


def test_gradientE_partials_and_integer_arguments():
    def prog(a):
        return A.map(lambda v: A.gradientE(lambda x, i: x * x * A.to_float(i))(v, 3), a)
    out = run(prog, np.array([1.0, 2.0]))
    np.testing.assert_allclose(out[0], [6.0, 12.0])
    np.testing.assert_array_equal(out[1], [0, 0])


def test_kink_conventions():
    x = np.array([2.0, 2.0, 1.0])
    gmax = run(A.gradientA(lambda a: A.sum_all(A.zip_with(A.max, a, A.map(lambda v: v, a)))),
               x)
    np.testing.assert_allclose(gmax, [1.0, 1.0, 1.0])  # 1/2 + 1/2 at every tie with itself
    g2 = run(A.gradientA(lambda a, b: A.sum_all(A.zip_with(A.max, a, b))),
             np.array([1.0, 3.0]), np.array([1.0, 2.0]))
    np.testing.assert_allclose(g2[0], [0.5, 1.0])
    np.testing.assert_allclose(g2[1], [0.5, 0.0])
    gabs = run(A.gradientA(lambda a: A.sum_all(A.map(abs, a))), np.array([0.0, -2.0, 3.0]))
    np.testing.assert_allclose(gabs, [0.0, -1.0, 1.0])
    gmaxred = run(A.gradientA(lambda a: A.the(A.maximum(a))), np.array([3.0, 1.0, 3.0, 3.0]))
    np.testing.assert_allclose(gmaxred, [1 / 3, 0.0, 1 / 3, 1 / 3])
    gsqrt = run(A.gradientA(lambda a: A.sum_all(A.map(A.sqrt, a))), np.array([0.0, 4.0]))
    assert np.isinf(gsqrt[0]) and gsqrt[1] == pytest.approx(0.25)
    glog = run(A.gradientA(lambda a: A.sum_all(A.map(A.log, a))), np.array([0.0]))
    assert np.isinf(glog[0])


def test_discrete_paths_carry_no_derivative_not_a_zero_one():
    """An array reached only through ``floor`` gets no adjoint at all (as JAX's symbolic
    zeros), so an infinite derivative upstream (sqrt at 0) does not turn 0 * inf into NaN,
    in maps and in either argument of a zip_with, and reverse agrees with forward mode."""
    x = np.array([0.0, 2.25, 7.0])

    def via_map(a):
        return A.the(A.sum_all(A.zip_with(lambda u, v: u + v, a,
                                          A.map(A.floor, A.map(A.sqrt, a)))))

    def via_zip(a):
        r = A.map(A.sqrt, a)
        return A.the(A.sum_all(A.zip_with(lambda u, v: 3.0 * u + A.floor(v), a, r)))

    def shift_by_floor_of_max(a):  # logsumexp's shift: the max's tie dual never runs
        m = A.map(A.floor, A.maximum(a))
        return A.the(A.sum(A.zip_with(lambda u, c: A.exp(u - c), a,
                                      A.replicate((3,), m))))

    for f, want in ((via_map, [1.0, 1.0, 1.0]), (via_zip, [3.0, 3.0, 3.0]),
                    (shift_by_floor_of_max, np.exp(x - 7.0))):
        g = run(A.gradientA(f), x)
        np.testing.assert_allclose(g, want, rtol=1e-15)
        _, tangent = A.jvp(f, (x,), (np.ones(3),))
        np.testing.assert_allclose(float(tangent), np.sum(want), rtol=1e-15)
    # and the gradient program never compares elements with the maximum (its tie split)
    from accel.ast import nodes as N
    from accel.ast.traverse import walk
    from accel.frontend import arg_type, trace_program
    prog = trace_program(A.gradientA(shift_by_floor_of_max), (arg_type(x, 0),))
    assert not [n for n in walk(prog.body) if isinstance(n, N.PrimApp) and n.op == "eq"]


def test_product_with_zeros():
    g = run(A.gradientA(lambda a: A.the(A.product(a))), np.array([2.0, 0.0, 3.0, 0.0]))
    np.testing.assert_allclose(g, [0.0, 0.0, 0.0, 0.0])
    g = run(A.gradientA(lambda a: A.the(A.product(a))), np.array([2.0, 0.0, 3.0]))
    np.testing.assert_allclose(g, [0.0, 6.0, 0.0])


def test_not_differentiable_errors_say_what_was_asked():
    x = np.arange(3.0)
    with pytest.raises(A.NotDifferentiableError, match="rank-0 floating"):
        run(A.gradientA(lambda a: A.map(A.sin, a)), x)
    with pytest.raises(A.NotDifferentiableError, match="rank-0 floating"):
        run(A.gradientA(lambda a: A.sum(A.map(lambda v: A.to_int(v), a))), x)
    with pytest.raises(A.NotDifferentiableError, match="parameter 1"):
        run(A.gradientA(lambda a, i: A.sum(a), wrt=1), x, np.arange(3))
    with pytest.raises(A.NotDifferentiableError, match="permute.*x.* - "):
        run(A.gradientA(lambda a: A.sum_all(A.permute(
            lambda p, q: p - q, A.fill((2,), 0.0), lambda i: i % 2, a))), x)
    # (in a map function such a loop is lifted: tests/test_while_reverse)
    with pytest.raises(A.NotDifferentiableError, match="while_.*indexes arrays.*fold"):
        run(A.gradientA(lambda a: A.fold(lambda p, q: p + A.while_(
            lambda s: s < 10.0, lambda s: s * 2.0 + a[0], q), 0.0, a)), x + 1)


def test_integer_programs_parts_carry_no_derivative():
    # a histogram built by permute on ints is fine: it only feeds indices
    def f(a, ix):
        counts = A.permute(lambda p, q: p + q, A.fill((3,), 0), lambda i: ix[i],
                           A.fill(ix.shape, 1))
        return A.sum_all(A.generate(a.shape, lambda i: a[i] * A.to_float(counts[i])))
    g = run(A.gradientA(f, wrt=0), np.ones(3), np.array([0, 0, 2]))
    np.testing.assert_allclose(g, [2.0, 0.0, 1.0])


def test_second_derivatives_reverse_over_reverse():
    x = np.array([0.5, -1.0, 2.0])
    f = lambda a: A.sum_all(A.map(lambda v: v * v * v, a))  # noqa: E731
    np.testing.assert_allclose(run(A.gradientA(lambda a: A.sum_all(A.gradientA(f)(a))), x),
                               6 * x)
    a0 = 1.7
    h = lambda a: A.sum_all(A.map(lambda v: A.exp(a0 * v), a))  # noqa: E731
    np.testing.assert_allclose(run(A.gradientA(lambda a: A.sum_all(A.gradientA(h)(a))), x),
                               a0 ** 2 * np.exp(a0 * x))
    sq = lambda a: A.sum_all(A.map(lambda v: v * v, a))  # noqa: E731
    np.testing.assert_allclose(run(A.gradientA(lambda a: A.sum_all(A.gradientA(sq)(a))), x),
                               [2.0, 2.0, 2.0])


def test_value_and_gradient_and_wrt_forms():
    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    f = lambda a, b: A.sum_all(A.zip_with(lambda u, v: u * v, a, b))  # noqa: E731
    v, g = run(A.value_and_gradientA(f), x, y)
    assert v == pytest.approx(11.0)
    np.testing.assert_allclose(g[0], y)
    np.testing.assert_allclose(g[1], x)
    np.testing.assert_allclose(run(A.gradientA(f, wrt=1), x, y), x)
    g = run(A.gradientA(f, wrt=(1,)), x, y)
    assert isinstance(g, tuple) and len(g) == 1


def test_vjp_non_scalar_outputs_and_inputs_unchanged():
    x = np.array([0.1, 0.2, 0.3])
    saved = x.copy()
    outs, pb = A.vjp(lambda a: (A.map(A.sin, a), A.sum(A.map(lambda v: v * v, a))), x)
    np.testing.assert_allclose(outs[0], np.sin(x))
    ct = (np.array([1.0, 2.0, 3.0]), np.array(2.0))
    (gx,) = pb(ct)
    np.testing.assert_allclose(gx, np.cos(x) * ct[0] + 2 * 2 * x)
    np.testing.assert_array_equal(x, saved)


def test_gradient_program_is_an_ordinary_program():
    f = lambda a: A.sum_all(A.map(lambda v: 2 * v + 3 * v * v, a))  # noqa: E731
    text = A.show(A.gradientA(f), np.zeros(3))
    assert "Map" in text or "Generate" in text
    c = A.compile(A.gradientA(f), backend=B)
    np.testing.assert_allclose(c(np.arange(4.0)), 2 + 6 * np.arange(4.0))
    np.testing.assert_allclose(c(np.arange(2.0)), 2 + 6 * np.arange(2.0))


def test_gradientE_only_differentiates_the_taken_branch():
    # d/dx cond(x > 0, sqrt(x), x): the untaken sqrt at 0 must not turn the derivative nan
    def prog(a):
        return A.map(A.gradientE(lambda x: A.cond(x > 0, A.sqrt(x), x)), a)
    np.testing.assert_allclose(run(prog, np.array([0.0, 4.0])), [1.0, 0.25])
    g = run(A.gradientA(lambda a: A.sum_all(A.map(lambda x: A.cond(x > 0, A.sqrt(x), x), a))),
            np.array([0.0, 4.0]))
    np.testing.assert_allclose(g, [1.0, 0.25])
