"""Element loops of the cpu backend: the vectorizable ``exp``, ``log`` and ``tanh``
(``mathlib``) and the tiles of rank >= 2 generates."""

from __future__ import annotations

import inspect
import platform
import re

import numpy as np
import pytest

import accel as A
from accel.ast import nodes as N
from accel.ast.types import float32, float64
from accel.fusion.kernels import KGenerate
from accel.backends.fused import evaluate
from accel.backends.cpu import prepare_kernels
from kernel_builders import (P, at, av, dim, f64, ix_lam, kernel_asm, kprog, sh,
                             unary_prog)


def _exp_arguments():
    rng = np.random.default_rng(7)
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-300, -1e-300, 5e-324,
             709.78, 709.7827128933839, 709.79, 709.8, 710.0, 1e308,
             -708.39, -708.4, -720.0, -744.44, -745.1332, -745.134, -745.2, -746.0, -1e308]
    # n ln2 +- half a step: where the range reduction switches n
    steps = np.arange(-1070, 1022) * np.log(2.0)
    return np.concatenate([edges, rng.uniform(-760, 720, 20000), rng.normal(0, 4, 20000),
                           steps, steps + 0.5 * np.log(2.0),
                           np.nextafter(steps + 0.5 * np.log(2.0), np.inf)])


def _ulps(got, want):
    """|got - want| in units of the last place of ``want`` (finite, nonzero want)."""
    return np.abs(got - want) / np.spacing(np.abs(want))


def test_exp_is_within_an_ulp_of_numpy_with_the_same_specials():
    x = _exp_arguments()
    got = prepare_kernels(unary_prog("exp", float64))([x])
    with np.errstate(over="ignore"):
        want = np.exp(x)
    finite = np.isfinite(want) & (want != 0)
    assert _ulps(got[finite], want[finite]).max() <= 1.0
    # overflow, underflow to zero, inf, nan and exact 1 at +-0 are NumPy's
    np.testing.assert_array_equal(got[~finite], want[~finite])
    assert got[0] == got[1] == 1.0
    # subnormal results round once (two half scalings), as NumPy's
    sub = finite & (want < np.finfo(np.float64).tiny)
    assert sub.sum() > 100 and _ulps(got[sub], want[sub]).max() <= 1.0


def test_exp_float32_rounds_the_float64_result():
    x = _exp_arguments()
    x = x[np.abs(x) < 120].astype(np.float32)
    got = prepare_kernels(unary_prog("exp", float32))([x])
    assert got.dtype == np.float32
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)  # correctly rounded, almost
    finite = np.isfinite(want) & (want != 0)
    assert _ulps(got[finite], want[finite]).max() <= 1.0
    np.testing.assert_array_equal(got[~finite], want[~finite])


def _log_arguments():
    rng = np.random.default_rng(3)
    tiny = np.finfo(np.float64).tiny
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, -5e-324, 5e-324, 1e-310, tiny,
             np.nextafter(tiny, 0), 1.0, 2.0, 0.5, np.nextafter(1.0, 0), np.nextafter(1.0, 2),
             np.sqrt(2.0), np.nextafter(np.sqrt(2.0), 2), np.nextafter(np.sqrt(2.0), 0),
             np.finfo(np.float64).max]
    return np.concatenate([edges, np.exp(rng.uniform(-745, 709, 20000)),
                           rng.uniform(0.5, 2, 20000), 1 + rng.normal(0, 1e-6, 5000),
                           rng.uniform(0, 1e-300, 1000), 2.0 ** np.arange(-1074, 1024)])


def test_log_is_within_an_ulp_with_the_same_specials():
    x = _log_arguments()
    got = prepare_kernels(unary_prog("log", float64))([x])
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.log(x)
        exact = np.log(x.astype(np.longdouble))  # 11 more bits (x86), NaN where NumPy's
    finite = np.isfinite(want) & (want != 0)
    assert _ulps(got[finite], want[finite]).max() <= 1.0
    err = np.abs(got[finite].astype(np.longdouble) - exact[finite]) / np.spacing(
        np.abs(want[finite]))
    if np.finfo(np.longdouble).nmant > 52:
        assert float(err.max()) < 0.85  # measured 0.80 (fdlibm's bound: < 1)
    np.testing.assert_array_equal(got[~finite], want[~finite])  # 0, <0, inf, NaN, log 1
    assert got[11] == 0.0 and not np.signbit(got[11])
    k = np.arange(-1074, 1024)  # log 2^k = k ln2_hi (exact) + k ln2_lo, rounded once
    np.testing.assert_array_equal(got[-k.size:], want[-k.size:])


