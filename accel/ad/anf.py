"""Array-level flat blocks: the form in which programs are differentiated.

A program body becomes an ``ABlock``: a list of ``ABind``s binding array
variables (tuples of arrays are split into their leaves) to one combinator
whose array arguments are variables, and a result tree of variables.  Each
bound variable is the *label* of its node (thesis section 3.4.2); aliases
(``let a = b``, projections of tuples) are resolved away.  ``Acond`` keeps
its branches as nested blocks; ``Awhile`` stays opaque.  ``Unit e`` becomes
``Generate () (\\_ -> e)`` so that the dual rules have one case less.  Trees and
the way back to ``Alet`` chains are shared with the scalar level (``flat.ARR``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ast import nodes as N
from ..ast.traverse import substitute
from ..ast.types import shape_type
from .flat import ARR, leaves


@dataclass
class ABind:
    outs: tuple  # Avars (leaves of the node's type)
    op: object  # an array node with Avar arguments, or ACondB


@dataclass
class ACondB:
    c: N.Exp
    t: "ABlock"
    e: "ABlock"


@dataclass
class ABlock:
    binds: list = field(default_factory=list)
    result: object = None  # tree of Avars


tree_term = ARR.tree_term
tree_like = ARR.tree_like
type_leaves = ARR.type_leaves
paths = ARR.paths
ablock_term = ARR.to_term
bind_term = ARR.bind_term


class AFlattener:
    def __init__(self):
        self.binds: list = []

    def bind(self, op, t):
        outs = tuple(N.Avar(N.fresh("a"), s) for s in type_leaves(t))
        self.binds.append(ABind(outs, op))
        return tree_like(t, iter(outs))

    def var(self, a: N.Arr, env: dict) -> N.Avar:
        v = self.go(a, env)
        assert isinstance(v, N.Avar), v
        return v

    def go(self, a: N.Arr, env: dict):
        while isinstance(a, N.Alet):
            env = {**env, a.var.name: self.go(a.bound, env)}
            a = a.body
        if isinstance(a, N.Avar):
            return env.get(a.name, a)
        if isinstance(a, N.ATuple):
            return tuple(self.go(i, env) for i in a.items)
        if isinstance(a, N.APrj):
            return self.go(a.tup, env)[a.index]
        # a lambda body (Awhile) may use an outer variable bound to a tuple of arrays
        # (the empty tuple, for instance): substitute the tuple, whose leaves are variables
        sub = {k: v if isinstance(v, N.Avar) else tree_term(v) for k, v in env.items()
               if isinstance(v, (N.Avar, tuple))}
        if isinstance(a, N.Acond):
            c = substitute(a.c, sub)
            return self.bind(ACondB(c, aflatten(a.t, env), aflatten(a.e, env)), a.type)
        if isinstance(a, N.Awhile):
            init = tree_term(self.go(a.init, env))
            return self.bind(N.Awhile(substitute(a.cond, sub), substitute(a.body, sub), init,
                                      a.every),
                             a.type)
        if isinstance(a, N.Unit):
            f = N.Lam((N.Var(N.fresh("x"), shape_type(0)),), substitute(a.exp, sub))
            return self.bind(N.Generate(N.Tuple(()), f), a.type)
        if isinstance(a, N.Use):
            return self.bind(a, a.type)
        kw = {}
        for name in ("f", "z", "shape", "comb", "spec"):
            if hasattr(a, name):
                v = getattr(a, name)
                if isinstance(v, tuple):
                    v = tuple(None if s is None else substitute(s, sub) for s in v)
                elif v is not None:
                    v = substitute(v, sub)
                kw[name] = v
        for name in ("a", "b", "defaults", "src"):
            if hasattr(a, name):
                kw[name] = self.var(getattr(a, name), env)
        if isinstance(a, N.Scan):
            kw["left"] = a.left
        if isinstance(a, N.Permute):
            kw["loc"] = a.loc
        return self.bind(type(a)(**kw), a.type)


def aflatten(a: N.Arr, env: dict) -> ABlock:
    f = AFlattener()
    res = f.go(a, env)
    return ABlock(f.binds, res)


#: the array level's blocks, flattener and tree functions (``leaves`` is the same at both
#: levels; the scalar level's module, ``blocks``, names it ``leaves_of``)
__all__ = ["ABind", "ACondB", "ABlock", "AFlattener", "aflatten", "leaves", "tree_term",
           "tree_like", "type_leaves", "paths", "ablock_term", "bind_term"]
