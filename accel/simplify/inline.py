"""Let inlining: trivial lets everywhere, single-use lets where that adds no work.

Invariant: a binding is inlined only when it is trivial (free to duplicate) or used once
at the nesting depth of its binder (so no work moves into a loop body, a combinator's
function or a conditional branch); an array used once is inlined only into a direct array
argument (``Index``/``Shape`` take array variables only).
"""

from __future__ import annotations

from ..ast.nodes import Alet, Avar, Const, Let, Program, Use, Var
from ..ast.traverse import rebuild
from .base import trivial
from .rename import simplifier_pass
from .uses import Uses


class Inliner:
    def __init__(self, uses: Uses, scratch=frozenset()):
        self.u = uses
        self.env = {}
        self.scratch = scratch  # names of ANF temporaries: inlining them is no change
        self.changes = 0

    def go(self, n):
        t = type(n)
        if t is Var or t is Avar:
            r = self.env.get(n.name)
            return n if r is None else r
        if t is Const or t is Use:
            return n
        if t is Let or t is Alet:
            return self.chain(n, t)
        return rebuild(n, self.go)

    def chain(self, n, t):
        u = self.u
        kept = []
        while type(n) is t:
            v = n.var
            name = v.name
            b = self.go(n.bound)
            c = u.cnt.get(name, 0)
            if c == 0:
                self.changes += 1
            elif trivial(b) or (c == 1 and u.udepth[name] == u.bdepth[name]
                                 and (t is Let or name not in u.indirect)):
                self.env[name] = b
                if name not in self.scratch:
                    self.changes += 1
            else:
                kept.append((n, b))
            n = n.body
        cur = self.go(n)
        for orig, b in reversed(kept):
            if orig.bound is b and orig.body is cur:
                cur = orig
            else:
                cur = t(orig.var, b, cur)
        return cur


@simplifier_pass
def inline_lets(prog: Program) -> Program:
    """Inline trivial lets everywhere and single-use lets where that adds no work.

    ``let x = a * b in x + 1`` becomes ``a * b + 1``; an array bound once and used
    once as an argument (``let a2 = Map f a1 in Fold g z a2``) is inlined into that
    argument, but never into an ``Awhile`` function or an ``Acond`` branch.
    """
    return Inliner(Uses(prog)).go(prog)
