"""Every combinator and scalar primitive of API.md against a NumPy / plain-Python reference.

Programs run through ``A.run(..., backend="interpreter")`` (the reference semantics) on
hypothesis-generated inputs: ranks 0 to 3 where the combinator allows, empty dimensions,
and every element type where it applies.  Non-commutative functions check the argument
order of folds and scans against sequential Python loops.
"""

from __future__ import annotations

import itertools
import math
import os

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import accel as A

SETTINGS = settings(deadline=None, max_examples=25)
FEW = settings(deadline=None, max_examples=10)

FLOATS = (np.float32, np.float64)
INTS = (np.int32, np.int64)
NUMERIC = FLOATS + INTS
ALL_DTYPES = NUMERIC + (np.bool_,)
ACCEL_TYPE = {np.float32: A.float32, np.float64: A.float64, np.int32: A.int32,
              np.int64: A.int64, np.bool_: A.bool_}


#: The reference interpreter by default; ``ACCEL_TEST_BACKEND=cpu`` reruns the corpus on
#: another backend (bounds are checked there too, so out-of-bounds tests still apply).
BACKEND = os.environ.get("ACCEL_TEST_BACKEND", "interpreter")


def run(f, *args):
    return A.run(f, *args, backend=BACKEND, check_bounds=True)


# --------------------------------------------------------------------------- strategies


def elements(dtype, lo=-10, hi=10):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return st.floats(lo, hi, width=dtype.itemsize * 8, allow_subnormal=False)
    if dtype.kind == "b":
        return st.booleans()
    return st.integers(int(lo), int(hi))


def shapes(min_dims=0, max_dims=3, max_side=4):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=0,
                            max_side=max_side)


def arrays(dtype, shape, lo=-10, hi=10):
    return hnp.arrays(np.dtype(dtype), shape, elements=elements(dtype, lo, hi))


@st.composite
def typed_array(draw, dtypes=ALL_DTYPES, min_dims=0, max_dims=3, lo=-10, hi=10):
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(shapes(min_dims, max_dims))
    return draw(arrays(dtype, shape, lo, hi))


def check(got, want, rtol=None, atol=None):
    """``got`` is an ndarray of ``want``'s dtype and shape with equal (or close) values."""
    want = np.asarray(want)
    assert isinstance(got, np.ndarray), type(got)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    if want.dtype.kind == "f":
        if rtol is None:
            rtol = 2e-5 if want.dtype == np.float32 else 1e-12
        if atol is None:
            atol = 1e-5 if want.dtype == np.float32 else 1e-12
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def check_tuple(got, want, **kw):
    assert isinstance(got, tuple), type(got)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, tuple):
            check_tuple(g, w, **kw)
        else:
            check(g, w, **kw)


def unary_op(dtype):
    """An elementwise function for ``dtype`` and its NumPy counterpart."""
    kind = np.dtype(dtype).kind
    if kind == "f":
        return (lambda v: v * 2 + 1), (lambda x: x * dtype(2) + dtype(1))
    if kind == "b":
        return (lambda v: ~v), np.logical_not
    return (lambda v: v * 3 - 1), (lambda x: x * dtype(3) - dtype(1))


def binary_op(dtype):
    kind = np.dtype(dtype).kind
    if kind == "f":
        return (lambda p, q: p * 2 - q), (lambda x, y: x * dtype(2) - y)
    if kind == "b":
        return (lambda p, q: p & ~q), (lambda x, y: x & ~y)
    return (lambda p, q: p * 2 - q), (lambda x, y: x * dtype(2) - y)


# --------------------------------------------------------------------------- use, unit, the


@SETTINGS
@given(typed_array())
def test_use_embeds_a_constant(x):
    got = run(lambda a: A.use(x), np.zeros(1))
    check(got, x)
    if x.size:  # the result never aliases the embedded constant
        assert not np.shares_memory(got, x)


@SETTINGS
@given(typed_array(dtypes=NUMERIC))
def test_use_combined_with_an_argument(x):
    f, ref = binary_op(x.dtype.type)
    check(run(lambda a: A.zip_with(f, a, A.use(x)), x), ref(x, x))


@SETTINGS
@given(typed_array(max_dims=0))
def test_unit_the(x):
    f, ref = unary_op(x.dtype.type)
    check(run(lambda a: A.unit(f(A.the(a))), x), ref(x))
    check(run(lambda a: A.unit(A.the(a)), x), x)


def test_unit_of_a_python_number_and_rank0_result_is_ndarray():
    got = run(lambda a: A.unit(3.5), np.zeros(2))
    check(got, np.array(3.5))
    assert isinstance(got, np.ndarray) and got.ndim == 0


# --------------------------------------------------------------------------- generate, fill


def _index_value(ix, shape):
    """A deterministic int64 function of an index (the reference for generate tests)."""
    v = 0
    for k, i in enumerate(ix):
        v = v * 7 + (k + 1) * i
    return v - 3


@SETTINGS
@given(shapes())
def test_generate_ranks_0_to_3(shape):
    def prog(a):
        def f(ix):
            if len(shape) == 1:
                ix = (ix,)
            return _index_value(ix, shape)
        return A.generate(shape, f)
    want = np.zeros(shape, dtype=np.int64)
    for ix in itertools.product(*(range(s) for s in shape)):
        want[ix] = _index_value(ix, shape)
    check(run(prog, np.zeros(1)), want)


@SETTINGS
@given(arrays(np.float64, shapes(1, 1)))
def test_generate_rank1_index_as_int_as_tuple_and_unpacked(x):
    n = x.shape[0]
    want = x[::-1] * np.arange(n)

    def as_int(a):
        return A.generate(a.shape, lambda i: a[n - 1 - i] * A.to_float(i))

    def as_tuple(a):
        return A.generate(a.shape, lambda ix: a[(n - 1 - ix[0],)] * A.to_float(ix[0]))

    def unpacked(a):
        def f(ix):
            (i,) = ix
            return a[n - 1 - i] * A.to_float(i)
        return A.generate(a.shape, f)

    for prog in (as_int, as_tuple, unpacked):
        check(run(prog, x), want)


