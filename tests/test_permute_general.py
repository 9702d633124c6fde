"""``permute`` with general associative and commutative combination functions, in both
modes and to second order (``accel/ad/reverse/scatter_general.py``, ``forward/scatter_general.py``).

The operators: ``\\x y -> x * y * 2``, log-add-exp and a (sum, count) pair, with colliding
and ignored targets.  The interpreter checks reverse mode, forward mode and central finite
differences against each other (first order; second order as reverse-over-reverse,
forward-over-reverse, reverse-over-forward and forward-over-forward); the other backends
run one program that uses all three operators, and its first and second derivatives, and
must give the interpreter's numbers (few programs: numba compiles are slow).
"""

from __future__ import annotations

import numpy as np
import pytest

import accel as A
from accel.testing.properties import usable


def logaddexp(x, y):
    return A.max(x, y) + A.log1p(A.exp(-abs(x - y)))


def mul2(x, y):
    return x * y * 2


def target(i):
    # 8 sources onto 3 targets: collisions, one target hit once, two sources ignored
    return A.cond(i % 5 != 3, (i * 7) % 3, A.ignore)


def scalar_loss(comb):
    def f(d, x):
        return A.sum_all(A.map(A.sin, A.permute(comb, d, target, x)))
    return f


def sum_count_loss(d, x):
    # the mean of each target's values (defaults included) from a (sum, count) histogram
    pd = A.map(lambda v: (v, A.to_int(v * 0.0) + 1), d)
    px = A.map(lambda v: (v * v, A.to_int(v * 0.0) + 1), x)
    r = A.permute(lambda p, q: (p[0] + q[0], p[1] + q[1]), pd, target, px)
    return A.sum_all(A.map(lambda p: A.sin(p[0]) / A.to_float(p[1]), r))


LOSSES = {"mul2": scalar_loss(mul2), "logaddexp": scalar_loss(logaddexp),
          "sum_count": sum_count_loss}


def all_three(d, x):
    s = A.the(sum_count_loss(d, x))
    return A.sum_all(A.zip_with(lambda a, b: a + b + s, A.permute(mul2, d, target, x),
                                A.permute(logaddexp, d, lambda i: A.cond(
                                    i % 2 == 0, i % 3, A.ignore), x)))


def second_reverse(f):
    """A scalar of the gradient: its gradient is reverse-over-reverse."""
    return lambda d, x: A.sum_all(A.map(lambda g: g * g, A.gradientA(f, wrt=1)(d, x)))


def second_forward(f):
    """A directional derivative (a jvp): its gradient is reverse-over-forward."""
    def j(d, x):
        _, t = A.jvp(f, (d, x), (A.map(lambda v: v * 0.0 + 1.0, d), A.map(A.cos, x)))
        return t
    return j


def inputs():
    rng = np.random.default_rng(7)
    return rng.uniform(0.5, 1.0, 3), rng.uniform(0.5, 1.0, 8)


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("order", ["first", "reverse2", "forward2"])
@pytest.mark.parametrize("backend", ["interpreter", "fused"])
def test_reverse_forward_and_finite_differences_agree(name, order, backend):
    f = LOSSES[name]
    f = {"first": f, "reverse2": second_reverse(f), "forward2": second_forward(f)}[order]
    rep = A.check_grad(f, *inputs(), backend=backend, rtol=1e-5, atol=1e-6)
    assert rep.ok, (name, order, rep.max_error)


COMPILED = [b for b in ("cpu", "cuda") if usable(b)]


