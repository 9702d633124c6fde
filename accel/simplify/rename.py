"""Unique binder names: ``uniquify`` and the entry wrapper of every public pass.

Invariant: after ``unique_binders`` every binder name is bound exactly once in the whole
program.  Every other pass relies on it: a name then identifies one binder, use counts
are per binder, and moving a term never captures a variable.
"""

from __future__ import annotations

from ..ast.nodes import ALam, Alet, Avar, Const, Lam, Let, Program, Use, Var
from ..ast.traverse import LEAVES, binders, fresh_like, rebuild, subterms, with_fields
from .base import deep, wrap_lets


def simplifier_pass(fn):
    """A public pass: recursion headroom, and unique binder names on entry (the passes
    rely on them; see ``uniquify``)."""
    def run(prog: Program, *args, **kw) -> Program:
        with deep():
            if fn is not unique_binders:
                prog = unique_binders(prog)
            return fn(prog, *args, **kw)
    run.__name__ = fn.__name__
    run.__qualname__ = fn.__qualname__
    run.__doc__ = fn.__doc__
    return run


def _duplicate_binders(prog) -> bool:
    seen = set()
    stack = [prog]
    while stack:
        n = stack.pop()
        if type(n) in LEAVES:
            continue
        for b in binders(n):
            if b.name in seen:
                return True
            seen.add(b.name)
        stack += subterms(n)
    return False


class Renamer:
    """Give every binder whose name was already bound elsewhere a fresh name."""

    def __init__(self):
        self.seen = set()
        self.env = {}

    def bind(self, v, undo):
        if v.name in self.seen:
            nv = fresh_like(v)
        else:
            nv = v
        self.seen.add(v.name)
        undo.append((v.name, self.env.get(v.name)))
        if nv is v:
            self.env.pop(v.name, None)
        else:
            self.env[v.name] = nv
        return nv

    def restore(self, undo):
        for name, old in reversed(undo):
            if old is None:
                self.env.pop(name, None)
            else:
                self.env[name] = old

    def go(self, n):
        t = type(n)
        if t is Var or t is Avar:
            return self.env.get(n.name, n)
        if t is Const or t is Use:
            return n
        undo = []
        if t is Let or t is Alet:
            items = []
            while type(n) is t:
                b = self.go(n.bound)
                items.append((self.bind(n.var, undo), b))
                n = n.body
            body = self.go(n)
            self.restore(undo)
            return wrap_lets(items, body, t)
        if t is Lam or t is Program:
            ps = tuple(self.bind(p, undo) for p in n.params)
            body = self.go(n.body)
            self.restore(undo)
            return with_fields(n, params=ps, body=body)
        if t is ALam:
            p = self.bind(n.param, undo)
            body = self.go(n.body)
            self.restore(undo)
            return with_fields(n, param=p, body=body)
        return rebuild(n, self.go)


def unique_binders(prog: Program) -> Program:
    """``prog`` with globally unique binder names (``prog`` itself if they already are).

    Every pass assumes unique names: then a name identifies one binder, counts of
    uses are per binder, and moving a term never captures a variable.
    """
    if not _duplicate_binders(prog):
        return prog
    return Renamer().go(prog)


uniquify = simplifier_pass(unique_binders)