def test_log_float32_rounds_the_float64_result():
    x = _log_arguments()
    x = x[(x > 1e-37) & (x < 1e37)].astype(np.float32)
    got = prepare_kernels(unary_prog("log", float32))([x])
    assert got.dtype == np.float32
    want = np.log(x.astype(np.float64)).astype(np.float32)
    finite = np.isfinite(want) & (want != 0)
    assert _ulps(got[finite], want[finite]).max() <= 1.0
    np.testing.assert_array_equal(got[~finite], want[~finite])


def _tanh_arguments():
    rng = np.random.default_rng(11)
    edges = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1e-300, 1e-16, 19.0,
             19.06, 20.0, 20.5, 30.0, -30.0, 1e308, -1e308]
    # n ln2 / 2 +- a little: where the range reduction of 2|x| switches n
    steps = np.arange(1, 60) * np.log(2.0) / 2
    mags = [rng.normal(0, s, 20000) for s in (1e-12, 1e-6, 1e-3, 0.1, 0.5, 1, 3, 10)]
    return np.concatenate([edges, *mags, steps, np.nextafter(steps, 0), -steps])


def test_tanh_is_within_a_few_ulps_with_the_same_specials():
    x = _tanh_arguments()
    got = prepare_kernels(unary_prog("tanh", float64))([x])
    want = np.tanh(x)
    finite = np.isfinite(x) & (want != 0)
    exact = np.tanh(x.astype(np.longdouble))
    err = np.abs(got[finite].astype(np.longdouble) - exact[finite]) / np.spacing(
        np.abs(want[finite]))
    if np.finfo(np.longdouble).nmant > 52:
        assert float(err.max()) < 2.5  # measured 2.26 (NumPy's libm: 1.19)
    assert _ulps(got[finite], want[finite]).max() <= 4.0
    np.testing.assert_array_equal(got[~finite], want[~finite])  # +-0, +-inf, NaN
    assert np.signbit(got[1]) and not np.signbit(got[0])
    assert np.all(np.abs(got[np.isfinite(x)]) <= 1.0)


def test_tanh_float32_rounds_the_float64_result():
    x = _tanh_arguments()
    x = x[~(np.abs(x) > 1e30)].astype(np.float32)
    got = prepare_kernels(unary_prog("tanh", float32))([x])
    assert got.dtype == np.float32
    want = np.tanh(x.astype(np.float64)).astype(np.float32)
    finite = np.isfinite(want) & (want != 0)
    assert _ulps(got[finite], want[finite]).max() <= 1.0
    np.testing.assert_array_equal(got[~finite], want[~finite])


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly")
@pytest.mark.parametrize("op", ["exp", "log", "tanh"])
def test_exp_and_log_loops_compile_to_vector_code_without_libm_calls(op):
    """Guards the point of ``mathlib``: with numba's ``np.exp``, ``np.log`` or ``np.tanh``
    (a libm call per element) such a loop is never vectorized."""
    runner = prepare_kernels(unary_prog(op, float64))
    x = np.linspace(0.5, 5, 1000)
    runner([x])
    py, asm = kernel_asm(runner, r"k\d+_g")
    assert f"_{op}(" in inspect.getsource(py) and f"np.{op}" not in inspect.getsource(py)
    packed_fma = len(re.findall(r"\bvfmadd\d+pd\s[^\n]*%[xyz]mm", asm))
    assert packed_fma >= 6, f"{op} loop not vectorized ({packed_fma} packed FMAs)"
    assert not re.search(rf"\bcall[q]?\s[^\n]*\b{op}\b", asm)


# --------------------------------------------------------------------------- tiles