@pytest.mark.parametrize("backend", COMPILED)
def test_compiled_backends_match_the_interpreter(backend):
    """The program of all three operators: its gradient, its second derivatives and its
    jvp match the interpreter's.  The cpu backend compiles reverse-over-forward only
    (16 s); reverse-over-reverse (44 s to compile on the cpu) is checked on the cuda
    backend, and per operator on the interpreter and the fused backend against
    forward mode and finite differences (above)."""
    d, x = inputs()
    seconds = (second_forward,) if backend == "cpu" else (second_reverse, second_forward)
    for f in (all_three,) + tuple(second(all_three) for second in seconds):
        ref = A.run(A.gradientA(f), d, x, backend="interpreter")
        out = A.run(A.gradientA(f), d, x, backend=backend)
        for r, o in zip(ref, out):
            np.testing.assert_allclose(o, r, rtol=1e-9, atol=1e-12)
    ref = A.jvp(all_three, (d, x), (np.ones(3), np.cos(x)), backend="interpreter")[1]
    out = A.jvp(all_three, (d, x), (np.ones(3), np.cos(x)), backend=backend)[1]
    np.testing.assert_allclose(out, ref, rtol=1e-9)


def test_all_three_operators_in_one_program_are_right():
    rep = A.check_grad(all_three, *inputs(), backend="interpreter", rtol=1e-5, atol=1e-6)
    assert rep.ok, rep.max_error


# ----------------------------------------------------------- a Futhark-style program


IS = np.array([4, 5, 2, 4, 5, 2, 0, 0, 4, 5, 1, 4, 1, 3, 3, 1, 8, -1])
VS = np.array([11, 16, 7, 0, 14, 6, 2, 1, 13, 0, 5, 0, 3, 0, 9, 4, 17, 18], dtype=np.float64)
C = np.arange(1.0, 9.0)


def hist_times(is_, vs, c):
    # a histogram with \x y -> x * y * 2 (neutral 0.5) into m bins, out-of-range indices
    # dropped, then multiplied by another array (Futhark's tests/ad hist_complex, in accel)
    m = c.shape[0]
    r = A.permute(mul2, A.fill((m,), 0.5), lambda i: A.cond(
        (is_[i] >= 0) & (is_[i] < m), is_[i], A.ignore), vs)
    return A.zip_with(lambda a, b: a * b, r, c)


def hist_times_jacobians():
    """The Jacobians by hand: r[t] = 2^(k-1) prod v over the k values in bin t."""
    m, n = len(C), len(VS)
    jv, jc = np.zeros((m, n)), np.zeros((m, m))
    for t in range(m):
        mine = [i for i in range(n) if IS[i] == t]
        r = 0.5 * np.prod([2 * VS[i] for i in mine]) if mine else 0.5
        jc[t, t] = r
        for i in mine:
            others = [2 * VS[j] for j in mine if j != i]
            jv[t, i] = C[t] * 0.5 * 2 * np.prod(others)
    return jv, jc


def _seeded(is_, vs, c, s):
    return A.sum_all(A.zip_with(lambda a, b: a * b, hist_times(is_, vs, c), s))


def _directional(is_, vs, c, e):
    return A.jvp(lambda v: hist_times(is_, v, c), (vs,), (e,))[1]


@pytest.mark.parametrize("backend", ["interpreter", "fused"] + COMPILED)
def test_histogram_with_a_general_operator_times_an_array(backend):
    jv, jc = hist_times_jacobians()
    # spot values stated by the original test (zeros among the values included)
    assert jv[5, 9] == 5376 and jv[1, 12] == 160 and jc[6, 6] == 0.5
    rows = A.compile(A.gradientA(_seeded, wrt=(1, 2)), backend=backend)
    for t, seed in enumerate(np.eye(len(C))):  # reverse mode: the Jacobians' rows
        gv, gc = rows(IS, VS, C, seed)
        np.testing.assert_allclose(gv, jv[t], rtol=1e-12)
        np.testing.assert_allclose(gc, jc[t], rtol=1e-12)
    cols = A.compile(_directional, backend=backend)
    for i, e in enumerate(np.eye(len(VS))):  # forward mode: the columns
        np.testing.assert_allclose(cols(IS, VS, C, e), jv[:, i], rtol=1e-12)


