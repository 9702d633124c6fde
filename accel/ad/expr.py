"""Reverse-mode AD of scalar functions (the thesis's section 3.5).

``differentiate_lam`` splits a scalar function into

* a **primal lambda** ``x -> (result, temporaries)``, and
* a **dual lambda** ``(result adjoint, temporaries) -> (x adjoint, IAI)``,

(or, in *recompute* mode, one dual lambda ``(x, result adjoint) -> (x adjoint,
IAI)`` that recomputes the primal: the thesis's section 5.3.1 trade-off).  The
IAI (index-adjoint information) tuple has one entry ``(adjoint, index,
executed)`` per ``Index`` into an active array; the array level turns each into
a ``Permute (+)``.  ``Cond`` exports the temporaries of both branches, with
zero stand-ins for the untaken one, and its dual is again a ``Cond`` whose
untaken branch reports ``executed = False``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ast import nodes as N
from ..ast.traverse import free_vars, freshen
from ..ast.types import Scalar, TupleT, bool_, int64
from ..errors import NotDifferentiableError
from .blocks import (Block, Bind, CondB, Flattener, flatten, fresh_leaves, leaves_of,
                     to_exp, tree_like, tree_term, type_leaves, zero)
from .rules import CASTS, DISCRETE, partials


@dataclass
class IAI:
    """One indexing of array ``array`` whose adjoint must be scattered back."""

    array: N.Avar
    adj: tuple  # atoms, the leaves of the array's element type
    index: tuple  # int64 atoms
    executed: N.Exp  # bool atom

    def term(self) -> N.Exp:
        adj = tree_term(tree_like(self.array.type.elt, iter(self.adj)))
        return N.Tuple((adj, N.Tuple(tuple(self.index)), self.executed))


def iai_type(array: N.Avar):
    return TupleT((array.type.elt, TupleT((int64,) * array.type.rank), bool_))


class Reverse:
    """The reverse sweep over a block: emits dual bindings, threads contributions."""

    def __init__(self, active):
        self.active = active  # predicate on array variables
        self.binds: list = []
        self.contribs: dict = {}
        self.vars: dict = {}
        self.iai: list = []

    def emit(self, term: N.Exp):
        f = Flattener()
        res = f.go(term, {})
        self.binds.extend(f.binds)
        return res

    def contribute(self, x, term):
        if isinstance(x, N.Var) and x.type.is_float:
            self.contribs.setdefault(x.name, []).append(term)
            self.vars[x.name] = x

    def adjoint(self, v):
        terms = self.contribs.pop(v.name, None)
        if not terms:
            return None
        s = terms[0]
        for t in terms[1:]:
            s = self.emit(N.PrimApp("add", (s, t)))
        return s

    def seed(self, tree, adj_tree):
        for x, a in zip(leaves_of(tree), leaves_of(adj_tree)):
            if a is not None:
                self.contribute(x, a)

    def block(self, blk: Block):
        for b in reversed(blk.binds):
            self.bind(b)

    def bind(self, b: Bind):
        op = b.op
        if isinstance(op, N.PrimApp):
            v = b.outs[0]
            if not v.type.is_float:
                return
            a = self.adjoint(v)
            if a is None or op.op in DISCRETE:
                return
            if op.op in CASTS:
                for x in op.args:
                    if x.type.is_float:
                        self.contribute(x, self.emit(N.PrimApp("to_" + x.type.name, (a,))))
                return
            for x, p in zip(op.args, partials(op.op, op.args, v)):
                if p is not None and isinstance(x, N.Var):
                    self.contribute(x, self.emit(_scale(p, a)))
        elif isinstance(op, N.Index):
            adjs = [self.adjoint(o) if o.type.is_float else None for o in b.outs]
            if all(a is None for a in adjs) or not self.active(op.array):
                return
            adjs = tuple(zero(o.type) if a is None else a for o, a in zip(b.outs, adjs))
            self.iai.append(IAI(op.array, adjs, op.index.items, N.Const(True, bool_)))
        elif isinstance(op, CondB):
            self._cond(b, op)
        elif isinstance(op, N.While):
            if any(o.type.is_float and o.name in self.contribs for o in b.outs):
                from .loops import while_dual
                while_dual(self, b, op)
        # Prj (of Shape or of a free tuple variable): discrete or handled by leaves

    def _cond(self, b: Bind, op: CondB):
        adjs = [self.adjoint(o) if o.type.is_float else None for o in b.outs]
        if all(a is None for a in adjs):
            return
        subs = []
        for br in (op.t, op.e):
            sub = Reverse(self.active)
            sub.seed(br.result, tuple(adjs))
            sub.block(br)
            subs.append(sub)
        outer = sorted(set(subs[0].contribs) | set(subs[1].contribs))
        ovars = [subs[0].vars.get(n) or subs[1].vars[n] for n in outer]
        results = []
        for k, sub in enumerate(subs):
            vals = []
            for v in ovars:
                a = sub.adjoint(v) if v.name in sub.contribs else None
                vals.append(zero(v.type) if a is None else a)
            for j, s in enumerate(subs):
                for e in s.iai:
                    if j == k:
                        vals.append(e.term())
                    else:
                        vals.append(zero(iai_type(e.array)))
            results.append(Block(sub.binds, tuple(vals)))
        t = TupleT(tuple(v.type for v in ovars)
                   + tuple(iai_type(e.array) for s in subs for e in s.iai))
        out = self.emit_cond(op.c, results[0], results[1], t)
        for v, a in zip(ovars, out):
            self.contribute(v, a)
        for e, tree in zip([e for s in subs for e in s.iai], out[len(ovars):]):
            adj, ix, ex = tree
            self.iai.append(IAI(e.array, tuple(leaves_of(adj)), tuple(leaves_of(ix)), ex))

    def emit_cond(self, c, t: Block, e: Block, ty):
        outs = fresh_leaves(ty, "j")
        self.binds.append(Bind(outs, CondB(c, t, e)))
        return tree_like(ty, iter(outs))


def _scale(p: N.Exp, a: N.Exp) -> N.Exp:
    if isinstance(p, N.Const):
        if p.value == 1:
            return a
        if p.value == -1:
            return N.PrimApp("neg", (a,))
    return N.PrimApp("mul", (p, a))


# --------------------------------------------------------------------------- exports


def _block_free(binds: list, result) -> frozenset:
    return free_vars(to_exp(Block(binds, result)))


def export_temporaries(blk: Block, needed: set) -> Block:
    """Make the variables of ``needed`` bound inside Cond branches visible after the Cond."""
    out = []
    for b in blk.binds:
        if isinstance(b.op, CondB):
            t = export_temporaries(b.op.t, needed)
            e = export_temporaries(b.op.e, needed)
            tx = [v for bb in t.binds for v in bb.outs if v.name in needed]
            ex = [v for bb in e.binds for v in bb.outs if v.name in needed]
            if tx or ex:
                tz = tuple(zero(v.type) for v in tx)
                ez = tuple(zero(v.type) for v in ex)
                t = Block(t.binds, (t.result, tuple(tx), ez))
                e = Block(e.binds, (e.result, tz, tuple(ex)))
                b = Bind(tuple(b.outs) + tuple(tx) + tuple(ex), CondB(b.op.c, t, e))
            else:
                b = Bind(b.outs, CondB(b.op.c, t, e))
        out.append(b)
    return Block(out, blk.result)


def _all_bound(blk: Block) -> list:
    return [v for b in blk.binds for v in b.outs]


# --------------------------------------------------------------------------- lambdas


@dataclass
class LamAD:
    """The pieces of a differentiated scalar function."""

    params: tuple  # the original parameters
    param_trees: tuple  # atom trees of the parameters' leaves
    primal: Block  # the primal computation, temporaries exported from branches
    dual: list  # dual bindings
    param_adj: tuple  # adjoint atom trees (or None leaves) per parameter
    iai: list
    seed: object  # the adjoint variables (a tree) the dual starts from

    def adjoint_term(self, i: int) -> N.Exp:
        p = self.params[i]
        leaves = iter(a if a is not None else zero(t) for a, t in
                      zip(leaves_of(self.param_adj[i]), type_leaves(p.type)))
        return tree_term(tree_like(p.type, leaves))

    def dual_result(self) -> N.Exp:
        adj = N.Tuple(tuple(self.adjoint_term(i) for i in range(len(self.params))))
        return N.Tuple((adj, N.Tuple(tuple(e.term() for e in self.iai))))


def differentiate_lam(lam: N.Lam, active=lambda a: a.type.elt is not None,
                      seed_tree=None) -> LamAD:
    """Reverse-differentiate ``lam``; the seed is a fresh adjoint variable tree (or given)."""
    pre = []
    trees = []
    for p in lam.params:
        if isinstance(p.type, TupleT):
            leaves = fresh_leaves(p.type, "p")
            for v, path in zip(leaves, _paths(p.type)):
                t = p
                for i in path:
                    t = N.Prj(i, t)
                pre.append(Bind((v,), t))
            trees.append(tree_like(p.type, iter(leaves)))
        else:
            trees.append(p)
    env = {p.name: t for p, t in zip(lam.params, trees)}
    body = flatten(lam.body, env)
    primal = Block(pre + body.binds, body.result)
    if seed_tree is None:
        seed_tree = tree_like(lam.type, iter(fresh_leaves(lam.type, "adj")))
    rev = Reverse(active)
    rev.seed(primal.result, tuple(x if x.type.is_float else None
                                  for x in leaves_of(seed_tree)))
    rev.block(primal)
    param_adj = tuple(tree_like(p.type, iter([rev.adjoint(x) if isinstance(x, N.Var) and
                                              x.type.is_float else None
                                              for x in leaves_of(t)]))
                      for p, t in zip(lam.params, trees))
    ad = LamAD(lam.params, tuple(trees), primal, rev.binds, param_adj, rev.iai, seed_tree)
    needed = set(_block_free(ad.dual, ad.dual_result()))
    ad.primal = export_temporaries(primal, needed)
    return ad


def _paths(t, prefix=()):
    if isinstance(t, TupleT):
        return [p for i, s in enumerate(t.items) for p in _paths(s, prefix + (i,))]
    return [prefix]


def _unpack(var: N.Var, tree) -> list:
    """Bindings that set the leaves of ``tree`` from the tuple variable ``var``."""
    out = []
    for leaf, path in zip(leaves_of(tree), _paths(var.type)):
        t = var
        for i in path:
            t = N.Prj(i, t)
        out.append(Bind((leaf,), t))
    return out


def store_lambdas(ad: LamAD) -> tuple:
    """(primal lambda ``x -> (y, tmps)``, dual lambda ``(adj, tmps) -> (x_adj, iai)``)."""
    dres = ad.dual_result()
    needed = _block_free(ad.dual, dres)
    seed_names = {v.name for v in leaves_of(ad.seed) if isinstance(v, N.Var)}
    avail = _all_bound(ad.primal) + [x for t in ad.param_trees for x in leaves_of(t)
                                     if isinstance(x, N.Var)]
    temps, seen = [], set()
    for v in avail:
        if v.name in needed and v.name not in seed_names and v.name not in seen:
            temps.append(v)
            seen.add(v.name)
    tmp_t = TupleT(tuple(v.type for v in temps))
    primal = N.Lam(ad.params, to_exp(ad.primal, (ad.primal.result, tuple(temps))))
    adj_p = N.Var(N.fresh("adj"), tree_term(ad.seed).type)
    tmp_p = N.Var(N.fresh("tmp"), tmp_t)
    pre = _unpack(adj_p, ad.seed) + _unpack(tmp_p, tuple(temps))
    dual = N.Lam((adj_p, tmp_p), to_exp(Block(pre + ad.dual, dres)))
    return freshen(primal), freshen(dual)


def recompute_lambda(ad: LamAD) -> N.Lam:
    """The dual lambda ``(x..., adj) -> (x_adj, iai)`` that recomputes the primal."""
    adj_p = N.Var(N.fresh("adj"), tree_term(ad.seed).type)
    binds = ad.primal.binds + _unpack(adj_p, ad.seed) + ad.dual
    return freshen(N.Lam(ad.params + (adj_p,), to_exp(Block(binds, ad.dual_result()))))


def gradient_lambda(lam: N.Lam) -> N.Lam:
    """``x... -> partial derivatives`` of a scalar function with a floating result."""
    if not (isinstance(lam.type, Scalar) and lam.type.is_float):
        raise NotDifferentiableError(
            f"gradientE: the function must return a floating scalar, got {lam.type!r}")
    one = N.Const(1, lam.type)
    ad = differentiate_lam(lam, active=lambda a: False, seed_tree=one)
    adj = N.Tuple(tuple(ad.adjoint_term(i) for i in range(len(ad.params))))
    return freshen(N.Lam(lam.params, to_exp(Block(ad.primal.binds + ad.dual, adj))))
