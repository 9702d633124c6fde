"""The one cost model: a rough count of float operations and memory reads of a term.

Fusion recomputes an index function at every use when it costs at most ``CHEAP``
(``accel.fusion.fuse``); the simplifier splits an array of tuples only when its
components' functions do not share more than ``SPLIT_COST`` (``accel.simplify.split``).
Transcendentals (and division) count 8, other float primitives 1, an element read 1, a
``While`` 100; integer arithmetic is free (index arithmetic is cheap next to memory).
"""

from __future__ import annotations

from .nodes import Index, PrimApp, While
from .traverse import subterms

#: Primitives that cost as much as 8 float operations.
EXPENSIVE = {"exp", "log", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
            "expm1", "log1p", "sqrt", "pow", "atan2", "div"}


def cost(n) -> int:
    """A rough count of float operations and memory reads (transcendentals count 8)."""
    c = 0
    stack = [n]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is PrimApp:
            if x.type.is_float or x.op in EXPENSIVE:
                c += 8 if x.op in EXPENSIVE else 1
        elif t is Index:
            c += 1
        elif t is While:
            c += 100
        stack.extend(subterms(x))
    return c