def _transposing_generate(rank):
    """out[..., i, j] = (a[..., j, i] * 2, a[..., j, i] + i): a gather across the last two
    dimensions, two outputs."""
    a = av(float64, rank, "a")
    o1, o2 = av(float64, rank, "o"), av(float64, rank, "o")

    def body(*ix):
        v = at(a, *ix[:-2], ix[-1], ix[-2])
        return N.Tuple((P("mul", v, f64(2.0)), P("add", v, P("to_float64", ix[-2]))))

    shape = sh(*[dim(a, d) for d in range(rank - 2)], dim(a, rank - 1), dim(a, rank - 2))
    return kprog((a,), [KGenerate((o1, o2), shape, ix_lam(rank, body))], (o1, o2))


@pytest.mark.parametrize("shape, phase", [
    ((3, 9, 1), "s_serial"), ((3, 9, 2), "s_serial"), ((4, 0, 2), None), ((1, 1, 1), "s_serial"),
    ((7000, 5, 2), "s_parallel"), ((40, 300, 5, 2), "s_parallel"),  # a slice is one tile: phase s
    ((2, 3, 40, 7), "g_serial"), ((2, 3, 70, 300), "g_parallel")])  # several tiles: phase g
def test_rank3_and_rank4_generates_in_tiles_match_the_reference(shape, phase, small_parallel):
    """Short rows (a tile per outer index), several tiles both ways, outer multi-indices
    (rank 4), and parallel chunks starting mid-way through the outer dimensions."""
    kp = _transposing_generate(len(shape))
    a = np.random.default_rng(1).standard_normal(shape[:-2] + (shape[-1], shape[-2]))
    runner = prepare_kernels(kp)
    got = runner([a])
    for g, w in zip(got, evaluate(kp, [a])):
        np.testing.assert_array_equal(g, w)
    if phase is not None:
        assert runner.stats()["launches"].get(phase), runner.stats()["launches"]


# -- index-set splitting (``branches.index_branch``)

_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}


