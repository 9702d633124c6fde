"""Forward mode of scalar functions: ``ScalarForward`` (the sweep over a flattened
scalar block, one tangent binding after each binding), its rules in ``SCALAR_RULES``,
``jvp_lam`` and ``ExpTangent`` (the tangent of a closed expression such as a fold seed)."""

from __future__ import annotations


from ...ast import nodes as N
from ...ast.traverse import freshen
from ...ast.types import TupleT
from ..blocks import (Block, Bind, CondB, Flattener, flatten, fresh_leaves, leaves_of, to_exp,
                      tree_like, type_leaves, zero)
from ..rules import CASTS, DISCRETE, partials
from .terms import tangent_var, prim, prj, leaf_paths, scale, is_float


class ScalarForward:
    """Forward sweep over a flat scalar block: primal bindings interleaved with tangents.

    ``tan`` maps scalar variable names to their tangent atoms (active variables only);
    ``arr_tan`` maps array variable names to their tangent array variables.
    """

    def __init__(self, arr_tan: dict, tan: dict):
        self.arr_tan = arr_tan
        self.tan = tan
        self.binds: list = []

    def child(self) -> "ScalarForward":
        return ScalarForward(self.arr_tan, dict(self.tan))

    def emit(self, term: N.Exp):
        f = Flattener()
        res = f.go(term, {})
        self.binds.extend(f.binds)
        return res

    def of(self, atom):
        """The tangent atom of ``atom`` (None if it is inactive or a constant)."""
        if isinstance(atom, N.Var) and is_float(atom.type):
            return self.tan.get(atom.name)
        return None

    def block(self, blk: Block) -> list:
        """Process ``blk``'s bindings; return the tangents of its result leaves."""
        for b in blk.binds:
            self.bind(b)
        return [self.of(x) for x in leaves_of(blk.result)]

    def bind(self, b: Bind):
        rule = SCALAR_RULES.get(type(b.op))
        if rule is None:  # Prj of a Shape (discrete) or of a free tuple variable: no tangent
            self.binds.append(b)
            return
        rule(self, b)
    def atoms(self, term: N.Exp) -> list:
        """The scalar atoms of a (tuple of) atom(s) term, projecting tuple variables."""
        out = []
        for x in leaves_of(self.emit(term)):
            if isinstance(x.type, TupleT):
                for i in range(len(x.type.items)):
                    out += self.atoms(N.Prj(i, x))
            else:
                out.append(x)
        return out

    def loop_body(self, body: N.Lam, t, act: list):
        """``\\(s, s_dot) -> (body s, body_dot s s_dot)`` for the active leaves ``act``."""
        tl = type_leaves(t)
        st = TupleT((t, TupleT(tuple(tl[j] for j in act))))
        s = N.Var(N.fresh("s"), st)
        pl = fresh_leaves(t, "p")
        pre = [Bind((v,), prj(s, 0, *path)) for v, path in zip(pl, leaf_paths(t))]
        dl = [tangent_var(pl[j]) for j in act]
        pre += [Bind((d,), prj(s, 1, k)) for k, d in enumerate(dl)]
        blk = flatten(body.body, {body.params[0].name: tree_like(t, iter(pl))})
        sub = ScalarForward(self.arr_tan, {**self.tan, **{pl[j].name: d for j, d in zip(act, dl)}})
        rt = sub.block(blk)
        tans = tuple(rt[j] if rt[j] is not None else zero(tl[j]) for j in act)
        lam = N.Lam((s,), to_exp(Block(pre + sub.binds, (blk.result, tans))))
        return lam, rt


# --------------------------------------------------------------------------- rules


def prim_app(fwd, b: Bind):
    # primal:  v = op args;  tangent: v_dot = sum_i d op / d arg_i * arg_i_dot
    fwd.binds.append(b)
    v, op = b.outs[0], b.op
    if not is_float(v.type) or op.op in DISCRETE:
        return
    ds = [fwd.of(a) for a in op.args]
    if all(d is None for d in ds):
        return
    if op.op in CASTS:
        term = prim(op.op, ds[0])
    else:
        term = None
        for p, d in zip(partials(op.op, op.args, v), ds):
            if p is None or d is None:
                continue
            s = scale(p, d)
            term = s if term is None else prim("add", term, s)
        if term is None:
            return
    fwd.tan[v.name] = fwd.emit(term)

def index(fwd, b: Bind):
    # primal:  v = arr[ix];  tangent: v_dot = arr_dot[ix]
    fwd.binds.append(b)
    op = b.op
    ad = fwd.arr_tan.get(op.array.name)
    if ad is None:
        return
    touts = tuple(tangent_var(o) for o in b.outs)
    fwd.binds.append(Bind(touts, N.Index(ad, op.index)))
    for o, t in zip(b.outs, touts):
        if is_float(o.type):
            fwd.tan[o.name] = t

