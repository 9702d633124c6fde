"""Tuple splitting: let-bound tuples used only through projections become one let each.

Invariant: a let-bound ``Tuple``/``ATuple`` whose variable is used only through
projections is replaced by one binding per used component, and a let-bound conditional
of tuples whose components are only partly used is narrowed to those components; no
term is duplicated except trivial ones.
"""

from __future__ import annotations

from ..ast.nodes import Acond, Alet, APrj, ATuple, Avar, Cond, Let, Prj, Program, Tuple, Var, fresh
from ..ast.traverse import LEAVES, fresh_like, rebuild, with_fields
from .base import trivial, wrap_lets
from .local import Local
from .rename import simplifier_pass
from .uses import Uses


def _select(branch, idxs: list, let_t, tup_t, prj_t):
    """``branch`` (a term of tuple type) restricted to components ``idxs``; a single
    index gives that component itself."""
    chain = []
    while type(branch) is let_t:
        chain.append(branch)
        branch = branch.body
    tail = branch
    if type(tail) is tup_t:
        parts = [tail.items[i] for i in idxs]
        new = parts[0] if len(parts) == 1 else tup_t(tuple(parts))
    else:
        var = tail
        binds = []
        if not (type(tail) is Var or type(tail) is Avar):
            var = (Var if tup_t is Tuple else Avar)(fresh("s"), tail.type)
            binds = [(var, tail)]
        parts = [prj_t(i, var) for i in idxs]
        new = wrap_lets(binds, parts[0] if len(parts) == 1 else tup_t(tuple(parts)), let_t)
    for orig in reversed(chain):
        new = let_t(orig.var, orig.bound, new)
    return new


class TupleSplit:
    """Split let-bound tuples used only through projections; narrow let-bound
    conditionals of tuples to the components that are used."""

    def __init__(self, uses: Uses):
        self.u = uses
        self.env = {}  # variable name -> {component index: replacement term}
        self.changes = 0

    def go(self, n):
        t = type(n)
        if t in LEAVES:
            return n
        if (t is Prj or t is APrj) and type(n.tup) in (Var, Avar):
            m = self.env.get(n.tup.name)
            if m is not None:
                return m[n.index]
            return n
        if t is Let or t is Alet:
            return self.chain(n, t)
        return rebuild(n, self.go)

    def chain(self, n, t):
        u = self.u
        tup_t, prj_t, cond_t = (Tuple, Prj, Cond) if t is Let else (ATuple, APrj, Acond)
        binds = []
        changed = False
        origs = []
        while type(n) is t:
            v, b = n.var, self.go(n.bound)
            name = v.name
            used = u.prj.get(name)
            if used and not u.nonprj.get(name) and type(b) is tup_t:
                m = {}
                for i in sorted(used):
                    item = b.items[i]
                    if trivial(item):
                        m[i] = item
                    else:
                        nv = fresh_like(v, item.type)
                        binds.append((nv, item))
                        m[i] = nv
                self.env[name] = m
                changed = True
                self.changes += 1
            elif (used and not u.nonprj.get(name) and type(b) is cond_t
                  and len(used) < len(b.type.items)):
                idxs = sorted(used)
                nb = with_fields(b, t=_select(b.t, idxs, t, tup_t, prj_t),
                           e=_select(b.e, idxs, t, tup_t, prj_t))
                nv = fresh_like(v, nb.type)
                binds.append((nv, nb))
                if len(idxs) == 1:
                    self.env[name] = {idxs[0]: nv}
                else:
                    self.env[name] = {i: prj_t(k, nv) for k, i in enumerate(idxs)}
                changed = True
                self.changes += 1
            else:
                binds.append((v, b))
                origs.append(n)
                changed |= b is not n.bound
            n = n.body
        body = self.go(n)
        if not changed and body is n:
            return origs[0]
        return wrap_lets(binds, body, t)


@simplifier_pass
def project_tuples(prog: Program) -> Program:
    """Projections of tuples (both levels), pushed through lets and conditionals;
    let-bound tuples used only through projections are split into one let per
    component, and let-bound conditionals of tuples narrowed to the used components.
    """
    prog = TupleSplit(Uses(prog)).go(prog)
    return Local(fold=False, project=True, zeros=False).run(prog)
