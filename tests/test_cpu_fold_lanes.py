"""Long folds in interleaved lanes (``backends/cpu/fold.py``, ``_fold_lanes``) and
floating-point sums in one loop of reassociating adds (``_fold_reassociated``): sums,
products, maxima and minima of long rows (every tail length, with and without an
initial value, float and int, NaN) match NumPy, and the lanes agree with the one-chain
loop up to reassociation."""

import re

import numpy as np
import pytest

import accel as A
import accel.backends.cpu.fold as fold
from accel.backends.cpu.codegen import generate
from accel.fusion.fuse import fuse
from accel.pipeline import arg_type, optimise, trace_program

RNG = np.random.default_rng(17)


def _ops():
    return {
        "sum": (lambda a: A.sum(a), lambda x: x.sum(axis=-1)),
        "prod": (lambda a: A.fold(lambda p, q: p * q, 1.0, a), lambda x: x.prod(axis=-1)),
        "max": (lambda a: A.maximum(a), lambda x: x.max(axis=-1)),
        "min": (lambda a: A.fold1(lambda p, q: A.min(q, p), a), lambda x: x.min(axis=-1)),
    }


@pytest.mark.parametrize("n", [1024, 1027, 1030, 4099, 100_003])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_long_rows_in_lanes(op, n):
    f, ref = _ops()[op]
    x = RNG.uniform(0.5, 1.5, (2, n)) if op == "prod" else RNG.standard_normal((2, n))
    if op == "prod":
        x = x ** (1.0 / n)  # keep the product of n factors finite
    got = A.compile(f)(x)
    np.testing.assert_allclose(got, ref(x), rtol=1e-12)


def test_integer_sums_and_nans():
    k = RNG.integers(-1000, 1000, 50_001)
    np.testing.assert_array_equal(A.run(lambda a: A.sum(a), k), k.sum())
    x = RNG.standard_normal(5000)
    x[4321] = np.nan
    assert np.isnan(A.run(lambda a: A.maximum(a), x))
    assert np.isnan(A.run(lambda a: A.sum(a), x))


def test_lanes_agree_with_one_chain(monkeypatch):
    x = RNG.standard_normal((3, 20_000))

    def f(a):
        return A.sum(A.map(lambda v: v * v - 0.5 * v, a)), A.maximum(a)
    laned = A.compile(f)(x)
    monkeypatch.setattr(fold, "FOLD_LANE_MIN", 10 ** 12)
    chain = A.compile(f)(x)
    for a, b in zip(laned, chain):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_array_equal(laned[1], x.max(axis=1))


@pytest.mark.parametrize("n", [1024, 1055, 1056, 4099, 100_003])
def test_buffered_sources_in_lanes(n):
    """A source calling ``exp``/``log`` is computed into a buffer and folded in lanes
    (``_fold_buffered_lanes``): every tail after the last whole buffer, sums, maxima and
    products, rows long enough for the lanes and one row cut into chunks."""
    def f(a):
        return (A.sum(A.map(A.exp, a)), A.maximum(A.map(lambda v: A.log(v * v + 1.0), a)),
                A.fold(lambda p, q: p * q, 1.0, A.map(lambda v: A.exp(v / n), a)))
    x = RNG.standard_normal((2, n))
    got = A.compile(f)(x)
    np.testing.assert_allclose(got[0], np.exp(x).sum(axis=1), rtol=1e-12)
    np.testing.assert_allclose(got[1], np.log(x * x + 1.0).max(axis=1), rtol=1e-15)  # (log: 1 ulp)
    np.testing.assert_allclose(got[2], np.exp(x / n).prod(axis=1), rtol=1e-12)
    one = A.compile(lambda a: A.sum(A.map(A.exp, a)))(x[0])
    np.testing.assert_allclose(one, np.exp(x[0]).sum(), rtol=1e-12)
    sig = (arg_type(x, 0),)
    src = generate(fuse(optimise(trace_program(f, sig))).body, False).source
    assert re.search(r"ln\d+ = _ld\(buf\d+, ", src)  # lanes start from a buffer



