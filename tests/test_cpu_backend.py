"""The numba CPU backend on hand-built kernel programs, against the NumPy kernel evaluator.

Every distinct kernel costs a numba compilation (0.3-2 s cold), so the programs here
are curated: one kernel exercises every primitive, each step kind appears in a few
shapes, and sizes vary without recompiling (kernels are compiled once per program
and reused for any size).  All tests share one fresh ``ACCEL_CACHE_DIR``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest

_CACHE = tempfile.mkdtemp(prefix="accel-cpu-test-")
os.environ["ACCEL_CACHE_DIR"] = _CACHE

import accel as A  # noqa: E402
from accel.ast import nodes as N  # noqa: E402
from accel.ast.types import (ATupleT, TupleT, bool_, float32, float64, int32,  # noqa: E402
                             int64, shape_type)
from accel.errors import OutOfBoundsError, ShapeError  # noqa: E402
from accel.fusion.kernels import (KAcond, KAwhile, KBlock, KernelProgram, KFold,  # noqa: E402
                                  KGenerate, KPermute, KScan, KUse)
from accel.backends.fused import evaluate  # noqa: E402
from accel.backends.cpu import codegen, fold, permute, prepare_kernels, scan  # noqa: E402
from accel.backends.cpu.runtime import POOL_MIN_BYTES  # noqa: E402
from accel.backends.numba import cache  # noqa: E402
from kernel_builders import (P, at, av, dim, f64, i64, ix_lam, kprog, lam, sh,  # noqa: E402
                             unary_prog)

# --------------------------------------------------------------------------- builders


def both(kp, args, check_bounds=False, runner=None):
    """Run on the CPU backend and on the NumPy evaluator; return (cpu, reference)."""
    runner = runner or prepare_kernels(kp, check_bounds)
    copies = [tuple(np.copy(c) for c in a) if isinstance(a, tuple) else np.copy(a)
              for a in args]
    got = runner(args)
    for a, c in zip(args, copies):  # the caller's arrays are never mutated
        for x, y in zip(a if isinstance(a, tuple) else (a,), c if isinstance(c, tuple) else (c,)):
            np.testing.assert_array_equal(x, y)
    return got, evaluate(kp, args)


def assert_same(got, want, rtol=0.0, atol=0.0):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w, rtol, atol)
        return
    assert isinstance(got, np.ndarray), type(got)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape,
                                                                 got.dtype, want.dtype)
    if rtol or atol:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def compose_t():
    return TupleT((int64, int64, int64, int64))


def matmul2():
    """2x2 integer matrix product on 4-tuples: associative, not commutative (wraps mod 2^64)."""
    def body(a, b):
        A = [N.Prj(k, a) for k in range(4)]
        B = [N.Prj(k, b) for k in range(4)]

        def dot(x, y, u, v):
            return P("add", P("mul", x, y), P("mul", u, v))
        return N.Tuple((dot(A[0], B[0], A[1], B[2]), dot(A[0], B[1], A[1], B[3]),
                        dot(A[2], B[0], A[3], B[2]), dot(A[2], B[1], A[3], B[3])))
    return lam((compose_t(), compose_t()), body)


def mats(n, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.integers(-3, 4, n).astype(np.int64) for _ in range(4))


# --------------------------------------------------------------------------- primitives

_F = np.array([0.0, -0.0, 1.5, -2.5, 0.5, 2.5, 3.7, -3.7, np.inf, -np.inf, np.nan, 7.0, -1.0,
               1e300, 2.0, -0.5])
_I = np.array([0, 1, -1, 7, -7, 3, -3, 2**62, -2**63, 5, -5, 2, 11, -1, 0, 4], dtype=np.int64)
_J = np.array([3, -2, 0, 2, 2, -3, -3, 3, -1, 0, 1, -1, -4, 63, 5, 2], dtype=np.int64)


_GROUPS = ("float64", "float32", "int", "other")


def _prims_kernel(group):
    """A KGenerate over a group of primitives (every primitive is in some group)."""
    xs, ys = av(float64, 1, "x"), av(float64, 1, "y")
    fs = av(float32, 1, "f")
    ks, js = av(int64, 1, "k"), av(int64, 1, "j")
    hs = av(int32, 1, "h")

    def body(i):
        x, y, f = at(xs, i), at(ys, i), at(fs, i)
        k, j = at(ks, i), at(js, i)
        h = at(hs, i)
        g = P("to_float32", y)
        hj = P("to_int32", j)
        b = P("lt", x, y)
        c = P("gt", k, j)
        out = []
        floats = {"float64": (x, y), "float32": (f, g)}
        if group in floats:
            u, v = floats[group]
            for op in ["add", "sub", "mul", "div", "floordiv", "mod", "pow", "max", "min",
                       "atan2"]:
                out.append(P(op, u, v))
            for op in ["neg", "abs", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
                       "tanh", "exp", "expm1", "log", "log1p", "sqrt", "floor", "ceil", "round",
                       "truncate"]:
                out.append(P(op, u))
        elif group == "int":
            for op in ["add", "sub", "mul", "floordiv", "mod", "pow", "max", "min", "and", "or",
                       "xor"]:
                out += [P(op, k, j), P(op, h, hj)]
            out += [P("not", k), P("not", h), P("neg", k), P("neg", h), P("abs", k),
                    P("abs", h)]
        else:
            for op in ["lt", "le", "gt", "ge", "eq", "ne"]:
                out += [P(op, x, y), P(op, k, j), P(op, b, c)]
            out += [P("and", b, c), P("or", b, c), P("xor", b, c), P("not", b)]
            for src in (x, f, k, h, b):
                out += [P("to_" + t, src)
                        for t in ("float32", "float64", "int32", "int64", "bool")]
        return N.Tuple(tuple(out))

    f = ix_lam(1, body)
    outs = tuple(av(t, 1, "o") for t in f.type.items)
    step = KGenerate(outs, sh(dim(xs, 0)), f)
    return kprog((xs, ys, fs, ks, js, hs), [step], outs)


@pytest.mark.parametrize("group", _GROUPS)
def test_every_primitive_matches_numpy_semantics(group):
    kp = _prims_kernel(group)
    x, y = _F, _F[::-1].copy()
    with np.errstate(all="ignore"):
        args = [x, y, x.astype(np.float32), _I, _J, _I.astype(np.int32)]
    got, want = both(kp, args)
    assert len(got) == len(want) >= 20
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype, k
        if g.dtype.kind == "f":
            # transcendental functions may differ by an ulp between numba's libm and NumPy
            tol = 2e-6 if g.dtype == np.float32 else 1e-14
            np.testing.assert_allclose(g, w, rtol=tol, atol=0, equal_nan=True,
                                       err_msg=f"output {k}")
            # but the IEEE specials (inf, nan, signed zeros) are the same
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"output {k}")
            np.testing.assert_array_equal(np.isinf(g), np.isinf(w), err_msg=f"output {k}")
            zero = (w == 0)
            np.testing.assert_array_equal(np.signbit(g[zero]), np.signbit(w[zero]),
                                          err_msg=f"output {k}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {k}")


def test_prim_groups_cover_every_primitive():
    from accel.ast.prims import PRIMS
    seen = set()
    for g in _GROUPS:
        kp = _prims_kernel(g)
        (step,) = kp.body.steps
        stack = [step.f.body]
        while stack:
            e = stack.pop()
            if isinstance(e, N.PrimApp):
                seen.add(e.op)
            stack.extend(c for c in getattr(e, "items", ()) + getattr(e, "args", ())
                         if isinstance(c, N.Exp))
    assert seen == set(PRIMS)


def test_ieee_specials_inf_nan():
    """1/0 = inf, 0/0 = nan, sqrt(-1) = nan, log(0) = -inf: no exceptions (error_model=numpy)."""
    xs = av(float64, 1, "x")
    f = ix_lam(1, lambda i: N.Tuple((P("div", f64(1.0), at(xs, i)),
                                     P("sqrt", at(xs, i)), P("log", at(xs, i)))))
    outs = tuple(av(float64, 1) for _ in range(3))
    kp = kprog((xs,), [KGenerate(outs, sh(dim(xs, 0)), f)], outs)
    x = np.array([0.0, -0.0, -1.0, 4.0])
    got, want = both(kp, [x])
    assert_same(got, want)
    assert got[0][0] == np.inf and got[0][1] == -np.inf and np.isnan(got[1][2])
    assert got[2][0] == -np.inf


# --------------------------------------------------------------------------- generate


def test_generate_rank2_tuple_elements_and_several_outputs():
    a = av(TupleT((float64, int32)), 2, "p")  # an array of pairs (struct of arrays)
    o1 = av(TupleT((int32, float64)), 2, "o")
    o2 = av(float32, 2, "o")

    def body(i, j):
        e = at(a, i, j)
        swapped = N.Tuple((P("add", N.Prj(1, e), N.Const(1, int32)),
                           P("mul", N.Prj(0, e), P("to_float64", P("add", i, j)))))
        return N.Tuple((swapped, P("to_float32", N.Prj(0, e))))
    kp = kprog((a,), [KGenerate((o1, o2), sh(dim(a, 0), dim(a, 1)), ix_lam(2, body))], (o1, o2))
    for shape in [(3, 4), (1, 7), (0, 5), (5, 0), (70, 600)]:  # tiles of 32 x 256
        x = (np.arange(np.prod(shape), dtype=np.float64).reshape(shape) * 0.5,
             np.arange(np.prod(shape), dtype=np.int32).reshape(shape))
        got, want = both(kp, [x])
        assert_same(got, want)
        assert isinstance(got[0], tuple) and got[0][0].shape == shape


def test_rank0_result_is_0d_array_and_nested_result_tuple():
    a = av(float64, 1, "x")
    s = av(float64, 0, "s")
    c = av(int64, 0, "c")
    step = KGenerate((s, c), sh(), ix_lam(0, lambda: N.Tuple((at(a, 2), dim(a, 0)))))
    kp = KernelProgram((a,), KBlock((step,), (s, c, a)),
                       ATupleT((s.type, ATupleT((c.type, a.type)))))
    x = np.arange(5.0)
    got, want = both(kp, [x])
    assert_same(got, want)
    assert got[0].shape == () and isinstance(got[0], np.ndarray)
    assert got[1][1] is not x and not np.shares_memory(got[1][1], x)


def test_cond_and_while_inside_kernels():
    """Collatz step counts (scalar While), Cond only evaluating the taken branch."""
    a = av(int64, 1, "n")
    st = TupleT((int64, int64))

    def body(i):
        n = at(a, i)
        loop = N.While(lam((st,), lambda s: P("gt", N.Prj(0, s), i64(1))),
                       lam((st,), lambda s: N.Tuple((
                           N.Cond(P("eq", P("mod", N.Prj(0, s), i64(2)), i64(0)),
                                  P("floordiv", N.Prj(0, s), i64(2)),
                                  P("add", P("mul", N.Prj(0, s), i64(3)), i64(1))),
                           P("add", N.Prj(1, s), i64(1))))),
                       N.Tuple((n, i64(0))))
        # the untaken branch reads out of bounds: never evaluated, never reported
        safe = N.Cond(P("lt", i, dim(a, 0)), at(a, i), at(a, P("add", i, i64(1000))))
        return P("add", N.Prj(1, loop), P("mul", safe, i64(0)))
    o = av(int64, 1)
    kp = kprog((a,), [KGenerate((o,), sh(dim(a, 0)), ix_lam(1, body))], o)
    x = np.arange(1, 40, dtype=np.int64)
    got, want = both(kp, [x], check_bounds=True)
    assert_same(got, want)
    assert got[26] == 111  # 27 takes 111 steps


def test_deep_else_if_chain():
    """A 120-deep else-if chain (deeper than Python's indentation limit if nested)."""
    a = av(float64, 1, "x")

    def body(i):
        x = N.Var(N.fresh("x"), float64)
        e = f64(-1.0)
        for k in reversed(range(120)):
            e = N.Cond(P("lt", x, f64(k * 0.5)), f64(float(k)), e)
        return N.Let(x, at(a, i), e)
    o = av(float64, 1)
    kp = kprog((a,), [KGenerate((o,), sh(dim(a, 0)), ix_lam(1, body))], o)
    x = np.linspace(-1, 70, 300)
    got, want = both(kp, [x], check_bounds=True)
    assert_same(got, want)


# --------------------------------------------------------------------------- fold


def _fold_prog(rank, f, z, elt):
    a = av(elt, rank, "x")
    o = av(elt, rank - 1, "o")
    outer = sh(*(dim(a, k) for k in range(rank - 1)))
    src = lam((shape_type(rank),), lambda i: N.Index(a, i))
    return kprog((a,), [KFold(o, outer, dim(a, rank - 1), f, z, src)], o)


def test_fold_rows_and_full_reduction_float():
    add = lam((float64, float64), lambda x, y: P("add", x, y))
    kp = _fold_prog(2, add, f64(0.5), float64)
    rng = np.random.default_rng(1)
    for shape in [(3, 5), (200, 3), (2, 100_000), (0, 4), (4, 0)]:
        x = rng.standard_normal(shape)
        got, want = both(kp, [x])
        assert_same(got, want, rtol=1e-12, atol=1e-9)
    kp1 = _fold_prog(1, lam((float64, float64), lambda x, y: P("max", x, y)), None, float64)
    for n in [1, 7, 1_000_001]:
        x = rng.standard_normal(n)
        got, want = both(kp1, [x])
        assert_same(got, want)
    x = rng.standard_normal(50_000)
    x[12345] = np.nan
    assert np.isnan(prepare_kernels(kp1)([x]))
    with pytest.raises(ShapeError):
        prepare_kernels(kp1)([np.zeros(0)])


@pytest.mark.parametrize("op", ["log", "exp"])
@pytest.mark.parametrize("comb", ["add", "mul"])
def test_fold_of_exp_or_log_vectorizes_its_source(op, comb, small_chunks):
    """Phase f: a float sum of a source calling mathlib is one loop of adds LLVM may
    reassociate (``_radd``: it vectorizes with the math); another combination computes
    the source 32 elements at a time, then combines them in order, exactly the
    sequential fold of the same element values.  Lengths around the buffer's and fold1;
    chunked folds and rows as well."""
    f = lam((float64, float64), lambda x, y: P(comb, x, y))
    rng = np.random.default_rng(5)
    for rank, z in ((1, f64(0.25)), (1, None), (2, f64(0.25))):
        a, o = av(float64, rank, "x"), av(float64, rank - 1, "o")
        src = lam((shape_type(rank),), lambda i: P("mul", P(op, N.Index(a, i)), f64(3.0)))
        kp = kprog((a,), [KFold(o, sh(*(dim(a, k) for k in range(rank - 1))),
                                dim(a, rank - 1), f, z, src)], o)
        runner = prepare_kernels(kp)
        f_src = next(t for t in runner.source().split("@nb.njit") if "_f(lo, hi" in t)
        assert f"_{op}(" in f_src
        assert ("_radd(" in f_src) == (comb == "add")
        assert ("np.empty(32" in f_src) == (comb != "add")
        elems = prepare_kernels(unary_prog(op, float64))  # the same mathlib values
        for n in (1, 31, 32, 33, 100, 1000) if rank == 1 else (0, 33, 250):
            shape = (n,) if rank == 1 else (3, n)
            mid = {"exp": -np.log(3.0), "log": np.exp(1 / 3)}[op]  # factors near 1
            x = rng.uniform(0.1, 3.0, shape) if comb == "add" else \
                rng.uniform(mid - 0.005, mid + 0.005, shape)
            got = runner([x])
            vals = elems([x.reshape(-1)]).reshape(shape) * 3.0
            want = []
            for row in vals.reshape(int(np.prod(shape[:-1])), n):
                acc = 0.25 if z is not None else row[0]
                for v in (row if z is not None else row[1:]):
                    acc = acc + v if comb == "add" else acc * v
                want.append(acc)
            if rank == 1 and n < 100 and comb != "add":  # one chunk, in order: exactly
                np.testing.assert_array_equal(got, want[0])
            else:  # reassociated, chunked (small_chunks), or rows in blocks (FMAs)
                np.testing.assert_allclose(got, np.array(want).reshape(shape[:-1]), rtol=1e-14)
            assert_same(got, evaluate(kp, [x]), rtol=1e-13)


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunk long folds/scans and parallel scatters from small sizes (fast references)."""
    monkeypatch.setattr(fold, "FOLD_CHUNK_MIN_N", 100)
    monkeypatch.setattr(scan, "SCAN_CHUNK_MIN_N", 100)
    monkeypatch.setattr(permute, "PERMUTE_PAR_MIN_SRC", 100)


def test_chunked_fold_non_commutative_gives_sequential_result(small_chunks):
    """A long 1-D fold of 2x2 integer matrix products is chunked (64 chunks folded in
    parallel, then combined in order): exact equality with the sequential product."""
    z = N.Tuple((i64(1), i64(2), i64(0), i64(1)))  # not the identity: chunk 0 starts from z
    kp = _fold_prog(1, matmul2(), z, compose_t())
    for n in [0, 5, 99, 100, 129, 1000]:
        x = mats(n, n)
        got, want = both(kp, [x])
        assert_same(got, want)
    x = mats(200_001, 1)  # against a plain sequential loop
    r = prepare_kernels(kp)
    got = r([x])
    assert tuple(int(g) for g in got) == seq_matprod(x, (1, 2, 0, 1))[-1]
    assert r.stats()["launches"] == {"f_parallel": 1, "comb": 1}
    # a few long rows (each chunked) and fold1
    kp2 = _fold_prog(2, matmul2(), None, compose_t())
    x = tuple(c.reshape(3, 400) for c in mats(1200, 7))
    got, want = both(kp2, [x])
    assert_same(got, want)


def _outer_fold_prog(rank, f, z, elt):
    """Fold over the *first* dimension of a rank-``rank`` array ``x``: the result has
    x's other dimensions, and the source reads ``x[j, i0, i1, ...]`` (outer-major)."""
    a = av(elt, rank, "x")
    o = av(elt, rank - 1, "o")
    outer = sh(*(dim(a, k) for k in range(1, rank)))
    src = lam((shape_type(rank),), lambda i: N.Index(a, N.Tuple(
        (N.Prj(rank - 1, i),) + tuple(N.Prj(k, i) for k in range(rank - 1)))))
    return kprog((a,), [KFold(o, outer, dim(a, 0), f, z, src)], o)


def test_interchanged_fold_outer_major_sources(small_parallel):
    """Folds whose source reads the folded index as the first array index run with their
    loops interchanged (tiles of rows, phase ``o``): still each row's elements combined
    in order, so non-commutative folds (2x2 matrix products) are exact, with and without
    a seed, for row counts that are and are not multiples of the tile."""
    add = lam((float64, float64), lambda x, y: P("add", x, y))
    kp = _outer_fold_prog(3, add, f64(0.25), float64)
    r = prepare_kernels(kp)
    assert [p.outer for p in r.gen.plans.values()] == [True]
    rng = np.random.default_rng(3)
    for shape in [(50, 7, 3), (1, 40, 40), (300, 1, 1), (0, 3, 4), (5, 0, 2), (8, 33, 129)]:
        x = rng.standard_normal(shape)
        got, want = both(kp, [x], runner=r)
        assert_same(got, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got, 0.25 + x.sum(axis=0), rtol=1e-12, atol=1e-12)
    assert r.stats()["launches"].get("o_parallel", 0) >= 1
    z = N.Tuple((i64(1), i64(2), i64(0), i64(1)))
    for zz in (z, None):
        kp = _outer_fold_prog(2, matmul2(), zz, compose_t())
        r = prepare_kernels(kp)
        assert [p.outer for p in r.gen.plans.values()] == [True]
        for rows, n in [(1, 9), (700, 30), (257, 2), (5, 1)]:
            x = tuple(c.reshape(n, rows) for c in mats(rows * n, rows))
            got, want = both(kp, [x], runner=r)
            assert_same(got, want)
            for col in (0, rows - 1):
                seq = seq_matprod(tuple(c[:, col] for c in x), (1, 2, 0, 1) if zz else None)
                assert tuple(int(g[col]) for g in got) == seq[-1]


def test_blocks_of_rows_hold_at_most_sixteen_accumulators():
    """A block of rows keeps one accumulator per row and scalar leaf: scalar folds go 16
    rows at a time, pairs 8, 2x2 matrix products (4-tuples) 4; each width still covers
    any row count with the smaller ones down to 1 (the exactness tests run them)."""
    def widths(elt, f, z):
        return fold.block_widths(_outer_fold_prog(2, f, z, elt).body.steps[0])
    add = lam((float64, float64), lambda x, y: P("add", x, y))
    pair = TupleT((float64, float64))
    addp = lam((pair, pair), lambda x, y: N.Tuple(tuple(
        P("add", N.Prj(k, x), N.Prj(k, y)) for k in range(2))))
    assert widths(float64, add, None) == fold.FOLD_WIDTHS == (16, 8, 2, 1)
    assert widths(pair, addp, None) == (8, 2, 1)
    assert widths(compose_t(), matmul2(), None) == (4, 2, 1)


def test_interchanged_fold_of_few_long_rows_is_chunked_exactly(small_chunks, small_parallel):
    """Few long rows of an outer-major fold (AD's sums over all points into a small
    array) fold in chunks of elements (phase ``oc``, every row per task), then each
    row's partials combine in chunk order: 2x2 integer matrix products stay exact."""
    z = N.Tuple((i64(1), i64(2), i64(0), i64(1)))
    for zz in (z, None):
        kp = _outer_fold_prog(2, matmul2(), zz, compose_t())
        r = prepare_kernels(kp)
        for rows, n in [(3, 1000), (17, 130), (40, 64 * 3 + 5), (300, 150)]:
            x = tuple(c.reshape(n, rows) for c in mats(rows * n, rows + n))
            got, want = both(kp, [x], runner=r)
            assert_same(got, want)
            for col in (0, rows - 1):
                seq = seq_matprod(tuple(c[:, col] for c in x), (1, 2, 0, 1) if zz else None)
                assert tuple(int(g[col]) for g in got) == seq[-1]
        launches = r.stats()["launches"]
        assert launches.get("oc_parallel", 0) >= 1 and launches["combc"] == 4


def test_fold_rows_of_rank3_outer_shapes_use_incremental_indices(monkeypatch, small_parallel):
    """Row folds over rank-3 outer shapes (row indices advanced with carries, not
    divisions): every row lands in its place, in parallel chunks and serially, row by
    row (phase ``f``) and in blocks of rows (phase ``b``)."""
    mul = lam((float64, float64), lambda x, y: P("add", P("mul", x, f64(0.5)), y))
    kp = _fold_prog(4, mul, f64(1.0), float64)
    r = prepare_kernels(kp)
    assert [p.outer for p in r.gen.plans.values()] == [False]
    rng = np.random.default_rng(4)
    for shape in [(3, 4, 5, 6), (40, 30, 7, 12), (1, 1, 1, 1), (2, 1, 3, 0), (7, 3, 1, 2)]:
        x = rng.standard_normal(shape)
        got, want = both(kp, [x], runner=r)
        assert_same(got, want, rtol=1e-13, atol=1e-13)
    assert r.stats()["launches"].get("b_parallel", 0) >= 1
    monkeypatch.setattr(fold, "FOLD_BLOCK_MAX_OPS", 0)
    r = prepare_kernels(kp)
    for shape in [(3, 4, 5, 6), (40, 30, 7, 12), (2, 1, 3, 0)]:
        x = rng.standard_normal(shape)
        got, want = both(kp, [x], runner=r)
        assert_same(got, want, rtol=1e-13, atol=1e-13)
    assert r.stats()["launches"].get("f_parallel", 0) >= 1


def test_blocked_row_folds_match_the_sequential_fold_exactly(monkeypatch, small_parallel):
    """Rows folded in blocks (phase ``b``) each still combine their elements in order:
    a non-associative combination gives bit for bit the sequential
    result, for rows in blocks, in leftovers at segment and task ends, with and without
    a seed."""
    f = lam((float64, float64), lambda x, y: P("add", P("mul", x, f64(0.5)), y))
    rng = np.random.default_rng(5)

    def seq(x, z):
        out = np.empty(x.shape[:-1])
        for ix in np.ndindex(*x.shape[:-1]):
            acc = z if z is not None else x[ix][0]
            for v in x[ix][0 if z is not None else 1:]:
                acc = acc * 0.5 + v
            out[ix] = acc
        return out

    for z in (0.75, None):
        kp = _fold_prog(3, f, f64(z) if z is not None else None, float64)
        r = prepare_kernels(kp)
        assert [p.blocked for p in r.gen.plans.values()] == [True]
        for shape in [(5, 19, 4), (3, 8, 9), (2, 40, 1 if z is None else 0), (1, 7, 3),
                      (300, 9, 13)]:
            x = rng.standard_normal(shape)
            got = r([x])
            np.testing.assert_array_equal(got, seq(x, z))
        launches = r.stats()["launches"]
        assert launches.get("b_serial", 0) + launches.get("b_parallel", 0) >= 4
        assert launches.get("b_parallel", 0) >= 1
    monkeypatch.setattr(fold, "FOLD_BLOCK_MAX_OPS", 0)
    assert [p.blocked for p in prepare_kernels(kp).gen.plans.values()] == [False]


def _wrap(v):
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >> 63 else v


def seq_matprod(x, z=None, left=True):
    """All partial products (scan order) of the 2x2 matrices ``x`` with int64 wrap-around."""
    ms = list(zip(*(c.tolist() for c in x)))
    if not left:
        ms = ms[::-1]
    acc = z
    out = []
    for m in ms:
        if acc is None:
            acc = m
        else:
            a, b = (acc, m) if left else (m, acc)
            acc = (_wrap(a[0] * b[0] + a[1] * b[2]), _wrap(a[0] * b[1] + a[1] * b[3]),
                   _wrap(a[2] * b[0] + a[3] * b[2]), _wrap(a[2] * b[1] + a[3] * b[3]))
        out.append(acc)
    return out


# --------------------------------------------------------------------------- scan


def _scan_prog(rank, f, z, left, elt):
    a = av(elt, rank, "x")
    o = av(elt, rank, "o")
    outer = sh(*(dim(a, k) for k in range(rank - 1)))
    src = lam((shape_type(rank),), lambda i: N.Index(a, i))
    return kprog((a,), [KScan(o, outer, dim(a, rank - 1), f, z, src, left)], o)


@pytest.mark.parametrize("left", [True, False])
def test_scans_long_1d_chunked_non_commutative(left, small_chunks, small_parallel):
    """Single-row scans of 2x2 integer matrix products, chunked in three phases from
    n >= 100 here: exact equality with the sequential scan."""
    zv = (2, 1, 1, 1)
    for z in (zv, None):
        zz = None if z is None else N.Tuple(tuple(i64(v) for v in z))
        kp = _scan_prog(1, matmul2(), zz, left, compose_t())
        for n in [0, 1, 6, 100, 131, 700]:
            x = mats(n, n + 1)
            got, want = both(kp, [x])
            assert_same(got, want)
        x = mats(100_003, 3)
        r = prepare_kernels(kp)
        got = r([x])
        assert r.stats()["launches"] == {"t_parallel": 1, "carry": 1, "s_parallel": 1}
        ref = seq_matprod(x, z, left)
        if z is not None:
            ref = [z] + ref
        if not left:
            ref = ref[::-1]
        assert [tuple(int(c[k]) for c in got) for k in (0, 1, 50_000, len(ref) - 1)] == \
            [ref[k] for k in (0, 1, 50_000, len(ref) - 1)]
        np.testing.assert_array_equal(got[2], [r[2] for r in ref])


@pytest.mark.parametrize("left,z", [(True, None), (False, 1.5)])
def test_scans_rows(left, z):
    f = lam((float64, float64), lambda x, y: P("add", P("mul", x, f64(0.5)), y))
    kp = _scan_prog(2, f, None if z is None else f64(z), left, float64)
    rng = np.random.default_rng(3)
    for shape in [(4, 6), (100, 1), (3, 0), (0, 3)]:
        x = rng.standard_normal(shape)
        got, want = both(kp, [x])
        assert_same(got, want, rtol=1e-13, atol=1e-13)


# --------------------------------------------------------------------------- permute


def _permute_prog(comb, elt, tgt_fn, default):
    src = av(elt, 1, "s")
    idx = av(int64, 1, "t")
    n = av(int64, 0, "n")  # the number of targets
    o = av(elt, 1, "o")
    target = ix_lam(1, lambda i: N.Tuple((tgt_fn(at(idx, i)), sh(at(idx, i)))))
    step = KPermute(o, sh(at(n)), ix_lam(1, lambda i: default), sh(dim(src, 0)), target,
                    ix_lam(1, lambda i: at(src, i)), comb)
    return kprog((src, idx, n), [step], o)


def test_permute_add_many_collisions_matches_add_at(small_chunks):
    kp = _permute_prog(lam((float64, float64), lambda x, y: P("add", y, x)), float64,
                       lambda t: P("ge", t, i64(0)), f64(1.0))
    rng = np.random.default_rng(5)
    r = prepare_kernels(kp)
    for n_src, n_tgt in [(10, 4), (1_000_000, 16), (200_000, 50_000), (0, 3), (5, 0),
                         (500, 20)]:
        t = rng.integers(-1, n_tgt, n_src) if n_tgt else -np.ones(n_src, dtype=np.int64)
        v = rng.standard_normal(n_src)
        ref = np.ones(n_tgt)
        np.add.at(ref, t[t >= 0], v[t >= 0])
        got, want = both(kp, [v, t, np.array(n_tgt)], runner=r)
        np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)
        assert_same(got, want, rtol=1e-9, atol=1e-9)
    launches = r.stats()["launches"]
    # private buffers for 1M -> 16 (16 chunks) and 200k -> 50k (8 chunks)
    assert launches["p_parallel"] == 3 and launches["p_serial"] == 2


