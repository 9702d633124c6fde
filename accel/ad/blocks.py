"""Flat blocks: the form in which scalar functions are differentiated.

A scalar function body becomes a ``Block``: a list of ``Bind``s, each binding
*scalar* variables (tuples are split into their leaves) to one operation on
atoms (variables or constants), and a result *tree* (an atom or a Python tuple
of trees).  ``Cond`` keeps its two branches as nested blocks; ``While`` stays
opaque.  Blocks convert back to ordinary ``Let`` chains with ``to_exp``; trees and
that conversion are shared with the array level (``flat.EXP``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ast import nodes as N
from ..ast.traverse import substitute
from ..ast.types import TupleT, bool_
from .flat import EXP, leaves


@dataclass
class Bind:
    """``outs = op``: ``op`` is a PrimApp/Index/Prj-of-Shape on atoms, a CondB or a While."""

    outs: tuple  # scalar Vars (the leaves of op's result, left to right)
    op: object


@dataclass
class CondB:
    c: N.Exp  # an atom
    t: "Block"
    e: "Block"


@dataclass
class Block:
    binds: list = field(default_factory=list)
    result: object = None  # a tree of atoms


leaves_of = leaves
tree_term = EXP.tree_term
tree_like = EXP.tree_like
type_leaves = EXP.type_leaves
to_exp = EXP.to_term
bind_term = EXP.bind_term


def zero(t) -> N.Exp:
    """ZeroValue: 0 of a numeric type, False, or a tuple of zeros."""
    if isinstance(t, TupleT):
        return N.Tuple(tuple(zero(i) for i in t.items))
    return N.Const(False if t == bool_ else 0, t)


def zero_tree(t):
    if isinstance(t, TupleT):
        return tuple(zero_tree(i) for i in t.items)
    return zero(t)


def fresh_leaves(t, prefix="x") -> tuple:
    return tuple(N.Var(N.fresh(prefix), s) for s in type_leaves(t))


class Flattener:
    """Turns an expression into a block; ``env`` maps variable names to atom trees."""

    def __init__(self):
        self.binds: list = []

    def bind(self, op, t) -> object:
        outs = fresh_leaves(t)
        self.binds.append(Bind(outs, op))
        return tree_like(t, iter(outs))

    def go(self, e: N.Exp, env: dict):
        while isinstance(e, N.Let):
            env = {**env, e.var.name: self.go(e.bound, env)}
            e = e.body
        if isinstance(e, N.Const):
            return e
        if isinstance(e, N.Var):
            return env.get(e.name, e)
        if isinstance(e, N.Tuple):
            return tuple(self.go(i, env) for i in e.items)
        if isinstance(e, N.Prj):
            t = self.go(e.tup, env)
            if isinstance(t, tuple):
                return t[e.index]
            return self.bind(N.Prj(e.index, t), e.type)  # a free tuple-typed variable
        if isinstance(e, N.PrimApp):
            args = tuple(self.go(a, env) for a in e.args)
            return self.bind(N.PrimApp(e.op, args), e.type)
        if isinstance(e, N.Index):
            ix = tree_term(self.go(e.index, env))
            return self.bind(N.Index(e.array, ix), e.type)
        if isinstance(e, N.Shape):
            return tuple(self.bind(N.Prj(i, e), t) for i, t in enumerate(e.type.items))
        if isinstance(e, N.Cond):
            c = self.go(e.c, env)
            if isinstance(c, N.Const):
                return self.go(e.t if c.value else e.e, env)
            return self.bind(CondB(c, flatten(e.t, env), flatten(e.e, env)), e.type)
        if isinstance(e, N.While):
            init = tree_term(self.go(e.init, env))
            sub = {k: tree_term(v) for k, v in env.items()}
            w = N.While(substitute(e.cond, sub), substitute(e.body, sub), init)
            return self.bind(w, e.type)
        raise TypeError(f"cannot flatten {type(e).__name__}")


def flatten(e: N.Exp, env: dict) -> Block:
    """The block computing ``e`` with variables looked up in ``env``."""
    f = Flattener()
    res = f.go(e, env)
    return Block(f.binds, res)
