"""Quotients and remainders of a fold's inner index, counted instead of divided.

A sum over several dimensions reaches a fold as one flat inner index ``j`` unravelled by
``j // c`` and ``j % c`` (fusion reshapes the dimensions into one; AD's gathers fold
over a flattened window).  An integer division costs 20-40 cycles, more than the rest
of a small element function: the gradient of a 2-D convolution with respect to its
kernel, 25 sums of 254,000 terms, spent most of its time dividing.  Along the fold's
inner loop ``j`` grows by one, so ``q = j // c`` and ``r = j % c`` follow by a compare
and an increment (``r += 1; if r == c: r = 0; q += 1``) from their values at the loop's
start.  :func:`counted` finds such divisions (divisor independent of the index, through
the source's lets) and gives the source with each replaced by a variable; the fold
kernel keeps the divided loop for divisors that are not positive (never the case for
shapes, but ``//`` and ``%`` of a user's expression follow ``accel.ast.prims``).
"""

from __future__ import annotations

from accel.ast import nodes as N
from accel.ast.traverse import free_vars, map_children, substitute
from accel.ast.types import int64

__all__ = ["counted"]


ENABLED = True  # read at code generation (tests compare both)


def counted(src: N.Lam, k: int):
    """``(body, [(divisor, q var, r var)])``: ``src``'s body with ``p.k // d`` and
    ``p.k % d`` (``d`` free of the index ``p``; the same ``d`` up to lets shares one
    pair) replaced by the variables, or None when it has none."""
    if not ENABLED:
        return None
    p = src.params[0]
    env: dict = {}  # let-bound names -> their bound expressions

    def collect(e):
        if isinstance(e, N.Let):
            env[e.var.name] = e.bound
        for c in (e.bound, e.body) if isinstance(e, N.Let) else ():
            collect(c)
    collect(src.body)

    def full(e):
        for _ in range(64):  # lets refer to earlier lets: substitute until none is left
            fv = free_vars(e)
            names = {n: env[n] for n in fv if n in env}
            if not names:
                return e
            e = substitute(e, names)
        return None

    divisors: list = []  # [(divisor, q, r)]

    def pair(d):
        for entry in divisors:
            if entry[0] == d:
                return entry
        entry = (d, N.Var(N.fresh("q"), int64), N.Var(N.fresh("r"), int64))
        divisors.append(entry)
        return entry

    def go(e):
        if (isinstance(e, N.PrimApp) and e.op in ("floordiv", "mod") and e.type == int64):
            a, d = full(e.args[0]), full(e.args[1])
            if (a is not None and d is not None and isinstance(a, N.Prj) and a.tup == p
                    and a.index == k and p.name not in free_vars(d)):
                _, q, r = pair(d)
                return q if e.op == "floordiv" else r
        return map_children(e, go) if isinstance(e, N.Node) else e

    body = go(src.body)
    return (body, divisors) if divisors else None
