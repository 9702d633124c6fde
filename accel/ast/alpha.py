"""Alpha-equivalence: terms equal up to the names of the binders inside them.

Two uses: CSE keys bound terms by ``alpha_key`` (a hashable flat tuple), and rewrites
that compare two terms (the branches of a conditional, two reductions of one array)
ask ``alpha_eq``, which stops at the first difference.  Free variables keep their names
(binder names are globally unique in the passes that use this).
"""

from __future__ import annotations

from .nodes import Avar, Const, Use, Var
from .traverse import BINDER, BINDERS, LAYOUT, NODE, NODES


def alpha_key(n) -> tuple:
    """A key equal for terms equal up to the names of the binders inside them.

    Free variables keep their names (they are globally unique); bound ones become
    their binder's position in a pre-order walk.  The key is a flat tuple.
    """
    out = []
    bmap = {}
    stack = [n]
    while stack:
        x = stack.pop()
        if x is None:
            out.append(None)
            continue
        t = type(x)
        if t is Var or t is Avar:
            i = bmap.get(x.name)
            out += (t, x.name if i is None else i, x.ty)
            continue
        if t is Const:
            out += (t, repr(x.value), x.ty)
            continue
        if t is Use:
            out.append(x)
            continue
        out.append(t)
        kids = []
        for name, kind in LAYOUT[t]:
            v = getattr(x, name)
            if kind == NODE:
                kids.append(v)
            elif kind == NODES:
                out.append(len(v))
                kids += v
            elif kind == BINDER:
                bmap[v.name] = len(bmap)
                out.append(v.ty)
            elif kind == BINDERS:
                out.append(len(v))
                for p in v:
                    bmap[p.name] = len(bmap)
                    out.append(p.ty)
            else:
                out.append(v)
        kids.reverse()
        stack += kids
    return tuple(out)


def alpha_eq(a, b) -> bool:
    """``a`` and ``b`` are equal up to the names of the binders inside them (a lockstep
    walk that stops at the first difference)."""
    ma, mb = {}, {}
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        t = type(x)
        if t is not type(y) or x is None:
            return False
        if t is Var or t is Avar:
            i = ma.get(x.name)
            if x.ty != y.ty or i != mb.get(y.name) or (i is None and x.name != y.name):
                return False
            continue
        if t is Const:
            if x.ty != y.ty or repr(x.value) != repr(y.value):
                return False
            continue
        if t is Use:
            if x != y:
                return False
            continue
        for name, kind in LAYOUT[t]:
            u, v = getattr(x, name), getattr(y, name)
            if kind == NODE:
                stack.append((u, v))
            elif kind == NODES:
                if len(u) != len(v):
                    return False
                stack += zip(u, v)
            elif kind == BINDER or kind == BINDERS:
                us, vs = (u, v) if kind == BINDERS else ((u,), (v,))
                if len(us) != len(vs):
                    return False
                for p, q in zip(us, vs):
                    if p.ty != q.ty:
                        return False
                    ma[p.name] = mb[q.name] = len(ma)
            elif u != v:
                return False
    return True


# --------------------------------------------------------------------------- uniquify