@SETTINGS
@given(arrays(np.float64, shapes(2, 2)))
def test_generate_with_dynamic_shape_from_argument(x):
    def prog(a):
        n, m = a.shape
        return A.generate((m, n), lambda ix: a[ix[1], ix[0]] + 1.0)
    check(run(prog, x), x.T + 1.0)


@SETTINGS
@given(typed_array(), st.sampled_from(ALL_DTYPES))
def test_fill_every_dtype_and_rank(x, dtype):
    value = {np.float32: 1.5, np.float64: -2.25, np.int32: 7, np.int64: -9,
             np.bool_: True}[dtype]
    want = np.full(x.shape, value, dtype=dtype)
    got = run(lambda a: A.fill(a.shape, A.the(A.use(np.array(value, dtype)))), x)
    check(got, want)


def test_fill_python_values():
    check(run(lambda a: A.fill((2, 3), 0.5), np.zeros(1)), np.full((2, 3), 0.5))
    check(run(lambda a: A.fill((0, 3), 1), np.zeros(1)), np.zeros((0, 3), np.int64))
    check(run(lambda a: A.fill((), False), np.zeros(1)), np.array(False))


# --------------------------------------------------------------------------- map, zip_with


@SETTINGS
@given(typed_array())
def test_map_every_dtype_and_rank(x):
    f, ref = unary_op(x.dtype.type)
    check(run(lambda a: A.map(f, a), x), ref(x))


@SETTINGS
@given(typed_array())
def test_map_changing_type(x):
    kind = x.dtype.kind
    if kind == "b":
        want = np.where(x, 1.0, -1.0)
        got = run(lambda a: A.map(lambda v: A.cond(v, 1.0, -1.0), a), x)
    else:
        want = x > 0
        got = run(lambda a: A.map(lambda v: v > 0, a), x)
    check(got, want)


@st.composite
def two_same_rank(draw, dtypes=ALL_DTYPES):
    dtype = draw(st.sampled_from(dtypes))
    r = draw(st.integers(0, 3))
    s1 = tuple(draw(st.integers(0, 4)) for _ in range(r))
    s2 = tuple(draw(st.integers(0, 4)) for _ in range(r))
    return draw(arrays(dtype, s1)), draw(arrays(dtype, s2))


@SETTINGS
@given(two_same_rank())
def test_zip_with_unequal_shapes_is_the_intersection(xy):
    x, y = xy
    f, ref = binary_op(x.dtype.type)
    cut = tuple(slice(0, min(p, q)) for p, q in zip(x.shape, y.shape))
    check(run(lambda a, b: A.zip_with(f, a, b), x, y), ref(x[cut], y[cut]))


@SETTINGS
@given(two_same_rank(FLOATS))
def test_zip_with_is_argument_order_sensitive(xy):
    x, y = xy
    cut = tuple(slice(0, min(p, q)) for p, q in zip(x.shape, y.shape))
    check(run(lambda a, b: A.zip_with(lambda p, q: p - q, a, b), x, y), x[cut] - y[cut])
    check(run(lambda a, b: A.zip_with(lambda p, q: p - q, b, a), x, y), y[cut] - x[cut])


@SETTINGS
@given(two_same_rank(NUMERIC))
def test_zip_with_mixed_element_types(xy):
    x, y = xy
    yi = y.astype(np.int32)
    cut = tuple(slice(0, min(p, q)) for p, q in zip(x.shape, y.shape))
    got = run(lambda a, b: A.zip_with(lambda p, q: A.cond(q > 0, p, p * 2), a, b), x, yi)
    check(got, np.where(yi[cut] > 0, x[cut], x[cut] * x.dtype.type(2)))


# --------------------------------------------------------------------------- folds


def py_fold(f, z, x):
    """Reference fold of the innermost dimension with a Python loop (``z=None``: fold1)."""
    out = np.empty(x.shape[:-1], dtype=object)
    for ix in itertools.product(*(range(s) for s in x.shape[:-1])):
        row = list(x[ix])
        acc = z if z is not None else row.pop(0)
        for v in row:
            acc = f(acc, v)
        out[ix] = acc
    return out


@SETTINGS
@given(typed_array(dtypes=NUMERIC, min_dims=1))
def test_sum_product_maximum_minimum(x):
    dt = x.dtype
    check(run(A.sum, x), np.sum(x, axis=-1, dtype=dt))
    check(run(A.product, x), np.prod(x, axis=-1, dtype=dt), rtol=1e-4)
    if x.shape[-1] > 0:
        check(run(A.maximum, x), np.max(x, axis=-1))
        check(run(A.minimum, x), np.min(x, axis=-1))


@SETTINGS
@given(typed_array(dtypes=(np.bool_,), min_dims=1))
def test_fold_on_bools(x):
    check(run(lambda a: A.fold(lambda p, q: p | q, False, a), x), np.any(x, axis=-1))
    check(run(lambda a: A.fold(lambda p, q: p & q, True, a), x), np.all(x, axis=-1))


@SETTINGS
@given(typed_array(dtypes=NUMERIC, min_dims=1))
def test_fold1(x):
    if x.shape[-1] == 0:
        return
    check(run(lambda a: A.fold1(lambda p, q: A.max(p, q) + 0, a), x), np.max(x, axis=-1))
    check(run(lambda a: A.fold1(lambda p, q: p + q, a), x), np.sum(x, axis=-1, dtype=x.dtype))


