"""The reference interpreter on hand-built ASTs, against NumPy and pure-Python loops."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accel.ast.nodes import (
    Acond,
    ALam,
    Alet,
    APrj,
    ATuple,
    Avar,
    Awhile,
    Backpermute,
    Cond,
    Const,
    Fold,
    Generate,
    Index,
    Lam,
    Let,
    Map,
    Permute,
    PrimApp,
    Prj,
    Program,
    Replicate,
    Reshape,
    Scan,
    Shape,
    Slice,
    Tuple,
    Unit,
    Use,
    Var,
    While,
    ZipWith,
    fresh,
)
from accel.ast.types import ArrayT, TupleT, bool_, float32, float64, int32, int64, shape_type
from accel.errors import OutOfBoundsError, ShapeError
from accel.backends.interpreter import InterpreterBackend, evaluate, make_runner

# --------------------------------------------------------------------------- builders


def P(op, *args):
    return PrimApp(op, tuple(args))


def i64(v):
    return Const(v, int64)


def f64(v):
    return Const(v, float64)


def lam(types, fn):
    """``Lam`` with fresh parameters of ``types``; ``fn`` builds the body from them."""
    params = tuple(Var(fresh("x"), t) for t in types)
    return Lam(params, fn(*params))


def alam(ty, fn):
    p = Avar(fresh("a"), ty)
    return ALam(p, fn(p))


def prog(types, fn):
    """A program whose parameters are array variables of ``types``."""
    params = tuple(Avar(fresh("a"), t) for t in types)
    return Program(params, fn(*params))


def arr(elt, rank):
    return ArrayT(elt, rank)


def sh(*exps):
    return Tuple(tuple(e if not isinstance(e, int) else i64(e) for e in exps))


def ix1(i):
    """The single component of a rank-1 index tuple."""
    return Prj(0, i)


ADD = lam((float64, float64), lambda x, y: P("add", x, y))


def add_lam(t):
    return lam((t, t), lambda x, y: P("add", x, y))


def run(p, *args):
    return evaluate(p, list(args))


def _affine_t():
    return TupleT((int64, int64))


def compose(t=None):
    """Associative, non-commutative: (a1,b1) then (a2,b2) is x -> a2*(a1*x+b1)+b2."""
    t = t or _affine_t()
    return lam((t, t), lambda f, g: Tuple((P("mul", Prj(0, g), Prj(0, f)),
                                           P("add", P("mul", Prj(0, g), Prj(1, f)), Prj(1, g)))))


def py_compose(f, g):
    return (g[0] * f[0], g[0] * f[1] + g[1])


# --------------------------------------------------------------------------- map / zip_with


@pytest.mark.parametrize("shape", [(), (5,), (0,), (3, 4), (2, 0, 3), (2, 3, 4)])
def test_map_ranks(shape):
    x = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) - 3.5
    p = prog([arr(float64, len(shape))],
             lambda a: Map(lam((float64,), lambda v: P("add", P("mul", v, v), f64(1.0))), a))
    r = run(p, x)
    assert isinstance(r, np.ndarray) and r.shape == shape and r.dtype == np.float64
    np.testing.assert_array_equal(r, x * x + 1)


def test_map_int32_dtype_and_floordiv():
    x = np.array([-7, -1, 0, 5, 9], dtype=np.int32)
    p = prog([arr(int32, 1)], lambda a: Map(
        lam((int32,), lambda v: P("floordiv", v, Const(2, int32))), a))
    r = run(p, x)
    assert r.dtype == np.int32
    np.testing.assert_array_equal(r, x // 2)


def test_zip_with_intersection():
    x = np.arange(15.0).reshape(3, 5)
    y = np.arange(8.0).reshape(4, 2) * 10
    p = prog([arr(float64, 2)] * 2, lambda a, b: ZipWith(ADD, a, b))
    r = run(p, x, y)
    np.testing.assert_array_equal(r, x[:3, :2] + y[:3, :2])


def test_map_ieee_no_warnings():
    x = np.array([1.0, 0.0, -1.0])
    p = prog([arr(float64, 1)], lambda a: Map(
        lam((float64,), lambda v: P("div", v, f64(0.0))), a))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = run(p, x)
    assert r[0] == np.inf and np.isnan(r[1]) and r[2] == -np.inf


# --------------------------------------------------------------------------- fold


def test_fold_sum_with_z_rank3():
    x = np.random.default_rng(0).normal(size=(2, 3, 7))
    p = prog([arr(float64, 3)], lambda a: Fold(ADD, f64(1.5), a))
    r = run(p, x)
    ref = np.full((2, 3), 1.5)
    for j in range(7):
        ref = ref + x[..., j]
    np.testing.assert_array_equal(r, ref)  # exact: left to right


def test_fold1_max_and_rank1_to_rank0():
    x = np.array([3.0, -1.0, 9.0, 2.0])
    p = prog([arr(float64, 1)], lambda a: Fold(
        lam((float64, float64), lambda u, v: P("max", v, u)), None, a))
    r = run(p, x)
    assert isinstance(r, np.ndarray) and r.shape == () and r == 9.0


def test_fold_general_left_to_right():
    # f(acc, x) = 2*acc + x is not associative: checks the exact order of application.
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    f = lam((int64, int64), lambda u, v: P("add", P("mul", i64(2), u), v))
    r = run(prog([arr(int64, 2)], lambda a: Fold(f, i64(5), a)), x)
    r1 = run(prog([arr(int64, 2)], lambda a: Fold(f, None, a)), x)
    ref, ref1 = [], []
    for row in x:
        acc = 5
        for v in row:
            acc = 2 * acc + v
        ref.append(acc)
        acc = row[0]
        for v in row[1:]:
            acc = 2 * acc + v
        ref1.append(acc)
    np.testing.assert_array_equal(r, ref)
    np.testing.assert_array_equal(r1, ref1)


def test_fold_noncommutative_affine_tuple_elements():
    rng = np.random.default_rng(1)
    a = rng.integers(-3, 4, size=(4, 6))
    b = rng.integers(-5, 6, size=(4, 6))
    t = _affine_t()
    p1 = prog([arr(t, 2)], lambda x: Fold(compose(), None, x))
    pz = prog([arr(t, 2)], lambda x: Fold(compose(), Tuple((i64(1), i64(0))), x))
    r1 = run(p1, (a, b))
    rz = run(pz, (a, b))
    assert isinstance(r1, tuple) and len(r1) == 2
    for i in range(4):
        acc = (a[i, 0], b[i, 0])
        for j in range(1, 6):
            acc = py_compose(acc, (a[i, j], b[i, j]))
        assert (r1[0][i], r1[1][i]) == acc
        assert (rz[0][i], rz[1][i]) == acc  # (1, 0) is the identity


def test_fold_empty_inner():
    x = np.zeros((3, 0))
    r = run(prog([arr(float64, 2)], lambda a: Fold(ADD, f64(7.0), a)), x)
    np.testing.assert_array_equal(r, [7.0, 7.0, 7.0])
    with pytest.raises(ShapeError):
        run(prog([arr(float64, 2)], lambda a: Fold(ADD, None, a)), x)
    # a general (non-recognised) operator too
    f = lam((float64, float64), lambda u, v: P("sub", u, v))
    with pytest.raises(ShapeError, match="fold1"):
        run(prog([arr(float64, 2)], lambda a: Fold(f, None, a)), x)


def test_fold_empty_outer_does_not_evaluate_z():
    # z indexes out of bounds, but there is nothing to fold
    x = np.zeros((0, 4))
    r = run(prog([arr(float64, 2), arr(float64, 1)],
                 lambda a, b: Fold(ADD, Index(b, sh(i64(10))), a)), x, np.zeros(2))
    assert r.shape == (0,)


# --------------------------------------------------------------------------- scans


def _scans_ref(x, f, z):
    """The four scans along the last axis with Python loops (x 2-D)."""
    m, n = x.shape
    sl, sr = np.empty((m, n + 1), x.dtype), np.empty((m, n + 1), x.dtype)
    sl1, sr1 = np.empty((m, n), x.dtype), np.empty((m, n), x.dtype)
    for i in range(m):
        sl[i, 0] = z
        for j in range(n):
            sl[i, j + 1] = f(sl[i, j], x[i, j])
        sr[i, n] = z
        for j in range(n - 1, -1, -1):
            sr[i, j] = f(x[i, j], sr[i, j + 1])
        if n:
            sl1[i, 0] = x[i, 0]
            for j in range(1, n):
                sl1[i, j] = f(sl1[i, j - 1], x[i, j])
            sr1[i, n - 1] = x[i, n - 1]
            for j in range(n - 2, -1, -1):
                sr1[i, j] = f(x[i, j], sr1[i, j + 1])
    return sl, sr, sl1, sr1


def _scan_progs(f, z, ty, rank=2):
    return [prog([arr(ty, rank)], lambda a, left=left, zz=zz: Scan(f, zz, a, left))
            for left, zz in ((True, z), (False, z), (True, None), (False, None))]


@pytest.mark.parametrize("n", [0, 1, 5])
def test_scans_general_operator(n):
    x = np.arange(3 * n, dtype=np.int64).reshape(3, n) - 4
    f = lam((int64, int64), lambda u, v: P("sub", P("mul", i64(3), u), v))
    refs = _scans_ref(x, lambda u, v: 3 * u - v, 2)
    for p, ref in zip(_scan_progs(f, i64(2), int64), refs):
        np.testing.assert_array_equal(run(p, x), ref)


@pytest.mark.parametrize("n", [0, 1, 6])
def test_scans_add_fast_path_exact(n):
    x = np.random.default_rng(2).normal(size=(4, n))
    refs = _scans_ref(x, lambda u, v: u + v, 0.25)
    for p, ref in zip(_scan_progs(ADD, f64(0.25), float64), refs):
        np.testing.assert_array_equal(run(p, x), ref)


def test_scan_tuple_noncommutative():
    rng = np.random.default_rng(3)
    a, b = rng.integers(-3, 4, size=(2, 5)), rng.integers(-3, 4, size=(2, 5))
    t = _affine_t()
    ident = Tuple((i64(1), i64(0)))
    for left, z in ((True, ident), (False, ident), (True, None), (False, None)):
        r = run(prog([arr(t, 2)], lambda x, left=left, z=z: Scan(compose(), z, x, left)),
                (a, b))
        for i in range(2):
            elems = [(a[i, j], b[i, j]) for j in range(5)]
            if left:
                acc = [(1, 0)] if z is not None else [elems[0]]
                for e in (elems if z is not None else elems[1:]):
                    acc.append(py_compose(acc[-1], e))
            else:
                acc = [(1, 0)] if z is not None else [elems[-1]]
                for e in reversed(elems if z is not None else elems[:-1]):
                    acc.insert(0, py_compose(e, acc[0]))
            assert list(zip(r[0][i], r[1][i])) == acc


# --------------------------------------------------------------------------- permute


def _hist_prog(comb, nbins, keep_fn=None):
    def body(d, s):
        def f(i):
            tgt = Tuple((P("mod", Index(s, i), i64(nbins)),))
            keep = Const(True, bool_) if keep_fn is None else keep_fn(i, s)
            return Tuple((keep, tgt))
        return Permute(comb, d, lam((shape_type(1),), f),
                       Map(lam((int64,), lambda v: P("mul", v, i64(10))), s))
    return prog([arr(int64, 1), arr(int64, 1)], body)


def test_permute_add_collisions():
    src = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], dtype=np.int64)
    d = np.full(4, 100, dtype=np.int64)
    r = run(_hist_prog(add_lam(int64), 4), d, src)
    ref = d.copy()
    for v in src:
        ref[v % 4] += 10 * v
    np.testing.assert_array_equal(r, ref)


@pytest.mark.parametrize("op,pyop", [("max", max), ("min", min)])
def test_permute_max_min(op, pyop):
    src = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], dtype=np.int64)
    d = np.array([0, 50, 1000, -7], dtype=np.int64)
    r = run(_hist_prog(lam((int64, int64), lambda u, v: P(op, u, v)), 4), d, src)
    ref = d.copy()
    for v in src:
        ref[v % 4] = pyop(10 * v, ref[v % 4])
    np.testing.assert_array_equal(r, ref)


def test_permute_noncommutative_comb_in_source_order():
    src = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 8, 8], dtype=np.int64)
    d = np.array([1, 2, 3, 4], dtype=np.int64)
    comb = lam((int64, int64), lambda new, old: P("add", P("mul", old, i64(7)), new))
    r = run(_hist_prog(comb, 4), d, src)
    ref = d.copy()
    for v in src:
        ref[v % 4] = ref[v % 4] * 7 + 10 * v
    np.testing.assert_array_equal(r, ref)


def test_permute_ignore_and_oob():
    src = np.array([3, 1, 4, 1, 5, 9, 2, 6], dtype=np.int64)
    d = np.zeros(3, dtype=np.int64)

    def keep_even(i, s):
        return P("eq", P("mod", Index(s, i), i64(2)), i64(0))

    # targets v % 4 may be 3 (out of bounds for 3 bins): only for odd v, which are ignored
    r = run(_hist_prog(add_lam(int64), 4, keep_even), d, src)
    ref = d.copy()
    for v in src:
        if v % 2 == 0:
            ref[v % 4] += 10 * v
    np.testing.assert_array_equal(r, ref)
    with pytest.raises(OutOfBoundsError, match=r"\(3,\)"):
        run(_hist_prog(add_lam(int64), 4), d, src)


def test_permute_negative_target_raises():
    src = np.array([-1, 2], dtype=np.int64)
    p = prog([arr(int64, 1), arr(int64, 1)], lambda d, s: Permute(
        add_lam(int64), d, lam((shape_type(1),), lambda i: Tuple((
            Const(True, bool_), Tuple((Index(s, i),))))), s))
    with pytest.raises(OutOfBoundsError):
        run(p, np.zeros(3, dtype=np.int64), src)


def test_permute_tuple_elements_general_rounds():
    # rank-2 source into rank-1 target, tuple elements, non-commutative comb
    rng = np.random.default_rng(4)
    a, b = rng.integers(-3, 4, size=(3, 4)), rng.integers(-3, 4, size=(3, 4))
    t = _affine_t()

    def body(d, s):
        f = lam((shape_type(2),), lambda i: Tuple((
            P("ne", Prj(1, i), i64(2)), Tuple((P("mod", P("add", Prj(0, i), Prj(1, i)),
                                                      i64(2)),)))))
        return Permute(compose(), d, f, s)
    p = prog([arr(t, 1), arr(t, 2)], body)
    da, db = np.ones(2, dtype=np.int64), np.zeros(2, dtype=np.int64)
    r = run(p, (da, db), (a, b))
    ref = [(1, 0), (1, 0)]
    for i in range(3):
        for j in range(4):
            if j != 2:
                k = (i + j) % 2
                ref[k] = py_compose((a[i, j], b[i, j]), ref[k])  # comb(new, old)
    assert list(zip(r[0], r[1])) == ref


def test_permute_rank0_target():
    x = np.arange(5.0)
    p = prog([arr(float64, 1)], lambda s: Permute(
        ADD, Unit(f64(0.5)), lam((shape_type(1),), lambda i: Tuple((Const(True, bool_),
                                                                      Tuple(())))), s))
    r = run(p, x)
    assert r.shape == () and r == 10.5


# --------------------------------------------------------------------------- gathers, shapes


def test_backpermute_transpose_and_oob():
    x = np.arange(12).reshape(3, 4)
    p = prog([arr(int64, 2)], lambda a: Backpermute(
        Tuple((Prj(1, Shape(a)), Prj(0, Shape(a)))),
        lam((shape_type(2),), lambda i: Tuple((Prj(1, i), Prj(0, i)))), a))
    np.testing.assert_array_equal(run(p, x), x.T)
    bad = prog([arr(int64, 2)], lambda a: Backpermute(
        sh(4, 4), lam((shape_type(2),), lambda i: Tuple((Prj(1, i), Prj(0, i)))), a))
    with pytest.raises(OutOfBoundsError, match=r"\(3, 4\)"):
        run(bad, x)


def test_reshape():
    x = np.arange(12.0).reshape(3, 4)
    r = run(prog([arr(float64, 2)], lambda a: Reshape(sh(2, 3, 2), a)), x)
    np.testing.assert_array_equal(r, x.reshape(2, 3, 2))
    with pytest.raises(ShapeError, match=r"\(3, 4\).*\(5, 2\)"):
        run(prog([arr(float64, 2)], lambda a: Reshape(sh(5, 2), a)), x)
    with pytest.raises(ShapeError):
        run(prog([arr(float64, 2)], lambda a: Reshape(sh(-3, -4), a)), x)


def test_negative_shapes():
    with pytest.raises(ShapeError):
        run(prog([], lambda: Generate(sh(2, -1), lam((shape_type(2),), lambda i: f64(0.0)))))
    with pytest.raises(ShapeError):
        run(prog([arr(float64, 1)], lambda a: Replicate((i64(-2), None), a)), np.ones(3))
    with pytest.raises(ShapeError):
        run(prog([arr(float64, 1)], lambda a: Backpermute(
            sh(-1), lam((shape_type(1),), lambda i: i), a)), np.ones(3))


def test_generate_ranks():
    r0 = run(prog([], lambda: Generate(sh(), lam((shape_type(0),), lambda i: f64(2.5)))))
    assert isinstance(r0, np.ndarray) and r0.shape == () and r0 == 2.5
    r3 = run(prog([], lambda: Generate(sh(2, 3, 4), lam((shape_type(3),), lambda i: P(
        "add", P("mul", Prj(0, i), i64(100)), P("add", P("mul", Prj(1, i), i64(10)),
                                                 Prj(2, i)))))))
    ii, jj, kk = np.indices((2, 3, 4))
    np.testing.assert_array_equal(r3, 100 * ii + 10 * jj + kk)
    re = run(prog([], lambda: Generate(sh(0, 3), lam((shape_type(2),), lambda i: f64(1.0)))))
    assert re.shape == (0, 3) and re.dtype == np.float64


def test_replicate():
    x = np.arange(4.0)
    r = run(prog([arr(float64, 1)], lambda a: Replicate((i64(2), None, i64(3)), a)), x)
    np.testing.assert_array_equal(r, np.broadcast_to(x[None, :, None], (2, 4, 3)))
    y = np.arange(6).reshape(2, 3)
    r = run(prog([arr(int64, 2)], lambda a: Replicate((None, i64(0), None), a)), y)
    assert r.shape == (2, 0, 3)
    r = run(prog([arr(int64, 0)], lambda a: Replicate((i64(3),), a)), np.array(7))
    np.testing.assert_array_equal(r, [7, 7, 7])


def test_slice():
    x = np.arange(24).reshape(2, 3, 4)
    r = run(prog([arr(int64, 3)], lambda a: Slice(a, (None, i64(1), None))), x)
    np.testing.assert_array_equal(r, x[:, 1, :])
    r = run(prog([arr(int64, 3)], lambda a: Slice(a, (i64(1), i64(2), i64(3)))), x)
    assert r.shape == () and r == x[1, 2, 3]
    for bad in (-1, 3):
        with pytest.raises(OutOfBoundsError):
            run(prog([arr(int64, 3)], lambda a, bad=bad: Slice(a, (None, i64(bad), None))), x)


# --------------------------------------------------------------------------- control flow


def test_acond_only_taken_branch():
    x = np.arange(3.0)

    def body(a, c):
        oob = Backpermute(sh(3), lam((shape_type(1),), lambda i: Tuple((
            P("add", ix1(i), i64(100)),))), a)
        return Acond(Index(c, sh()), a, oob)
    p = prog([arr(float64, 1), arr(bool_, 0)], body)
    np.testing.assert_array_equal(run(p, x, np.array(True)), x)
    with pytest.raises(OutOfBoundsError):
        run(p, x, np.array(False))


def test_awhile_doubles_until_large():
    x = np.array([1.0, 2.0, 3.0])
    t = arr(float64, 1)

    def cond(s):
        tot = Avar(fresh("tot"), arr(float64, 0))
        return Alet(tot, Fold(ADD, f64(0.0), s), Unit(P("lt", Index(tot, sh()), f64(100.0))))
    p = prog([t], lambda a: Awhile(
        alam(t, cond),
        alam(t, lambda s: Map(lam((float64,), lambda v: P("mul", v, f64(2.0))), s)), a))
    r = run(p, x)
    ref = x.copy()
    while ref.sum() < 100:
        ref = ref * 2
    np.testing.assert_array_equal(r, ref)
    # zero iterations
    np.testing.assert_array_equal(run(p, x * 100), x * 100)


def test_cond_untaken_lanes_not_evaluated():
    a = np.array([10.0, 20.0, 30.0])
    p = prog([arr(float64, 1)], lambda v: Generate(sh(8), lam((shape_type(1),), lambda i: Cond(
        P("lt", ix1(i), Prj(0, Shape(v))), Index(v, i),
        Cond(P("gt", ix1(i), i64(5)), f64(-1.0), Index(v, sh(P("sub", ix1(i), i64(3)))))))))
    r = run(p, a)
    np.testing.assert_array_equal(r, [10, 20, 30, 10, 20, 30, -1, -1])


def test_cond_tuple_branches():
    p = prog([], lambda: Generate(sh(5), lam((shape_type(1),), lambda i: Cond(
        P("eq", P("mod", ix1(i), i64(2)), i64(0)),
        Tuple((ix1(i), f64(1.0))), Tuple((P("neg", ix1(i)), f64(2.0)))))))
    r0, r1 = run(p)
    np.testing.assert_array_equal(r0, [0, -1, 2, -3, 4])
    np.testing.assert_array_equal(r1, [1, 2, 1, 2, 1])


def test_while_per_lane_trip_counts():
    # Collatz: (n, steps) -> count steps to reach 1 for n = 1..N; bound uses the outer lane
    t = TupleT((int64, int64))

    def f(i):
        n0 = P("add", ix1(i), i64(1))
        cond = lam((t,), lambda s: P("ne", Prj(0, s), i64(1)))
        body = lam((t,), lambda s: Tuple((
            Cond(P("eq", P("mod", Prj(0, s), i64(2)), i64(0)),
                 P("floordiv", Prj(0, s), i64(2)),
                 P("add", P("mul", Prj(0, s), i64(3)), i64(1))),
            P("add", Prj(1, s), i64(1)))))
        return Prj(1, While(cond, body, Tuple((n0, i64(0)))))
    r = run(prog([], lambda: Generate(sh(30), lam((shape_type(1),), f))))
    ref = []
    for n in range(1, 31):
        k = 0
        while n != 1:
            n = n // 2 if n % 2 == 0 else 3 * n + 1
            k += 1
        ref.append(k)
    np.testing.assert_array_equal(r, ref)


def test_while_uses_outer_variables_and_guarded_index():
    # per lane i: sum a[j] for j < i, with the loop reading the array a and the outer i
    a = np.array([1.0, 2.0, 4.0, 8.0])
    t = TupleT((int64, float64))

    def f(v, i):
        cond = lam((t,), lambda s: P("lt", Prj(0, s), ix1(i)))
        body = lam((t,), lambda s: Tuple((P("add", Prj(0, s), i64(1)),
                                          P("add", Prj(1, s), Index(v, sh(Prj(0, s)))))))
        return Prj(1, While(cond, body, Tuple((i64(0), f64(0.0)))))
    r = run(prog([arr(float64, 1)], lambda v: Generate(
        Shape(v), lam((shape_type(1),), lambda i: f(v, i)))), a)
    np.testing.assert_array_equal(r, [0, 1, 3, 7])


@pytest.mark.parametrize("k", [-1, 3, 100])
def test_index_out_of_bounds(k):
    a = np.array([1.0, 2.0, 3.0])
    p = prog([arr(float64, 1)], lambda v: Generate(sh(2), lam((shape_type(1),), lambda i: Index(
        v, sh(P("add", ix1(i), i64(k)))))))
    with pytest.raises(OutOfBoundsError, match=r"\(3,\)") as e:
        run(p, a)
    assert isinstance(e.value, IndexError)
    assert str(k) in str(e.value)


def test_index_rank0_and_rank2():
    a = np.arange(6.0).reshape(2, 3)
    p = prog([arr(float64, 2), arr(float64, 0)], lambda v, s: Generate(
        sh(3), lam((shape_type(1),), lambda i: P("add", Index(v, Tuple((i64(1), ix1(i)))),
                                                  Index(s, sh())))))
    np.testing.assert_array_equal(run(p, a, np.array(0.5)), a[1] + 0.5)


# --------------------------------------------------------------------------- values and lets


def test_tuple_arrays_and_array_tuples():
    x = np.arange(4.0)
    t = TupleT((float64, TupleT((int64, bool_))))

    def body(a):
        m = Map(lam((float64,), lambda v: Tuple((P("mul", v, v), Tuple((
            P("to_int64", v), P("gt", v, f64(1.0))))))), a)
        b = Avar(fresh("b"), arr(t, 1))
        back = Map(lam((t,), lambda e: P("add", Prj(0, e), P("to_float64", Prj(0, Prj(1, e))))),
                   b)
        return Alet(b, m, ATuple((b, APrj(1, ATuple((a, back))), Unit(f64(3.0)))))
    r = run(prog([arr(float64, 1)], body), x)
    assert isinstance(r, tuple) and len(r) == 3
    sq, (ints, flags) = r[0]
    np.testing.assert_array_equal(sq, x * x)
    np.testing.assert_array_equal(ints, [0, 1, 2, 3])
    np.testing.assert_array_equal(flags, x > 1)
    np.testing.assert_array_equal(r[1], x * x + x)
    assert r[2].shape == () and r[2] == 3.0


def test_use_and_outputs_do_not_alias():
    c = np.arange(3.0)
    u = Use(c)
    p = prog([arr(float64, 1)], lambda a: ATuple((u, a, Map(lam((float64,), lambda v: v), a))))
    x = np.array([5.0, 6.0])
    r = run(p, x)
    for out in r:
        out[...] = -1
    np.testing.assert_array_equal(run(p, x)[0], c)
    np.testing.assert_array_equal(x, [5.0, 6.0])


def test_inputs_not_mutated():
    d = np.zeros(3)
    s = np.array([1.0, 2.0, 3.0])
    p = prog([arr(float64, 1)] * 2, lambda dd, ss: Permute(ADD, dd, lam(
        (shape_type(1),),
        lambda i: Tuple((Const(True, bool_), Tuple((P("mod", ix1(i), i64(2)),))))), ss))
    r = run(p, d, s)
    np.testing.assert_array_equal(r, [4.0, 2.0, 0.0])
    np.testing.assert_array_equal(d, 0.0)
    np.testing.assert_array_equal(s, [1.0, 2.0, 3.0])
    assert not np.shares_memory(r, d)


def test_deep_alet_and_let_chains():
    n = 5000
    a0 = Avar(fresh("a"), arr(float64, 1))
    body = None
    vs = [a0]
    for _ in range(n):
        vs.append(Avar(fresh("a"), arr(float64, 1)))
    body = vs[-1]
    for k in range(n, 0, -1):
        body = Alet(vs[k], Map(lam((float64,), lambda v: P("add", v, f64(1.0))), vs[k - 1]), body)
    p = Program((a0,), body)
    np.testing.assert_array_equal(run(p, np.zeros(2)), [n, n])

    xs = [Var(fresh("x"), float64) for _ in range(n + 1)]
    e = xs[-1]
    for k in range(n, 0, -1):
        e = Let(xs[k], P("add", xs[k - 1], f64(1.0)), e)
    p = prog([arr(float64, 1)], lambda a: Map(Lam((xs[0],), e), a))
    np.testing.assert_array_equal(run(p, np.array([0.0, 1.0])), [n, n + 1])


def test_let_scoping_and_shadowing():
    x = Var(fresh("x"), int64)
    y = Var(fresh("y"), int64)
    # let y = x + 1 in (let y = y * 10 in y) + y   (same name rebound: inner shadows)
    e = Let(y, P("add", x, i64(1)), P("add", Let(y, P("mul", y, i64(10)), y), y))
    p = prog([arr(int64, 1)], lambda a: Map(Lam((x,), e), a))
    np.testing.assert_array_equal(run(p, np.array([0, 1])), [11, 22])


def test_input_checks():
    p = prog([arr(float64, 2)], lambda a: a)
    with pytest.raises(ShapeError):
        run(p, np.zeros(3))
    with pytest.raises(ShapeError):
        evaluate(p, [])
    r = run(prog([arr(float32, 1)], lambda a: a), np.arange(3.0))
    assert r.dtype == np.float32


def test_runner_and_backend():
    p = prog([arr(float64, 1)], lambda a: Fold(ADD, f64(0.0), a))
    assert make_runner(p)([np.arange(4.0)]) == 6.0
    assert InterpreterBackend().compile(p)([np.arange(5.0)]) == 10.0


# --------------------------------------------------------------------------- hypothesis


shapes = st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple)


@settings(deadline=None, max_examples=60)
@given(shapes, st.integers(0, 2**31 - 1))
def test_hyp_fold_scan_general_vs_loops(shape, seed):
    x = np.random.default_rng(seed).integers(-5, 6, size=shape)
    f = lam((int64, int64), lambda u, v: P("sub", P("mul", i64(2), u), v))
    pf = prog([arr(int64, len(shape))], lambda a: Fold(f, i64(1), a))
    r = run(pf, x)
    ref = np.ones(shape[:-1], dtype=np.int64)
    for j in range(shape[-1]):
        ref = 2 * ref - x[..., j]
    np.testing.assert_array_equal(r, ref)
    x2 = x.reshape(int(np.prod(shape[:-1])), shape[-1])
    refs = _scans_ref(x2, lambda u, v: 2 * u - v, 1)
    for p, ref in zip(_scan_progs(f, i64(1), int64, len(shape)), refs):
        out = run(p, x)
        np.testing.assert_array_equal(out.reshape(ref.shape), ref)
        assert out.shape == shape[:-1] + ref.shape[-1:]


@settings(deadline=None, max_examples=60)
@given(shapes, shapes, st.integers(0, 2**31 - 1))
def test_hyp_zip_with_and_sum(s1, s2, seed):
    r = min(len(s1), len(s2))
    s1, s2 = s1[:r], s2[:r]
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=s1), rng.normal(size=s2)
    p = prog([arr(float64, r)] * 2, lambda a, b: ZipWith(
        lam((float64, float64), lambda u, v: P("sub", u, P("mul", v, f64(2.0)))), a, b))
    cut = tuple(slice(0, min(p_, q)) for p_, q in zip(s1, s2))
    np.testing.assert_array_equal(run(p, x, y), x[cut] - 2 * y[cut])
    ps = prog([arr(float64, r)], lambda a: Fold(ADD, f64(0.0), a))
    ref = np.zeros(s1[:-1])
    for j in range(s1[-1]):
        ref = ref + x[..., j]
    np.testing.assert_array_equal(run(ps, x), ref)


@settings(deadline=None, max_examples=60)
@given(st.lists(st.integers(-3, 12), max_size=30), st.integers(0, 6),
       st.sampled_from(["add", "max", "general"]))
def test_hyp_permute_vs_loop(targets, nbins, kind):
    src = np.array(targets, dtype=np.int64).reshape(-1)
    d = np.arange(nbins, dtype=np.int64) * 3
    if kind == "general":
        comb = lam((int64, int64), lambda new, old: P("sub", P("mul", old, i64(2)), new))

        def pyc(new, old):
            return 2 * old - new
    else:
        comb = lam((int64, int64), lambda new, old, k=kind: P(k, old, new))
        pyc = {"add": np.add, "max": max}[kind]

    def body(dd, ss):
        f = lam((shape_type(1),), lambda i: Tuple((
            P("ge", Index(ss, i), i64(0)), Tuple((Index(ss, i),)))))
        return Permute(comb, dd, f, ss)
    p = prog([arr(int64, 1)] * 2, body)
    ref = d.copy()
    oob = False
    for v in src:
        if v >= 0:
            if v >= nbins:
                oob = True
                break
            ref[v] = pyc(v, ref[v])
    if oob:
        with pytest.raises(OutOfBoundsError):
            run(p, d, src)
    else:
        np.testing.assert_array_equal(run(p, d, src), ref)


def test_permute_float_add_exact_source_order():
    rng = np.random.default_rng(5)
    src, tg = rng.normal(size=500), rng.integers(0, 7, size=500)

    def body(d, s, t):
        f = lam((shape_type(1),), lambda i: Tuple((Const(True, bool_), Tuple((Index(t, i),)))))
        return Permute(ADD, d, f, s)
    r = run(prog([arr(float64, 1), arr(float64, 1), arr(int64, 1)], body), np.zeros(7), src, tg)
    ref = np.zeros(7)
    for v, k in zip(src, tg):
        ref[k] = v + ref[k]
    np.testing.assert_array_equal(r, ref)


def test_deeply_nested_expression():
    x = Var(fresh("x"), float64)
    e = x
    for _ in range(3000):
        e = P("add", e, f64(1.0))
    p = prog([arr(float64, 1)], lambda a: Map(Lam((x,), e), a))
    np.testing.assert_array_equal(run(p, np.zeros(2)), [3000.0, 3000.0])
