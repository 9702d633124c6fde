"""Reverse mode of ``while_`` whose body reads arrays carrying a derivative (issue 24).

Such a loop is run over all elements at once as an array-level ``awhile``
(``accel.ad.reverse.lift_while``): each element's loop is exact, reads in the body
contribute their adjoints, and the cost is the maximum trip count per element (checked
by counting the lifted loop's iterations), not the square of it.  Checked against
forward mode and central differences (``A.check_grad``) on the interpreter, the fused
NumPy backend and the cpu backend: per-element Horner evaluation with the coefficients
as parameters, trip counts that differ between elements, a ``Generate`` and a
``ZipWith`` function, a ``while_`` inside an ``awhile`` body, two loops in one function,
loops under conditionals and inside loops, and second derivatives; the type checker
runs on every derivative program.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accel as A
from accel.ad.api import gradient_program
from accel.ad.forward.driver import jvp_program
from accel.ast.typecheck import typecheck
from accel.frontend import arg_type, trace_program

BACKENDS = ["interpreter", "fused", "cpu"]


def horner(c, x):
    """``sum_e p(x_e)`` with ``p(v) = sum_k c_k v^k`` evaluated by Horner's rule."""
    def elem(v):
        def body(s):
            k, acc = s
            return (k - 1, acc * v + c[k - 1])
        return A.while_(lambda s: s[0] > 0, body, (A.size(c), A.to_float(0) * v))[1]
    return A.sum(A.map(elem, x))


def varying(c, x):
    """Trip counts that differ between elements (a data-dependent stop), a ``ZipWith``."""
    def elem(v, u):
        def body(s):
            k, t = s
            return (k + 1, t * c[k % A.size(c)] + A.sin(u) * 0.1)
        k, t = A.while_(lambda s: (abs(s[1]) > 0.05) & (s[0] < 6), body, (0, v))
        return t * t + A.to_float(k)
    return A.sum(A.zip_with(elem, x, A.map(lambda q: q * 2, x)))


def generated(c, m):
    """A ``Generate`` over a matrix: the trip count is the column index plus one."""
    def elem(ix):
        i, j = ix
        def body(s):
            k, acc = s
            return (k + 1, acc * m[i, j] + c[(k + i) % A.size(c)])
        return A.while_(lambda s: s[0] < j + 1, body, (0, m[i, j]))[1]
    return A.sum_all(A.generate(m.shape, elem))


def in_awhile(c, x):
    """A ``while_`` reading ``c`` inside the body of an ``awhile``."""
    def body(s):
        t, h = s
        h2 = A.map(lambda v: A.while_(lambda q: q[0] < 3,
                                      lambda q: (q[0] + 1, A.tanh(q[1] * c[q[0]] + v)),
                                      (0, v))[1], h)
        return (A.unit(A.the(t) + 1), h2)
    _, h = A.awhile(lambda s: A.unit(A.the(s[0]) < 2), body, (A.unit(0), x))
    return A.sum(A.map(lambda v: v * v, h))


def two_loops(c, x):
    """Two loops in one element function, the second starting from the first's result,
    and values computed before the loops used after them."""
    def elem(v):
        w = A.exp(v * 0.5)
        a = A.while_(lambda s: s[0] < 2, lambda s: (s[0] + 1, s[1] * c[s[0]] + w), (0, v))[1]
        b = A.while_(lambda s: s[0] < 3, lambda s: (s[0] + 1, A.sin(s[1]) + c[3 - s[0]]),
                     (0, a))[1]
        return a * b + w
    return A.sum(A.map(elem, x))


def under_cond(c, x):
    """Loops under conditionals (nested ones too), each branch with its own loop."""
    def elem(v):
        w = A.cos(v)
        inner = A.cond(v > 0.5, A.while_(lambda s: s[0] < 3,
                                         lambda s: (s[0] + 1, s[1] * c[s[0]] + w), (0, v))[1],
                       w * v)
        other = A.while_(lambda s: s[0] < 2, lambda s: (s[0] + 1, A.sin(s[1]) * c[s[0] + 1]),
                         (0, w))[1]
        return A.cond(v > 0, inner, other)
    return A.sum(A.map(elem, x))


