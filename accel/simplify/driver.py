"""The simplifier's driver: all passes, round after round, to a fixpoint.

Invariant: the program that comes out has the same results as the one that went in (up
to the errors dead code would have raised), is well typed, has globally unique binder
names, and does no more work; at most ``max_rounds`` rounds run, then single-use lets
are inlined once more.
"""

from __future__ import annotations

from ..ast.nodes import Program
from .base import deep
from .inline import inline_lets
from .local import Local
from .rename import unique_binders
from .rounds import one_round
from .split import ElementSplit

MAX_ROUNDS = 10


def simplify(program: Program, adjoint_zeros: bool = False,
             max_rounds: int = MAX_ROUNDS) -> Program:
    """Run all passes to a fixpoint (at most ``max_rounds`` rounds).

    ``adjoint_zeros=True`` (for differentiated programs) also treats ``x + 0.0`` as
    ``x``.  Example: ``simplify(trace_program(f, types))``.
    """
    with deep():
        p = unique_binders(program)
        for _ in range(max_rounds):
            p, changed = one_round(p, lambda c, q: Program(q.params, c.region_arr(q.body)),
                                Local(adjoint_zeros=adjoint_zeros), (ElementSplit,))
            if not changed:
                return p
        return inline_lets(p)
