"""Reads of an array at the unravelling of a flat index by its own shape are flat reads
(``backends/numba/flatreads.py``): the pattern is recognised exactly (its lets, either
order of a product of dimensions), nothing else is, and programs that reach it through
``sum_all`` or an explicit reshape give NumPy's results, checked or not."""

from __future__ import annotations

import numpy as np
import pytest

import accel as A
from accel.ast import nodes as N
from accel.ast.types import ArrayT, float64, int64, shape_type
from accel.backends.numba.flatreads import flat_position

ARR = N.Avar("a", ArrayT(float64, 3))
OTHER = N.Avar("b", ArrayT(float64, 3))
IX = N.Var("i", shape_type(1))
J = N.Prj(0, IX)


def _d(q, arr=ARR):
    return N.Prj(q, N.Shape(arr))


def _p(op, a, b):
    return N.PrimApp(op, (a, b))


def _rank2(j=J, arr=ARR):
    a2 = N.Avar(arr.name, ArrayT(float64, 2))
    return a2, N.Tuple((_p("floordiv", j, _d(1, a2)), _p("mod", j, _d(1, a2))))


def test_rank_two_unravelling_is_its_flat_index():
    arr, ix = _rank2()
    assert flat_position(arr, ix, {}) == J


@pytest.mark.parametrize("order", [(1, 2), (2, 1)])
def test_rank_three_with_a_product_of_dimensions(order):
    prod = _p("mul", _d(order[0]), _d(order[1]))
    ix = N.Tuple((_p("floordiv", J, prod), _p("mod", _p("floordiv", J, _d(2)), _d(1)),
                  _p("mod", J, _d(2))))
    assert flat_position(ARR, ix, {}) == J


def test_rank_three_through_a_shared_let_bound_quotient():
    c = N.Var("c", int64)
    ix = N.Tuple((_p("floordiv", c, _d(1)), _p("mod", c, _d(1)), _p("mod", J, _d(2))))
    assert flat_position(ARR, ix, {"c": _p("floordiv", J, _d(2))}) == J


def test_other_reads_are_not_flat():
    k = N.Prj(0, N.Var("k", shape_type(1)))
    wrapped = N.Tuple((_p("mod", _p("floordiv", J, _p("mul", _d(1), _d(2))), _d(0)),
                       _p("mod", _p("floordiv", J, _d(2)), _d(1)), _p("mod", J, _d(2))))
    cases = [
        N.Tuple((_p("floordiv", J, _d(1, OTHER)), _p("mod", J, _d(1, OTHER)),
                 _p("mod", J, _d(2, OTHER)))),  # another array's dimensions
        wrapped,  # the first component wrapped too: another element out of range
        N.Tuple((_p("floordiv", J, _p("mul", _d(1), _d(2))),
                 _p("mod", _p("floordiv", k, _d(2)), _d(1)), _p("mod", J, _d(2)))),
        N.Tuple((_p("floordiv", J, _d(2)), _p("mod", _p("floordiv", J, _d(2)), _d(1)),
                 _p("mod", J, _d(2)))),  # first quotient by the wrong product
        N.Tuple((J, _p("mod", J, _d(1)), _p("mod", J, _d(2)))),
    ]
    for ix in cases:
        assert flat_position(ARR, ix, {}) is None, ix


@pytest.mark.parametrize("check_bounds", [False, True])
def test_programs_reading_through_a_reshape_match_numpy(check_bounds):
    rng = np.random.default_rng(4)
    x3, x2 = rng.standard_normal((7, 5, 3)), rng.standard_normal((4, 6))

    def total(a):
        return A.sum_all(A.map(lambda v: A.exp(v * 0.5), a))

    def shifted(a):  # a flat position j + 1 (a let inside the index)
        fl = A.reshape((a.shape[0] * a.shape[1],), a)
        return A.generate((a.shape[0] * a.shape[1] - 1,), lambda i: fl[i[0] + 1] * 2.0)

    for f, x, want in ((total, x3, np.exp(0.5 * x3).sum()), (total, x2, np.exp(0.5 * x2).sum()),
                       (shifted, x2, 2.0 * x2.reshape(-1)[1:])):
        got = A.compile(f, backend="cpu", check_bounds=check_bounds)(x)
        np.testing.assert_allclose(got, want, rtol=1e-13)