def nested(c, x):
    """A loop in the body of a loop, its trip count the outer counter."""
    def elem(v):
        def outer(s):
            k, acc = s
            inner = A.while_(lambda q: q[0] < k + 1,
                             lambda q: (q[0] + 1, q[1] * c[q[0] % 4] + 0.1), (0, acc))[1]
            return (k + 1, A.sin(inner) + v)
        return A.while_(lambda s: s[0] < 3, outer, (0, v))[1]
    return A.sum(A.map(elem, x))


def scalar_generate(c):
    """A rank-0 ``generate``."""
    return A.generate((), lambda _: A.while_(
        lambda s: s[0] < 4, lambda s: (s[0] + 1, s[1] * c[s[0]] + 1.0), (0, c[0]))[1])


def search(c, m):
    """An integer loop state (a search reading ``c``) over a matrix; the index found
    reads ``c`` again."""
    def elem(v):
        k = A.while_(lambda k: (k < 3) & (c[k] < v), lambda k: k + 1, 0)
        return c[k] * v
    return A.sum_all(A.map(elem, m))


def matrix(c, m):
    return A.sum_all(A.map(lambda v: A.while_(
        lambda s: s[0] < 3, lambda s: (s[0] + 1, A.sin(s[1] * c[s[0]])), (0, v))[1], m))


RNG = np.random.default_rng(1)
C, X, M = RNG.uniform(-1, 1, 4), RNG.uniform(-1, 1, 5), RNG.uniform(-1, 1, (3, 4))
CASES = {
    "horner": (horner, (C, X)),
    "varying": (varying, (C * 2, X + 0.3)),
    "generated": (generated, (C, M)),
    "in_awhile": (in_awhile, (C, X)),
    "two_loops": (two_loops, (C, X)),
    "under_cond": (under_cond, (C, np.array([0.3, -0.4, 0.8, 1.2, -1.0]))),
    "nested": (nested, (C, X)),
    "scalar_generate": (scalar_generate, (C,)),
    "search": (search, (C, np.array([[0.3, -0.4], [0.8, 1.2]]))),
    "matrix": (matrix, (C, M)),
    "empty_matrix": (matrix, (C, np.zeros((0, 3)))),
}


def _sig(args):
    return tuple(arg_type(a, i) for i, a in enumerate(args))


@pytest.mark.parametrize("name", sorted(CASES))
def test_derivative_programs_typecheck(name):
    f, args = CASES[name]
    prog = trace_program(f, _sig(args))
    g, _ = gradient_program(prog, None)
    typecheck(g)
    typecheck(jvp_program(prog))


# The whole property on the cpu backend for these cases (three numba compilations each:
# the primal, the gradient and the jvp program); for the others the cpu backend compiles
# only the gradient program, checked against the interpreter's (itself checked against
# forward mode and finite differences by the interpreter's case).
FULL_CPU = {"nested", "varying"}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_reverse_matches_forward_and_differences(name, backend):
    f, args = CASES[name]
    if backend == "cpu" and name not in FULL_CPU:
        got = A.run(A.gradientA(f), *args, backend="cpu")
        want = A.run(A.gradientA(f), *args, backend="interpreter")
        got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
        assert len(got) == len(want) == len(args)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)
        return
    report = A.check_grad(f, *args, backend=backend)
    assert report, report


def test_horner_gradient_is_the_powers():
    g_c, g_x = A.run(A.gradientA(horner), C, X, backend="interpreter")
    np.testing.assert_allclose(g_c, [np.sum(X ** k) for k in range(4)], rtol=1e-12)
    dp = np.polynomial.polynomial.polyder(C)
    np.testing.assert_allclose(g_x, np.polynomial.polynomial.polyval(X, dp), rtol=1e-12)