def test_parallel_scatters_take_as_many_private_buffers_as_pay():
    """Private buffers cost an initialisation and a merge per target: at most two
    scatters' worth of elements (a function of the shapes, so of no thread count)."""
    assert permute.permute_chunks(16, 1_000_000) == permute.PERMUTE_CHUNKS
    assert permute.permute_chunks(50_000, 200_000) == 8
    assert permute.permute_chunks(52_800, 102_400) == 2  # the GMM's lower-triangle gradients
    assert permute.permute_chunks(200_000, 200_000) == 2
    assert permute.permute_chunks(200_001, 200_000) == 0  # two buffers would cost more
    assert permute.permute_chunks(10, permute.PERMUTE_PAR_MIN_SRC - 1) == 0  # too few sources


@pytest.mark.parametrize("check", [False, True])
def test_permute_from_rank3_sources_walks_every_index(small_chunks, check):
    """Scatters of rank-3 sources carry the source's multi-index from element to
    element, from each chunk's first element on: a target made of all three indices (a
    lower-triangle pack, like the GMM's icf gradient, with collisions over the first
    dimension), serial and in parallel chunks that start inside rows."""
    def pack(x):
        d = x.shape[2]
        zeros = A.fill((d * (d + 1) // 2,), 0.0)
        return A.permute(lambda a, b: a + b, zeros,
                         lambda ix: A.cond(ix[2] <= ix[1],
                                           ((ix[1] * (ix[1] + 1)) // 2 + ix[2],), A.ignore),
                         x)

    rng = np.random.default_rng(8)
    prog = A.compile(pack, check_bounds=check)
    for shape in [(3, 4, 4), (7, 13, 13), (37, 11, 11)]:  # the last: 4477 sources
        x = rng.standard_normal(shape)
        rows, cols = np.tril_indices(shape[1])
        np.testing.assert_allclose(prog(x), x[:, rows, cols].sum(axis=0), rtol=1e-12)
    assert prog.stats(x)["launches"].get("p_parallel")


def test_permute_max_int_and_non_recognised_combination():
    kp = _permute_prog(lam((int32, int32), lambda x, y: P("max", x, y)), int32,
                       lambda t: N.Const(True, bool_), N.Const(-5, int32))
    rng = np.random.default_rng(6)
    for n_src in [100, 300_000, 20_000]:
        t = rng.integers(0, 1000, n_src)
        v = rng.integers(-2**31, 2**31 - 1, n_src).astype(np.int32)
        got, want = both(kp, [v, t, np.array(1000)])
        assert_same(got, want)
    pair = TupleT((float64, int64))
    comb = lam((pair, pair), lambda x, y: N.Tuple((P("add", N.Prj(0, x), N.Prj(0, y)),
                                                   P("add", N.Prj(1, x), N.Prj(1, y)))))
    kp2 = _permute_prog(comb, pair, lambda t: P("ne", P("mod", t, i64(3)), i64(0)),
                        N.Tuple((f64(0.0), i64(0))))
    t = rng.integers(0, 10, 1000)
    v = (rng.standard_normal(1000), rng.integers(0, 100, 1000))
    got, want = both(kp2, [v, t, np.array(10)])
    assert_same(got, want, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- bounds


def _gather_prog():
    a = av(float64, 2, "arr")
    idx = av(int64, 1, "ix")
    o = av(float64, 1)
    f = ix_lam(1, lambda i: at(a, at(idx, i), i64(1)))
    return kprog((a, idx), [KGenerate((o,), sh(dim(idx, 0)), f)], o)


def test_check_bounds_raises_out_of_bounds_error():
    kp = _gather_prog()
    r = prepare_kernels(kp, True)
    a = np.arange(12.0).reshape(4, 3)
    np.testing.assert_array_equal(r([a, np.array([3, 0, 2])]), a[[3, 0, 2], 1])
    for bad in ([0, 4], [-1, 2]):  # never wraps around
        with pytest.raises(OutOfBoundsError, match=r"array arr\d+.*shape \(4, 3\)") as e:
            r([a, np.array(bad)])
        assert str(bad[-1] if bad[0] == 0 else bad[0]) in str(e.value)
    assert isinstance(e.value, IndexError)
    r0 = prepare_kernels(kp, False)
    assert "err[0]" not in r0.gen.source and "err[0]" in r.gen.source
    np.testing.assert_array_equal(r0([a, np.array([1, 2])]), a[[1, 2], 1])


def test_check_bounds_permute_target():
    kp = _permute_prog(lam((float64, float64), lambda x, y: P("add", x, y)), float64,
                       lambda t: N.Const(True, bool_), f64(0.0))
    r = prepare_kernels(kp, True)
    with pytest.raises(OutOfBoundsError, match=r"permute.*\(7,\).*\(5,\)"):
        r([np.ones(3), np.array([0, 7, 1]), np.array(5)])
    with pytest.raises(OutOfBoundsError):
        r([np.ones(3), np.array([0, -1, 1]), np.array(5)])
    np.testing.assert_array_equal(r([np.ones(3), np.array([0, 4, 0]), np.array(5)]),
                                  [2, 0, 0, 0, 1])


def test_host_shape_expressions_read_arrays():
    """Shapes are host expressions that may Index manifest arrays (always checked)."""
    a = av(int64, 1, "n")
    o = av(float64, 3)
    f = ix_lam(3, lambda i, j, k: P("to_float64", P("sub", P("mul", i, j), k)))
    kp = kprog((a,), [KGenerate((o,), sh(at(a, 0), P("add", at(a, 1), i64(1)), at(a, 2)),
                                f)], o)
    for dims in ([2, 3, 4], [3, 40, 300], [0, 2, 2], [2, 0, 3]):
        got, want = both(kp, [np.array(dims)])
        assert_same(got, want)
    with pytest.raises(ShapeError):
        prepare_kernels(kp)([np.array([-2, 3, 1])])
    with pytest.raises(OutOfBoundsError):
        prepare_kernels(kp)([np.array([2, 1])])



def test_step_plans_replayed_only_while_what_the_host_read_is_unchanged():
    """A runner replays the last call's step plans for arguments of the same shapes,
    each step whose arrays read by the host have the same shapes and whose elements
    read by the host the same values; other steps are planned anew."""
    a = av(int64, 1, "n")
    x = av(float64, 1, "x")
    m = av(int64, 0)
    o, q = av(float64, 2), av(float64, 1)
    add = lam((int64, int64), lambda p, r: P("add", p, r))
    steps = [
        # m = sum(n): an intermediate whose value is the next step's size
        KFold(m, sh(), dim(a, 0), add, i64(0), lam((shape_type(1),), lambda i: N.Index(a, i))),
        # o[i, j] = x[j] * i, shape (n[0], size x): an input's element read by the host
        KGenerate((o,), sh(at(a, 0), dim(x, 0)),
                  ix_lam(2, lambda i, j: P("mul", at(x, j), P("to_float64", i)))),
        KGenerate((q,), sh(at(m)), ix_lam(1, lambda i: P("to_float64", i))),
    ]
    kp = kprog((a, x), steps, (o, q))
    r = prepare_kernels(kp)

    def check(n, xs, planned):
        before = r.stats()["planned_steps"]
        got, want = r([np.array(n), np.array(xs)]), evaluate(kp, [np.array(n), np.array(xs)])
        assert_same(got, want)
        assert r.stats()["planned_steps"] - before == planned

    check([2, 3], [1.0, 2.0], 3)
    check([2, 3], [4.0, 5.0], 0)  # only x's values changed: nothing the host read
    check([2, 4], [4.0, 5.0], 1)  # m changed: only q's step
    check([3, 3], [4.0, 5.0], 1)  # n[0] changed: only o's step (m is 6 again)
    check([3, 3], [4.0, 5.0, 6.0], 3)  # other argument shapes: all planned ...
    check([3, 3], [4.0, 5.0], 0)  # ... and the earlier shapes' plans still remembered
    check([3, 3, 0], [4.0, 5.0], 3)

    # a shape the host remembered from an earlier step within a call is still read by
    # the later step: both depend on n[0]
    o1, o2 = av(float64, 1), av(float64, 1)
    steps2 = [KGenerate((o1,), sh(at(a, 0)), ix_lam(1, lambda i: at(x, i64(0)))),
              KGenerate((o2,), sh(at(a, 0)), ix_lam(1, lambda i: P("to_float64", i)))]
    kp = kprog((a, x), steps2, (o1, o2))
    r = prepare_kernels(kp)
    check([2], [1.0], 2)
    check([2], [1.0], 0)
    check([5], [1.0], 2)


# --------------------------------------------------------------------------- control flow


def _control_prog():
    """acond on the sum, then awhile doubling until the total exceeds a use'd limit (at
    most 12 times)."""
    x = av(float64, 1, "x")
    lim = av(float64, 0, "lim")
    s = av(float64, 0, "s")
    add = lam((float64, float64), lambda p, q: P("add", p, q))
    src1 = lam((shape_type(1),), lambda i: N.Index(x, i))
    fold = KFold(s, sh(), dim(x, 0), add, f64(0.0), src1)
    # acond: if sum > 0 then x * 2 else x - 1 (as a generate in each branch)
    t_o, e_o = av(float64, 1), av(float64, 1)
    tb = KBlock((KGenerate((t_o,), sh(dim(x, 0)), ix_lam(1, lambda i: P("mul", at(x, i),
                                                                         f64(2.0)))),), (t_o,))
    eb = KBlock((KGenerate((e_o,), sh(dim(x, 0)), ix_lam(1, lambda i: P("sub", at(x, i),
                                                                         f64(1.0)))),), (e_o,))
    y = av(float64, 1, "y")
    acond = KAcond((y,), P("gt", at(s), f64(0.0)), tb, eb)
    # awhile over (array, counter): while sum(arr) < lim: arr = arr * 2 + 1, k = k + 1
    pa, pk = av(float64, 1, "pa"), av(int64, 0, "pk")
    ps, pc = av(float64, 0), av(bool_, 0)
    cond = KBlock((KFold(ps, sh(), dim(pa, 0), add, f64(0.0),
                         lam((shape_type(1),), lambda i: N.Index(pa, i))),
                   KGenerate((pc,), sh(), ix_lam(0, lambda: P("and", P("lt", at(ps), at(lim)),
                                                              P("lt", at(pk), i64(12)))))),
                  (pc,))
    na, nk = av(float64, 1), av(int64, 0)
    body = KBlock((KGenerate((na,), sh(dim(pa, 0)), ix_lam(1, lambda i: P(
        "add", P("mul", at(pa, i), f64(2.0)), f64(1.0)))),
        KGenerate((nk,), sh(), ix_lam(0, lambda: P("add", at(pk), i64(1))))), (na, nk))
    k0 = av(int64, 0)
    fa, fk = av(float64, 1), av(int64, 0)
    steps = [KUse(lim, np.array(1000.0)), fold, acond,
             KGenerate((k0,), sh(), ix_lam(0, lambda: i64(0))),
             KAwhile((fa, fk), (pa, pk), cond, body, (y, k0))]
    return kprog((x,), steps, (fa, fk, lim, s))


def test_acond_awhile_use():
    kp = _control_prog()
    for x in [np.array([1.0, 2.0, 3.0]), np.array([-5.0, 1.0]), np.zeros(0),
              np.array([5000.0])]:
        got, want = both(kp, [x])
        assert_same(got, want)
    r = prepare_kernels(kp)
    a, b = r([np.ones(2)])[2], r([np.ones(2)])[2]
    assert a.shape == () and a == 1000.0 and a is not b  # use'd constants are copied out
    a[...] = 0
    assert r([np.ones(2)])[2] == 1000.0
    assert r.stats()["kernels"] == 8


# --------------------------------------------------------------------------- caching


def test_stats_and_in_memory_cache():
    kp = _gather_prog()
    r1 = prepare_kernels(kp, False)
    r1([np.ones((2, 2)), np.array([1])])
    st = r1.stats()
    assert st["kernels"] == 1 and st["compile_seconds"] >= 0
    r2 = prepare_kernels(_gather_prog(), False)  # same structure, fresh variable names
    assert r2.module is r1.module
    r2([np.ones((2, 2)), np.array([1])])
    assert r2.stats()["compile_seconds"] < 0.05


_SUBPROCESS = """
import sys
sys.path[:0] = [{root!r}, {tests!r}]
import numpy as np
import os
import test_cpu_backend as t  # (sets its own cache directory: use the parent's)
os.environ["ACCEL_CACHE_DIR"] = {cache!r}
from accel.backends.cpu import prepare_kernels
kp = t._fold_prog(2, t.matmul2(), None, t.compose_t())
r = prepare_kernels(kp)
x = tuple(c.reshape(2, 5000) for c in t.mats(10000))  # big enough for the parallel driver
out = r([x])
print(r.stats()["numba_cache_hits"], r.stats()["compiled_functions"], int(out[0][0]))
"""


def test_disk_cache_in_a_new_process():
    kp = _fold_prog(2, matmul2(), None, compose_t())
    x = tuple(c.reshape(2, 5000) for c in mats(10000))
    want = prepare_kernels(kp)([x])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = _SUBPROCESS.format(root=root, tests=os.path.join(root, "tests"), cache=_CACHE)
    env = dict(os.environ, ACCEL_CACHE_DIR=_CACHE)
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    hits, used, v = res.stdout.split()
    assert int(hits) == int(used) == 2  # the range function and the driver, from disk
    assert int(v) == int(want[0][0])


def test_corrupted_cache_file_is_rebuilt():
    kp = _gather_prog()
    r = prepare_kernels(kp, True)
    path = r.stats()["module"]
    cache.clear_memory_cache()
    with open(path, "w") as f:
        f.write("this is not python (")
    r2 = prepare_kernels(kp, True)
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(r2([a, np.array([1, 0])]), [4.0, 1.0])
    with open(path) as f:
        assert f.read() == r2.gen.source
    # corrupted numba cache files (index and data) are flushed and rebuilt too
    pyc = os.path.join(os.path.dirname(path), "__pycache__")
    stem = os.path.basename(path)[:-3]
    corrupted = [f for f in os.listdir(pyc) if f.startswith(stem + ".")]
    assert corrupted
    for f in corrupted:
        with open(os.path.join(pyc, f), "w") as fh:
            fh.write("garbage")
    cache.clear_memory_cache()
    r3 = prepare_kernels(kp, True)
    np.testing.assert_array_equal(r3([a, np.array([1, 0])]), [4.0, 1.0])


def test_generated_source_is_deterministic_and_names_free():
    s1 = codegen.generate(_control_prog().body, True).source
    s2 = codegen.generate(_control_prog().body, True).source
    assert s1 == s2
    assert "parallel=True" not in s1 and 'error_model="numpy"' in s1  # (drivers are shared)
    assert 'fastmath={"contract"}' in s1  # FMA contraction and no other fast-math licence


def test_inputs_are_not_mutated_and_results_do_not_alias():
    a = av(float64, 1, "x")
    kp = KernelProgram((a,), KBlock((), (a, a)), ATupleT((a.type, a.type)))
    x = np.arange(3.0)
    r = prepare_kernels(kp)(([x]))
    assert not np.shares_memory(r[0], x) and not np.shares_memory(r[0], r[1])
    r[0][0] = 99
    assert x[0] == 0 and r[1][0] == 0


def test_intermediate_buffers_are_recycled_but_results_never():
    """The next call reuses the buffers of a call's intermediate arrays (no fresh pages),
    never those of its results: results of an earlier call keep their values."""
    x = av(float64, 1, "x")
    m = av(float64, 1, "m")
    o = av(float64, 1, "o")
    step1 = KGenerate((m,), sh(dim(x, 0)), ix_lam(1, lambda i: P("mul", at(x, i), f64(2.0))))
    step2 = KGenerate((o,), sh(dim(x, 0)), ix_lam(1, lambda i: P("add", at(m, i), f64(1.0))))
    kp = kprog((x,), [step1, step2], (m, o))
    kp_inner = kprog((x,), [step1, step2], o)
    r = prepare_kernels(kp)
    first = r([np.arange(5.0)])
    second = r([np.arange(5.0) + 10])
    np.testing.assert_array_equal(first[0], np.arange(5.0) * 2)  # results: never recycled
    np.testing.assert_array_equal(first[1], np.arange(5.0) * 2 + 1)
    np.testing.assert_array_equal(second[1], (np.arange(5.0) + 10) * 2 + 1)
    assert r._pool.bytes == 0
    r2 = prepare_kernels(kp_inner)
    outs = [r2([np.arange(5.0) + k]) for k in range(3)]
    # m's buffer, waiting for the next call: in the pool, or in the arena of the
    # straight-line driver that runs the later calls
    arenas = [b for d in r2._straight.values() for b in d.arena]
    assert r2._pool.bytes + sum(b.nbytes for b in arenas) == 5 * 8
    assert r2.stats()["straight_line_calls"] == 2
    assert r2.stats()["launches"] == {"g_serial": 6}  # 2 steps, 3 calls (2 replayed)
    r2.release_buffers()  # forgets the replay (its launches stay counted)
    r2([np.arange(5.0)])
    assert r2.stats()["launches"] == {"g_serial": 8}
    for k, out in enumerate(outs):
        np.testing.assert_array_equal(out, (np.arange(5.0) + k) * 2 + 1)
    assert not np.shares_memory(outs[0], outs[1])


def test_compiled_program_with_sizes_read_from_an_argument_replays_correctly():
    """As GMM's point count: a size read from an argument's element.  Calls with the
    same argument shapes replay the plans unless that element changed."""
    import accel as A

    def f(x, c):
        n = A.to_int(c[0])
        ys = A.generate((n, x.shape[0]), lambda ix: x[ix[1]] * A.to_float(ix[0]))
        return A.sum(ys), A.sum(A.transpose(ys))

    prog = A.compile(f, backend="cpu")
    x = np.linspace(1.0, 2.0, 7)
    for n in (3, 3, 5, 5, 0, 3):
        c = np.array([float(n), 0.0])
        got, want = prog(x, c), A.run(f, x, c, backend="interpreter")
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-13)
        assert got[0].shape == (n,)
    (runner,) = [r for _, r in prog._cache.values()]
    before = runner.stats()["planned_steps"]
    prog(x + 1.0, np.array([3.0, 1.0]))  # new values, same sizes: nothing planned
    assert runner.stats()["planned_steps"] == before


def test_host_shapes_remembered_within_a_call_but_not_across_loop_iterations():
    """Shapes are evaluated once per call for arrays that stay bound, but a loop whose
    state grows re-evaluates the shapes of its iterations (and calls see new inputs)."""
    import accel as A

    def f(x):
        def body(s):
            n = A.size(s)
            return A.generate((2 * n,), lambda i: s[i % n] + 1.0)
        r = A.awhile(lambda s: A.unit(A.size(s) < 40), body, x)
        return (A.sum(A.map(lambda v: v * 2.0, r)), A.generate((A.size(r) + 1,), lambda i: 1.0),
                A.generate((A.size(x),), lambda i: 2.0))

    c = A.compile(f, backend="cpu")
    for n in (3, 5, 41):
        x = np.arange(float(n))
        got, want = c(x), A.run(f, x, backend="interpreter")
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        assert got[1].shape == (n * 2 ** max(0, int(np.ceil(np.log2(40 / n)))) + 1,)


def test_result_buffers_are_reused_only_after_the_caller_drops_them():
    """Results are lent: their buffers come back for the next call only when no array
    (not even a view of a slice) of the caller's still uses them."""
    x = av(float64, 1, "x")
    o = av(float64, 1, "o")
    step = KGenerate((o,), sh(dim(x, 0)), ix_lam(1, lambda i: P("mul", at(x, i), f64(3.0))))
    r = prepare_kernels(kprog((x,), [step], o))
    x0 = np.arange(10_000.0)  # buffers below POOL_MIN_BYTES are never pooled
    assert x0.nbytes >= POOL_MIN_BYTES

    def addr(a):
        return a.__array_interface__["data"][0]

    out = r([x0])
    kept = out[10:20]  # a view keeps the buffer lent
    a0 = addr(out)
    del out
    out2 = r([x0 + 1])
    assert addr(out2) != a0
    np.testing.assert_array_equal(kept, x0[10:20] * 3)
    del kept
    out3 = r([x0 + 2])  # now the first buffer is free again
    assert addr(out3) == a0
    np.testing.assert_array_equal(out3, (x0 + 2) * 3)
    np.testing.assert_array_equal(out2, (x0 + 1) * 3)
    small = r([x0[:10]])  # a small result is a fresh allocation, not lent
    assert not any(b is small.base for b in r._pool.lent)
    np.testing.assert_array_equal(small, x0[:10] * 3)


def test_release_buffers_empties_the_pools_of_a_compiled_program():
    import accel as A

    def f(x):
        y = A.map(lambda v: A.exp(v) * 2.0, x)   # read twice: materialised
        return A.zip_with(lambda a, b: a * b, y, A.map(lambda v: v + 1.0, y))

    c = A.compile(f, backend="cpu")
    x = np.linspace(0, 1, 10_000)  # above POOL_MIN_BYTES
    want = c(x)
    (runner,) = [r for _, r in c._cache.values()]
    assert runner._pool.bytes > 0 or runner._pool.lent
    c.release_buffers()
    assert runner._pool.bytes == 0 and not runner._pool.lent
    np.testing.assert_array_equal(c(x), want)
