"""The CUDA backend (numba-cuda) against the reference interpreter and the NumPy kernel
evaluator, on the CUDA simulator when there is no GPU.

``NUMBA_ENABLE_CUDASIM`` must be set before ``numba.cuda`` is imported: tests/conftest.py
sets it for the session when the machine has no NVIDIA GPU, and this module sets it
too (``setdefault``) for when it is run on its own.  The simulator runs every CUDA
thread as a Python thread, so sizes stay small (at most a few hundred elements), launches
use blocks of 8 threads and at most 2 blocks (several rows per block, several elements
per thread: the grid-stride and row loops are exercised), and folds use 8-thread trees.
PTX compilation of a corpus (no simulator, no GPU needed) runs in a subprocess.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

os.environ.setdefault("ACCEL_CACHE_DIR", tempfile.mkdtemp(prefix="accel-cuda-test-"))

import accel as A  # noqa: E402
from accel.ast import nodes as N  # noqa: E402
from accel.ast.types import (ATupleT, TupleT, bool_, float64, int32,  # noqa: E402
                             int64, shape_type)
from accel.errors import OutOfBoundsError, ShapeError  # noqa: E402
from accel.fusion.kernels import (KBlock, KernelProgram, KFold, KGenerate,  # noqa: E402
                                  KPermute, KScan)
from accel.backends.fused import evaluate  # noqa: E402
from accel.backends import cuda as cuda_backend  # noqa: E402
from kernel_builders import P, at, av, dim, f64, i64, ix_lam, kprog, lam, sh  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OK, WHY = cuda_backend.available()
pytestmark = pytest.mark.skipif(not OK, reason=WHY)

BLOCK, MAX_BLOCKS = 8, 2


def prepare(kp, check_bounds=False, block=BLOCK):
    return cuda_backend.prepare_kernels(kp, check_bounds, block_size=block,
                                        max_blocks=MAX_BLOCKS)


# --------------------------------------------------------------------------- frontend


def kernel_program(fn, args):
    from accel.backends.cuda.ptxcheck import kernel_program as kp_of
    return kp_of(fn, args)


def run_cuda(fn, *args, check_bounds=False, block=BLOCK):
    from accel.pipeline import convert_args
    runner = prepare(kernel_program(fn, args), check_bounds, block)
    return runner(convert_args(args)), runner


def flatten(v):
    if isinstance(v, tuple):
        return [x for i in v for x in flatten(i)]
    return [np.asarray(v)]


def assert_matches_interpreter(fn, *args, rtol=1e-9, atol=1e-12, exact=False, block=BLOCK):
    saved = [np.copy(a) for a in args]
    got, runner = run_cuda(fn, *args, block=block)
    want = A.run(fn, *args, backend="interpreter")
    fw, fg = flatten(want), flatten(got)
    assert len(fw) == len(fg)
    for w, g in zip(fw, fg):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if exact or w.dtype.kind not in "fc":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
            np.testing.assert_array_equal(np.isinf(g), np.isinf(w))
    for a, s in zip(args, saved):  # the caller's arrays are never mutated
        np.testing.assert_array_equal(a, s)
    return got, runner


# --------------------------------------------------------------------------- kernel IR


def both(kp, args, check_bounds=False):
    return prepare(kp, check_bounds)(args), evaluate(kp, args)


def assert_same(got, want):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
        return
    assert isinstance(got, np.ndarray)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def compose_t():
    return TupleT((int64, int64, int64, int64))


def matmul2():
    """2x2 integer matrix product on 4-tuples: associative, not commutative."""
    def body(a, b):
        X = [N.Prj(k, a) for k in range(4)]
        Y = [N.Prj(k, b) for k in range(4)]

        def dot(x, y, u, v):
            return P("add", P("mul", x, y), P("mul", u, v))
        return N.Tuple((dot(X[0], Y[0], X[1], Y[2]), dot(X[0], Y[1], X[1], Y[3]),
                        dot(X[2], Y[0], X[3], Y[2]), dot(X[2], Y[1], X[3], Y[3])))
    return lam((compose_t(), compose_t()), body)


def mats(n, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.integers(-2, 3, n).astype(np.int64) for _ in range(4))


def seq_matprod(x, z=None, left=True):
    """Every partial product, in scan order, with int64 wrap-around."""
    def wrap(v):
        v &= (1 << 64) - 1
        return v - (1 << 64) if v >> 63 else v
    ms = list(zip(*(c.tolist() for c in x)))
    if not left:
        ms = ms[::-1]
    acc, out = z, []
    for m in ms:
        if acc is None:
            acc = m
        else:
            a, b = (acc, m) if left else (m, acc)
            acc = (wrap(a[0] * b[0] + a[1] * b[2]), wrap(a[0] * b[1] + a[1] * b[3]),
                   wrap(a[2] * b[0] + a[3] * b[2]), wrap(a[2] * b[1] + a[3] * b[3]))
        out.append(acc)
    return out


# --------------------------------------------------------------------------- corpus


def _parity_corpus():
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    try:
        from test_backend_parity import CORPUS
    finally:
        sys.path.pop(0)
    return CORPUS


CORPUS = _parity_corpus()


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_parity_corpus_matches_interpreter(name):
    fn, args = CORPUS[name]
    assert_matches_interpreter(fn, *args)


def test_extra_corpus_permute_strategies_and_primitives():
    """The programs the PTX check adds: CAS and lock permutes, integer atomics, float32,
    every float primitive (exact on the simulator: NumPy implements both sides)."""
    from accel.backends.cuda.ptxcheck import extra_corpus
    for name, (fn, args) in sorted(extra_corpus().items()):
        got, runner = assert_matches_interpreter(fn, *args, rtol=1e-6, atol=1e-12)
        if name == "x_prims":
            assert len(flatten(got)) == 4


def test_gradients_match_interpreter():
    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, 40)
    m = rng.uniform(-1, 1, (6, 9))
    assert_matches_interpreter(
        A.gradientA(lambda a: A.sum_all(A.map(lambda v: v * A.sin(v), a))), x)
    assert_matches_interpreter(A.gradientA(lambda a: A.sum_all(A.map(
        lambda r: A.log(r), A.sum(A.map(lambda v: A.exp(v), a))))), m)
    assert_matches_interpreter(A.gradientA(lambda a: A.sum_all(A.minimum(
        A.map(lambda v: v * v, a)))), m)


def test_gmm_gradient_matches_interpreter():
    from accel.adbench import gmm
    from accel.adbench import io as aio
    g = aio.read_gmm(os.path.join(ROOT, "adbench", "data", "gmm", "test.txt"))
    args = (g.alphas, g.means, g.icf, g.x, gmm.constants(g.d, g.k, g.n, g.gamma, g.m))
    _, runner = assert_matches_interpreter(gmm.gradient, *args, rtol=1e-9, atol=1e-9)
    st = runner.stats()
    assert st["kernels"] >= 10 and st["launches"] >= st["kernels"] - 2


# --------------------------------------------------------------------------- IEEE


def test_ieee_specials_with_constant_operands():
    """1/0, 0/0, sqrt(-1), log(0) on constants and on data: inf/nan, never an exception
    (the simulator computes on typed NumPy scalars)."""
    xs = av(float64, 1, "x")
    f = ix_lam(1, lambda i: N.Tuple((
        P("div", f64(1.0), f64(0.0)), P("div", f64(0.0), f64(0.0)),
        P("div", f64(1.0), at(xs, i)), P("sqrt", at(xs, i)), P("log", at(xs, i)),
        P("div", f64(1.0), P("mul", f64(2.0), P("sqrt", f64(0.0)))),
        P("floordiv", at(xs, i), f64(0.0)), P("mod", at(xs, i), f64(0.0)),
        P("to_int64", P("div", at(xs, i), f64(0.0))),
        P("to_int32", P("mul", at(xs, i), f64(1e300))),
        P("pow", at(xs, i), f64(-0.5)), P("exp", P("mul", at(xs, i), f64(1e4))))))
    outs = tuple(av(t, 1) for t in f.type.items)
    kp = kprog((xs,), [KGenerate(outs, sh(dim(xs, 0)), f)], outs)
    x = np.array([0.0, -0.0, -1.0, 4.0, np.inf, np.nan, 1e-300])
    got, want = both(kp, [x])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        if g.dtype.kind == "f":
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w))
    assert got[0][0] == np.inf and np.isnan(got[1][0]) and got[2][1] == -np.inf
    assert np.isnan(got[3][2]) and got[4][0] == -np.inf and got[5][0] == np.inf


def test_every_scalar_primitive_on_special_values():
    """Each primitive on float64, float32, int64, int32 and bool, with infinities, NaN,
    signed zeros, int extremes and zero divisors, against the interpreter."""
    fv = np.array([0.0, -0.0, 1.5, -2.5, 0.5, 2.5, 3.7, -3.7, np.inf, -np.inf, np.nan, 7.0,
                   -1.0, 1e300, 2.0, -0.5])
    iv = np.array([0, 1, -1, 7, -7, 3, -3, 2**62, -2**63, 5, -5, 2, 11, -1, 0, 4])
    jv = np.array([3, -2, 0, 2, 2, -3, -3, 3, -1, 0, 1, -1, -4, 63, 5, 2])

    def floats(x, y):
        return tuple(op(x, y) for op in (
            lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a / b,
            lambda a, b: a // b, lambda a, b: a % b, lambda a, b: a ** b, A.max, A.min,
            A.atan2)) + tuple(op(x) for op in (
                lambda a: -a, abs, A.sin, A.cos, A.tan, A.asin, A.acos, A.atan, A.sinh,
                A.cosh, A.tanh, A.exp, A.expm1, A.log, A.log1p, A.sqrt, A.floor, A.ceil,
                A.round, A.truncate, A.to_int, lambda a: A.to_int(a, A.int32)))

    def ints(k, j):
        return tuple(op(k, j) for op in (
            lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, lambda a, b: a // b,
            lambda a, b: a % b, lambda a, b: a ** b, A.max, A.min, lambda a, b: a & b,
            lambda a, b: a | b, lambda a, b: a ^ b)) + (-k, abs(k), ~k, A.to_float(k))

    def prog(f, g, f32, k, j):
        def row(x, y, z, u, v):
            b = x < y
            c = u > v
            return (floats(x, y) + floats(z, z * A.to_float(y, A.float32)) + ints(u, v)
                    + ints(A.to_int(u, A.int32), A.to_int(v, A.int32))
                    + (b & c, b | c, b ^ c, ~b, b == c, x <= y, x >= y, x != y, u == v,
                       A.to_float(b), A.to_int(b), A.to_float(z)))
        return A.generate(f.shape, lambda i: row(f[i], g[i], f32[i], k[i], j[i]))
    with np.errstate(all="ignore"):
        args = (fv, fv[::-1].copy(), fv.astype(np.float32), iv.astype(np.int64),
                jv.astype(np.int64))
        got, _ = assert_matches_interpreter(prog, *args, rtol=2e-6, atol=0)
    assert len(flatten(got)) > 80


# --------------------------------------------------------------------------- steps


def test_generate_rank3_tuples_and_several_outputs():
    a = av(TupleT((float64, int32)), 3, "p")
    o1 = av(TupleT((int32, float64)), 3, "o")
    o2 = av(bool_, 3, "o")

    def body(i, j, k):
        e = at(a, i, j, k)
        return N.Tuple((N.Tuple((P("add", N.Prj(1, e), N.Const(1, int32)),
                                 P("mul", N.Prj(0, e), P("to_float64", P("add", i, k))))),
                        P("lt", N.Prj(0, e), P("to_float64", j))))
    kp = kprog((a,), [KGenerate((o1, o2), sh(dim(a, 0), dim(a, 1), dim(a, 2)),
                                ix_lam(3, body))], (o1, o2))
    for shape in [(2, 3, 5), (1, 1, 1), (0, 4, 2), (3, 7, 11)]:
        n = int(np.prod(shape))
        x = (np.arange(n, dtype=np.float64).reshape(shape) * 0.25,
             np.arange(n, dtype=np.int32).reshape(shape))
        got, want = both(kp, [x])
        assert_same(got, want)


def _fold_prog(rank, f, z, elt):
    a = av(elt, rank, "x")
    o = av(elt, rank - 1, "o")
    outer = sh(*(dim(a, k) for k in range(rank - 1)))
    src = lam((shape_type(rank),), lambda i: N.Index(a, i))
    return kprog((a,), [KFold(o, outer, dim(a, rank - 1), f, z, src)], o)


def test_fold_non_commutative_is_the_sequential_product():
    """2x2 integer matrix products (associative, not commutative): each of the 8 threads
    folds a contiguous chunk, then an in-order tree; empty chunks (n < 8) are skipped.
    Exact equality with the sequential product, with and without z."""
    z = (1, 2, 0, 1)
    zz = N.Tuple(tuple(i64(v) for v in z))
    kp_z = _fold_prog(1, matmul2(), zz, compose_t())
    kp_1 = _fold_prog(1, matmul2(), None, compose_t())
    r_z, r_1 = prepare(kp_z), prepare(kp_1)
    for n in [0, 1, 3, 5, 8, 13, 37, 200]:
        x = mats(n, n)
        got = r_z([x])
        assert tuple(int(c) for c in got) == (seq_matprod(x, z)[-1] if n else z)
        if n:
            assert tuple(int(c) for c in r_1([x])) == seq_matprod(x)[-1]
    with pytest.raises(ShapeError):
        r_1([mats(0)])
    # rows (several per block), against the evaluator
    kp2 = _fold_prog(2, matmul2(), None, compose_t())
    x = tuple(c.reshape(7, 6) for c in mats(42, 9))
    got, want = both(kp2, [x])
    assert_same(got, want)


def test_fold_block_sizes_and_float_rows():
    add = lam((float64, float64), lambda x, y: P("add", x, y))
    kp = _fold_prog(2, add, f64(0.5), float64)
    rng = np.random.default_rng(1)
    for block in (1, 3, 8, 32):
        r = prepare(kp, block=block)
        for shape in [(3, 5), (5, 40), (0, 4), (4, 0)]:
            x = rng.standard_normal(shape)
            np.testing.assert_allclose(r([x]), x.sum(axis=1) + 0.5, rtol=1e-12, atol=1e-12)
    mx = _fold_prog(1, lam((float64, float64), lambda x, y: P("max", x, y)), None, float64)
    x = rng.standard_normal(50)
    x[17] = np.nan
    assert np.isnan(prepare(mx)([x]))


@pytest.mark.parametrize("left", [True, False])
def test_scans_non_commutative(left):
    zv = (2, 1, 1, 1)
    for z in (zv, None):
        zz = None if z is None else N.Tuple(tuple(i64(v) for v in z))
        a = av(compose_t(), 2, "x")
        o = av(compose_t(), 2, "o")
        src = lam((shape_type(2),), lambda i: N.Index(a, i))
        kp = kprog((a,), [KScan(o, sh(dim(a, 0)), dim(a, 1), matmul2(), zz, src, left)], o)
        for rows, n in [(3, 7), (1, 0), (5, 1), (2, 19)]:
            x = tuple(c.reshape(rows, n) for c in mats(rows * n, n))
            got, want = both(kp, [x])
            assert_same(got, want)
            if rows and n:
                ref = seq_matprod(tuple(c[0] for c in x), z, left)
                ref = ([z] if z is not None else []) + ref
                ref = ref if left else ref[::-1]
                assert [tuple(int(c[0, k]) for c in got) for k in range(len(ref))] == ref


def _permute_prog(comb, elt, default, keep=None):
    src = av(elt, 1, "s")
    idx = av(int64, 1, "t")
    n = av(int64, 0, "n")
    o = av(elt, 1, "o")
    keep = keep or (lambda t: P("ge", t, i64(0)))
    target = ix_lam(1, lambda i: N.Tuple((keep(at(idx, i)), sh(at(idx, i)))))
    step = KPermute(o, sh(at(n)), ix_lam(1, lambda i: default), sh(dim(src, 0)), target,
                    ix_lam(1, lambda i: at(src, i)), comb)
    return kprog((src, idx, n), [step], o)


def _mode(kp):
    from accel.backends.cuda.codegen import permute_mode
    return permute_mode(kp.body.steps[0])


def test_permute_collisions_atomics_cas_and_locks():
    rng = np.random.default_rng(5)
    n_src, n_tgt = 200, 7
    t = rng.integers(-1, n_tgt, n_src)
    ints = rng.integers(-1000, 1000, n_src)
    halves = rng.integers(-8, 8, n_src) * 0.5  # exact sums in any order

    # + on float64 (atomic add; -0.0 defaults survive only where nothing lands)
    kp = _permute_prog(lam((float64, float64), lambda x, y: P("add", y, x)), float64,
                       f64(-0.0))
    assert _mode(kp) == "atomic_add"
    got, want = both(kp, [halves, t, np.array(n_tgt + 2)])
    assert_same(got, want)
    assert np.signbit(got[-1])

    # + on int32 and max on int64 (atomics)
    kp = _permute_prog(lam((int32, int32), lambda x, y: P("add", x, y)), int32,
                       N.Const(3, int32))
    got, want = both(kp, [ints.astype(np.int32), t, np.array(n_tgt)])
    assert_same(got, want)
    kp = _permute_prog(lam((int64, int64), lambda x, y: P("max", x, y)), int64, i64(-5000))
    assert _mode(kp) == "atomic_max"
    got, want = both(kp, [ints, t, np.array(n_tgt)])
    assert_same(got, want)

    # max on float64 with NaN (CAS on the bit pattern: NaN propagates like NumPy)
    kp = _permute_prog(lam((float64, float64), lambda x, y: P("max", x, y)), float64,
                       f64(-np.inf))
    assert _mode(kp) == "cas"
    h = halves.copy()
    h[np.flatnonzero(t == 2)[:1]] = np.nan
    got, want = both(kp, [h, t, np.array(n_tgt)])
    assert_same(got, want)
    assert np.isnan(got[2]) and not np.isnan(got[3])

    # a combination nobody recognises: new + old + 1 (associative and commutative)
    comb = lam((float64, float64), lambda x, y: P("add", P("add", x, y), f64(1.0)))
    kp = _permute_prog(comb, float64, f64(0.0))
    assert _mode(kp) == "cas"
    got, want = both(kp, [halves, t, np.array(n_tgt)])
    assert_same(got, want)
    counts = np.bincount(t[t >= 0], minlength=n_tgt)
    np.testing.assert_array_equal(got, np.bincount(t[t >= 0], halves[t >= 0], n_tgt) + counts)

    # products on int64 (CAS on the value)
    kp = _permute_prog(lam((int64, int64), lambda x, y: P("mul", x, y)), int64, i64(1))
    got, want = both(kp, [np.where(ints % 3 == 0, -1, 1), t, np.array(n_tgt)])
    assert_same(got, want)

    # tuples and bools: per-target locks
    pair = TupleT((float64, int64))
    comb = lam((pair, pair), lambda x, y: N.Tuple((P("add", N.Prj(0, x), N.Prj(0, y)),
                                                   P("max", N.Prj(1, x), N.Prj(1, y)))))
    kp = _permute_prog(comb, pair, N.Tuple((f64(0.0), i64(-1))))
    assert _mode(kp) == "lock"
    got, want = both(kp, [(halves, ints), t, np.array(n_tgt)])
    assert_same(got, want)
    kp = _permute_prog(lam((bool_, bool_), lambda x, y: P("or", x, y)), bool_,
                       N.Const(False, bool_))
    assert _mode(kp) == "lock"
    got, want = both(kp, [ints > 900, t, np.array(n_tgt)])
    assert_same(got, want)


# --------------------------------------------------------------------------- bounds


def _gather_prog():
    a = av(float64, 2, "arr")
    idx = av(int64, 1, "ix")
    o = av(float64, 1)
    f = ix_lam(1, lambda i: P("div", f64(1.0), at(a, at(idx, i), i64(1))))
    return kprog((a, idx), [KGenerate((o,), sh(dim(idx, 0)), f)], o)


def test_check_bounds_raises_out_of_bounds_error():
    kp = _gather_prog()
    r = prepare(kp, True)
    a = np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(r([a, np.array([3, 0, 2])]), 1.0 / a[[3, 0, 2], 1])
    for bad, shown in (([0, 4, 1], "4"), ([-1, 2], "-1")):  # never wraps around
        with pytest.raises(OutOfBoundsError, match=r"array arr\d+.*shape \(4, 3\)") as e:
            r([a, np.array(bad)])
        assert f"({shown}, 1)" in str(e.value)
    assert isinstance(e.value, IndexError)
    np.testing.assert_array_equal(r([a, np.array([1])]), [0.25])  # usable afterwards
    r0 = prepare(kp, False)
    assert "err[1]" not in r0.gen.source and "err[1]" in r.gen.source


def test_check_bounds_permute_target_and_frontend():
    kp = _permute_prog(lam((float64, float64), lambda x, y: P("add", x, y)), float64,
                       f64(0.0), keep=lambda t: N.Const(True, bool_))
    r = prepare(kp, True)
    with pytest.raises(OutOfBoundsError, match=r"permute.*\(7,\).*\(5,\)"):
        r([np.ones(3), np.array([0, 7, 1]), np.array(5)])
    with pytest.raises(OutOfBoundsError):
        r([np.ones(3), np.array([0, -1, 1]), np.array(5)])
    np.testing.assert_array_equal(r([np.ones(3), np.array([0, 4, 0]), np.array(5)]),
                                  [2, 0, 0, 0, 1])
    with pytest.raises(OutOfBoundsError):
        run_cuda(lambda a, ix: A.map(lambda i: a[i], ix), np.arange(4.0), np.array([1, 4]),
                 check_bounds=True)


# --------------------------------------------------------------------------- host side


def test_host_shapes_read_device_arrays_and_results_do_not_alias():
    a = av(int64, 1, "n")
    o = av(float64, 2)
    f = ix_lam(2, lambda i, j: P("to_float64", P("sub", i, j)))
    kp = kprog((a,), [KGenerate((o,), sh(at(a, 0), P("add", at(a, 1), i64(1))), f)], o)
    got, want = both(kp, [np.array([2, 3])])
    assert_same(got, want)
    with pytest.raises(ShapeError):
        prepare(kp)([np.array([-2, 3])])
    with pytest.raises(OutOfBoundsError):
        prepare(kp)([np.array([2])])
    x = av(float64, 1, "x")
    kp2 = KernelProgram((x,), KBlock((), (x, x)), ATupleT((x.type, x.type)))
    v = np.arange(3.0)
    r = prepare(kp2)([v])
    assert not np.shares_memory(r[0], v) and not np.shares_memory(r[0], r[1])


def test_acond_awhile_stay_on_device_and_stats():
    fn, args = CORPUS["acond_awhile"]
    got, runner = assert_matches_interpreter(fn, *args)
    st = runner.stats()
    assert st["launches"] > st["kernels"] >= 3  # the loop body ran several times
    assert st["block_size"] == BLOCK and st["max_blocks"] == MAX_BLOCKS
    src = runner.source()
    assert "@cuda.jit(cache=True)" in src and "shfl" not in src
    # a negative sum takes the other branch
    assert_matches_interpreter(fn, -np.abs(args[0]))


def test_stats_via_a_compile_with_registered_backend():
    from accel.pipeline import BACKENDS
    if "cuda" not in BACKENDS:
        pytest.skip("the cuda backend is not registered in accel.pipeline yet")
    c = A.compile(lambda a: A.sum(A.map(lambda v: v * 2.0, a)), backend="cuda")
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_allclose(c(x), (x * 2).sum(axis=1))
    assert c.stats(x)["kernels"] == 1


# --------------------------------------------------------------------------- availability


def _python(code, env_changes):
    env = dict(os.environ)
    for k, v in env_changes.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300, cwd=ROOT)


_UNAVAILABLE = """
import accel as A
from accel.errors import BackendError
from accel.backends.cuda import prepare_kernels
from accel.backends.cuda.ptxcheck import kernel_program
kp = kernel_program(lambda a: A.map(lambda v: v + 1.0, a), (__import__("numpy").ones(3),))
try:
    prepare_kernels(kp, False)