@given(n=st.integers(0, 6), deg=st.integers(0, 5), seed=st.integers(0, 2 ** 16))
@settings(deadline=None, max_examples=15, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
def test_horner_any_sizes(n, deg, seed):
    """Empty inputs, a zero-trip loop (no coefficients) and any degree."""
    rng = np.random.default_rng(seed)
    c, x = rng.uniform(-1, 1, deg), rng.uniform(-1, 1, n)
    np.testing.assert_allclose(A.run(horner, c, x, backend="interpreter"),
                               np.polynomial.polynomial.polyval(x, c).sum() if deg else 0.0,
                               atol=1e-12)
    assert A.check_grad(horner, c, x, backend="interpreter")


def test_second_order_through_a_lifted_loop():
    """The gradient (an awhile with a tape) differentiates again: the Hessian of
    Horner's rule in the coefficients is zero, in x it is p''."""
    def fx(x):
        return horner(A.use(C), x)
    hx = A.run(A.gradientA(lambda x: A.sum(A.gradientA(fx)(x))), X, backend="interpreter")
    d2 = np.polynomial.polynomial.polyder(C, 2)
    np.testing.assert_allclose(hx, np.polynomial.polynomial.polyval(X, d2), rtol=1e-10)
    t = np.linspace(-1, 1, X.size)
    _, hv = A.jvp(A.gradientA(fx), (X,), (t,), backend="interpreter")
    np.testing.assert_allclose(hv, np.polynomial.polynomial.polyval(X, d2) * t, rtol=1e-10)

    def fc(c):
        return horner(c, A.use(X))
    hc = A.run(A.gradientA(lambda c: A.sum(A.gradientA(fc)(c))), C, backend="interpreter")
    np.testing.assert_allclose(hc, 0.0, atol=1e-12)


def test_cost_is_the_longest_trip_per_element(monkeypatch):
    """The lifted loop runs max(trip counts) iterations, once counting, once taped and
    once backwards: 3 body steps per degree, whatever the number of elements (counted on
    the fused NumPy backend; the recomputing rule would take O(degree^2))."""
    from accel.backends import fused as numpy_eval
    from accel.fusion.fuse import fuse
    from accel.fusion.kernels import KAwhile
    from accel.pipeline import optimise
    run_block = numpy_eval._run_block
    bodies: set = set()
    steps = [0]

    def spy(b, env):
        steps[0] += id(b) in bodies
        return run_block(b, env)
    monkeypatch.setattr(numpy_eval, "_run_block", spy)

    def body_steps(deg, n):
        c, x = np.linspace(-1, 1, deg), np.linspace(-0.5, 0.5, n)
        kp = fuse(optimise(trace_program(A.gradientA(horner), _sig([c, x]))))
        bodies.clear()
        bodies.update(id(s.body) for s in kp.body.steps if isinstance(s, KAwhile))
        steps[0] = 0
        numpy_eval.evaluate(kp, [c, x])
        return steps[0]
    assert body_steps(12, 5) - body_steps(3, 5) == 3 * 9
    assert body_steps(12, 50) == body_steps(12, 5)


# --------------------------------------------------------------------------- random programs


def _lifting_programs(n, seed):
    """The first ``n`` differentiable generated programs whose gradient lifts a loop (a
    ``while_`` reading a differentiated array, with at least one trip)."""
    import random

    from accel.ad.reverse import lift_while
    from accel.testing.programs import generate_program
    from accel.testing.sources import RandomSource
    found = []
    real = lift_while.lift
    calls = [0]

    def counting(*a):
        calls[0] += 1
        return real(*a)
    lift_while.lift = counting
    try:
        for i in range(2000):
            d = generate_program(RandomSource(random.Random(f"{seed}:{i}")),
                                 differentiable=True, max_stmts=4)
            if "while_" not in d.source or "< 0" in d.source:
                continue
            _, loss = d.build()
            calls[0] = 0
            try:
                gradient_program(trace_program(loss, _sig(d.args())), None)
            except A.AccelError:
                continue
            if calls[0]:
                found.append(d)
                if len(found) == n:
                    return found
    finally:
        lift_while.lift = real
    raise AssertionError("the generator drew too few lifted loops")


def test_generated_programs_with_lifted_loops():
    """Reverse == forward == finite differences on generated programs whose loops read
    differentiated arrays, on the interpreter and the fused backend (one on the cpu
    backend), and their gradients differentiate again."""
    from accel.testing.properties import Skip, check_gradient, check_second_order
    for k, d in enumerate(_lifting_programs(3, seed=7)):
        try:
            check_gradient(d, backends=["fused"] + (["cpu"] if k == 0 else []), directions=1)
            check_second_order(d, backends=["interpreter"])
        except Skip:
            pass


@pytest.mark.parametrize("name", ["horner", "under_cond", "nested", "in_awhile"])
def test_store_mode_agrees_with_recompute_mode(name):
    f, args = CASES[name]
    want = A.run(A.gradientA(f, mode="recompute"), *args, backend="interpreter")
    got = A.run(A.gradientA(f, mode="store"), *args, backend="fused")
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
