"""The local rewriter: bottom-up rewriting with the rule tables, and its public passes.

Invariant: each rule maps a term to an equal term of the same type that does no more
work; ``Local.post`` applies rules at a node until none fires (at most 32 times), so the
result is a local normal form.  The flags select rule families: constant folding
(``fold``), projections (``project``) and identity/zero arrays (``zeros``).
"""

from __future__ import annotations

from collections import ChainMap

from ..ast.nodes import (Alet, Avar, Awhile, Backpermute, Const, Generate, Lam, Let, Permute,
                         Program, Use, Var, fresh)
from ..ast.traverse import rebuild
from ..ast.types import ArrayT
from .array_rules import ARRAY_RULES
from .base import trivial
from .rename import simplifier_pass
from .rules import EXP_RULES
from .shapes import ShapeFacts, default_dims, meet_dims


class Local(ShapeFacts):
    """Bottom-up local rewriting; ``flags`` selects the families of rules."""

    def __init__(self, fold=True, project=True, zeros=True, adjoint_zeros=False, subst=None):
        self.fold, self.project, self.zeros = fold, project, zeros
        self.adjoint_zeros = adjoint_zeros
        self.subst = {} if subst is None else subst  # variable name -> trivial term
        self.bound = {}  # let-bound variable name -> its (rewritten) bound term
        # array variable name -> its dimensions, when they are known better than
        # ``(shape v).k`` (each a cheap expression in scope, e.g. ``(shape a).0`` or 3)
        self.dims = {}
        # tuple-of-arrays variable name -> tree of dimensions (see ``tree_dims``), and
        # id(awhile) -> (awhile, tree of its result's dimensions)
        self.tuple_dims = {}
        self.memo = {}  # id(array term) -> (term, its dimensions)
        self.ibounds = {}  # index parameter name -> the dimensions it ranges over
        self.changes = 0

    def run(self, prog: Program) -> Program:
        return rebuild(prog, self.go)

    def derived(self, subst) -> Local:
        """A rewriter with every rule on, substituting ``subst``, that sees this one's
        bindings but records its own separately."""
        new = Local(True, True, True, self.adjoint_zeros, subst)
        new.bound, new.dims = ChainMap({}, self.bound), ChainMap({}, self.dims)
        new.tuple_dims = ChainMap({}, self.tuple_dims)
        new.memo, new.ibounds = self.memo, self.ibounds
        return new

    # -- traversal

    def go(self, n):
        t = type(n)
        if t is Var or t is Avar:
            r = self.subst.get(n.name)
            return n if r is None else r
        if t is Const or t is Use:
            return n
        if t is Let or t is Alet:
            return self.chain(n, t)
        if t is Awhile:
            return self.post(self.awhile(n))
        if t is Generate or t is Backpermute:
            d = self.exp_dims(n.shape)
            if d is not None:
                self.ibounds[n.f.params[0].name] = d
        elif t is Permute:
            d = self.dims_of(n.src)
            if d is not None:
                self.ibounds[n.f.params[0].name] = d
        return self.post(rebuild(n, self.go))

    def chain(self, n, t):
        kept = []
        while type(n) is t:
            b = self.go(n.bound)
            name = n.var.name
            if trivial(b):
                self.subst[name] = b
                self.changes += 1
            else:
                self.bound[name] = b
                if t is Alet and isinstance(b.type, ArrayT):
                    self.dims.pop(name, None)  # a fact from a dropped assumption (``awhile``)
                    d = self.dims_of(b)
                    if d is not None and any(x is not None for x in d):
                        dflt = default_dims(n.var)
                        d = tuple(dflt[k] if x is None else x for k, x in enumerate(d))
                        if d != dflt:
                            self.dims[name] = d
                kept.append((n, b))
            n = n.body
        cur = self.go(n)
        for orig, b in reversed(kept):
            if orig.bound is b and orig.body is cur:
                cur = orig
            else:
                cur = t(orig.var, b, cur)
        return cur

    def awhile(self, n: Awhile) -> Awhile:
        """``n`` with its functions rewritten knowing which dimensions of its state
        never change: the greatest set of the initial state's dimensions that every
        iteration keeps, found by assuming them all and dropping those the body does not
        return until the assumption holds.  Reverse mode's loops carry adjoints and tapes
        whose shapes are the primal's; knowing it, their bodies' bounds tests against
        the primal's sizes and ``min`` of equal sizes fold away."""
        init = self.go(n.init)
        assumed = self.tree_dims(init)
        while True:
            for lam in (n.cond, n.body):
                self._assume(lam.param, assumed)
            cond, body = self.go(n.cond), self.go(n.body)
            kept = meet_dims(assumed, self.tree_dims(body.body), n.type)
            if kept == assumed:
                break
            assumed = kept
            self.memo.clear()  # facts derived under the dropped assumption
        out = n if (cond is n.cond and body is n.body and init is n.init) else \
            Awhile(cond, body, init, n.every)
        if assumed is not None:
            self.tuple_dims[id(out)] = (out, assumed)
        return out

    def _assume(self, p: Avar, d):
        """Record (or forget) the dimensions ``d`` of the loop state parameter ``p``."""
        table = self.dims if isinstance(p.type, ArrayT) else self.tuple_dims
        if d is None:
            table.pop(p.name, None)
            return
        if isinstance(p.type, ArrayT):
            dflt = default_dims(p)
            d = tuple(dflt[k] if x is None else x for k, x in enumerate(d))
        table[p.name] = d

    def post(self, n):
        for _ in range(32):
            rule = RULES.get(type(n))
            r = None if rule is None else rule(self, n)
            if r is None or r is n:
                return n
            self.changes += 1
            n = r
        return n

    def applied(self, lam: Lam, args: tuple):
        """The body of ``lam`` with its parameters replaced by ``args`` (trivial terms),
        rewritten."""
        sub = self.derived({p.name: a for p, a in zip(lam.params, args)})
        return sub.go(lam.body)

    def generate(self, sh, value):
        """``Generate sh (\\_ -> value)`` for a constant ``value``."""
        i = Var(fresh("i"), sh.type)
        return Generate(sh, Lam((i,), value))

#: The rule for each node type (rules return an equal term, or None when they do not apply).
RULES = {**EXP_RULES, **ARRAY_RULES}


@simplifier_pass
def fold_constants(prog: Program) -> Program:
    """Constant folding and exact algebraic identities (see ``rules`` and ``array_rules``).

    ``2.0 * 3.0`` becomes ``6.0``, ``x * 1.0`` becomes ``x``, ``if True then a else b``
    becomes ``a``; ``x + 0.0`` stays (it is not ``x`` when ``x`` is ``-0.0``).
    """
    return Local(fold=True, project=False, zeros=False).run(prog)


@simplifier_pass
def eliminate_zeros(prog: Program, adjoint_zeros: bool = False) -> Program:
    """Remove identity maps and zero contributions (see ``rules`` and ``array_rules``).

    ``ZipWith (+) a (Generate (shape a) (\\_ -> 0))`` becomes ``a`` for integers, and
    for floats when ``adjoint_zeros`` (after AD: ``x + 0.0`` only loses the sign of a
    zero adjoint).
    """
    return Local(fold=False, project=False, zeros=True, adjoint_zeros=adjoint_zeros).run(prog)