except BackendError as e:
    print("BackendError:", e)
else:
    print("available")
"""


def test_backend_error_without_gpu_or_simulator_or_numba_cuda():
    res = _python(_UNAVAILABLE, {"NUMBA_ENABLE_CUDASIM": None})
    assert res.returncode == 0, res.stderr
    if "available" == res.stdout.strip():
        pytest.skip("this machine has a GPU")
    assert "no CUDA GPU" in res.stdout and "NUMBA_ENABLE_CUDASIM" in res.stdout
    res = _python("import sys; sys.modules['numba_cuda'] = None\n" + _UNAVAILABLE, {})
    assert res.returncode == 0, res.stderr
    assert "numba-cuda is not installed" in res.stdout


def test_every_kernel_compiles_to_ptx_for_cc90():
    """The parity corpus, the extra programs and the GMM and BA gradient programs compile
    to PTX for compute capability 9.0 (``python -m accel.backends.cuda.ptxcheck`` also does the
    bounds-checked variants).  Runs in a subprocess without the simulator."""
    env = {"NUMBA_ENABLE_CUDASIM": None}
    res = _python("import sys; from accel.backends.cuda.ptxcheck import main; "
                  "sys.exit(main(['--quick', '--adbench', '--quiet']))", env)
    if res.returncode == 3:
        pytest.skip("cuda.compile_ptx is unavailable: " + res.stderr.strip()[-300:])
    assert res.returncode == 0, res.stdout + res.stderr
    n = int(res.stdout.strip().split()[0])
    assert n >= 30, res.stdout
