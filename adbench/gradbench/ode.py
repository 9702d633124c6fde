"""GradBench's ``ode`` eval: ``s`` fourth-order Runge-Kutta steps of a linear ODE system.

    y' = f(x, y),  f(x, y)_0 = x_0,  f(x, y)_i = x_i y_{i-1};  y(0) = 0,  t in [0, 2]

``primal`` is the final state; ``gradient`` is the gradient of its last component with
respect to ``x``.  The steps are an ``A.awhile`` over (state, step count), so one compiled
program serves every ``s``, and the gradient is ``A.gradientA`` through that loop.
"""

from __future__ import annotations

import numpy as np

import accel as A

from .evalfn import PROGRAMS, EvalFunction, field, floats, integer, tolist

TF = 2.0


def _f(x, y):
    n = x.shape[0]
    return A.generate((n,), lambda i: A.cond(i == 0, x[0], x[i] * y[A.max(i - 1, 0)]))


def _axpy(y, h, k):
    return A.zip_with(lambda a, b: a + h * b, y, k)


def solve(x, ss):
    """The state after ``ss`` (a rank-0 int64 array) steps."""
    s = A.the(ss)
    h = TF / A.to_float(s)

    def step(state):
        y, i = state
        k1 = _f(x, y)
        k2 = _f(x, _axpy(y, h / 2.0, k1))
        k3 = _f(x, _axpy(y, h / 2.0, k2))
        k4 = _f(x, _axpy(y, h, k3))
        inc = A.zip_with(lambda a, b: a + b, A.zip_with(lambda a, b: a + 2.0 * b, k1, k2),
                         A.zip_with(lambda a, b: 2.0 * a + b, k3, k4))
        return _axpy(y, h / 6.0, inc), A.map(lambda v: v + 1, i)

    y0 = A.map(lambda v: 0.0 * v, x)
    y, _ = A.awhile(lambda st: A.unit(A.the(st[1]) < s), step, (y0, A.unit(A.to_int(0))))
    return y


def last(x, ss):
    return A.unit(solve(x, ss)[x.shape[0] - 1])


gradient = A.gradientA(last, wrt=0)


def _decode(inp) -> tuple:
    x = floats(field(inp, "x"), "x", 1)
    s = integer(field(inp, "s"), "s", lo=1)
    if x.size == 0:
        from .evalfn import InputError
        raise InputError("ode: 'x' must not be empty")
    return x, np.array(s, dtype=np.int64)


FUNCTIONS = {
    "primal": EvalFunction(decode=_decode, encode=tolist,
                           run=lambda x, s: PROGRAMS.get(("ode", "primal"), lambda: solve)(x, s)),
    "gradient": EvalFunction(decode=_decode, encode=tolist,
                             run=lambda x, s: PROGRAMS.get(("ode", "gradient"),
                                                           lambda: gradient)(x, s)),
}