def _branchy(op, flipped, shift):
    """``o[i] = if i OP size(h) + shift then tanh(w[i] * h[min i (size h - 1)]) else
    w[i] * 0.5``, the comparison written either way round: a branch on the element
    index against a size, as reverse mode writes for adjoints over another domain."""
    w, h, o = av(float64, 1, "w"), av(float64, 1, "h"), av(float64, 1, "o")

    def body(i):
        e = P("add", dim(h, 0), N.Const(shift, dim(h, 0).type))
        test = P({"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}[op], e, i) if flipped \
            else P(op, i, e)
        j = P("min", i, P("sub", dim(h, 0), N.Const(1, dim(h, 0).type)))
        return N.Cond(test, P("tanh", P("mul", at(w, i), at(h, j))),
                      P("mul", at(w, i), f64(0.5)))
    return kprog((w, h), [KGenerate((o,), sh(dim(w, 0)), ix_lam(1, body))], o)


@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge"])
@pytest.mark.parametrize("flipped", [False, True])
def test_branch_on_the_index_splits_the_element_loop(op, flipped, small_parallel):
    """The loop is split where the branch changes (the generated source has no branch on
    the index left), for split points before, inside and after the range, in serial and
    parallel chunks (chunk bounds inside either part)."""
    kp = _branchy(op, flipped, -2)
    r = prepare_kernels(kp)
    src = r.source()
    assert re.search(r"range\(lo, m\d+\)", src), src
    rng = np.random.default_rng(7)
    for n, m in [(10, 5), (10, 1), (10, 40), (0, 3), (70001, 33333), (70001, 90000)]:
        w, h = rng.standard_normal(n), rng.standard_normal(m)
        i = np.arange(n)
        hj = h[np.minimum(i, m - 1)] if m else np.zeros(n)
        want = np.where(_COMPARE[op](i, m - 2), np.tanh(w * hj), w * 0.5)
        got = r([w, h])
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-15)
        np.testing.assert_allclose(got, evaluate(kp, [w, h]), rtol=1e-15, atol=1e-15)
    assert r.stats()["launches"].get("g_parallel", 0) >= 1


def test_a_branch_on_an_element_is_not_split():
    """``i < x[0]`` reads an element: evaluated before the loop, it could read what the
    branch guards (here: nothing when the loop is empty), so the loop is not split."""
    x, o = av(float64, 1, "x"), av(float64, 1, "o")
    f = ix_lam(1, lambda i: N.Cond(P("lt", P("to_float64", i), at(x, 0)), at(x, i), f64(0.0)))
    kp = kprog((x,), [KGenerate((o,), sh(dim(x, 0)), f)], o)
    r = prepare_kernels(kp)
    assert not re.search(r"range\(lo, m\d+\)", r.source())
    x = np.array([2.5, 1.0, 7.0, 3.0])
    np.testing.assert_array_equal(r([x]), np.where(np.arange(4) < 2.5, x, 0.0))


def _tape_bounded(nested: bool):
    """``o[r, c] = let b = n[t[0] - 1] in if (r < size w.0) & (c < min (size w.1) b) then
    tanh w[r, c] else -1``: a branch on the column against an element read at a position
    that does not depend on the index, through a ``let`` (as reverse mode reads a loop
    state's shape back from its tape at step ``t - 1``); ``nested``: the branch sits in
    another branch, on an element (``w[r, c] < 1.5``), so its test is made only for
    some indices."""
    w, n, t = av(float64, 2, "w"), av(N.int64, 1, "n"), av(N.int64, 1, "t")
    o = av(float64, 2, "o")

    def body(r, c):
        b = N.Var(N.fresh("b"), N.int64)
        test = P("and", P("lt", r, dim(w, 0)), P("lt", c, P("min", dim(w, 1), b)))
        inner = N.Cond(test, P("tanh", at(w, r, c)), f64(-1.0))
        if nested:
            inner = N.Cond(P("lt", at(w, r, c), f64(1.5)), inner, f64(2.0))
        return N.Let(b, N.Index(n, sh(P("sub", at(t, 0), N.Const(1, N.int64)))), inner)
    return kprog((w, n, t), [KGenerate((o,), N.Shape(w), ix_lam(2, body))], o)


@pytest.mark.parametrize("nested", [False, True])
def test_a_column_branch_on_an_invariant_element_read_splits_the_column_loop(nested):
    """Tiles of a rank-2 generate split their column loop at such a bound (an always-made
    test only: inside another branch it is not split), for bounds before, inside and
    after the columns and across tiles (300 columns: two tiles of 256), with the element
    read only when there are elements (an empty ``w`` with empty ``n``, bounds checked)."""
    kp = _tape_bounded(nested)
    r = prepare_kernels(kp, check_bounds=True)
    split = re.search(r"range\(\w+, m\d+\)", r.source())
    assert (split is None) == nested, r.source()
    rng = np.random.default_rng(3)
    for (rows, cols), bound in [((5, 7), 3), ((5, 7), 0), ((5, 7), 9), ((40, 300), 260),
                                ((40, 300), 100), ((1, 1), 1)]:
        w = rng.standard_normal((rows, cols))
        n, t = np.array([bound + 5, bound]), np.array([2])
        c = np.arange(cols)
        want = np.where(c[None, :] < min(cols, bound), np.tanh(w), -1.0)
        if nested:
            want[w >= 1.5] = 2.0
        got = r([w, n, t])
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
        np.testing.assert_allclose(got, evaluate(kp, [w, n, t]), rtol=1e-15, atol=0)
    assert r([np.zeros((0, 0)), np.zeros(0, dtype=np.int64), np.array([7])]).shape == (0, 0)


def test_transcendental_elements_weigh_more_for_the_parallel_launch():
    """``step_weight`` counts a transcendental function as ``TRANSCENDENTAL_OPS``
    operations: 40,000 ``exp`` run in parallel where 40,000 additions stay serial (under
    ``PAR_MIN_WORK``), with the same values either way."""
    x = np.random.default_rng(2).standard_normal(40_000)
    cheap = A.compile(lambda a: A.map(lambda v: v + 1.0, a))
    dear = A.compile(lambda a: A.map(lambda v: A.exp(v) * 0.5, a))
    np.testing.assert_array_equal(cheap(x), x + 1.0)
    np.testing.assert_allclose(dear(x), np.exp(x) * 0.5, rtol=1e-15)
    assert cheap.stats(x)["launches"] == {"g_serial": 1}
    assert dear.stats(x)["launches"] == {"g_parallel": 1}