@SETTINGS
@given(typed_array(dtypes=NUMERIC))
def test_fold_all_and_sum_all(x):
    dt = x.dtype
    check(run(A.sum_all, x), np.sum(x, dtype=dt))
    check(run(lambda a: A.fold_all(lambda p, q: A.max(p, q), -100, a), x),
          np.max(x, initial=dt.type(-100)))


def test_fold_seed_from_top_level_scalar():
    x = np.arange(6.0).reshape(2, 3)

    def prog(a):
        z = A.the(A.sum_all(a))
        return A.fold(lambda p, q: p + q, z, a)
    check(run(prog, x), x.sum(axis=-1) + x.sum())


def test_fold_over_empty_inner_dimension_gives_seed():
    check(run(lambda a: A.fold(lambda p, q: p + q, 2.5, a), np.zeros((3, 0))), np.full(3, 2.5))
    check(run(A.sum, np.zeros((0,), np.int32)), np.array(0, np.int32))
    check(run(A.sum, np.zeros((0, 4))), np.zeros(0))


# ---- associative, non-commutative folds compared with sequential loops


def matmul2(p, q):
    a, b, c, d = p
    e, f, g, h = q
    return (a * e + b * g, a * f + b * h, c * e + d * g, c * f + d * h)


def compose_affine(p, q):
    """(a, b) then (c, d): x -> c*(a*x + b) + d, i.e. (a*c, b*c + d)."""
    a, b = p
    c, d = q
    return (a * c, b * c + d)


@st.composite
def four_int_arrays(draw):
    shape = draw(shapes(1, 3, max_side=5))
    return tuple(draw(arrays(np.int64, shape, -2, 2)) for _ in range(4))


@SETTINGS
@given(four_int_arrays())
def test_fold_matrix_product_on_4_tuples(ms):
    def prog(a, b, c, d):
        t = A.generate(a.shape, lambda ix: (a[ix], b[ix], c[ix], d[ix]))
        return A.fold(matmul2, (1, 0, 0, 1), t)

    def fold1_prog(a, b, c, d):
        t = A.generate(a.shape, lambda ix: (a[ix], b[ix], c[ix], d[ix]))
        return A.fold1(matmul2, t)

    stacked = np.stack(ms, axis=-1)  # (..., n, 4)
    outer, n = ms[0].shape[:-1], ms[0].shape[-1]
    want = [np.zeros(outer, np.int64) for _ in range(4)]
    want1 = [np.zeros(outer, np.int64) for _ in range(4)]
    for ix in itertools.product(*(range(s) for s in outer)):
        acc = (1, 0, 0, 1)
        for j in range(n):
            acc = matmul2(acc, tuple(int(v) for v in stacked[ix][j]))
        for k in range(4):
            want[k][ix] = acc[k]
        if n:
            acc = tuple(int(v) for v in stacked[ix][0])
            for j in range(1, n):
                acc = matmul2(acc, tuple(int(v) for v in stacked[ix][j]))
            for k in range(4):
                want1[k][ix] = acc[k]
    check_tuple(run(prog, *ms), tuple(want))
    if n:
        check_tuple(run(fold1_prog, *ms), tuple(want1))


@SETTINGS
@given(arrays(np.float64, shapes(1, 1, max_side=8), -2, 2),
       arrays(np.float64, shapes(1, 1, max_side=8), -2, 2))
def test_fold_all_and_scan_composition_of_affine_maps(a, b):
    n = min(a.size, b.size)
    a, b = a[:n], b[:n]

    def prog(x, y):
        return A.fold_all(compose_affine, (1.0, 0.0), A.zip(x, y))

    def scan_prog(x, y):
        return A.scanl(compose_affine, (1.0, 0.0), A.zip(x, y))

    acc, prefix = (1.0, 0.0), [(1.0, 0.0)]
    for p in zip(a, b):
        acc = compose_affine(acc, p)
        prefix.append(acc)
    check_tuple(run(prog, a, b), (np.array(acc[0]), np.array(acc[1])))
    check_tuple(run(scan_prog, a, b),
                (np.array([p[0] for p in prefix]), np.array([p[1] for p in prefix])))


# --------------------------------------------------------------------------- scans


def py_scan(f, z, row, left):
    """Accelerate's scans on one row: scanl f(acc, x), scanr f(x, acc); z=None for *1."""
    row = list(row)
    if left:
        if z is None:
            if not row:
                return []
            acc, rest, out = row[0], row[1:], [row[0]]
        else:
            acc, rest, out = z, row, [z]
        for v in rest:
            acc = f(acc, v)
            out.append(acc)
        return out
    if z is None:
        if not row:
            return []
        acc, rest, out = row[-1], row[:-1], [row[-1]]
    else:
        acc, rest, out = z, row, [z]
    for v in reversed(rest):
        acc = f(v, acc)
        out.append(acc)
    return out[::-1]


def scan_ref(f, z, x, left):
    k = x.shape[-1] + (1 if z is not None else 0)
    out = np.zeros(x.shape[:-1] + (k,), dtype=x.dtype)
    for ix in itertools.product(*(range(s) for s in x.shape[:-1])):
        out[ix] = py_scan(f, z, x[ix], left)
    return out


@SETTINGS
@given(typed_array(dtypes=NUMERIC, min_dims=1, lo=-3, hi=3))
def test_scans_argument_order_non_commutative(x):
    z = x.dtype.type(1)
    def f(p, q):
        return 2 * p + q

    def ref_f(p, q):
        return x.dtype.type(2) * p + q
    check(run(lambda a: A.scanl(f, 1, a), x), scan_ref(ref_f, z, x, True))
    check(run(lambda a: A.scanr(f, 1, a), x), scan_ref(ref_f, z, x, False))
    check(run(lambda a: A.scanl1(f, a), x), scan_ref(ref_f, None, x, True))
    check(run(lambda a: A.scanr1(f, a), x), scan_ref(ref_f, None, x, False))