@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("n", [1, 7, 1031, 4099, 100_003])
def test_float_sums_are_one_reassociating_loop(dtype, n):
    """Floating-point sums on phase ``f`` fold in one loop of adds LLVM may reassociate
    (``_fold_reassociated``), a source calling ``exp`` included (no buffer), with and
    without an initial value, for rows and for one long row cut into chunks: they match
    NumPy to rounding and propagate infinities and NaN."""
    def f(a):
        return (A.sum(A.map(lambda v: A.exp(v * 0.5), a)), A.fold(lambda p, q: p + q, 2.5, a),
                A.maximum(A.map(A.exp, a)))
    x = RNG.uniform(0.5, 1.5, (3, n)).astype(dtype)
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    c = A.compile(f)
    got = c(x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(got[0], np.exp(x64 * 0.5).sum(1), rtol=rtol)
    np.testing.assert_allclose(got[1], 2.5 + x64.sum(1), rtol=rtol)
    np.testing.assert_allclose(got[2], np.exp(x64).max(1), rtol=rtol)
    np.testing.assert_allclose(A.compile(lambda a: A.sum(A.map(A.exp, a)))(x[0]),
                               np.exp(x64[0]).sum(), rtol=rtol)
    if n > 2:
        x[1, n // 2] = np.inf
        x[2, n // 3] = np.nan
        got = c(x)
        assert np.isinf(got[0][1]) and np.isinf(got[1][1]) and np.isnan(got[1][2])
        assert np.isnan(got[0][2])
    src = generate(fuse(optimise(trace_program(f, (arg_type(x, 0),)))).body, False).source
    assert "_radd(" in src


def test_many_rows_of_mathlib_sources_fold_on_the_buffer():
    """Rows of a source calling ``exp``/``log``/``tanh`` fold on phase ``f``'s buffer
    (vectorized math), not in blocks of rows (phase ``b``: reads across rows, where the
    math ran scalar); a source laid out along the rows (a sum over the leading index)
    keeps its interchanged phase, whose loops read along the rows.  Both match NumPy,
    with tails of rows and blocks (21 rows of 37, 300 of 500)."""
    def rows(a):
        return A.sum(A.map(lambda v: A.exp(v) + A.tanh(v) * A.log(v * v + 1.0), a))

    def columns(a):
        return A.sum(A.transpose(A.map(A.exp, a)))

    for shape in ((21, 37), (300, 500)):
        x = RNG.standard_normal(shape)
        c = A.compile(rows, tiered=False)
        np.testing.assert_allclose(c(x), (np.exp(x) + np.tanh(x) * np.log(x * x + 1.0)).sum(1),
                                   rtol=1e-12)
        assert {k.split("_")[0] for k in c.stats(x)["launches"]} == {"f"}
        t = A.compile(columns, tiered=False)
        np.testing.assert_allclose(t(x), np.exp(x).sum(0), rtol=1e-12)
        assert {k.split("_")[0] for k in t.stats(x)["launches"]} <= {"o", "oc", "combc"}


def _windows(x, w):
    """``out[r] = 3 + sum_j x[j + r] * w[j]``: rows share ``w[j]`` (a 1-D convolution's
    kernel adjoint, with a seed)."""
    k = x.shape[0] - w.shape[0] + 1
    src = A.generate((k, w.shape[0]), lambda ix: x[ix[1] + ix[0]] * w[ix[1]])
    return A.fold(lambda p, q: p + q, 3.0, src)


def _window_maxima(x, w):
    k = x.shape[0] - w.shape[0] + 1
    return A.fold1(lambda p, q: A.max(p, q),
                   A.generate((k, w.shape[0]), lambda ix: x[ix[0] + ix[1]] - w[ix[1]]))


@pytest.mark.parametrize("rows", [16, 4])
def test_few_long_rows_fold_in_blocks_by_chunks(rows):
    """Few long rows (chunked by the host) whose element function is small fold as
    blocks of rows over each chunk (phase ``oc``), reading the shared ``w[j]`` once for
    the block, when the rows fill a block of at least 8; fewer rows fold one by one
    (phase ``f``).  Seeded sums and fold1 maxima against NumPy."""
    n = 50_000
    x, w = RNG.standard_normal(n + rows - 1), RNG.standard_normal(n)
    want = np.array([(x[r:r + n] * w).sum() for r in range(rows)]) + 3.0
    prog = A.compile(_windows, tiered=False)
    np.testing.assert_allclose(prog(x, w), want, rtol=1e-11, atol=1e-9)
    launches = prog.stats(x, w)["launches"]
    blocked = rows >= fold.FOLD_WIDTHS[1]
    assert any(k.startswith("oc") for k in launches) == blocked, launches
    maxima = A.compile(_window_maxima, tiered=False)(x, w)
    np.testing.assert_array_equal(maxima, [(x[r:r + n] - w).max() for r in range(rows)])
