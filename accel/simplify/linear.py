"""Sums of int64 terms collected as linear forms, so that terms that cancel are removed.

Why: reverse mode writes the extent of a window's adjoint as the sum of the extents it
came from, ``(shape x).0 - (shape k).0 + 1 + (shape k).0 + -1`` (a convolution's output
length plus its kernel's, less one), which is ``(shape x).0``.  Written so, the shape
facts cannot see that the adjoint has the input's shape: the guard ``u.0 < min (shape
x).0 (...)`` stayed in a kernel, and the conv2d gradient copied its image adjoint into
an array of the image's shape (a whole extra pass, 8% of the gradient).

A sum is rewritten only when collecting it removes something: a term cancels, or (in
the sum as written) two constants or two equal terms merge; otherwise it is left as
written (other rules match its shape, e.g. ``i + k`` for shifted reads).  int64
arithmetic wraps, so every reassociation is exact.  Let-bound variables whose bound is
a cheap closed size (``shapes.cheap_closed``) are looked through, as the cancellation
may be between a variable and a use of it (only a cancellation then: a merge would
copy the variable's term in place of its name).
"""

from __future__ import annotations

from ..ast.nodes import Const, PrimApp, Var
from ..ast.types import int64
from .shapes import cheap_closed

__all__ = ["collected"]

_DEPTH = 8  # let-bound variables looked through, nested


def collected(e: PrimApp, bound: dict):
    """``e`` (an int64 ``add`` or ``sub``) with its terms collected, or None when that
    removes nothing.  ``bound``: let-bound variable name -> bound term."""
    terms: dict = {}
    seen = [0, 0, 0]  # terms, constants and let-bound variables met

    def walk(x, coef: int, depth: int) -> int:
        t = type(x)
        if t is Const:
            seen[1] += 1
            return coef * int(x.value)
        if t is PrimApp and x.type == int64:
            op, args = x.op, x.args
            if op == "add" or op == "sub":
                return (walk(args[0], coef, depth)
                        + walk(args[1], coef if op == "add" else -coef, depth))
            if op == "neg":
                return walk(args[0], -coef, depth)
            if op == "mul":
                for a, b in (args, args[::-1]):
                    if type(a) is Const:
                        return walk(b, coef * int(a.value), depth)
        if t is Var and depth < _DEPTH:
            b = bound.get(x.name)
            if b is not None and b.type == int64 and cheap_closed(b):
                seen[2] += 1
                return walk(b, coef, depth + 1)
        seen[0] += 1
        terms[x] = terms.get(x, 0) + coef
        return 0

    const = walk(e, 1, 0)
    kept = [(x, c) for x, c in terms.items() if c != 0]
    cancelled = len(kept) < len(terms)
    merged = not seen[2] and (len(terms) < seen[0] or seen[1] >= 2
                              or (seen[1] == 1 and const == 0))  # (x + 0)
    if not (cancelled or merged):
        return None
    if not kept:
        return Const(const, int64)
    out = None
    for x, c in kept:
        term = x if abs(c) == 1 else PrimApp("mul", (Const(abs(c), int64), x))
        if out is None:
            out = term if c > 0 else PrimApp("neg", (term,))
        else:
            out = PrimApp("add" if c > 0 else "sub", (out, term))
    if const:
        out = PrimApp("add" if const > 0 else "sub", (out, Const(abs(const), int64)))
    return out
