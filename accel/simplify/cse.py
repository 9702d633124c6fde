"""Common subexpression elimination and A-normal form (both levels).

Invariant: every strict non-trivial subterm is bound to a variable (expression regions
only when they repeat a subterm), and a let whose bound term equals, up to renaming of
its binders (``accel.ast.alpha``), a term bound by an enclosing let is replaced by that
let's variable.  Terms are reused only from bindings in scope, so nothing moves out of a
conditional branch or a loop body.
"""

from __future__ import annotations

from ..ast.alpha import alpha_key
from ..ast.nodes import (Acond, Alet, Arr, Avar, Awhile, Cond, Const, Exp, Index, Lam, Let, PrimApp,
                         Prj, Program, Shape, Tuple, Use, Var, While, fresh)
from ..ast.traverse import LAYOUT, NODE, NODES, rebuild, subterms, with_fields
from .base import trivial, wrap_lets
from .rename import simplifier_pass


def scan_exp(e, ren) -> tuple:
    """(``e`` has a repeated non-trivial subterm, ``e`` mentions a variable in ``ren``)."""
    seen = {}
    renamed = False
    stack = [e]
    while stack:
        n = stack.pop()
        t = type(n)
        if t is Var or t is Avar:
            renamed = renamed or n.name in ren
            continue
        if t is Const:
            continue
        if t is not Let and t is not Lam and not trivial(n):
            h = hash(n)
            other = seen.get(h)
            if other is not None and (other is n or other == n):
                return True, True
            seen[h] = n
        stack += subterms(n)
    return False, renamed


def rename(n, ren):
    """``n`` with variables renamed by ``ren`` (name -> variable or trivial term)."""
    def go(n):
        t = type(n)
        if t is Var or t is Avar:
            return ren.get(n.name, n)
        if t is Const or t is Use:
            return n
        if t is Let or t is Alet:
            chain = []
            while type(n) is t:
                chain.append((n, go(n.bound)))
                n = n.body
            cur = go(n)
            for orig, b in reversed(chain):
                cur = orig if orig.bound is b and orig.body is cur else t(orig.var, b, cur)
            return cur
        return rebuild(n, go)
    return go(n)


