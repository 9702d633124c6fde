"""GradBench's ``lse`` eval: LogSumExp of a vector and its gradient.

Written from its primitives as the eval asks (the maximum, then the shifted sum of
exponentials), and differentiated by ``A.gradientA``; the maximum's adjoint is the
tie-splitting one of accel's ``maximum`` fold, which cancels in exact arithmetic.
"""

from __future__ import annotations

import accel as A

from .evalfn import PROGRAMS, EvalFunction, field, floats, scalar, tolist


def logsumexp(x):
    """``max(x) + log(sum(exp(x - max(x))))`` as a rank-0 array."""
    mx = A.the(A.maximum(x))
    return A.unit(mx + A.log(A.the(A.sum(A.map(lambda v: A.exp(v - mx), x)))))


gradient = A.gradientA(logsumexp)


def _decode(inp) -> tuple:
    x = floats(field(inp, "x"), "x", 1)
    if x.size == 0:
        from .evalfn import InputError
        raise InputError("lse: 'x' must not be empty")
    return (x,)


FUNCTIONS = {
    "primal": EvalFunction(decode=_decode, encode=scalar,
                           run=lambda x: PROGRAMS.get(("lse", "primal"), lambda: logsumexp)(x)),
    "gradient": EvalFunction(decode=_decode, encode=tolist,
                             run=lambda x: PROGRAMS.get(("lse", "gradient"),
                                                        lambda: gradient)(x)),
}
