"""Bugs found by the random-program generator and the soak (``accel.testing``), each as
the minimal program that showed it.  Fixed ones are plain tests; open ones are
``xfail(strict=True)`` with the reason."""

from __future__ import annotations

import numpy as np
import pytest

import accel as A
from accel.pipeline import BACKENDS
from accel.testing.properties import usable

KERNEL_BACKENDS = [b for b in BACKENDS if b != "interpreter" and usable(b)]


def _counted_awhile_loss(a0):
    def cond(s):
        return A.the(s[0]) < 2

    def body(s):
        k, x = s
        return (A.map(lambda c: c + 1, k), A.map(lambda v: A.sin(v), x))
    return A.sum_all(A.awhile(cond, body, (A.unit(0), a0))[1])


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
def test_gradient_of_awhile_on_kernel_backends(backend):
    # was: KeyError 'ac...' in the fused evaluator: the reverse pass binds an empty tuple of
    # arrays outside the loop and uses it in the loop body; aflatten left it unsubstituted
    # (fixed in accel/ad/anf.py, AFlattener.go)
    x = np.array([0.5, 1.0])
    g = A.gradientA(_counted_awhile_loss)
    want = np.cos(np.sin(x)) * np.cos(x)
    np.testing.assert_allclose(A.run(g, x, backend="interpreter"), want, rtol=1e-12)
    np.testing.assert_allclose(A.run(g, x, backend=backend), want, rtol=1e-12)


def _int_scan_of_size_of_x(a):
    c = A.scanl1(lambda p, q: p + q, A.fill((a.shape[0],), 1))
    return A.sum_all(A.zip_with(lambda v, k: v * A.to_float(k), a, c))


def _int_scan_of_x(a):
    c = A.scanl1(lambda p, q: p + q, A.map(lambda v: A.to_int(v), a))
    return A.sum_all(A.zip_with(lambda v, k: v * A.to_float(k), a, c))


def _int_permute_max(a):
    c = A.map(lambda v: a.shape[0], a)
    d = A.permute(lambda p, q: A.max(p, q), A.fill((3,), 0), lambda i: i, c)
    return A.sum_all(A.zip_with(lambda v, k: v * A.to_float(k), a, d))


@pytest.mark.parametrize("f, want", [
    (_int_scan_of_size_of_x, [1.0, 2.0, 3.0]),
    (_int_scan_of_x, [0.0, 1.0, 3.0]),
    (_int_permute_max, [3.0, 3.0, 3.0]),
])
def test_integer_arrays_computed_from_differentiated_inputs_carry_no_derivative(f, want):
    # was: NotDifferentiableError "fold/scan: reverse mode needs floating elements ..., got
    # int64" / "permute: max on int64 elements": reverse mode marked integer arrays computed
    # from an active array active (fixed in accel/ad/reverse.py, _activity)
    x = np.array([0.5, 1.25, 2.5])
    np.testing.assert_allclose(A.run(A.gradientA(f), x, backend="interpreter"), want)
    _, t = A.jvp(f, (x,), (np.ones(3),), backend="interpreter")
    np.testing.assert_allclose(t, sum(want))


def test_traced_vjp_with_integer_and_bool_parameters():
    # was: ProgramTypeError "cannot use Const value Const(value=0, ty=int64) in an accel
    # expression": the traced pullback built the zero cotangents of non-floating parameters
    # from a term instead of a user value (fixed in accel/ad/api.py, _zero_like)
    def pull(x, k, b, ct):
        _, pullback = A.vjp(lambda a, n, c: A.map(lambda v: v * 2.0, a), x, k, b)
        return pullback(ct)

    gx, gk, gb = A.run(pull, np.ones(2), np.arange(2, dtype=np.int32), np.array([True, False]),
                       np.array([1.0, 3.0]), backend="interpreter")
    np.testing.assert_array_equal(gx, [2.0, 6.0])
    assert gk.dtype == np.int32 and not gk.any()
    assert gb.dtype == np.bool_ and not gb.any()