class CSE:
    """A-normalisation with (optionally) reuse of equal bound terms in scope."""

    def __init__(self, merge: bool = True):
        self.merge = merge
        self.avail = {}  # canonical key -> variable bound to that term (in scope)
        self.undo = []  # keys added, popped when their region ends
        self.ren = {}  # variable name -> replacement (merged or trivial)
        self.scratch = set()  # names of the temporaries introduced
        self.changes = 0

    # -- scopes

    def bind(self, v, term, binds):
        if trivial(term):
            self.ren[v.name] = term
            self.changes += 1
            return
        if self.merge:
            k = alpha_key(term)
            u = self.avail.get(k)
            if u is not None:
                self.ren[v.name] = u
                self.changes += 1
                return
            self.avail[k] = v
            self.undo.append(k)
        binds.append((v, term))

    def bind_fresh(self, term, binds):
        v = (Var if isinstance(term, Exp) else Avar)(fresh("c" if isinstance(term, Exp)
                                                          else "ac"), term.type)
        self.scratch.add(v.name)
        self.bind(v, term, binds)
        return self.ren.get(v.name, v)

    def close(self, mark):
        avail, undo = self.avail, self.undo
        while len(undo) > mark:
            del avail[undo.pop()]

    def region_exp(self, e):
        mark = len(self.undo)
        binds = []
        r = self.exp(e, binds, False)
        self.close(mark)
        return wrap_lets(binds, r, Let)

    def region_arr(self, a):
        mark = len(self.undo)
        binds = []
        r = self.arr(a, binds, False)
        self.close(mark)
        return wrap_lets(binds, r, Alet)

    def lam(self, f):
        body = self.region_exp(f.body)
        return f if body is f.body else with_fields(f, body=body)

    def alam(self, f):
        body = self.region_arr(f.body)
        return f if body is f.body else with_fields(f, body=body)

    def avar(self, a):
        return self.ren.get(a.name, a)

    # -- expressions

    def exp(self, e, binds, atom):
        t = type(e)
        if t is Var:
            return self.ren.get(e.name, e)
        if t is Const:
            return e
        if t is Let:
            while type(e) is Let:
                if type(e.bound) is Let:
                    self.changes += 1  # flattened
                b = self.exp(e.bound, binds, False)
                self.bind(e.var, b, binds)
                e = e.body
            return self.exp(e, binds, atom)
        if t is Shape:
            a = self.avar(e.array)
            return e if a is e.array else Shape(a)
        if t is Prj:
            tup = self.exp(e.tup, binds, True)
            return e if tup is e.tup else Prj(e.index, tup)
        if t is Cond:
            term = with_fields(e, c=self.exp(e.c, binds, True), t=self.region_exp(e.t),
                         e=self.region_exp(e.e))
        elif t is While:
            init = self.exp(e.init, binds, True)
            term = with_fields(e, cond=self.lam(e.cond), body=self.lam(e.body), init=init)
        elif t is Index:
            term = with_fields(e, array=self.avar(e.array), index=self.exp(e.index, binds, True))
        elif t is PrimApp:
            args = []
            for x in e.args:
                args.append(self.exp(x, binds, True))
            term = with_fields(e, args=tuple(args))
        elif t is Tuple:
            items = []
            for x in e.items:
                items.append(self.exp(x, binds, True))
            term = with_fields(e, items=tuple(items))
        else:  # pragma: no cover - every expression node is handled above
            raise TypeError(f"cse: unexpected expression {t.__name__}")
        if atom:
            return self.bind_fresh(term, binds)
        return term

    # -- arrays

    def arr(self, a, binds, atom):
        t = type(a)
        if t is Avar:
            return self.avar(a)
        if t is Alet:
            while type(a) is Alet:
                if type(a.bound) is Alet:
                    self.changes += 1  # flattened
                b = self.arr(a.bound, binds, False)
                self.bind(a.var, b, binds)
                a = a.body
            return self.arr(a, binds, atom)
        if t is Acond:
            term = with_fields(a, c=self.top_exp(a.c), t=self.region_arr(a.t),
                               e=self.region_arr(a.e))
        elif t is Awhile:
            init = self.arr(a.init, binds, True)
            term = with_fields(a, cond=self.alam(a.cond), body=self.alam(a.body), init=init)
        elif t is Use:
            term = a
        else:
            vals = []
            for name, kind in LAYOUT[t]:
                v = getattr(a, name)
                if kind == NODE:
                    v = self.sub(v, binds)
                elif kind == NODES:
                    items = []
                    for x in v:
                        items.append(self.sub(x, binds))
                    v = tuple(items)
                vals.append(v)
            term = t(*vals)
        if atom:
            return self.bind_fresh(term, binds)
        return term

    def sub(self, v, binds):
        """A child of an array node: arrays become atoms, functions and expressions
        are normalised on their own."""
        if v is None:
            return None
        if isinstance(v, Arr):
            return self.arr(v, binds, True)
        if type(v) is Lam:
            body = self.top_exp(v.body)
            return v if body is v.body else with_fields(v, body=body)
        return self.top_exp(v)

    def top_exp(self, e):
        """An expression region directly under the array level.  Most have no repeated
        subterm: those are only renamed, not A-normalised (which would rebuild them)."""
        if not self.merge:
            return self.region_exp(e)
        dup, ren = scan_exp(e, self.ren)
        if dup:
            return self.region_exp(e)
        return rename(e, self.ren) if ren else e


@simplifier_pass
def cse(prog: Program) -> Program:
    """Common subexpression elimination (both levels), leaving the program in ANF.

    ``let a2 = Map (\\x -> x * 2.0) a1; a3 = Map (\\y -> y * 2.0) a1 in ZipWith f a2 a3``
    becomes ``let a2 = Map (\\x -> x * 2.0) a1 in ZipWith f a2 a2``.  Run
    ``inline_lets`` afterwards to undo the A-normalisation where nothing was shared.
    """
    c = CSE(True)
    return Program(prog.params, c.region_arr(prog.body))


@simplifier_pass
def anf(prog: Program) -> Program:
    """A-normal form: every strict non-trivial subterm bound by a ``Let``/``Alet``."""
    c = CSE(False)
    return Program(prog.params, c.region_arr(prog.body))
