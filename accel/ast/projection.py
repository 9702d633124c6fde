"""Recognising projection combination functions of ``permute``.

``\\new old -> new`` is Accelerate's ``permute const``: a scatter in which, among
colliding writes, the one from the last source index in row-major order wins (API.md);
``\\new old -> old`` keeps the defaults.  Backends need to know which, to make the
winner deterministic under parallel execution, and AD needs it for the adjoint rule
(the winner alone gets the output adjoint).  Both ask here, so that the two agree on
what counts as a projection, whatever shape the simplifier left the body in
(``x`` or, for tuple elements, ``(x.0, x.1)``).
"""

from __future__ import annotations

from . import nodes as N
from .types import TupleT


def projection_side(lam: N.Lam) -> int | None:
    """0 if ``lam`` is ``\\new old -> new``, 1 if it is ``\\new old -> old``, else None."""
    if len(lam.params) != 2:
        return None
    for side, p in enumerate(lam.params):
        if _rebuilds(lam.body, p, (), p.type):
            return side
    return None


def _rebuilds(e: N.Exp, p: N.Var, path: tuple, t) -> bool:
    """Whether ``e`` is the component of ``p`` at ``path`` (of type ``t``), possibly
    rebuilt as a tuple of its components."""
    if isinstance(e, N.Tuple):
        return isinstance(t, TupleT) and len(e.items) == len(t.items) and all(
            _rebuilds(x, p, path + (i,), s) for i, (x, s) in enumerate(zip(e.items, t.items)))
    steps = []
    while isinstance(e, N.Prj):
        steps.append(e.index)
        e = e.tup
    return isinstance(e, N.Var) and e.name == p.name and tuple(reversed(steps)) == path
