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
    # from an active array active (fixed in accel/ad/reverse/driver.py, _activity)
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


def _shrinking_awhile(x, y):
    def cond(s):
        return A.the(s[0]) < 2

    def body(s):
        k, v = s
        return (A.map(lambda c: c + 1, k), A.zip_with(lambda p, q: A.sin(p) * q, v, y))
    return A.sum_all(A.awhile(cond, body, (A.unit(0), x))[1])


def test_forward_mode_through_awhile_whose_state_shrinks():
    x, y = np.array([0.3, 0.7, 1.1]), np.array([0.5, 2.0])
    _, t = A.jvp(_shrinking_awhile, (x, y), (np.ones(3), np.zeros(2)), backend="interpreter")
    v1 = np.sin(x[:2]) * y
    np.testing.assert_allclose(t, np.sum(np.cos(v1) * y * np.cos(x[:2]) * y), rtol=1e-12)


@pytest.mark.parametrize("mode", ["store", "recompute"])
def test_reverse_mode_through_awhile_whose_state_shrinks(mode):
    # found by the soak (seed 11, programs 1259 and 2477); fixed by the flat loop tape
    x, y = np.array([0.3, 0.7, 1.1]), np.array([0.5, 2.0])
    g = A.run(A.gradientA(_shrinking_awhile, wrt=0, mode=mode), x, y, backend="interpreter")
    v1 = np.sin(x[:2]) * y
    np.testing.assert_allclose(g, list(np.cos(v1) * y * np.cos(x[:2]) * y) + [0.0],
                               rtol=1e-12)


def _top_level_scalar_in_while(a):
    c = A.the(A.sum_all(a))  # a scalar computed at the top level ...

    def f(v):  # ... used in the body of a scalar loop (API.md allows it in any function)
        return A.while_(lambda s: s[0] < 2, lambda s: (s[0] + 1, s[1] * c), (0, v))[1]
    return A.sum_all(A.map(f, a))


def test_forward_mode_with_a_top_level_scalar_in_a_while_body():
    x = np.array([0.5, 1.5])
    _, t = A.jvp(_top_level_scalar_in_while, (x,), (np.array([1.0, 0.0]),),
                 backend="interpreter")
    c = x.sum()
    np.testing.assert_allclose(t, c ** 2 + 2 * c * x.sum())


def test_reverse_mode_with_a_top_level_scalar_in_a_while_body():
    """A top-level scalar is bound in the outermost scalar function, outside the loop."""
    # found by the soak (--max-stmts 10, seed 15, program 986)
    x = np.array([0.5, 1.5])
    g = A.run(A.gradientA(_top_level_scalar_in_while), x, backend="interpreter")
    c = x.sum()
    np.testing.assert_allclose(g, [c ** 2 + 2 * c * x.sum()] * 2)