def test_scan_order_by_hand():
    x = np.array([1.0, 2.0, 3.0])

    def f(p, q):
        return 2 * p + q
    # scanl: acc0 = 0; 2*0+1 = 1; 2*1+2 = 4; 2*4+3 = 11
    check(run(lambda a: A.scanl(f, 0.0, a), x), [0.0, 1.0, 4.0, 11.0])
    # scanr: f(x, acc): 2*3+0 = 6; 2*2+6 = 10; 2*1+10 = 12
    check(run(lambda a: A.scanr(f, 0.0, a), x), [12.0, 10.0, 6.0, 0.0])
    check(run(lambda a: A.scanl1(f, a), x), [1.0, 4.0, 11.0])
    # scanr1: 3; 2*2+3 = 7; 2*1+7 = 9
    check(run(lambda a: A.scanr1(f, a), x), [9.0, 7.0, 3.0])


@SETTINGS
@given(typed_array(dtypes=NUMERIC, min_dims=1))
def test_scans_with_plus_against_cumsum(x):
    dt = x.dtype
    n = x.shape[-1]
    zero = np.zeros(x.shape[:-1] + (1,), dt)
    incl = np.cumsum(x, axis=-1, dtype=dt)
    rincl = np.flip(np.cumsum(np.flip(x, -1), axis=-1, dtype=dt), -1)

    def add(p, q):
        return p + q
    check(run(lambda a: A.scanl(add, 0, a), x), np.concatenate([zero, incl], axis=-1))
    check(run(lambda a: A.scanr(add, 0, a), x), np.concatenate([rincl, zero], axis=-1))
    check(run(lambda a: A.scanl1(add, a), x), incl)
    check(run(lambda a: A.scanr1(add, a), x), rincl)
    assert run(lambda a: A.scanl1(add, a), x).shape[-1] == n


# --------------------------------------------------------------------------- permute


@SETTINGS
@given(typed_array(dtypes=NUMERIC, min_dims=1, max_dims=1), st.integers(1, 4))
def test_permute_add_with_collisions(x, k):
    want = np.zeros(k, x.dtype)
    np.add.at(want, np.arange(x.size) % k, x)

    def prog(a):
        return A.permute(lambda new, old: new + old, A.fill((k,), x.dtype.type(0)),
                         lambda i: i % k, a)

    def slow_comb(a):  # not recognised as a plain "+": the general combination path
        return A.permute(lambda new, old: (new + old) * 1, A.fill((k,), x.dtype.type(0)),
                         lambda i: (i % k,), a)
    check(run(prog, x), want)
    check(run(slow_comb, x), want)


@SETTINGS
@given(typed_array(dtypes=NUMERIC, min_dims=2, max_dims=2), st.integers(1, 4))
def test_permute_max_rank2_to_rank1(x, k):
    n, m = x.shape
    want = np.full(k, -100, x.dtype)
    rows = np.repeat(np.arange(n), m)
    np.maximum.at(want, rows % k, x.reshape(-1))

    def prog(a):
        return A.permute(A.max, A.fill((k,), x.dtype.type(-100)), lambda ix: (ix[0] % k,), a)
    check(run(prog, x), want)


@SETTINGS
@given(arrays(np.float64, shapes(1, 1, max_side=8)))
def test_permute_with_ignore(x):
    n = x.size
    want, want_add = np.full(n, -1.0), np.full(n, -1.0)
    for i in range(n):
        if x[i] > 0:
            want[n - 1 - i] = x[i]
            want_add[n - 1 - i] += x[i]

    def prog(a):
        return A.permute(lambda new, old: new + old, A.fill((n,), -1.0),
                         lambda i: A.cond(a[i] > 0, (n - 1 - i,), A.ignore), a)

    def ignore_first(a):  # A.ignore in the "then" position, bare rank-1 target
        return A.permute(lambda new, old: new, A.fill((n,), -1.0),
                         lambda i: A.cond(a[i] <= 0, A.ignore, n - 1 - i), a)
    check(run(prog, x), want_add)
    check(run(ignore_first, x), want)


def test_permute_to_rank0_and_2d_targets():
    x = np.arange(1.0, 7.0).reshape(2, 3)
    check(run(lambda a: A.permute(lambda p, q: p + q, A.unit(0.0), lambda ix: (), a), x),
          np.array(21.0))
    # transpose by scatter
    check(run(lambda a: A.permute(lambda p, q: p, A.fill((3, 2), 0.0),
                                  lambda ix: (ix[1], ix[0]), a), x), x.T)


# --------------------------------------------------------------------------- backpermute


@SETTINGS
@given(typed_array(min_dims=1, max_dims=1))
def test_backpermute_reverse(x):
    n = x.size
    check(run(lambda a: A.backpermute(a.shape, lambda i: n - 1 - i, a), x), x[::-1])


@SETTINGS
@given(typed_array(min_dims=2, max_dims=2))
def test_backpermute_transpose_and_diagonal(x):
    n, m = x.shape
    check(run(lambda a: A.backpermute((m, n), lambda ix: (ix[1], ix[0]), a), x), x.T)
    check(run(A.transpose, x), x.T)
    d = min(n, m)
    check(run(lambda a: A.backpermute((d,), lambda i: (i, i), a), x),
          np.array([x[i, i] for i in range(d)], dtype=x.dtype))


@SETTINGS
@given(typed_array(min_dims=3, max_dims=3))
def test_backpermute_rank3_and_to_rank0(x):
    p, q, r = x.shape
    check(run(lambda a: A.backpermute((r, p, q), lambda ix: (ix[1], ix[2], ix[0]), a), x),
          np.transpose(x, (2, 0, 1)))
    if x.size:
        check(run(lambda a: A.backpermute((), lambda ix: (p - 1, 0, r - 1), a), x),
              np.array(x[p - 1, 0, r - 1]))


