"""Dead code elimination: unused ``Let``/``Alet`` bindings are dropped.

Invariant: backward liveness over each let chain, with occurrence counts decremented as
bindings go, so a whole dead chain goes in one pass.  Everything is pure; dropping an
unused ``Index`` can drop an out-of-bounds error, as in every compiler.
"""

from __future__ import annotations

from ..ast.nodes import Alet, Avar, Const, Let, Program, Use, Var
from ..ast.traverse import LEAVES, rebuild, subterms
from .rename import simplifier_pass


def occurrences(n, cnt, delta):
    """Add ``delta`` to ``cnt`` for every variable occurrence in ``n``."""
    stack = [n]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is Var or t is Avar:
            cnt[x.name] = cnt.get(x.name, 0) + delta
        elif t is not Const and t is not Use:
            stack += subterms(x)


class DeadCode:
    """Backward: a binding is dead when no occurrence of its variable is left once
    the bindings after it (and their dead code) are gone."""

    def __init__(self, root):
        self.cnt = {}
        occurrences(root, self.cnt, 1)
        self.changes = 0

    def go(self, n):
        t = type(n)
        if t in LEAVES:
            return n
        if t is Let or t is Alet:
            chain = []
            while type(n) is t:
                chain.append(n)
                n = n.body
            cur = body = self.go(n)
            same = body is n
            for orig in reversed(chain):
                if self.cnt.get(orig.var.name, 0) <= 0:
                    occurrences(orig.bound, self.cnt, -1)
                    self.changes += 1
                    same = False
                    continue
                b = self.go(orig.bound)
                if same and b is orig.bound:
                    cur = orig
                else:
                    cur = t(orig.var, b, cur)
                    same = False
            return cur
        return rebuild(n, self.go)


@simplifier_pass
def eliminate_dead_code(prog: Program) -> Program:
    """Drop unused ``Let``/``Alet`` bindings (whole dead chains in one pass)."""
    return DeadCode(prog).go(prog)
