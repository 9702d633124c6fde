"""One round of the simplifier's passes, and ``tidy`` (the expression-level rounds).

Invariant: a round runs CSE, inlining, local rewriting, tuple splitting (and any extra
passes) and dead code elimination once, and reports whether any pass changed the term;
a round that changes nothing is a fixpoint.  ``tidy`` is for terms built after
simplification (fusion composes index functions and shapes by substitution).
"""

from __future__ import annotations

from ..ast.nodes import Lam
from ..ast.traverse import with_fields
from .base import deep
from .cse import CSE
from .dce import DeadCode
from .inline import Inliner
from .local import Local
from .rename import Renamer
from .tuples import TupleSplit
from .uses import Uses


def tidy(e, rounds: int = 4):
    """The simplifier's expression passes (constant folding, projections of tuples and
    lets, ``min x x``, CSE, inlining, dead lets) on one expression or function built
    after simplification: fusion
    composes index functions and shapes by substitution, and without this its shapes
    repeat whole let-chains per dimension (the host evaluates them before every loop).
    Common subterms are shared by lets, single-use lets inlined, dead ones dropped."""
    with deep():
        if type(e) is Lam:
            return with_fields(e, body=tidy(e.body, rounds))
        e = Renamer().go(e)  # fusion shares subterms, binders included
        for _ in range(rounds):
            e, changed = one_round(e, lambda c, x: c.top_exp(x), Local(zeros=False))
            if not changed:
                break
        return e


def one_round(term, cse, local: Local, extra: tuple = ()):
    """One round of the passes over ``term`` (a program, or an expression with ``cse``
    its entry into ``CSE``): ``(new term, whether anything changed)``.  ``extra`` are
    further passes (classes built from the use counts, with ``go`` and ``changes``) run
    after tuple splitting."""
    c = CSE(True)
    term = cse(c, term)
    inl = Inliner(Uses(term), c.scratch)
    term = inl.go(term)
    term = local.go(term)
    tup = TupleSplit(Uses(term))
    term = tup.go(term)
    done = [c, inl, local, tup]
    for make in extra:
        p = make(Uses(term))
        term = p.go(term)
        done.append(p)
    dce = DeadCode(term)
    term = dce.go(term)
    done.append(dce)
    return term, any(x.changes for x in done)
