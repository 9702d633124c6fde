"""Reverse-mode AD: every construct the thesis differentiates, checked against forward
mode and finite differences (``A.check_grad``) on hypothesis-generated inputs, in
float64 and float32, in both temporaries modes; plus the special cases of API.md."""

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import accel as A
from accel.ad.api import gradient_program
from accel.ast.typecheck import typecheck
from accel.frontend import arg_type, trace_program

BACKEND = "interpreter"
SETTINGS = settings(deadline=None, max_examples=6,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def smooth_floats(shape, lo=-2.0, hi=2.0):
    return st.lists(st.floats(lo, hi, allow_nan=False, width=32),
                    min_size=int(np.prod(shape)), max_size=int(np.prod(shape))).map(
        lambda xs: np.array(xs, dtype=np.float64).reshape(shape))


def gradient_typechecks(f, args, wrt=None, mode="store"):
    prog = trace_program(f, tuple(arg_type(a, i) for i, a in enumerate(args)))
    g, _ = gradient_program(prog, wrt, mode=mode)
    typecheck(g)
    return g


# name -> (program, shapes of the float inputs, extra (non-differentiated) inputs)
IDX = np.array([0, 2, 2, 1], dtype=np.int64)
CASES = {
    "map": (lambda x: A.sum_all(A.map(lambda v: A.sin(v) * v + A.exp(v / 4), x)), [(5,)]),
    "map_2d": (lambda x: A.sum_all(A.map(lambda v: A.tanh(v) * v, x)), [(3, 4)]),
    "zip_with_unequal": (lambda x, y: A.sum_all(A.zip_with(lambda u, v: u * v + A.cos(u),
                                                           x, y)), [(5,), (3,)]),
    "zip_with_same": (lambda x: A.sum_all(A.zip_with(lambda u, v: u * v, x, x)), [(4,)]),
    "generate_index": (lambda x: A.sum_all(A.generate((3,), lambda i: x[i + 1] * x[i])),
                       [(4,)]),
    "generate_2d": (lambda x: A.sum_all(A.generate((2, 3), lambda ix: x[ix[1]] * x[ix[0]])),
                    [(3,)]),
    "gather_data_dependent": (lambda x, ix: A.sum_all(A.map(lambda j: x[j] * x[j], ix)),
                              [(3,)], [IDX]),
    "sum_rows": (lambda x: A.sum_all(A.map(lambda s: s * s, A.sum(x))), [(3, 4)]),
    "product_fold": (lambda x: A.the(A.product(x)), [(5,)]),
    "fold_general": (lambda x: A.the(A.fold(lambda p, q: p * q + A.sin(q), 0.5, x)), [(4,)]),
    "fold1_general": (lambda x: A.sum_all(A.fold1(lambda p, q: p * q + q, x)), [(2, 3)]),
    "fold_z_indexes": (lambda x: A.the(A.fold(lambda p, q: p * q, x[0], x)), [(4,)]),
    "maximum": (lambda x: A.sum_all(A.maximum(x)), [(3, 4)]),
    "minimum": (lambda x: A.the(A.minimum(x)), [(5,)]),
    "backpermute": (lambda x: A.sum_all(A.map(A.exp, A.backpermute((3,), lambda i: 2 - i, x))),
                    [(3,)]),
    "reshape": (lambda x: A.sum_all(A.map(A.sin, A.reshape((4, 3), x))), [(3, 4)]),
    "replicate": (lambda x: A.sum_all(A.map(A.sin, A.replicate((2, A.All, 3), x))), [(3,)]),
    "replicate_inner": (lambda x: A.sum_all(A.map(A.cos, A.replicate((A.All, 2, A.All), x))),
                        [(2, 3)]),
    "slice": (lambda x: A.sum_all(A.map(A.sin, A.slice(x, (1, A.All)))), [(3, 4)]),
    "transpose": (lambda x: A.sum_all(A.zip_with(lambda u, v: u * v, A.transpose(x), x)),
                  [(3, 3)]),
    "acond": (lambda x: A.the(A.acond(A.the(A.sum(x)) > 0, A.sum(A.map(A.sin, x)),
                                      A.sum(A.map(A.cos, x)))), [(4,)]),
    "cond": (lambda x: A.sum_all(A.map(lambda v: A.cond(v > 0, v * v, A.sin(v)), x)), [(5,)]),
    "let_tuples": (lambda x: A.sum_all(A.map(lambda p: p[0] * A.exp(p[1]),
                                             A.zip(x, A.map(lambda v: v * 0.5, x)))), [(4,)]),
    "unit_the": (lambda x: A.the(A.unit(A.the(A.sum(x)) * A.the(A.sum(x)))), [(3,)]),
    "shape_use": (lambda x: A.sum_all(A.map(lambda v: v * A.to_float(A.size(x)), x)), [(3,)]),
    "primitives": (lambda x: A.sum_all(A.map(
        lambda v: A.sqrt(v * v + 1) + A.log1p(v * v) + A.atan(v) + A.asin(v / 3)
        + A.acos(v / 3) + A.sinh(v) + A.cosh(v) + A.expm1(v) + A.tan(v / 2)
        + A.atan2(v, 2.0) + A.log(v * v + 1) + (v * v + 1) ** 1.5 + A.max(v, 0.3)
        + A.min(v, -0.3) + abs(v) + 1 / (v * v + 1) + -v, x)), [(4,)]),
    "empty": (lambda x: A.sum_all(A.map(A.sin, x)), [(0,)]),
    "empty_rows": (lambda x: A.sum_all(A.map(lambda s: s + 1, A.sum(x))), [(3, 0)]),
}


# Inputs near a kink or a branch switch, where finite differences straddle two pieces.
AWAY_FROM_KINKS = {
    "acond": lambda xs: abs(xs[0].sum()) > 0.05,
    "cond": lambda xs: np.all(np.abs(xs[0]) > 0.01),
    "maximum": lambda xs: _no_ties(xs[0]),
    "minimum": lambda xs: _no_ties(xs[0]),
    "primitives": lambda xs: np.all(np.abs(np.abs(xs[0]) - 0.3) > 0.01)
    and np.all(np.abs(xs[0]) > 0.01),
}


def _no_ties(x):
    rows = x.reshape(-1, x.shape[-1])
    return all(np.min(np.diff(np.sort(r))) > 0.01 for r in rows if r.size > 1)


@pytest.mark.parametrize("mode", ["store", "recompute"])
@pytest.mark.parametrize("name", sorted(CASES))
@SETTINGS
@given(data=st.data())
def test_reverse_agrees_with_forward_and_fd(name, mode, data):
    f, shapes, *extra = CASES[name]
    extra = extra[0] if extra else []
    xs = [data.draw(smooth_floats(s)) for s in shapes]
    assume(AWAY_FROM_KINKS.get(name, lambda _: True)(xs))
    args = xs + list(extra)
    wrt = tuple(range(len(xs)))
    gradient_typechecks(f, args, wrt, mode)
    g = A.run(A.gradientA(f, wrt=wrt, mode=mode), *args, backend=BACKEND)
    report = A.check_grad(f, *args, wrt=wrt, backend=BACKEND, rtol=1e-4, atol=1e-6)
    for got, want in zip(g, report.forward):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
    assert report.ok, report


@pytest.mark.parametrize("name", ["map", "zip_with_unequal", "product_fold", "acond",
                                  "gather_data_dependent", "replicate"])
def test_float32(name):
    f, shapes, *extra = CASES[name]
    rng = np.random.default_rng(1)
    xs = [rng.uniform(-1, 1, size=s).astype(np.float32) for s in shapes]
    args = xs + list(extra[0] if extra else [])
    wrt = tuple(range(len(xs)))
    g = A.run(A.gradientA(f, wrt=wrt), *args, backend=BACKEND)
    g = g if isinstance(g, tuple) else (g,)
    assert all(x.dtype == np.float32 for x in g)
    assert A.check_grad(f, *args, wrt=wrt, backend=BACKEND)
