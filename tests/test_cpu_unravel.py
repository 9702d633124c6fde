"""Quotients and remainders of a fold's inner index by counters (backends/cpu/unravel.py):
the same values as the interpreter for sums over several dimensions (one chunk or many),
for divisors from shapes, constants, arrays, and for negative and zero divisors (which
keep the divided loop)."""

import numpy as np
import pytest

import accel as A
import accel.backends.cpu.unravel as unravel
from accel.ast import nodes as N
from accel.ast.types import int64

RNG = np.random.default_rng(5)


@pytest.mark.parametrize("shape", [(3, 7), (1, 1), (5, 1), (1, 9), (300, 301), (2, 3, 4),
                                   (64, 65, 3)])
def test_sums_over_several_dimensions(shape):
    x = RNG.standard_normal(shape)

    def f(x):
        return A.sum_all(A.map(lambda v: v * v + 1.0, x))
    want = A.run(f, x, backend="interpreter")
    np.testing.assert_allclose(A.run(f, x, backend="cpu"), want, rtol=1e-12)


@pytest.mark.parametrize("divisor", [3, 1, -2, 0, "array", "shape"])
def test_user_divisions_of_the_inner_index(divisor):
    x = RNG.standard_normal((4, 50))
    d = np.array([3], dtype=np.int64)

    def f(x, d):
        n = x.shape[1]

        def elt(ix):
            j = ix[1]
            c = (d[0] if divisor == "array" else n // 7 if divisor == "shape"
                 else divisor)
            return x[ix[0], j] * A.to_float(j // c) + A.to_float(j % c)
        return A.sum(A.generate((4, n), elt))
    want = A.run(f, x, d, backend="interpreter")
    for enabled in (True, False):
        unravel.ENABLED = enabled
        try:
            got = A.compile(f)(x, d)
        finally:
            unravel.ENABLED = True
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_counted_finds_divisions_through_lets():
    p = N.Var("ix", N.Tuple((N.Const(0, int64), N.Const(0, int64))).type)
    c = N.Var("c", int64)
    j = N.Prj(1, p)
    body = N.Let(c, N.PrimApp("add", (N.Const(2, int64), N.Const(3, int64))),
                 N.PrimApp("add", (N.PrimApp("floordiv", (j, c)), N.PrimApp("mod", (j, c)))))
    found = unravel.counted(N.Lam((p,), body), 1)
    assert found is not None and len(found[1]) == 1
    # a division of another component is left alone
    other = N.PrimApp("floordiv", (N.Prj(0, p), N.Const(3, int64)))
    assert unravel.counted(N.Lam((p,), other), 1) is None


@pytest.mark.parametrize("divisor", [3, -2, 0])
@pytest.mark.parametrize("rows", [(40, 17), (3, 5)])
def test_divisions_in_blocks_of_rows(rows, divisor):
    """Phases ``b`` and ``o`` (rows in blocks; interchanged) count too: many short rows
    with a divided inner index (a 2-D window summed as one fold) match the interpreter,
    with and without counting, for positive, negative and zero divisors."""
    x = RNG.standard_normal(rows)
    win = 6

    def f(x):
        n, m = x.shape

        def elt(ix):
            c = divisor if divisor != 3 else 3
            j = ix[2]
            return x[ix[0], (ix[1] + j // c + j % c) % m] * A.to_float(j + 1)
        return A.sum(A.generate((n, m, win), elt))
    want = A.run(f, x, backend="interpreter")
    for enabled in (True, False):
        unravel.ENABLED = enabled
        try:
            got = A.compile(f)(x)
        finally:
            unravel.ENABLED = True
        np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("op", ["add", "max", "min", "mul"])
def test_long_rows_dividing_the_index_fold_by_segments(op):
    """Few long rows whose source reads a flattened window ``(j // d, j % d)`` fold each
    chunk segment by segment in lanes (``fold._fold_segments``): divisors shorter than
    the lanes, a remainder wrapping inside a chunk, chunks starting mid-segment (64 per
    row), float and integer elements; divisors that are not positive keep the counted
    chain (``j // 0`` is 0).  Compared with NumPy, exactly for integers.  The divisor is
    read from an array, so each program compiles once for all of them."""
    n = 150_000  # 64 chunks a row of 2,343 elements: lanes from FOLD_LANE_MIN (1,024)
    x = RNG.standard_normal((3, n))
    ints = np.arange(3 * n, dtype=np.int64).reshape(3, n) % 11 - 5

    def pick(a, b):
        return {"add": a + b, "max": A.max(a, b), "min": A.min(a, b), "mul": a * b}[op]

    def f(x, d):
        def elt(ix):
            j = ix[1]
            q, r = j // d[0], j % d[0]
            v = x[ix[0], j] * A.to_float(q % 5 + 1) - A.to_float(r % 3)
            return 1.0 + 1e-5 * v if op == "mul" else v
        return A.fold(pick, {"add": 0.0, "max": -1e300, "min": 1e300, "mul": 1.0}[op],
                      A.generate(x.shape, elt))

    def g(k, d):
        def elt(ix):
            j = ix[1]
            return k[ix[0], j] * ((j // d[0]) % 5 + 1) - (j % d[0]) % 3
        return A.fold(pick, {"add": 0, "max": -(1 << 62), "min": 1 << 62, "mul": 1}[op],
                      A.generate(k.shape, elt))

    cf, cg = A.compile(f, backend="cpu"), A.compile(g, backend="cpu")
    reduce = {"add": np.sum, "max": np.max, "min": np.min, "mul": np.prod}[op]
    j = np.arange(n)
    for divisor in (1, 3, 4, 7, 509, 0, -3):
        d = np.array([divisor], dtype=np.int64)
        q = j // divisor if divisor else np.zeros_like(j)
        r = j % divisor if divisor else np.zeros_like(j)
        elts = x * ((q % 5) + 1) - (r % 3)
        elts = 1.0 + 1e-5 * elts if op == "mul" else elts
        np.testing.assert_allclose(cf(x, d), reduce(elts, axis=1), rtol=1e-10, atol=1e-9)
        if op != "mul":  # (integer products overflow)
            np.testing.assert_array_equal(cg(ints, d),
                                          reduce(ints * ((q % 5) + 1) - (r % 3), axis=1))