def cond(fwd, b: Bind):
    # primal:  v = if c then t else e;  tangent: (v, v_dot) = if c then (t, t_dot) else
    # (e, e_dot), with zeros where a branch's result is inactive
    op = b.op
    subs = []
    for br in (op.t, op.e):
        s = fwd.child()
        subs.append((s, s.block(br), br))
    act = [j for j, o in enumerate(b.outs)
           if is_float(o.type) and any(rt[j] is not None for _, rt, _ in subs)]
    if not act:
        fwd.binds.append(b)
        return
    blocks = []
    for s, rt, br in subs:
        tans = tuple(rt[j] if rt[j] is not None else zero(b.outs[j].type) for j in act)
        blocks.append(Block(s.binds, (br.result, tans)))
    touts = tuple(tangent_var(b.outs[j]) for j in act)
    fwd.binds.append(Bind(tuple(b.outs) + touts, CondB(op.c, blocks[0], blocks[1])))
    for j, t in zip(act, touts):
        fwd.tan[b.outs[j].name] = t

def while_(fwd, b: Bind):
    # primal:  v = while cond body init
    # tangent: (v, v_dot) = while (cond . fst) (body, body_dot) (init, init_dot); the
    # active state leaves are a fixpoint: active in init, or made active by the body
    op = b.op
    t = op.type
    tl = type_leaves(t)
    init = fwd.atoms(op.init)
    act = [j for j, x in enumerate(init) if fwd.of(x) is not None]
    while True:
        body, rt = fwd.loop_body(op.body, t, act)
        more = {j for j, d in enumerate(rt) if d is not None and is_float(tl[j])}
        if more <= set(act):
            break
        act = sorted(set(act) | more)
    if not act:
        fwd.binds.append(b)
        return
    st = body.params[0].type
    s = N.Var(N.fresh("s"), st)
    cond = N.Lam((s,), N.Let(op.cond.params[0], N.Prj(0, s), op.cond.body))
    dinit = tuple(fwd.of(init[j]) if fwd.of(init[j]) is not None else zero(tl[j])
                  for j in act)
    w = N.While(cond, body, N.Tuple((op.init, N.Tuple(dinit))))
    touts = tuple(tangent_var(b.outs[j]) for j in act)
    fwd.binds.append(Bind(tuple(b.outs) + touts, w))
    for j, d in zip(act, touts):
        fwd.tan[b.outs[j].name] = d


#: scalar node type -> ``rule(fwd, bind)``: emits the binding and its tangent binding
SCALAR_RULES = {
    N.PrimApp: prim_app,
    N.Index: index,
    CondB: cond,
    N.While: while_,
}


def tangent_tree(t, rt: list):
    """The tangent tree of element type ``t`` from leaf tangents (zeros for None)."""
    return tree_like(t, iter(d if d is not None else zero(s)
                             for d, s in zip(rt, type_leaves(t))))


def jvp_lam(lam: N.Lam, active: tuple, arr_tan: dict) -> N.Lam | None:
    """``\\p1..pn p_dot_i.. -> (body, body_dot)`` with one tangent per active parameter.

    Returns None if the result carries no tangent (nothing active reaches it).
    Example: ``jvp_lam(\\x -> x * x, (True,), {})`` is ``\\x x_dot -> (x * x, x * x_dot +
    x * x_dot)``.
    """
    pre, env, tan, tparams = [], {}, {}, []
    for p, act in zip(lam.params, active):
        pl = destructure(p, pre)
        env[p.name] = tree_like(p.type, iter(pl))
        if act:
            d = tangent_var(p)
            tparams.append(d)
            for x, y in zip(pl, destructure(d, pre)):
                if is_float(x.type):
                    tan[x.name] = y
    blk = flatten(lam.body, env)
    fwd = ScalarForward(arr_tan, tan)
    rt = fwd.block(blk)
    if all(d is None for d in rt):
        return None
    body = to_exp(Block(pre + fwd.binds, (blk.result, tangent_tree(lam.type, rt))))
    return freshen(N.Lam(tuple(lam.params) + tuple(tparams), body))


def destructure(p: N.Var, pre: list) -> list:
    """The scalar leaves of parameter ``p`` (projections bound in ``pre`` for tuples)."""
    if not isinstance(p.type, TupleT):
        return [p]
    pl = fresh_leaves(p.type, "p")
    pre.extend(Bind((v,), prj(p, *path)) for v, path in zip(pl, leaf_paths(p.type)))
    return pl


class ExpTangent:
    """The jvp of a closed array-level expression (a fold seed): ``(e, e_dot)``."""

    def __init__(self, e: N.Exp, arr_tan: dict):
        self.e = e
        blk = flatten(e, {})
        fwd = ScalarForward(arr_tan, {})
        rt = fwd.block(blk)
        self.active = any(d is not None for d in rt)
        self.binds, self.res = fwd.binds, blk.result
        self.tan = tangent_tree(e.type, rt)

    def pair(self, *extra) -> N.Exp:
        """``(e, e_dot, *extra)`` (``e_dot`` zero when inactive)."""
        if not self.active:
            return N.Tuple((freshen(self.e), zero(self.e.type)) + extra)
        return freshen(to_exp(Block(self.binds, (self.res, self.tan) + extra)))

    def tangent(self) -> N.Exp:
        if not self.active:
            return zero(self.e.type)
        return freshen(to_exp(Block(self.binds, self.tan)))