def test_an_operator_that_is_not_associative_is_refused_in_both_modes():
    x = np.arange(1.0, 4.0)

    def f(a):
        return A.sum_all(A.permute(lambda p, q: p * q + 1.0, A.fill((2,), 1.0),
                                   lambda i: i % 2, a))
    with pytest.raises(A.NotDifferentiableError, match=r"permute.*not associative"):
        A.run(A.gradientA(f), x, backend="interpreter")
    with pytest.raises(A.NotDifferentiableError, match=r"permute.*not associative"):
        A.jvp(f, (x,), (x,), backend="interpreter")


def test_rank_two_sources_and_targets_rank_zero_and_empty():
    rng = np.random.default_rng(1)

    def f(d, x):  # rank-2 sources onto rank-2 targets, a column ignored
        r = A.permute(logaddexp, d, lambda ix: A.cond(
            ix[1] != 2, ((ix[0] + ix[1]) % 2, ix[1] % 3), A.ignore), x)
        return A.sum_all(A.map(A.sin, r))
    assert A.check_grad(f, rng.uniform(0.5, 1, (2, 3)), rng.uniform(0.5, 1, (4, 5)),
                        backend="interpreter")

    def g(d, x):  # one rank-0 target
        return A.sum_all(A.map(A.sin, A.permute(mul2, d, lambda i: (), x)))
    for x in (rng.uniform(0.5, 1, 4), np.zeros(0)):
        assert A.check_grad(g, np.array(0.7), x, backend="interpreter")


# ------------------------------------------------------------ generated programs, 2nd order


def _generated(i):
    import random

    from accel.testing.programs import generate_program
    from accel.testing.sources import RandomSource
    return generate_program(RandomSource(random.Random(f"general:{i}")), differentiable=True)


#: seeds whose random program uses log-add-exp, (sum, count) and x*y*2 permutes
GENERATED = {60: "permute_logaddexp", 45: "permute_sum_count", 24: "permute_mul2"}


@pytest.mark.parametrize("seed", sorted(GENERATED))
def test_generated_general_permutes_to_second_order(seed):
    from accel.testing.properties import check_gradient
    desc = _generated(seed)
    assert GENERATED[seed] in desc.features, desc  # the generator still makes this case
    check_gradient(desc, backends=["fused"] + COMPILED, directions=1, modes=("recompute",))
    args = desc.args()
    wrt = tuple(k for k, a in enumerate(args) if a.dtype.kind == "f")
    _, loss = desc.build()

    def squared_gradient(*xs):  # its gradient is reverse-over-reverse, its jvp forward-over
        total = None
        for g in A.gradientA(loss, wrt=wrt)(*xs):
            s = A.the(A.sum_all(A.map(lambda v: v * v, g)))
            total = s if total is None else total + s
        return A.unit(total)
    rep = A.check_grad(squared_gradient, *args, wrt=wrt, backend="interpreter", rtol=1e-4,
                       atol=1e-6)
    assert rep.ok, (rep.max_error, desc)


def test_an_operator_reading_a_differentiated_array():
    # forward mode differentiates it (the JVP of comb carries the array's tangent);
    # reverse mode refuses: it would need every application of comb, not the last one
    def f(c, x):
        r = A.permute(lambda a, b: a * b * c[0], A.fill((3,), 0.9), lambda i: i % 3, x)
        return A.sum_all(A.map(A.sin, r))
    c, x = np.array([1.7]), np.linspace(0.5, 1.0, 7)
    _, t = A.jvp(f, (c, x), (np.ones(1), np.zeros(7)), backend="interpreter")
    h = 1e-6
    fd = (A.run(f, c + h, x, backend="interpreter") -
          A.run(f, c - h, x, backend="interpreter")) / (2 * h)
    np.testing.assert_allclose(t, fd, rtol=1e-7)
    with pytest.raises(A.NotDifferentiableError, match="reads no array being differentiated"):
        A.run(A.gradientA(f), c, x, backend="interpreter")
