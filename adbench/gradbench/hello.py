"""GradBench's ``hello`` eval: ``square(x) = x * x`` and its derivative ``double``.

Both are accel programs on a rank-0 array; ``double`` is ``A.gradientA`` of ``square``.
"""

from __future__ import annotations

import numpy as np

import accel as A

from .evalfn import PROGRAMS, EvalFunction, InputError, scalar


def square(x):
    return A.map(lambda v: v * v, x)


double = A.gradientA(square)


def _decode(inp) -> tuple:
    if isinstance(inp, bool) or not isinstance(inp, (int, float)):
        raise InputError(f"hello: the input must be a number, got {inp!r}")
    return (np.array(float(inp)),)


def _function(name, prog) -> EvalFunction:
    return EvalFunction(decode=_decode, run=lambda x: PROGRAMS.get(("hello", name),
                                                                   lambda: prog)(x),
                        encode=scalar)


FUNCTIONS = {"square": _function("square", square), "double": _function("double", double)}
