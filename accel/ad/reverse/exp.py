"""Reverse-mode AD of scalar functions (the thesis's section 3.5).

``differentiate_lam`` splits a scalar function into

* a **primal lambda** ``x -> (result, temporaries)``, and
* a **dual lambda** ``(result adjoint, temporaries) -> (x adjoint, IAI)``,

(or, in *recompute* mode, one dual lambda ``(x, result adjoint) -> (x adjoint,
IAI)`` that recomputes the primal: the thesis's section 5.3.1 trade-off).  The
IAI (the thesis's index-adjoint information, ``IndexAdjoint`` here) tuple has
one entry ``(adjoint, index, executed)`` per ``Index`` into an active array;
the array level turns each into a ``Permute (+)``.  ``Cond`` exports the
temporaries of both branches, with zero stand-ins for the untaken one, and its
dual is again a ``Cond`` whose untaken branch reports ``executed = False``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ast import nodes as N
from ...ast.traverse import apply_lam, free_vars, freshen, substitute, walk
from ...ast.types import Scalar, TupleT, bool_, int64
from ...errors import NotDifferentiableError
from ..blocks import (Block, Bind, CondB, Flattener, flatten, fresh_leaves, leaves_of,
                      to_exp, tree_like, tree_term, type_leaves, zero)
from ..rules import CASTS, DISCRETE, partials


@dataclass
class IndexAdjoint:
    """One indexing of array ``array`` whose adjoint must be scattered back."""

    array: N.Avar
    adj: tuple  # atoms, the leaves of the array's element type
    index: tuple  # int64 atoms
    executed: N.Exp  # bool atom
    primal_index: tuple = ()  # the index atoms in the primal function (for gather.py)

    def term(self) -> N.Exp:
        adj = tree_term(tree_like(self.array.type.elt, iter(self.adj)))
        return N.Tuple((adj, N.Tuple(tuple(self.index)), self.executed))


def index_adjoint_type(array: N.Avar):
    return TupleT((array.type.elt, TupleT((int64,) * array.type.rank), bool_))


class ScalarReverse:
    """The reverse sweep over a block: emits dual bindings, threads contributions."""

    def __init__(self, active):
        self.active = active  # predicate on array variables
        self.binds: list = []
        self.contribs: dict = {}
        self.vars: dict = {}
        self.index_adjoints: list = []

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
        rule = SCALAR_RULES.get(type(b.op))
        if rule is not None:
            rule(self, b)
        # Prj (of Shape or of a free tuple variable): discrete or handled by leaves

    def emit_cond(self, c, t: Block, e: Block, ty):
        outs = fresh_leaves(ty, "j")
        self.binds.append(Bind(outs, CondB(c, t, e)))
        return tree_like(ty, iter(outs))


def _p(op, *args) -> N.Exp:
    return N.PrimApp(op, args)


def _scale(p: N.Exp, a: N.Exp) -> N.Exp:
    if isinstance(p, N.Const):
        if p.value == 1:
            return a
        if p.value == -1:
            return N.PrimApp("neg", (a,))
    return N.PrimApp("mul", (p, a))

# --------------------------------------------------------------------------- rules


def prim_app(rev, b: Bind):
    # primal:  v = op x1 .. xn
    # reverse: xi += (d op / d xi) * dv   (casts: xi += to_xi dv; discrete ops: nothing)
    op = b.op
    v = b.outs[0]
    if not v.type.is_float:
        return
    a = rev.adjoint(v)
    if a is None or op.op in DISCRETE:
        return
    if op.op in CASTS:
        for x in op.args:
            if x.type.is_float:
                rev.contribute(x, rev.emit(N.PrimApp("to_" + x.type.name, (a,))))
        return
    for x, p in zip(op.args, partials(op.op, op.args, v)):
        if p is not None and isinstance(x, N.Var):
            rev.contribute(x, rev.emit(_scale(p, a)))


def index(rev, b: Bind):
    # primal:  v = arr ! ix   (arr an array carrying a derivative)
    # reverse: IAI += (dv, ix, True)   (scattered into arr's adjoint at the array level)
    op = b.op
    adjs = [rev.adjoint(o) if o.type.is_float else None for o in b.outs]
    if all(a is None for a in adjs) or not rev.active(op.array):
        return
    adjs = tuple(zero(o.type) if a is None else a for o, a in zip(b.outs, adjs))
    rev.index_adjoints.append(IndexAdjoint(op.array, adjs, op.index.items,
                                           N.Const(True, bool_), op.index.items))


def cond(rev, b: Bind):
    # primal:  y = if c then t else e   (both branches export their temporaries)
    # reverse: (adjoints of outer variables, IAI of both) = if c then (dual t) else (dual e),
    #          the untaken branch giving zeros and executed = False
    op = b.op
    adjs = [rev.adjoint(o) if o.type.is_float else None for o in b.outs]
    if all(a is None for a in adjs):
        return
    subs = []
    for br in (op.t, op.e):
        sub = ScalarReverse(rev.active)
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
            for e in s.index_adjoints:
                if j == k:
                    vals.append(e.term())
                else:
                    vals.append(zero(index_adjoint_type(e.array)))
        results.append(Block(sub.binds, tuple(vals)))
    t = TupleT(tuple(v.type for v in ovars)
               + tuple(index_adjoint_type(e.array) for s in subs for e in s.index_adjoints))
    out = rev.emit_cond(op.c, results[0], results[1], t)
    for v, a in zip(ovars, out):
        rev.contribute(v, a)
    for e, tree in zip([e for s in subs for e in s.index_adjoints], out[len(ovars):]):
        adj, ix, ex = tree
        rev.index_adjoints.append(IndexAdjoint(e.array, tuple(leaves_of(adj)),
                                               tuple(leaves_of(ix)), ex, e.primal_index))


# --------------------------------------------------------------------------- while_


def while_(rev, b: Bind):
    """Adjoints for ``outs = while_ cond body init`` inside a scalar function (recompute).

    A scalar loop has no arrays to keep a tape in: state ``k`` is recomputed from the
    initial state (O(n^2) body steps, O(1) memory).  A body that indexes arrays carrying
    a derivative would add index adjoints at every iteration: in an elementwise function
    such a loop is lifted to an array-level ``awhile`` first (``lift_while``); elsewhere
    (a fold, scan or permute function) it is an error.
    """
    # primal:  y = while_ c f x0;   n = its number of iterations
    # reverse: for k = n-1 .. 0:  x_k = f^k x0 (recomputed);  (lam, free) += vjp(f)(x_k, lam);
    #          x0 += lam
    op = b.op
    if not any(o.type.is_float and o.name in rev.contribs for o in b.outs):
        return
    adjs = [rev.adjoint(o) if o.type.is_float else None for o in b.outs]
    if all(a is None for a in adjs):
        return
    if free_vars(op.body) & _active_arrays(rev, op.body):
        raise NotDifferentiableError(
            "while_: reverse mode through a scalar loop whose body indexes arrays that carry "
            "a derivative is supported in map, zip_with and generate functions (run over all "
            "elements as an awhile), not in a fold, scan or permute function (use awhile "
            "there)")
    S = op.init.type
    frees = sorted({v.name: v for v in walk(op.body) if isinstance(v, N.Var)
                    and v.name in free_vars(op.body) and v.type.is_float}.items())
    fvars = [v for _, v in frees]

    def lam2(types, fn):
        ps = tuple(N.Var(N.fresh("w"), t) for t in types)
        return N.Lam(ps, fn(*ps))

    def app(lam, *args):
        return apply_lam(lam, args)

    one = N.Const(1, int64)
    KS = TupleT((S, int64))
    count = N.Prj(1, N.While(
        lam2((KS,), lambda s: app(op.cond, N.Prj(0, s))),
        lam2((KS,), lambda s: N.Tuple((app(op.body, N.Prj(0, s)), _p("add", N.Prj(1, s), one)))),
        N.Tuple((op.init, N.Const(0, int64)))))

    def state_at(k):
        return N.Prj(0, N.While(
            lam2((KS,), lambda s: _p("lt", N.Prj(1, s), k)),
            lam2((KS,), lambda s: N.Tuple((app(op.body, N.Prj(0, s)),
                                           N.PrimApp("add", (N.Prj(1, s), one))))),
            N.Tuple((op.init, N.Const(0, int64)))))

    sp = N.Var(N.fresh("s"), S)
    fps = tuple(N.Var(N.fresh("f"), v.type) for v in fvars)
    blam = N.Lam((sp,) + fps, app(op.body, sp) if not fvars else
                 substitute(app(op.body, sp), {v.name: w for v, w in zip(fvars, fps)}))
    ad = differentiate_lam(blam, active=lambda arr: False)
    D = recompute_lambda(ad)
    DT = TupleT((int64, S) + tuple(v.type for v in fvars))

    def dbody(st):
        km1 = _p("sub", N.Prj(0, st), one)
        kv = N.Var(N.fresh("k"), int64)
        rv = N.Var(N.fresh("r"), D.type)
        lam = N.Prj(1, st)
        res = N.Tuple((kv, N.Prj(0, N.Prj(0, rv))) + tuple(
            _p("add", N.Prj(2 + i, st), N.Prj(1 + i, N.Prj(0, rv))) for i in range(len(fvars))))
        return N.Let(kv, km1, N.Let(rv, app(D, state_at(kv), *[N.Var(v.name, v.type)
                                                               for v in fvars], lam), res))

    lam0 = tree_like(S, iter(a if a is not None else zero(o.type)
                              for a, o in zip(adjs, b.outs)))
    init = N.Tuple((count, tree_term(lam0)) + tuple(zero(v.type) for v in fvars))
    loop = N.While(lam2((DT,), lambda st: _p("gt", N.Prj(0, st), N.Const(0, int64))),
                   lam2((DT,), dbody), init)
    out = rev.emit(loop)
    lam_fin = leaves_of(out[1])
    init_atoms = leaves_of(_exp_tree(op.init))
    for atom, a, t in zip(init_atoms, lam_fin, type_leaves(S)):
        if t.is_float:
            rev.contribute(atom, a)
    for v, a in zip(fvars, out[2:]):
        rev.contribute(v, a)


def _active_arrays(rev, lam) -> set:
    """Names of the arrays carrying a derivative that ``lam`` indexes."""
    names = set()
    for x in walk(lam):
        if isinstance(x, N.Index) and rev.active(x.array):
            names.add(x.array.name)
    return names


def _exp_tree(e: N.Exp):
    if isinstance(e, N.Tuple):
        return tuple(_exp_tree(i) for i in e.items)
    return e


#: scalar node type -> ``rule(rev, bind)``: the dual of one binding of a flattened scalar
#: function (others, projections, carry no derivative of their own)
SCALAR_RULES = {
    N.PrimApp: prim_app,
    N.Index: index,
    CondB: cond,
    N.While: while_,
}


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
    index_adjoints: list
    seed: object  # the adjoint variables (a tree) the dual starts from

    def adjoint_term(self, i: int) -> N.Exp:
        p = self.params[i]
        leaves = iter(a if a is not None else zero(t) for a, t in
                      zip(leaves_of(self.param_adj[i]), type_leaves(p.type)))
        return tree_term(tree_like(p.type, leaves))

    def dual_result(self) -> N.Exp:
        adj = N.Tuple(tuple(self.adjoint_term(i) for i in range(len(self.params))))
        return N.Tuple((adj, N.Tuple(tuple(e.term() for e in self.index_adjoints))))


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
    rev = ScalarReverse(active)
    rev.seed(primal.result, tuple(x if x.type.is_float else None
                                  for x in leaves_of(seed_tree)))
    rev.block(primal)
    param_adj = tuple(tree_like(p.type, iter([rev.adjoint(x) if isinstance(x, N.Var) and
                                              x.type.is_float else None
                                              for x in leaves_of(t)]))
                      for p, t in zip(lam.params, trees))
    ad = LamAD(lam.params, tuple(trees), primal, rev.binds, param_adj, rev.index_adjoints,
               seed_tree)
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


def recompute_lambda(ad: LamAD, output: N.Exp | None = None) -> N.Lam:
    """The dual lambda ``(x..., adj) -> (x_adj, iai)`` that recomputes the primal.

    ``output``: an expression equal to the primal's (scalar) result, the element of the
    array the primal wrote: the dual reads it instead of recomputing the binding that
    made it (``tanh``'s derivative is ``1 - y^2`` of its output), so what only fed that
    binding is dead.  In a loop's reverse sweep the output is the next state, already
    on the loop tape (``loop``), and the body's forward computation goes."""
    adj_p = N.Var(N.fresh("adj"), tree_term(ad.seed).type)
    primal = ad.primal.binds
    res = ad.primal.result
    if output is not None and isinstance(res, N.Var):
        primal = [Bind(b.outs, output) if isinstance(b, Bind) and b.outs == (res,) else b
                  for b in primal]
    binds = primal + _unpack(adj_p, ad.seed) + ad.dual
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
