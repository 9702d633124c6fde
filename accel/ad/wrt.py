"""Which parameters a derivative is taken with respect to: the one resolver behind
``gradientA``/``value_and_gradientA``/``vjp``, ``check_grad`` and ``jvp``.

Reverse mode (``forward=False``) differentiates floating arrays only, in the order the
caller names them (the gradients come back in that order).  Forward mode
(``forward=True``) takes a tangent for any parameter with a floating leaf by default
(tuples of arrays included) and for any parameter it is asked to, in parameter order.
"""

from __future__ import annotations

import numpy as np

from ..ast import nodes as N
from ..ast.types import ArrayT, Scalar, has_float
from ..errors import NotDifferentiableError, ProgramTypeError


def is_float_array(t) -> bool:
    return isinstance(t, ArrayT) and isinstance(t.elt, Scalar) and t.elt.is_float


def resolve_wrt(op: str, prog: N.Program, wrt, *, forward: bool = False) -> tuple:
    """``(positions, single)`` of the differentiated parameters of ``prog``.

    ``wrt``: None (every differentiable parameter), a position, or a sequence of
    positions; ``single`` says whether one gradient (not a tuple) is returned.
    """
    params = prog.params
    n = len(params)
    if wrt is None:
        default = has_float if forward else is_float_array
        idx = tuple(i for i, p in enumerate(params) if default(p.type))
        single = n == 1
    elif isinstance(wrt, (int, np.integer)):
        idx, single = (int(wrt),), True
    else:
        if forward and any(not isinstance(i, (int, np.integer)) for i in wrt):
            raise ProgramTypeError(f"{op}: wrt={wrt!r} must hold parameter positions")
        idx, single = tuple(int(i) for i in wrt), False
    for i in idx:
        if not 0 <= i < n:
            raise ProgramTypeError(f"{op}: wrt={wrt!r} names parameter {i}, but the program "
                                   f"has {n} parameters")
        if not forward and not is_float_array(params[i].type):
            raise NotDifferentiableError(
                f"{op}: parameter {i} has type {params[i].type!r}; only floating arrays have "
                "a gradient")
    if forward:
        idx = tuple(sorted(set(idx)))
    return idx, single
