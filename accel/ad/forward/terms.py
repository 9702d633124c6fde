"""Term builders shared by the forward-mode rules: tangent variables, dual-number
arithmetic, pair/triple projections and the recogniser of a combination function."""

from __future__ import annotations


from ...ast import nodes as N
from ...ast.traverse import freshen
from ...ast.types import ATupleT, Scalar, TupleT, int64
from ..blocks import flatten, fresh_leaves, leaves_of, tree_like, zero


def tangent_var(v):
    """A fresh tangent variable ``x_dot`` for the (array or expression) variable ``v``."""
    base = v.name.rstrip("0123456789") or "x"
    return type(v)(N.fresh(base + "_dot"), v.type)


def prim(op, *args) -> N.Exp:
    return N.PrimApp(op, args)


def prj(e, *path):
    for i in path:
        e = N.Prj(i, e)
    return e


def leaf_paths(t, prefix=()):
    if isinstance(t, TupleT):
        return [p for i, s in enumerate(t.items) for p in leaf_paths(s, prefix + (i,))]
    return [prefix]


def lam_of(types, fn) -> N.Lam:
    """``\\x1 .. xn -> fn(x1, .., xn)`` with fresh parameters of ``types``."""
    vs = tuple(N.Var(N.fresh("x"), t) for t in types)
    return N.Lam(vs, fn(*vs))


def let_apply(lam: N.Lam, args) -> N.Exp:
    """``lam`` applied to ``args`` (a let per parameter); ``lam`` must not be reused."""
    body = lam.body
    for p, a in reversed(list(zip(lam.params, args))):
        body = N.Let(p, a, body)
    return body


def scale(p: N.Exp, d: N.Exp) -> N.Exp:
    """``p * d`` with the unit partials folded away."""
    if isinstance(p, N.Const):
        if p.value == 1:
            return d
        if p.value == -1:
            return prim("neg", d)
    return prim("mul", p, d)


def is_float(t) -> bool:
    return isinstance(t, Scalar) and t.is_float


def add_exp(x: N.Exp, y: N.Exp, t) -> N.Exp:
    """Leafwise sum of two tangents of element type ``t`` (bool leaves: ``x``)."""
    if isinstance(t, TupleT):
        return N.Tuple(tuple(add_exp(N.Prj(i, x), N.Prj(i, y), s)
                             for i, s in enumerate(t.items)))
    if t.is_bool:
        return x
    return prim("add", x, y)


def add_lam(t) -> N.Lam:
    return lam_of((t, t), lambda x, y: add_exp(x, y, t))


def combiner_op(lam: N.Lam):
    """``op`` if ``lam`` is ``\\x y -> op x y`` applied leafwise (either order), else None."""
    if len(lam.params) != 2 or lam.params[0].type != lam.params[1].type:
        return None
    t = lam.params[0].type
    xs, ys = fresh_leaves(t, "x"), fresh_leaves(t, "y")
    env = {lam.params[0].name: tree_like(t, iter(xs)), lam.params[1].name: tree_like(t, iter(ys))}
    try:
        blk = flatten(lam.body, env)
    except TypeError:
        return None
    bound = {b.outs[0].name: b.op for b in blk.binds
             if len(b.outs) == 1 and isinstance(b.op, N.PrimApp)}
    ops = set()
    for r, x, y in zip(leaves_of(blk.result), xs, ys):
        op = bound.get(r.name) if isinstance(r, N.Var) else None
        if op is None or len(op.args) != 2 or not all(isinstance(a, N.Var) for a in op.args):
            return None
        if sorted(a.name for a in op.args) != sorted((x.name, y.name)):
            return None
        ops.add(op.op)
    return ops.pop() if len(ops) == 1 else None


def prj_lam(t, i: int) -> N.Lam:
    return lam_of((t,), lambda p: N.Prj(i, p))


def zeros_like_term(v: N.Avar) -> N.Arr:
    elt = v.type.elt
    return N.Map(lam_of((elt,), lambda _: zero(elt)), v)


def aprj(a, *path):
    for i in path:
        a = N.APrj(i, a)
    return a


def arr_atoms(term: N.Arr) -> list:
    if isinstance(term, N.ATuple):
        return [x for i in term.items for x in arr_atoms(i)]
    if isinstance(term.type, ATupleT):
        return [x for i in range(len(term.type.items)) for x in arr_atoms(N.APrj(i, term))]
    return [term]


def fresh_spec(spec: tuple) -> tuple:
    return tuple(None if s is None else freshen(s) for s in spec)


def tie_lam(kind: str, elt) -> N.Lam:
    """Combine (value, tangent sum, count) triples under max/min; ties add up."""
    t = TupleT((elt, elt, int64))
    wins = "gt" if kind == "max" else "lt"

    def body(p, q):
        x, s, c = N.Prj(0, p), N.Prj(1, p), N.Prj(2, p)
        y, u, d = N.Prj(0, q), N.Prj(1, q), N.Prj(2, q)
        pick = N.Cond(prim(wins, x, y), N.Tuple((s, c)),
                      N.Cond(prim(wins, y, x), N.Tuple((u, d)),
                             N.Tuple((prim("add", s, u), prim("add", c, d)))))
        r = N.Var(N.fresh("r"), pick.type)
        return N.Let(r, pick, N.Tuple((prim(kind, x, y), N.Prj(0, r), N.Prj(1, r))))

    return lam_of((t, t), body)