# --------------------------------------------------------------------------- reshape, etc.


@st.composite
def reshape_case(draw):
    x = draw(typed_array())
    size = x.size
    # a new shape of the same size, rank 0..3
    if size == 0:
        new = draw(st.sampled_from([(0,), (0, 3), (2, 0, 1), (1, 0)]))
    else:
        divisors = [d for d in range(1, size + 1) if size % d == 0]
        d1 = draw(st.sampled_from(divisors))
        r = draw(st.integers(0 if size == 1 else 1, 3))
        new = {0: (), 1: (size,), 2: (d1, size // d1), 3: (1, d1, size // d1)}[r]
    return x, new


@SETTINGS
@given(reshape_case())
def test_reshape(case):
    x, new = case
    check(run(lambda a: A.reshape(new, a), x), x.reshape(new))
    check(run(A.flatten, x), x.reshape(-1))


@SETTINGS
@given(typed_array(max_dims=2), st.integers(0, 3), st.integers(0, 3))
def test_replicate(x, k1, k2):
    r = x.ndim
    spec = (k1,) + (A.All,) * r + (k2,)
    want = np.broadcast_to(x.reshape((1,) + x.shape + (1,)), (k1,) + x.shape + (k2,))
    check(run(lambda a: A.replicate(spec, a), x), want)
    if r == 2:
        spec = (A.All, k1, A.All)
        want = np.broadcast_to(x[:, None, :], (x.shape[0], k1, x.shape[1]))
        check(run(lambda a: A.replicate(spec, a), x), want)


def test_replicate_with_dynamic_size():
    x = np.arange(3.0)
    check(run(lambda a: A.replicate((a.shape[0], A.All), a), x), np.tile(x, (3, 1)))
    check(run(lambda a: A.replicate((2,), a), np.array(4.0)), np.array([4.0, 4.0]))


@SETTINGS
@given(typed_array(min_dims=1), st.data())
def test_slice(x, data):
    spec, key = [], []
    for d in x.shape:
        if d > 0 and data.draw(st.booleans()):
            i = data.draw(st.integers(0, d - 1))
            spec.append(i)
            key.append(i)
        else:
            spec.append(A.All)
            key.append(slice(None))
    spec = tuple(spec)
    check(run(lambda a: A.slice(a, spec), x), np.asarray(x[tuple(key)]))


def test_slice_with_dynamic_index():
    x = np.arange(12.0).reshape(3, 4)
    check(run(lambda a: A.slice(a, (A.All, a.shape[0] - 1)), x), x[:, 2])
    check(run(lambda a: A.slice(a, (1, 2)), x), np.array(x[1, 2]))


# --------------------------------------------------------------------------- acond, awhile


@SETTINGS
@given(arrays(np.float64, shapes(1, 1)), st.floats(-5, 5))
def test_acond_both_branches_untaken_one_out_of_bounds(x, t):
    n = x.size

    def prog(a, th):
        # the branch not taken would index far out of bounds: it must not run
        bad = A.generate((3,), lambda i: a[i + n + 100])
        good = A.map(lambda v: v + 1.0, a)
        bad2 = A.generate((3,), lambda i: a[i + n + 100])
        good2 = A.map(lambda v: v + 1.0, a)
        return A.acond(A.the(th) > 0, good, bad), A.acond(A.the(th) <= 0, bad2, good2)

    if t > 0:
        check_tuple(run(prog, x, np.float64(t)), (x + 1.0, x + 1.0))
    else:
        with pytest.raises(A.OutOfBoundsError):
            run(prog, x, np.float64(t))


def test_acond_taken_branch_values():
    x = np.arange(4.0)

    def prog(a, s):
        bad = A.generate((3,), lambda i: a[i + 100])
        return A.acond(A.the(s) > 0, A.map(lambda v: v + 1.0, a), bad)
    check(run(prog, x, np.float64(1.0)), x + 1.0)
    with pytest.raises(A.OutOfBoundsError):
        run(prog, x, np.float64(-1.0))

    def prog2(a, s):
        bad = A.generate((3,), lambda i: a[i + 100])
        return A.acond(A.the(s) > 0, bad, A.map(lambda v: v * 2.0, a))
    check(run(prog2, x, np.float64(-1.0)), x * 2.0)


def test_acond_sizes_may_differ_and_tuples_and_python_bool():
    x = np.arange(5.0)

    def prog(a, s):
        return A.acond(A.the(s) > 0, A.generate((2,), lambda i: a[i]), a)
    check(run(prog, x, np.float64(1.0)), x[:2])
    check(run(prog, x, np.float64(-1.0)), x)

    def tup(a, s):
        neg = A.map(lambda v: -v, a)
        return A.acond(A.the(s) > 0, (a, neg), (neg, a))
    check_tuple(run(tup, x, np.float64(1.0)), (x, -x))
    check_tuple(run(tup, x, np.float64(-1.0)), (-x, x))
    check(run(lambda a: A.acond(True, a, A.map(lambda v: -v, a)), x), x)
    check(run(lambda a: A.acond(False, a, A.map(lambda v: -v, a)), x), -x)


@pytest.mark.parametrize("start,iters", [(100.0, 0), (60.0, 1), (1.0, 7)])
def test_awhile_zero_one_many_iterations(start, iters):
    x = np.array([start, 0.0])

    def prog(a):
        return A.awhile(lambda s: A.map(lambda t: t < 100.0, A.sum_all(s)),
                        lambda s: A.map(lambda v: v * 2.0, s), a)
    want = x.copy()
    n = 0
    while want.sum() < 100.0:
        want = want * 2.0
        n += 1
    assert n == iters
    check(run(prog, x), want)


def test_awhile_tuple_state_and_changing_size():
    x = np.arange(1.0, 4.0)

    def prog(a):
        def cond(s):
            arr, k = s
            return A.unit(A.the(k) < 3)

        def body(s):
            arr, k = s
            grown = A.generate((arr.shape[0] + 1,),
                               lambda i: A.cond(i < arr.shape[0], arr[i], 0.0) * 2.0)
            return grown, A.map(lambda v: v + 1, k)
        return A.awhile(cond, body, (a, A.unit(0)))
    arr, k = run(prog, x)
    check(arr, np.concatenate([x, [0.0, 0.0, 0.0]]) * 8.0)
    check(k, np.array(3))


# --------------------------------------------------------------------------- indexing, shape


@SETTINGS
@given(typed_array(min_dims=0, max_dims=3))
def test_indexing_every_rank_and_shape(x):
    r = x.ndim

    def prog(a):
        def f(ix):
            ix = (ix,) if r == 1 else ix
            return a[tuple(ix)]
        return A.generate(a.shape, f)
    check(run(prog, x), x)
    got = run(lambda a: tuple(A.unit(s) for s in A.shape(a)) if r else A.unit(0), x)
    if r:
        check_tuple(got, tuple(np.array(s, np.int64) for s in x.shape))
        got2 = run(lambda a: tuple(A.unit(s) for s in a.shape), x)
        check_tuple(got2, tuple(np.array(s, np.int64) for s in x.shape))
    assert A.run(lambda a: A.unit(len(A.shape(a))), x, backend="interpreter") == r


def test_indexing_rank0_and_top_level_scalars_used_in_later_functions():
    x = np.arange(1.0, 5.0)

    def prog(a, s):
        c = a[0]
        n = a.shape[0]
        t = A.the(s)
        tot = A.the(A.sum_all(a))
        return A.generate((n * 2,), lambda i: A.to_float(i) * c + t + tot + s[()])
    want = np.arange(8.0) * 1.0 + 0.5 + 10.0 + 0.5
    check(run(prog, x, np.float64(0.5)), want)


def test_size_iota_zip_helpers():
    x = np.arange(6.0).reshape(2, 3)
    check(run(lambda a: A.unit(A.size(a)), x), np.array(6))
    check(run(lambda a: A.iota(4), x), np.arange(4))
    check(run(lambda a: A.iota(3, A.float32), x), np.arange(3, dtype=np.float32))
    check_tuple(run(lambda a: A.zip(a, A.map(lambda v: v > 2, a)), x), (x, x > 2))


# --------------------------------------------------------------------------- cond, while_


@SETTINGS
@given(typed_array(dtypes=NUMERIC))
def test_cond_per_element(x):
    t = x.dtype.type
    got = run(lambda a: A.map(lambda v: A.cond(v > 0, v * 2, -v), a), x)
    check(got, np.where(x > 0, x * t(2), -x))
    got = run(lambda a: A.map(lambda v: A.cond(v > 0, (v, True), (-v, False)), a), x)
    check_tuple(got, (np.where(x > 0, x, -x), x > 0))


def test_cond_with_python_branches_and_python_condition():
    x = np.array([-1.0, 2.0])
    # Python numbers of different kinds in both branches take their common type
    check(run(lambda a: A.map(lambda v: A.cond(v > 0, 1, 0.5), a), x), np.array([0.5, 1.0]))
    check(run(lambda a: A.map(lambda v: A.cond(v > 0, (1, v), (0.5, 0)), a), x)[0],
          np.array([0.5, 1.0]))
    check(run(lambda a: A.map(lambda v: v + A.max(1, 2.5), a), x), x + 2.5)
    check(run(lambda a: A.map(lambda v: A.cond(v > 0, 1, 0), a), x), np.array([0, 1]))
    check(run(lambda a: A.map(lambda v: A.cond(v > 0, 1.0, v), a), x), np.array([-1.0, 1.0]))
    check(run(lambda a: A.map(lambda v: A.cond(v > 0, v, 0), a), x), np.array([0.0, 2.0]))
    check(run(lambda a: A.map(lambda v: A.cond(True, v, 0.0), a), x), x)


def collatz_steps(n):
    k = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        k += 1
    return k


@SETTINGS
@given(arrays(np.int64, shapes(0, 2, max_side=5), 1, 60))
def test_while_per_element_trip_counts(x):
    def prog(a):
        def body(s):
            n, k = s
            return A.cond(n % 2 == 0, n // 2, 3 * n + 1), k + 1
        return A.map(lambda v: A.while_(lambda s: s[0] != 1, body, (v, 0))[1], a)
    want = np.vectorize(collatz_steps, otypes=[np.int64])(x) if x.size else x.copy()
    check(run(prog, x), want.astype(np.int64).reshape(x.shape))


@SETTINGS
@given(arrays(np.float64, shapes(1, 1), 0, 50))
def test_while_scalar_state(x):
    got = run(lambda a: A.map(lambda v: A.while_(lambda s: s < 100.0, lambda s: s * 2.0 + 1.0,
                                                 v), a), x)
    want = []
    for v in x:
        while v < 100.0:
            v = v * 2.0 + 1.0
        want.append(v)
    check(got, np.array(want, dtype=np.float64).reshape(x.shape))


# --------------------------------------------------------------------------- tuples


@SETTINGS
@given(two_same_rank())
def test_tuples_zip_map_over_tuples_and_struct_of_arrays(xy):
    x, y = xy
    cut = tuple(slice(0, min(p, q)) for p, q in zip(x.shape, y.shape))
    got = run(A.zip, x, y)
    check_tuple(got, (x[cut], y[cut]))
    # map over an array of tuples, returning a nested tuple
    got = run(lambda a, b: A.map(lambda p: (p[1], (p[0], p[0])), A.zip(a, b)), x, y)
    check_tuple(got, (y[cut], (x[cut], x[cut])))
    # unpack with ordinary Python, index an array of tuples
    def prog(a, b):
        z = A.zip(a, b)

        def f(ix):
            p, q = z[ix]
            return q, p
        return A.generate(z.shape, f)
    check_tuple(run(prog, x, y), (y[cut], x[cut]))


def test_program_returning_nested_tuple_of_arrays():
    x = np.arange(3.0)
    got = run(lambda a: (a, (A.map(lambda v: v + 1, a), A.unit(1))), x)
    check_tuple(got, (x, (x + 1, np.array(1))))


# --------------------------------------------------------------------------- scalar prims


def map_check(f, ref, x, **kw):
    check(run(lambda a: A.map(f, a), x), ref(x), **kw)


def zip_check(f, ref, x, y, **kw):
    check(run(lambda a, b: A.zip_with(f, a, b), x, y), ref(x, y), **kw)


@st.composite
def pair(draw, dtypes, lo=-10, hi=10, nonzero=False):
    dtype = draw(st.sampled_from(dtypes))
    shape = draw(shapes(0, 2))
    x = draw(arrays(dtype, shape, lo, hi))
    y = draw(arrays(dtype, shape, lo, hi))
    if nonzero:
        y = np.where(y == 0, np.asarray(3, dtype), y).astype(dtype)
    return x, y


@SETTINGS
@given(pair(NUMERIC))
def test_arithmetic_add_sub_mul_neg_abs(xy):
    x, y = xy
    t = x.dtype.type
    zip_check(lambda p, q: p + q, np.add, x, y)
    zip_check(lambda p, q: p - q, np.subtract, x, y)
    zip_check(lambda p, q: p * q, np.multiply, x, y)
    map_check(lambda v: -v, np.negative, x)
    map_check(abs, np.abs, x)
    # Python numbers on either side are lifted to the Exp's type
    map_check(lambda v: 3 - v, lambda a: t(3) - a, x)
    map_check(lambda v: v + 2, lambda a: a + t(2), x)
    map_check(lambda v: 2 * v, lambda a: t(2) * a, x)


@SETTINGS
@given(pair(FLOATS, nonzero=True))
def test_float_division_floordiv_mod_pow(xy):
    x, y = xy
    t = x.dtype.type
    zip_check(lambda p, q: p / q, np.divide, x, y)
    zip_check(lambda p, q: p // q, np.floor_divide, x, y)
    zip_check(lambda p, q: p % q, np.mod, x, y, atol=1e-4 if t is np.float32 else 1e-9)
    map_check(lambda v: 1 / v, lambda a: t(1) / a, y)
    zip_check(lambda p, q: abs(p) ** (q / 4), lambda a, b: np.abs(a) ** (b / t(4)), x, y)
    map_check(lambda v: v ** 2, lambda a: a ** t(2), x)


@SETTINGS
@given(pair(INTS, -50, 50, nonzero=True))
def test_int_floordiv_and_mod_are_floored(xy):
    x, y = xy
    zip_check(lambda p, q: p // q, np.floor_divide, x, y)
    zip_check(lambda p, q: p % q, np.mod, x, y)
    # against Python's own semantics
    got = run(lambda a, b: A.zip_with(lambda p, q: (p // q, p % q), a, b), x, y)
    for i in np.ndindex(x.shape):
        assert got[0][i] == int(x[i]) // int(y[i])
        assert got[1][i] == int(x[i]) % int(y[i])
    map_check(lambda v: 7 // v, lambda a: np.floor_divide(a.dtype.type(7), a), y)
    map_check(lambda v: v % -3, lambda a: np.mod(a, a.dtype.type(-3)), x)


@SETTINGS
@given(pair(INTS, 0, 5))
def test_int_pow(xy):
    x, y = xy
    zip_check(lambda p, q: p ** q, np.power, x - 2, y)


@SETTINGS
@given(pair(INTS, -1000, 1000))
def test_int_bitwise(xy):
    x, y = xy
    zip_check(lambda p, q: p & q, np.bitwise_and, x, y)
    zip_check(lambda p, q: p | q, np.bitwise_or, x, y)
    zip_check(lambda p, q: p ^ q, np.bitwise_xor, x, y)
    map_check(lambda v: v & 6, lambda a: a & a.dtype.type(6), x)
    map_check(lambda v: 6 ^ v, lambda a: a.dtype.type(6) ^ a, x)


@SETTINGS
@given(pair((np.bool_,)))
def test_bool_logic(xy):
    x, y = xy
    zip_check(lambda p, q: p & q, np.logical_and, x, y)
    zip_check(lambda p, q: p | q, np.logical_or, x, y)
    map_check(lambda v: ~v, np.logical_not, x)
    zip_check(lambda p, q: ~(p & q) | (p & True), lambda a, b: ~(a & b) | a, x, y)


@SETTINGS
@given(pair(ALL_DTYPES, -3, 3))
def test_comparisons_every_dtype(xy):
    x, y = xy
    for f, ref in [(lambda p, q: p < q, np.less), (lambda p, q: p <= q, np.less_equal),
                   (lambda p, q: p > q, np.greater), (lambda p, q: p >= q, np.greater_equal),
                   (lambda p, q: p == q, np.equal), (lambda p, q: p != q, np.not_equal)]:
        zip_check(f, ref, x, y)


def test_comparisons_with_python_numbers():
    x = np.array([-1.0, 0.0, 2.0])
    map_check(lambda v: v > 0, lambda a: a > 0, x)
    map_check(lambda v: 0 < v, lambda a: 0 < a, x)
    map_check(lambda v: v == 0, lambda a: a == 0, x)
    i = np.array([1, 2, 3], np.int32)
    map_check(lambda v: (v >= 2) & (v != 3), lambda a: (a >= 2) & (a != 3), i)


UNARY = [
    ("sin", A.sin, np.sin, -10, 10), ("cos", A.cos, np.cos, -10, 10),
    ("tan", A.tan, np.tan, -1.5, 1.5), ("asin", A.asin, np.arcsin, -1, 1),
    ("acos", A.acos, np.arccos, -1, 1), ("atan", A.atan, np.arctan, -10, 10),
    ("sinh", A.sinh, np.sinh, -5, 5), ("cosh", A.cosh, np.cosh, -5, 5),
    ("tanh", A.tanh, np.tanh, -10, 10), ("exp", A.exp, np.exp, -10, 10),
    ("expm1", A.expm1, np.expm1, -10, 10), ("log", A.log, np.log, 0.015625, 100),
    ("log1p", A.log1p, np.log1p, -0.984375, 100), ("sqrt", A.sqrt, np.sqrt, 0, 100),
    ("floor", A.floor, np.floor, -10, 10), ("ceil", A.ceil, np.ceil, -10, 10),
    ("round", A.round, np.round, -10, 10), ("truncate", A.truncate, np.trunc, -10, 10),
]


@pytest.mark.parametrize("name,fn,ref,lo,hi", UNARY, ids=[u[0] for u in UNARY])
@FEW
@given(data=st.data())
def test_unary_floating_functions(name, fn, ref, lo, hi, data):
    dtype = data.draw(st.sampled_from(FLOATS))
    x = data.draw(arrays(dtype, shapes(0, 2), lo, hi))
    got = run(lambda a: A.map(fn, a), x)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    check(got, ref(x), rtol=rtol, atol=rtol)


@SETTINGS
@given(pair(FLOATS, -5, 5))
def test_atan2_max_min(xy):
    x, y = xy
    zip_check(A.atan2, np.arctan2, x, y)
    zip_check(A.max, np.maximum, x, y)
    zip_check(A.min, np.minimum, x, y)
    map_check(lambda v: A.max(v, 0), lambda a: np.maximum(a, a.dtype.type(0)), x)
    map_check(lambda v: A.min(0.5, v), lambda a: np.minimum(a.dtype.type(0.5), a), x)


@SETTINGS
@given(pair(INTS))
def test_int_max_min(xy):
    x, y = xy
    zip_check(A.max, np.maximum, x, y)
    zip_check(A.min, np.minimum, x, y)
    map_check(lambda v: A.max(1, v), lambda a: np.maximum(a.dtype.type(1), a), x)


def test_float_floordiv_and_mod_are_exact_like_python():
    # floor(5 / 0.001) would be 5000; the exact floored quotient is 4999 (0.001 > 1/1000)
    for dt in FLOATS:
        x, y = np.array([5.0, -5.0, 7.5, 1.0], dt), np.array([0.001, 0.001, -2.0, 0.1], dt)
        q, r = run(lambda a, b: A.zip_with(lambda p, t: (p // t, p % t), a, b), x, y)
        check(q, np.floor_divide(x, y))
        check(r, np.mod(x, y))
        for i in range(len(x)):
            assert float(q[i]) == float(x[i]) // float(y[i])
    assert run(lambda a: A.map(lambda v: v // 0.001, a), np.array([5.0]))[0] == 5.0 // 0.001


def test_round_is_half_to_even_and_rounding_keeps_type():
    for dt in FLOATS:
        x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.4999, -3.7, 0.0], dt)
        check(run(lambda a: A.map(A.round, a), x),
              np.array([0, 2, 2, -0.0, -2, -2, 3, -4, 0], dt))
        check(run(lambda a: A.map(A.truncate, a), x), np.trunc(x))
        check(run(lambda a: A.map(A.floor, a), x), np.floor(x))
        check(run(lambda a: A.map(A.ceil, a), x), np.ceil(x))


@SETTINGS
@given(typed_array(dtypes=ALL_DTYPES, max_dims=2, lo=-100, hi=100))
def test_to_float(x):
    check(run(lambda a: A.map(A.to_float, a), x), x.astype(np.float64))
    check(run(lambda a: A.map(lambda v: A.to_float(v, A.float32), a), x), x.astype(np.float32))


@SETTINGS
@given(typed_array(dtypes=NUMERIC, max_dims=2, lo=-100, hi=100))
def test_to_int_truncates_toward_zero(x):
    want = np.trunc(x).astype(np.int64) if x.dtype.kind == "f" else x.astype(np.int64)
    check(run(lambda a: A.map(A.to_int, a), x), want)
    check(run(lambda a: A.map(lambda v: A.to_int(v, A.int32), a), x), want.astype(np.int32))


def test_to_int_by_hand():
    x = np.array([-2.7, -0.5, 0.5, 2.7, -3.0])
    check(run(lambda a: A.map(A.to_int, a), x), np.array([-2, 0, 0, 2, -3]))


def test_scalar_functions_on_python_numbers_and_math_constants():
    x = np.array([1.0])
    got = run(lambda a: A.map(lambda v: v * A.sin(math.pi / 2) + A.sqrt(4.0), a), x)
    check(got, np.array([3.0]))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
def test_empty_arrays_every_dtype(dtype):
    f, ref = unary_op(dtype)
    for shape in [(0,), (0, 3), (3, 0), (2, 0, 4)]:
        x = np.zeros(shape, dtype)
        check(run(lambda a: A.map(f, a), x), ref(x))
        check(run(lambda a: A.generate(a.shape, lambda ix: a[ix]), x), x)


@example(np.zeros((0,)))
@SETTINGS
@given(arrays(np.float64, shapes(1, 1)))
def test_cond_and_index_guard(x):
    n = x.size
    got = run(lambda a: A.generate((n + 3,), lambda i: A.cond(i < n, a[i], 0.0)), x)
    check(got, np.concatenate([x, np.zeros(3)]))
