"""GradBench's ``particle`` eval: steer a charged particle to the origin (Pearlmutter and
Siskind's nested-AD benchmark).

Two fixed unit charges at ``(10, 10 - w)`` and ``(10, 0)`` repel a particle started at
``(0, 8)`` with velocity ``(0.75, 0)``.  :func:`naive_euler` integrates its path with
Euler steps of ``0.1`` (an ``A.awhile``, stepping while the next position stays above the
x axis; the force is minus the gradient of the potential ``p(x) = sum 1/|x - c|``, an AD
gradient inside the loop), interpolates linearly to where the path crosses the x axis and
returns the squared x coordinate there.  The output is the ``w`` found by gradient
descent on that (:func:`.descent.argmin`, started at the input ``w``), whose gradient is
taken *through* the Euler loop: the four functions are nested AD (first letter: the
descent's mode, second: the potential's; ``r`` is ``A.gradientA``, ``f`` ``A.jvp``).
"""

from __future__ import annotations

import numpy as np

import accel as A

from .descent import argmin, grad_f, grad_r
from .evalfn import PROGRAMS, EvalFunction, InputError, field, scalar

DT = 0.1
OUTER = {"r": grad_r, "f": grad_f(1)}
INNER = {"r": grad_r, "f": grad_f(2)}


def charges(w):
    """The fixed charges' positions, a (2, 2) array, for the control ``w`` (shape (1,))."""
    c = A.the(A.unit(w[0]))
    return A.generate((2, 2), lambda ix: A.cond(ix[1] == 0, 10.0,
                                                A.cond(ix[0] == 0, 10.0 - c, 0.0)))


def potential(x, ch):
    """``p(x) = sum_k 1 / |x - ch_k|`` as a rank-0 array."""
    d = A.generate((2,), lambda k: 1.0 / A.sqrt((x[0] - ch[k, 0]) * (x[0] - ch[k, 0])
                                                + (x[1] - ch[k, 1]) * (x[1] - ch[k, 1])))
    return A.unit(A.the(A.sum(d)))


def naive_euler(inner: str):
    """``w`` (shape (1,)) -> the squared x coordinate where the path meets the x axis."""
    grad = INNER[inner]

    def run(w):
        ch = charges(w)

        def step(s):
            x, xdot, _ = s
            force = grad(potential, x, ch)          # xddot = -grad p
            x_new = A.zip_with(lambda a, v: a + DT * v, x, xdot)
            moved = (x_new, A.zip_with(lambda v, g: v - DT * g, xdot, force), A.unit(True))
            return A.acond(x_new[1] > 0.0, moved, (x, xdot, A.unit(False)))

        x0 = A.generate((2,), lambda i: A.cond(i == 0, 0.0, 8.0))
        v0 = A.generate((2,), lambda i: A.cond(i == 0, 0.75, 0.0))
        x, xdot, _ = A.awhile(lambda s: s[2], step, (x0, v0, A.unit(True)))
        t_f = -x[1] / xdot[1]
        x_f = x[0] + t_f * xdot[0]
        return A.unit(x_f * x_f)
    return run


def program(outer: str, inner: str, **kw):
    """The ``particle`` program of one mode pair: ``w0`` (shape (1,)) -> ``w`` (shape (1,))."""
    f = naive_euler(inner)

    def particle(w0):
        return argmin(OUTER[outer], f, w0, **kw)
    return particle


def _decode(inp) -> tuple:
    w = field(inp, "w")
    if isinstance(w, bool) or not isinstance(w, (int, float)):
        raise InputError(f"particle: 'w' must be a number, got {w!r}")
    return (np.array([float(w)]),)


def _function(name: str) -> EvalFunction:
    return EvalFunction(decode=_decode, encode=lambda w: scalar(np.asarray(w)[0]),
                        run=lambda w: PROGRAMS.get(("particle", name),
                                                   lambda: program(name[0], name[1]))(w))


FUNCTIONS = {name: _function(name) for name in ("rr", "ff", "fr", "rf")}
