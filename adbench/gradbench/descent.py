"""Gradient descent and the two ways of taking a gradient, shared by ``particle`` and
``saddle`` (Pearlmutter and Siskind's nested-AD benchmarks).

``argmin(grad, f, x0, *rest)`` minimises ``f(x, *rest)`` over the vector ``x`` with the
step-size rule every GradBench tool uses: stop when ``|grad| <= 1e-5`` or a step moves
``x`` by at most ``1e-5``; a step that lowers ``f`` is taken (after ten in a row the
step size doubles), one that does not halves the step size.  It is one ``A.awhile``
whose branches are ``A.acond``s, so only the taken branch evaluates ``f`` or its
gradient; it runs inside an accel program, and can itself be differentiated.

``grad`` is one of:

* :func:`grad_r`: reverse mode, ``A.gradientA`` of ``f`` with respect to ``x``;
* :func:`grad_f`: forward mode, one ``A.jvp`` of ``f`` per coordinate of ``x`` (the
  length ``n`` of ``x`` is fixed when the program is built), the other arguments with
  zero tangents.

Nesting one inside the other (the gradient of a function that itself runs ``argmin``
or takes a gradient) gives the four mode pairs rr, rf, fr, ff.  ``f`` receives every
value it depends on as a parameter (``*rest``), so each transformation sees a closed
program.
"""

from __future__ import annotations

import accel as A

TOLERANCE = 1e-5
ETA0 = 1e-5


def grad_r(f, x, *rest):
    """The gradient of ``f`` with respect to its first argument, in reverse mode."""
    return A.gradientA(f, wrt=0)(x, *rest)


def grad_f(n: int):
    """The gradient of ``f`` with respect to its first argument (a length-``n`` vector),
    in forward mode: ``n`` Jacobian-vector products along the unit vectors."""
    def grad(f, x, *rest):
        zeros = tuple(A.map(lambda v: 0.0 * v, r) for r in rest)
        parts = []
        for k in range(n):
            e = A.generate(x.shape, lambda j, k=k: A.cond(j == k, 1.0, 0.0))
            _, t = A.jvp(f, (x, *rest), (e, *zeros))
            parts.append(A.the(t))
        return A.generate(x.shape, lambda j: _select(j, parts))
    return grad


def _select(j, parts):
    out = parts[-1]
    for k in range(len(parts) - 2, -1, -1):
        out = A.cond(j == k, parts[k], out)
    return out


def _norm(v):
    return A.sqrt(A.the(A.sum(A.map(lambda a: a * a, v))))


def argmin(grad, f, x0, *rest, eta0: float = ETA0, tol: float = TOLERANCE):
    """The ``x`` near ``x0`` minimising ``f(x, *rest)`` (``f`` returns a rank-0 array)."""
    def step(s):
        x, fx, gx, eta, i, _ = s
        e, k = A.the(eta), A.the(i)
        xp = A.zip_with(lambda a, g: a - e * g, x, gx)
        dist = _norm(A.zip_with(lambda a, b: a - b, x, xp))

        def try_step():
            fxp = f(xp, *rest)
            better = (xp, fxp, grad(f, xp, *rest), eta, A.unit(k + 1), A.unit(True))
            worse = (x, fx, gx, A.unit(e / 2.0), A.unit(k * 0), A.unit(True))
            return A.acond(A.the(fxp) < A.the(fx), better, worse)

        stop = (x, fx, gx, eta, i, A.unit(False))
        grow = (x, fx, gx, A.unit(2.0 * e), A.unit(k * 0), A.unit(True))
        return A.acond(_norm(gx) <= tol, stop,
                       A.acond(k == 10, grow, A.acond(dist <= tol, stop, try_step())))

    init = (x0, f(x0, *rest), grad(f, x0, *rest), A.unit(A.to_float(0) + eta0),
            A.unit(A.to_int(0)), A.unit(True))
    return A.awhile(lambda s: s[5], step, init)[0]


def argmax(grad, f, x0, *rest, **kw):
    """The ``x`` near ``x0`` maximising ``f(x, *rest)``: :func:`argmin` of ``-f``."""
    return argmin(grad, _negated(f), x0, *rest, **kw)


def _negated(f):
    def neg(*args):
        return A.map(lambda v: -v, f(*args))
    return neg
