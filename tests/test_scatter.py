"""Scatter: ``permute`` with a projection combination (``\\new old -> new`` / ``old``).

Primal: among colliding writes the one from the last source index in row-major order
wins, on every backend (checked against a sequential loop, with collisions, ignored
sources, 2-D targets, tuple elements, and a source large enough for the cpu backend's
parallel chunks).  Derivatives: the winner gets the output adjoint at its target, the
defaults get it where nothing landed, losers get zero; checked with explicit values and
against forward mode and finite differences, first and second order (reverse over
reverse, forward over reverse), including the gradient of an ``awhile`` loop (whose tape
accel writes with a projection permute) and reverse mode's own tuple ``(+)`` permutes.
"""

import numpy as np
import pytest

import accel as A
from accel import jvp
from compiled_helpers import check_second_order

BACKENDS = ["interpreter", "fused", "cpu", "cuda"]


def sequential_scatter(defaults, idx, vals):
    """The reference: ``out[idx[i]] = vals[i]`` in source order (negative: ignored)."""
    out = defaults.copy()
    for i, t in enumerate(idx):
        if t >= 0:
            out[t] = vals[i]
    return out


def scatter(x, d, idx):
    ix = A.use(idx)
    return A.permute(lambda new, old: new, d,
                     lambda i: A.cond(ix[i] >= 0, ix[i], A.ignore), x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_last_write_wins(backend):
    idx = np.array([0, 2, 0, -1, 2, 1, 0, 1, 5, -1])
    x = np.arange(1.0, 11.0)
    d = np.full(6, -1.0)
    out = A.run(lambda x, d: scatter(x, d, idx), x, d, backend=backend)
    # target 0 is written by sources 0, 2, 6 (6 wins), 1 by 5, 7 (7), 2 by 1, 4 (4)
    np.testing.assert_array_equal(out, [7.0, 8.0, 5.0, -1.0, -1.0, 9.0])
    np.testing.assert_array_equal(out, sequential_scatter(d, idx, x))


@pytest.mark.parametrize("backend", BACKENDS)
def test_keep_old_and_tuples_and_2d(backend):
    idx = np.array([[1, 0, 1], [0, 1, 0]])
    x = np.arange(6.0).reshape(2, 3)
    d = np.array([[10.0, 20.0], [30.0, 40.0]])

    def prog(x, d):
        ix = A.use(idx)
        tgt = lambda i: (ix[i], i[1] % 2)  # noqa: E731
        return (A.permute(lambda new, old: old, d, tgt, x),
                A.permute(lambda new, old: new, A.zip(d, A.map(lambda v: -v, d)), tgt,
                          A.zip(x, A.map(A.sin, x))))
    keep, (a, b) = A.run(prog, x, d, backend=backend)
    np.testing.assert_array_equal(keep, d)
    # source (r, c) goes to (idx[r, c], c % 2); row-major: (1, 0) beats (0, 0) etc.
    want = d.copy()
    for r in range(2):
        for c in range(3):
            want[idx[r, c], c % 2] = x[r, c]
    np.testing.assert_array_equal(a, want)
    np.testing.assert_allclose(b, np.where(want == d, -d, np.sin(want)))


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_many_collisions_large_source(backend):
    # 40000 sources into 50 targets: the cpu backend splits the sources into chunks
    rng = np.random.default_rng(0)
    idx = rng.integers(-5, 50, 40000)
    x = rng.standard_normal(40000)
    d = np.zeros(50)
    out = A.run(lambda x, d: scatter(x, d, idx), x, d, backend=backend)
    win = np.full(50, -1)
    np.maximum.at(win, idx[idx >= 0], np.flatnonzero(idx >= 0))
    np.testing.assert_array_equal(out, np.where(win >= 0, x[win], d))


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_target_out_of_bounds(backend):
    idx = np.array([0, 7])
    with pytest.raises(A.OutOfBoundsError, match="permute"):
        A.run(lambda x, d: scatter(x, d, idx), np.ones(2), np.zeros(3), backend=backend,
              check_bounds=True)


# --------------------------------------------------------------------------- derivatives

IDX = np.array([0, 2, 0, -1, 2, 3, 0])


def loss(x, d):
    y = scatter(A.map(lambda v: v * v, x), A.map(A.sin, d), IDX)
    return A.sum_all(A.map(lambda v: v * v * v + v, y))


X = np.array([0.5, -1.1, 0.7, 1.3, 0.9, -0.4, 1.2])
D = np.array([0.3, -0.6, 0.8, 1.1, 0.2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_adjoint_goes_to_winners_and_untouched_defaults(backend):
    gx, gd = A.run(A.gradientA(loss), X, D, backend=backend)
    y = sequential_scatter(np.sin(D), IDX, X * X)
    dy = 3 * y * y + 1
    # winners: source 6 (target 0), 4 (target 2), 5 (target 3); 3 is ignored
    want_x = np.zeros(7)
    for i, t in ((6, 0), (4, 2), (5, 3)):
        want_x[i] = dy[t] * 2 * X[i]
    want_d = np.array([0, 1, 0, 0, 1]) * dy * np.cos(D)
    np.testing.assert_allclose(gx, want_x, rtol=1e-12)
    np.testing.assert_allclose(gd, want_d, rtol=1e-12)
    assert A.check_grad(loss, X, D, backend=backend)
    tx, td = np.linspace(-1, 1, 7), np.linspace(0.5, -0.5, 5)
    _, t = jvp(loss, (X, D), (tx, td), backend=backend)
    np.testing.assert_allclose(t, gx @ tx + gd @ td, rtol=1e-10)


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_scatter_second_order(backend):
    check_second_order(lambda x: loss(x, A.use(D)), X, backend)


def loop_loss(x):
    # issue 24: the gradient of a loop (its tape is written by a projection permute)
    def cond(s):
        return A.unit(A.the(s[1]) < 3)

    def body(s):
        return (A.map(lambda v: 0.9 * v + A.sin(v), s[0]), A.unit(A.the(s[1]) + 1))
    s = A.awhile(cond, body, (x, A.unit(0)))
    return A.sum_all(A.map(lambda v: v * v, s[0]))


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_loop_gradient_differentiates_again(backend):
    check_second_order(loop_loss, np.array([0.3, -1.2, 2.0]), backend)


def tuple_index_loss(x):
    # issue 26: reverse mode's index adjoint of an array of tuples is a tuple Permute (+)
    z = A.zip(x, A.map(A.sin, x))
    return A.sum_all(A.generate((3,), lambda i: z[i + 1][0] * z[i][1]))


@pytest.mark.parametrize("backend", ["interpreter", "cpu"])
def test_tuple_index_adjoint_differentiates_again(backend):
    check_second_order(tuple_index_loss, np.array([0.3, -1.2, 2.0, 0.7]), backend)


# --------------------------------------------------------------------------- errors


def test_other_combination_error_names_function_and_permute_line():
    import inspect
    line = inspect.currentframe().f_lineno + 3

    def f(x):
        return A.sum_all(A.permute(lambda new, old: new - old, A.fill((2,), 1.0),
                                   lambda i: (0,), x))
    where = f"{__file__}:{line}"
    with pytest.raises(A.NotDifferentiableError) as e:
        A.run(A.gradientA(f), np.ones(3), backend="interpreter")
    assert "permute" in str(e.value) and " - " in str(e.value)
    assert where in str(e.value) and str(e.value).count("(at ") == 1
    with pytest.raises(A.NotDifferentiableError) as e:
        jvp(f, (np.ones(3),), (np.ones(3),), backend="interpreter")
    assert where in str(e.value) and str(e.value).count("(at ") == 1


def test_projection_recogniser():
    from accel.ast import nodes as N
    from accel.ast.patterns import leafwise_binop, projection_side
    from accel.ast.types import TupleT, bool_, float64
    t = TupleT((float64, bool_))
    x, y = N.Var(N.fresh("x"), t), N.Var(N.fresh("y"), t)
    assert projection_side(N.Lam((x, y), x)) == 0
    assert projection_side(N.Lam((x, y), N.Tuple((N.Prj(0, y), N.Prj(1, y))))) == 1
    assert projection_side(N.Lam((x, y), N.Tuple((N.Prj(0, x), N.Prj(1, y))))) is None
    # reverse mode's sum of tuples with a bool leaf is a leafwise (+)
    total = N.Lam((x, y), N.Tuple((N.PrimApp("add", (N.Prj(0, x), N.Prj(0, y))), N.Prj(1, x))))
    assert leafwise_binop(total) == "add" and projection_side(total) is None
