"""Forward-mode AD (``accel.ad.forward``): every construct against central finite
differences on hypothesis-generated inputs (interpreter backend), golden derivatives,
the tie and kink conventions, composition with tracing and reverse mode, and errors.

Inputs are drawn as sizes (including empty dimensions) and a random seed; values are
continuous uniform draws, so that (with probability one) no input sits on a kink,
a tie or a branch boundary, where finite differences are meaningless.  Special
points are tested separately, with exact expected values.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import accel as A
from accel.ad.forward.driver import jvp, jvp_program
from accel.ast.typecheck import typecheck
from accel.frontend import arg_type, trace_program

BACKEND = "interpreter"
# No shrinking: the values come from a seed anyway, and shrinking a broken rule over
# dozens of cases would take many minutes.
SETTINGS = settings(deadline=None, max_examples=12, derandomize=True,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow])
EPS, RTOL, ATOL = 1e-6, 1e-5, 1e-6


@pytest.fixture
def backend():
    return BACKEND


# --------------------------------------------------------------------------- helpers


def leaves(v) -> list:
    if isinstance(v, tuple):
        return [x for i in v for x in leaves(i)]
    return [np.asarray(v)]


def is_float(a) -> bool:
    return np.asarray(a).dtype.kind == "f"


def jvp_typechecks(f, args):
    prog = trace_program(f, tuple(arg_type(a, i) for i, a in enumerate(args)))
    jp = jvp_program(prog)
    typecheck(jp)
    return jp


def finite_differences(f, args, tans, eps=EPS):
    plus = [a + eps * t if t is not None else a for a, t in zip(args, tans)]
    minus = [a - eps * t if t is not None else a for a, t in zip(args, tans)]
    run = A.compile(f, backend=BACKEND)  # (once for both points)
    hi, lo = leaves(run(*plus)), leaves(run(*minus))
    return [(h.astype(np.float64) - w.astype(np.float64)) / (2 * eps) if is_float(h) else None
            for h, w in zip(hi, lo)]


def check_jvp(f, args, rng, rtol=RTOL, atol=ATOL):
    """jvp of ``f`` at ``args`` in a random direction vs the primal run and central FD."""
    jvp_typechecks(f, args)
    tans = [rng.uniform(-1, 1, np.shape(a)).astype(np.asarray(a).dtype) if is_float(a)
            else None for a in args]
    outs, touts = jvp(f, tuple(args), tuple(tans), backend=BACKEND)
    ref = A.run(f, *args, backend=BACKEND)
    for o, r in zip(leaves(outs), leaves(ref)):
        np.testing.assert_array_equal(o, r)
    fd = finite_differences(f, args, tans)
    for t, o, d in zip(leaves(touts), leaves(outs), fd):
        assert t.shape == o.shape and t.dtype == o.dtype
        if d is None:
            assert not np.any(t), "a non-floating output has a non-zero tangent"
        else:
            np.testing.assert_allclose(t, d, rtol=rtol, atol=atol)
    return outs, touts


def floats(rng, shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, shape)


# --------------------------------------------------------------------------- the cases

IDX_HI = "m"  # int index arrays point into a dimension of this size


def affine(p, q):
    # composition of affine maps x -> a x + b: associative, not commutative
    return (p[0] * q[0], p[1] * q[0] + q[1])


def collapse(pairs):
    return A.map(lambda p: p[0] + 2.0 * p[1], pairs)


def awhile_case(x, n):
    def cond(s):
        return A.unit(A.the(s[0]) < A.the(n))

    def body(s):
        return (A.map(lambda c: c + 1, s[0]),
                A.map(lambda v: A.sin(v) * 1.5 + 0.1 * v * v, s[1]))
    return A.awhile(cond, body, (A.unit(0), x))[1]


def awhile_free(x, n):
    # the accumulator starts inactive and becomes active through x (a fixpoint)
    def cond(s):
        return A.unit(A.the(s[0]) < A.the(n))

    def body(s):
        return (A.map(lambda c: c + 1, s[0]),
                A.zip_with(lambda acc, v: acc * 0.5 + A.sin(v), s[1], x))
    return A.awhile(cond, body, (A.unit(0), A.fill(x.shape, 0.25)))


def while_case(x, ks):
    return A.zip_with(lambda v, k: A.while_(lambda s: s[0] < k,
                                            lambda s: (s[0] + 1, s[1] * 0.9 + A.sin(s[1]) * v),
                                            (0, v))[1], x, ks)


def while_free(x, ks):
    # the accumulator starts inactive (a constant) and becomes active through v
    return A.zip_with(lambda v, k: A.while_(lambda s: s[0] < k,
                                            lambda s: (s[0] + 1, s[1] * 0.5 + A.cos(v)),
                                            (0, 0.25))[1], x, ks)


def ignore_odd(idx):
    return lambda i: A.cond(i % 2 == 0, (idx[i],), A.ignore)


# name -> (program, argument specs); a spec is ("f", dims) for a float array, ("i", dims,
# hi) for an int array of values in [0, hi) (hi: an int or a size name), ("n", lo, hi) for
# a rank-0 int; dims name sizes: "n", "k" in [0, 4], "m", "p" in [1, 4]
CASES = {
    "map_primitives": (lambda x: A.map(
        lambda v: A.sqrt(v * v + 1) + A.log1p(v * v) + A.atan(v) + A.asin(v / 3)
        + A.acos(v / 3) + A.sinh(v) + A.cosh(v) + A.expm1(v) + A.tan(v / 2)
        + A.atan2(v, 2.0) + A.log(v * v + 1) + (v * v + 1) ** 1.5 + A.max(v, 0.3)
        + A.min(v, -0.3) + abs(v) + 1 / (v * v + 1) + -v + A.tanh(v) + v % 0.7
        + A.floor(v) * v + A.to_float(A.to_int(v * 3)), x), [("f", ("n",))]),
    "map_2d": (lambda x: A.map(lambda v: A.exp(v / 2) * A.cos(v), x), [("f", ("m", "n"))]),
    "map_tuple_result": (lambda x: A.map(lambda v: (v * v, A.sin(v)), x), [("f", ("n",))]),
    "map_int_result": (lambda x: (A.map(lambda v: A.to_int(v * 4), x),
                                  A.map(lambda v: v > 0, x), A.map(A.sin, x)),
                       [("f", ("n",))]),
    "pow_const_exponent": (lambda x: A.map(lambda v: v ** 3.0 + v ** 2, x), [("f", ("n",))]),
    "pow_both": (lambda x, y: A.zip_with(lambda u, v: (u * u + 0.5) ** v, x, y),
                 [("f", ("n",)), ("f", ("n",))]),
    "cast_and_int_args": (lambda x, ks: A.zip_with(
        lambda v, k: A.to_float(v, A.float64) * A.to_float(k) + A.to_float(k * k), x, ks),
        [("f", ("n",)), ("i", ("n",), 5)]),
    "generate_index": (lambda x: A.generate((x.shape[0] - 1,), lambda i: x[i + 1] * x[i]),
                       [("f", ("m",))]),
    "generate_2d": (lambda x: A.generate((2, 3), lambda ix: x[ix[1]] * A.sin(x[ix[0]])),
                    [("f", (3,))]),
    "gather_data_dependent": (lambda x, idx: A.map(lambda j: x[j] * x[j] + A.sin(x[0]), idx),
                              [("f", ("m",)), ("i", ("n",), "m")]),
    "zip_with_same": (lambda x: A.zip_with(lambda u, v: u * v + A.exp(u), x, x),
                      [("f", ("n",))]),
    "zip_with_unequal": (lambda x, y: A.zip_with(lambda u, v: u * A.cos(v) + u * u, x, y),
                         [("f", ("n",)), ("f", ("k",))]),
    "zip_with_unequal_2d": (lambda x, y: A.zip_with(lambda u, v: u / (v * v + 1), x, y),
                            [("f", ("m", "n")), ("f", ("p", "k"))]),
    "zip_with_one_active": (lambda x, ks: A.zip_with(lambda u, k: u * A.to_float(k), x, ks),
                            [("f", ("n",)), ("i", ("k",), 4)]),
    "zip_with_index_other": (lambda x, y, idx: A.zip_with(lambda u, j: u * y[j], x, idx),
                             [("f", ("n",)), ("f", ("m",)), ("i", ("k",), "m")]),
    "sum": (lambda x: A.sum(x), [("f", ("m", "n"))]),
    "sum_z_active": (lambda x: A.fold(lambda a, b: a + b, A.the(A.sum_all(x)) * 2.0, x),
                     [("f", ("m", "n"))]),
    "product": (lambda x: A.product(x), [("f", ("m", "n"))]),
    "fold_general": (lambda x: A.fold(lambda p, q: p * q + p + q, 0.5, x),
                     [("f", ("m", "n"))]),
    "fold_z_indexes": (lambda x: A.fold(lambda p, q: p * q, x[0], x), [("f", ("m",))]),
    "fold1_general": (lambda x: A.fold1(lambda p, q: p * q + q + p, x), [("f", ("m", "p"))]),
    "fold_noncommutative": (lambda x, y: collapse(A.fold(affine, (1.0, 0.0), A.zip(x, y))),
                            [("f", ("m", "n")), ("f", ("m", "n"))]),
    "fold1_noncommutative": (lambda x, y: collapse(A.fold1(affine, A.zip(x, y))),
                             [("f", ("p",)), ("f", ("p",))]),
    "fold1_left_projection": (lambda x: A.fold1(lambda a, b: a, x), [("f", ("m", "p"))]),
    "maximum": (lambda x: A.maximum(x), [("f", ("m", "p"))]),
    "minimum": (lambda x: A.minimum(x), [("f", ("p",))]),
    "fold_max_z": (lambda x: A.fold(A.max, 0.0, x), [("f", ("m", "n"))]),
    "fold_all": (lambda x: A.fold_all(lambda a, b: a + b * 1.0, 0.0, A.map(A.sin, x)),
                 [("f", ("m", "n"))]),
    "scanl": (lambda x: A.scanl(lambda a, b: a + b, 0.5, x), [("f", ("m", "n"))]),
    "scanr": (lambda x: A.scanr(lambda a, b: a + b, 0.5, x), [("f", ("m", "n"))]),
    "scanl1": (lambda x: A.scanl1(lambda a, b: a + b, x), [("f", ("m", "n"))]),
    "scanr1": (lambda x: A.scanr1(lambda a, b: a + b, x), [("f", ("n",))]),
    "scanl_general": (lambda x: A.scanl(lambda a, b: a * b + a + b, 0.5, x),
                      [("f", ("m", "n"))]),
    "scanr1_general": (lambda x: A.scanr1(lambda a, b: a * b + a + b, x), [("f", ("n",))]),
    "scanl_noncommutative": (lambda x, y: collapse(A.scanl(affine, (1.0, 0.0), A.zip(x, y))),
                             [("f", ("n",)), ("f", ("n",))]),
    "scanr_noncommutative": (lambda x, y: collapse(A.scanr(affine, (1.0, 0.0), A.zip(x, y))),
                             [("f", ("m", "n")), ("f", ("m", "n"))]),
    "scanl1_noncommutative": (lambda x, y: collapse(A.scanl1(affine, A.zip(x, y))),
                              [("f", ("n",)), ("f", ("n",))]),
    "scanr1_noncommutative": (lambda x, y: collapse(A.scanr1(affine, A.zip(x, y))),
                              [("f", ("n",)), ("f", ("n",))]),
    "scanl_max": (lambda x: A.scanl(A.max, -1.0, x), [("f", ("m", "n"))]),
    "scanr1_min": (lambda x: A.scanr1(A.min, x), [("f", ("n",))]),
    "permute_add": (lambda d, x, idx: A.permute(lambda a, b: a + b, A.map(A.sin, d),
                                                lambda i: idx[i], x),
                    [("f", ("m",)), ("f", ("n",)), ("i", ("n",), "m")]),
    "permute_add_inactive_default": (lambda x, idx: A.permute(
        lambda a, b: a + b, A.fill((4,), 1.0), lambda i: idx[i], A.map(A.exp, x)),
        [("f", ("n",)), ("i", ("n",), 4)]),
    "permute_add_ignore": (lambda d, x, idx: A.permute(lambda a, b: a + b, d, ignore_odd(idx),
                                                       x),
                           [("f", ("m",)), ("f", ("n",)), ("i", ("n",), "m")]),
    "permute_max": (lambda d, x, idx: A.permute(A.max, d, lambda i: idx[i], x),
                    [("f", ("m",)), ("f", ("n",)), ("i", ("n",), "m")]),
    "permute_mul": (lambda d, x, idx: A.permute(lambda a, b: a * b, d, lambda i: idx[i],
                                                A.map(lambda v: v * 0.5 + 1.0, x)),
                    [("f", ("m",)), ("f", ("n",)), ("i", ("n",), "m")]),
    "permute_min_2d": (lambda d, x, idx: A.permute(A.min, d, lambda ix: (idx[ix[0]], ix[1]), x),
                       [("f", ("m", 2)), ("f", ("n", 2)), ("i", ("n",), "m")]),
    "backpermute": (lambda x: A.map(A.exp, A.backpermute((x.shape[0],),
                                                         lambda i: x.shape[0] - 1 - i, x)),
                    [("f", ("n",))]),
    "transpose": (lambda x: A.zip_with(lambda u, v: u * v, A.transpose(x), x),
                  [("f", ("m", "m"))]),
    "reshape": (lambda x: A.map(A.sin, A.reshape((x.shape[1], x.shape[0]), x)),
                [("f", ("m", "n"))]),
    "flatten": (lambda x: A.sum(A.flatten(A.map(A.sin, x))), [("f", ("m", "n"))]),
    "replicate": (lambda x: A.map(A.sin, A.replicate((2, A.All, 3), x)), [("f", ("n",))]),
    "replicate_inner": (lambda x: A.map(A.cos, A.replicate((A.All, 2, A.All), x)),
                        [("f", ("m", "n"))]),
    "slice": (lambda x: A.map(A.sin, A.slice(x, (0, A.All))), [("f", ("m", "n"))]),
    "unit_the": (lambda x: A.unit(A.the(A.sum(x)) * A.the(A.sum(x))), [("f", ("n",))]),
    "shape_use": (lambda x: A.zip_with(lambda v, c: v * A.to_float(A.size(x)) + c, x,
                                       A.use(np.ones(3))), [("f", ("n",))]),
    "cond_both_branches": (lambda x: A.map(lambda v: A.cond(v > 0, v * v, A.sin(v)), x),
                           [("f", ("n",))]),
    "cond_one_branch_constant": (lambda x: A.map(lambda v: A.cond(v > 0, v * 3.0, 1.0), x),
                                 [("f", ("n",))]),
    "cond_tuple": (lambda x: A.map(lambda v: A.cond(v > 0, (v, v * v), (A.exp(v), 2.0))[1], x),
                   [("f", ("n",))]),
    "let_tuples": (lambda x: A.map(lambda p: p[0] * A.exp(p[1]),
                                   A.zip(x, A.map(lambda v: v * 0.5, x))), [("f", ("n",))]),
    "acond": (lambda x, y, c: A.acond(A.the(c) > 0, A.map(A.sin, x), A.map(lambda v: v * v, y)),
              [("f", ("n",)), ("f", ("k",)), ("n", 0, 2)]),
    "acond_inactive_branch": (lambda x, c: A.acond(A.the(c) > 0, A.map(A.sin, x),
                                                   A.fill((3,), 1.0)),
                              [("f", ("n",)), ("n", 0, 2)]),
    "acond_tuple": (lambda x, c: A.acond(A.the(c) > 0, (x, A.map(A.cos, x)),
                                         (A.map(A.exp, x), x)),
                    [("f", ("n",)), ("n", 0, 2)]),
    "acond_data_dependent": (lambda x: A.acond(A.the(A.sum_all(x)) > 0, A.map(A.sin, x), x),
                             [("f", ("n",))]),
    "awhile": (awhile_case, [("f", ("n",)), ("n", 0, 4)]),
    "awhile_free_active": (awhile_free, [("f", ("n",)), ("n", 0, 4)]),
    "while": (while_case, [("f", ("n",)), ("i", ("n",), 4)]),
    "while_free_active": (while_free, [("f", ("n",)), ("i", ("n",), 4)]),
    "tuple_result_and_params": (lambda x, y: (A.sum(A.zip_with(lambda u, v: u * v, x, y)),
                                              A.map(A.sin, y), x),
                                [("f", ("n",)), ("f", ("n",))]),
}


def make_args(specs, sizes, rng):
    out = []
    for spec in specs:
        if spec[0] == "f":
            out.append(floats(rng, tuple(sizes.get(d, d) for d in spec[1])))
        elif spec[0] == "i":
            hi = sizes.get(spec[2], spec[2])
            out.append(rng.integers(0, hi, tuple(sizes.get(d, d) for d in spec[1])))
        else:
            out.append(np.array(rng.integers(spec[1], spec[2] + 1), dtype=np.int64))
    return out


@pytest.mark.parametrize("name", sorted(CASES))
@SETTINGS
@given(n=st.integers(0, 4), k=st.integers(0, 4), m=st.integers(1, 4), p=st.integers(1, 4),
       seed=st.integers(0, 2**32 - 1))
def test_jvp_matches_finite_differences(name, n, k, m, p, seed):
    f, specs = CASES[name]
    rng = np.random.default_rng(seed)
    args = make_args(specs, {"n": n, "k": k, "m": m, "p": p}, rng)
    check_jvp(f, args, rng)


# --------------------------------------------------------------------------- loops and
# conditionals: each iteration count and each branch explicitly


@pytest.mark.parametrize("iters", [0, 1, 5])
def test_awhile_iteration_counts(iters, backend):
    rng = np.random.default_rng(iters)
    x = floats(rng, (3,))
    outs, touts = check_jvp(awhile_case, [x, np.array(iters)], rng)
    if iters == 0:
        np.testing.assert_array_equal(outs, x)
    check_jvp(awhile_free, [x, np.array(iters)], rng)


@pytest.mark.parametrize("iters", [0, 1, 5])
def test_while_iteration_counts(iters, backend):
    rng = np.random.default_rng(10 + iters)
    x = floats(rng, (4,))
    ks = np.full(4, iters)
    check_jvp(while_case, [x, ks], rng)
    check_jvp(while_free, [x, ks], rng)
    t = np.ones(4)
    _, tout = jvp(while_case, (x, ks), (t, None), backend=backend)
    if iters == 0:
        np.testing.assert_array_equal(tout, t)


@pytest.mark.parametrize("c", [0, 1])
def test_acond_each_branch(c, backend):
    rng = np.random.default_rng(c)
    f, _ = CASES["acond"]
    x, y = floats(rng, (3,)), floats(rng, (5,))
    outs, touts = check_jvp(f, [x, y, np.array(c)], rng)
    assert outs.shape == ((3,) if c else (5,))
    check_jvp(CASES["acond_tuple"][0], [x, np.array(c)], rng)
    _, t = jvp(CASES["acond_inactive_branch"][0], (x, np.array(c)), (np.ones(3), None),
               backend=backend)
    np.testing.assert_allclose(t, np.cos(x) if c else np.zeros(3))


def test_cond_each_branch(backend):
    x = np.array([-1.5, -0.5, 0.5, 1.5])
    f = CASES["cond_both_branches"][0]
    _, t = jvp(f, (x,), (np.ones(4),), backend=backend)
    np.testing.assert_allclose(t, np.where(x > 0, 2 * x, np.cos(x)))
    _, t = jvp(CASES["cond_one_branch_constant"][0], (x,), (np.ones(4),), backend=backend)
    np.testing.assert_allclose(t, np.where(x > 0, 3.0, 0.0))


# --------------------------------------------------------------------------- golden values


def test_golden_square(backend):
    x = np.array([-3.0, -0.5, 0.0, 2.0, 7.0])
    y, t = jvp(lambda x: A.map(lambda v: v ** 2, x), (x,), (np.ones_like(x),), backend=backend)
    np.testing.assert_allclose(y, x ** 2)
    np.testing.assert_allclose(t, 2 * x)


def test_golden_exp(backend):
    x = np.array([-1.0, 0.0, 0.5, 2.0])
    a = np.array([0.5, -2.0, 3.0, 1.0])

    def f(x, a):
        return A.zip_with(lambda v, c: A.exp(c * v), x, a)

    _, t = jvp(f, (x, a), (np.ones_like(x), np.zeros_like(a)), backend=backend)
    np.testing.assert_allclose(t, a * np.exp(a * x))
    _, t = jvp(f, (x, a), (np.zeros_like(x), np.ones_like(a)), backend=backend)
    np.testing.assert_allclose(t, x * np.exp(a * x))


def test_constant_exponent_at_negative_base_is_finite(backend):
    # the partial wrt the exponent (log x * x^y) is nan at x < 0; a constant exponent has
    # no tangent, so it must never be multiplied in
    x = np.array([-2.0, -1.0, -0.25])
    _, t = jvp(lambda x: A.map(lambda v: v ** 3.0, x), (x,), (np.ones(3),), backend=backend)
    np.testing.assert_allclose(t, 3 * x ** 2)


def test_kink_conventions(backend):
    x = np.array([0.0, 0.3, -1.0])
    _, t = jvp(lambda x: A.map(lambda v: abs(v) + A.max(v, 0.3) + A.min(v, 0.3), x), (x,),
               (np.ones(3),), backend=backend)
    # abs' (0) = 0; max/min at a tie split equally
    np.testing.assert_allclose(t, [0.0 + 0.0 + 1.0, 1.0 + 0.5 + 0.5, -1.0 + 0.0 + 1.0])
    _, t = jvp(lambda x: A.map(A.sqrt, x), (np.array([0.0]),), (np.ones(1),), backend=backend)
    assert np.isinf(t[0])


def test_tied_maximum_splits_equally(backend):
    x = np.array([[1.0, 3.0, 3.0, 3.0], [2.0, 2.0, 0.0, 1.0]])
    t = np.array([[100.0, 2.0, 4.0, 9.0], [1.0, 3.0, 7.0, 7.0]])
    _, d = jvp(lambda x: A.maximum(x), (x,), (t,), backend=backend)
    np.testing.assert_allclose(d, [5.0, 2.0])
    # the seed takes part in the tie (with tangent 0)
    _, d = jvp(lambda x: A.fold(A.max, 3.0, x), (x,), (t,), backend=backend)
    np.testing.assert_allclose(d, [15.0 / 4, 0.0])
    _, d = jvp(lambda x: A.scanl1(A.max, x), (x[0],), (t[0],), backend=backend)
    np.testing.assert_allclose(d, [100.0, 2.0, 3.0, 5.0])


def test_permute_max_collisions_and_ties(backend):
    d = np.array([0.0, 5.0, 1.0])
    x = np.array([4.0, 5.0, 3.0, 2.0])
    idx = np.array([0, 1, 0, 2])
    td, tx = np.array([10.0, 20.0, 30.0]), np.array([1.0, 2.0, 3.0, 4.0])

    def f(d, x, idx):
        return A.permute(A.max, d, lambda i: idx[i], x)

    y, t = jvp(f, (d, x, idx), (td, tx, None), backend=backend)
    np.testing.assert_allclose(y, [4.0, 5.0, 2.0])
    # target 1 ties the default (5.0) with x[1]: the mean of their tangents
    np.testing.assert_allclose(t, [1.0, 11.0, 4.0])


def test_permute_add_collisions(backend):
    d = np.array([1.0, 2.0])
    x = np.array([1.0, 2.0, 3.0])

    def f(d, x):
        return A.permute(lambda a, b: a + b, d, lambda i: (0,), A.map(lambda v: v * v, x))

    y, t = jvp(f, (d, x), (np.array([1.0, 1.0]), np.ones(3)), backend=backend)
    np.testing.assert_allclose(y, [15.0, 2.0])
    np.testing.assert_allclose(t, [1.0 + 2 + 4 + 6, 1.0])


def test_empty_arrays(backend):
    x = np.zeros((0,))
    y, t = jvp(lambda x: A.map(A.sin, x), (x,), (x,), backend=backend)
    assert y.shape == t.shape == (0,)
    y, t = jvp(lambda x: A.sum(x), (np.zeros((3, 0)),), (np.zeros((3, 0)),), backend=backend)
    np.testing.assert_array_equal(t, np.zeros(3))
    y, t = jvp(lambda x: A.fold(lambda a, b: a * b + a, A.the(A.sum_all(x)), x),
               (np.zeros((2, 0)),), (np.zeros((2, 0)),), backend=backend)
    np.testing.assert_array_equal(t, np.zeros(2))


def test_float32(backend):
    rng = np.random.default_rng(7)
    x = floats(rng, (5,)).astype(np.float32)
    t = rng.uniform(-1, 1, 5).astype(np.float32)

    def f(x):
        return A.scanl(lambda a, b: a * b + a + b, 0.5, A.map(lambda v: A.sin(v) * v, x))

    y, d = jvp(f, (x,), (t,), backend=backend)
    assert y.dtype == d.dtype == np.float32
    fd = finite_differences(f, [x.astype(np.float64)], [t.astype(np.float64)])[0]
    np.testing.assert_allclose(d, fd, rtol=1e-3, atol=1e-4)


# --------------------------------------------------------------------------- composition


def cube_sum(x):
    return A.sum_all(A.map(lambda v: v * v * v, x))


def test_jvp_inside_a_program(backend):
    rng = np.random.default_rng(3)
    x, t = floats(rng, (4,)), rng.uniform(-1, 1, 4)

    def f(x):
        return A.map(lambda v: A.sin(v) * v, x)

    def prog(x, t):
        return jvp(f, (x,), (t,))

    y, d = A.run(prog, x, t, backend=backend)
    y2, d2 = jvp(f, (x,), (t,), backend=backend)
    np.testing.assert_allclose(y, y2)
    np.testing.assert_allclose(d, d2)


def test_forward_over_forward(backend):
    rng = np.random.default_rng(4)
    x, t, s = floats(rng, (4,)), rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 4)

    def inner(x, t):
        return jvp(lambda x: A.map(lambda v: v * v * v, x), (x,), (t,))[1]

    _, d = jvp(inner, (x, t), (s, np.zeros(4)), backend=backend)
    np.testing.assert_allclose(d, 6 * x * t * s)


def test_forward_over_reverse_hvp(backend):
    rng = np.random.default_rng(5)
    x, t = floats(rng, (4,)), rng.uniform(-1, 1, 4)
    g, hv = jvp(A.gradientA(cube_sum), (x,), (t,), backend=backend)
    np.testing.assert_allclose(g, 3 * x ** 2)
    np.testing.assert_allclose(hv, 6 * x * t)


def test_reverse_over_forward(backend):
    rng = np.random.default_rng(6)
    x, t = floats(rng, (4,)), rng.uniform(-1, 1, 4)

    def directional(x, t):
        return A.sum_all(jvp(lambda x: A.map(lambda v: v * v * v, x), (x,), (t,))[1])

    g = A.run(A.gradientA(directional, wrt=0), x, t, backend=backend)
    np.testing.assert_allclose(g, 6 * x * t)


def test_jvp_program_shape(backend):
    prog = trace_program(lambda x, k: (A.map(A.sin, x), k),
                         (arg_type(np.zeros(2), 0), arg_type(np.zeros(2, np.int64), 1)))
    jp = jvp_program(prog)
    typecheck(jp)
    assert len(jp.params) == 3
    assert jp.params[2].type == prog.params[0].type
    assert jp.type.items == prog.type.items * 2
    jp0 = jvp_program(prog, (0, 1))
    assert len(jp0.params) == 4


# --------------------------------------------------------------------------- errors


def test_tangent_errors(backend):
    x = np.zeros(3)
    f = A.sum
    with pytest.raises(A.ShapeError, match="parameter 0"):
        jvp(f, (x,), (np.zeros(4),), backend=backend)
    with pytest.raises(A.ProgramTypeError, match="parameter 0"):
        jvp(f, (x,), (np.zeros(3, np.float32),), backend=backend)
    with pytest.raises(A.ProgramTypeError):
        jvp(f, (x,), (), backend=backend)
    with pytest.raises(A.ShapeError, match="parameter 0"):
        A.run(lambda x, t: jvp(f, (x,), (t,))[1], x, np.zeros((3, 1)), backend=backend)
    with pytest.raises(A.ProgramTypeError, match="parameter 0"):
        A.run(lambda x, t: jvp(f, (x,), (t,))[1], x, np.zeros(3, np.float32), backend=backend)


def test_permute_other_combination_not_differentiable(backend):
    x = np.ones(3)

    def f(x):
        return A.permute(lambda new, old: new - old, A.fill((2,), 1.0), lambda i: (0,), x)

    with pytest.raises(A.NotDifferentiableError, match="permute"):
        jvp(f, (x,), (x,), backend=backend)

    def g(x):  # the same permute on inactive data is fine
        return (A.map(A.sin, x),
                A.permute(lambda new, old: new - old, A.fill((2,), 1.0), lambda i: (0,),
                          A.fill((3,), 2.0)))

    _, (t, t2) = jvp(g, (x,), (x,), backend=backend)
    np.testing.assert_array_equal(t2, np.zeros(2))


def test_tuple_parameter_program(backend):
    from accel.ast import nodes as N
    from accel.ast.types import ArrayT, ATupleT, float64
    from accel.backends.interpreter import evaluate
    v1 = ArrayT(float64, 1)
    p = N.Avar(N.fresh("a"), ATupleT((v1, v1)))
    x, y = N.Var(N.fresh("x"), float64), N.Var(N.fresh("y"), float64)
    mul = N.Lam((x, y), N.PrimApp("mul", (x, y)))
    prog = N.Program((p,), N.ZipWith(mul, N.APrj(0, p), N.APrj(1, p)))
    jp = jvp_program(prog)
    typecheck(jp)
    a, b = np.array([1.0, 2.0]), np.array([3.0, 5.0])
    ta, tb = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    y, t = evaluate(jp, [(a, b), (ta, tb)])
    np.testing.assert_allclose(y, a * b)
    np.testing.assert_allclose(t, ta * b + a * tb)
