"""GradBench's ``saddle`` eval: a saddle point of ``f(p, q) = (x_1^2 + y_1^2) - (x_2^2 +
y_2^2)`` (``p = (x_1, y_1)``, ``q = (x_2, y_2)``) by gradient descent, as ``min_p max_q f``.

``r1 = argmin_p max_q f(p, q)`` (both searches started at ``start``), then ``r2 =
argmax_q f(r1, q)``; the output is ``r1 ++ r2``.  The outer search's gradient is taken
*through* the inner search (an ``A.awhile`` that itself takes gradients), so the four
functions are genuinely nested AD: ``rr`` is ``A.gradientA`` of a loop containing
``A.gradientA``, ``ff`` ``A.jvp`` of a loop containing ``A.jvp``, ``fr`` and ``rf`` the
mixed pairs (first letter: the outer search's mode; the last search uses it too).
The descent loop and the gradient helpers are in :mod:`.descent`.
"""

from __future__ import annotations


import accel as A

from .descent import argmax, argmin, grad_f, grad_r
from .evalfn import PROGRAMS, EvalFunction, InputError, field, floats, tolist

MODES = {"r": grad_r, "f": grad_f(2)}


def objective(p, q):
    """``f(p, q)`` as a rank-0 array (``p`` and ``q`` are points of the plane)."""
    return A.unit((p[0] * p[0] + p[1] * p[1]) - (q[0] * q[0] + q[1] * q[1]))


def _r2_cost(q, p):
    return objective(p, q)


def program(outer: str, inner: str, **kw):
    """The ``saddle`` program of one mode pair: ``start`` (2,) -> ``r1 ++ r2`` (4,)."""
    grad0, grad1 = MODES[outer], MODES[inner]

    def r1_cost(p, start):
        return _r2_cost(argmax(grad1, _r2_cost, start, p, **kw), p)

    def saddle(start):
        r1 = argmin(grad0, r1_cost, start, start, **kw)
        r2 = argmax(grad0, _r2_cost, start, r1, **kw)
        return A.generate((4,), lambda j: A.cond(j < 2, r1[A.min(j, 1)],
                                                 r2[A.max(j - 2, 0)]))
    return saddle


def _decode(inp) -> tuple:
    s = floats(field(inp, "start"), "start", 1)
    if s.shape != (2,):
        raise InputError(f"saddle: 'start' must have 2 numbers, got {s.shape[0]}")
    return (s,)


def _function(name: str) -> EvalFunction:
    return EvalFunction(decode=_decode, encode=tolist,
                        run=lambda s: PROGRAMS.get(("saddle", name),
                                                   lambda: program(name[0], name[1]))(s))


FUNCTIONS = {name: _function(name) for name in ("rr", "ff", "fr", "rf")}
