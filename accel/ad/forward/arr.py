"""Forward rules of the array constructs, one function ``rule(fwd, bind)`` each
(``fwd`` is the driver's ``ArrayForward``): elementwise, folds and scans, permute,
the element movements, and ``awhile``.  The driver's ``RULES`` table maps node types
to them."""

from __future__ import annotations


from ...ast import nodes as N
from ...ast.patterns import projection_side
from ...ast.traverse import freshen
from ...ast.types import ATupleT, int64
from ..anf import ABind, ABlock, ablock_term, aflatten
from ..anf import leaves as aleaves
from ..anf import paths as apaths
from ..anf import tree_like as atree_like
from ..anf import type_leaves as atype_leaves
from ..blocks import zero
from ...errors import NotDifferentiableError
from ..combination import located_at
from . import scatter_general
from .exp import ExpTangent, jvp_lam
from .terms import (tangent_var, prim, lam_of, let_apply, is_float, add_lam, combiner_op, prj_lam,
                    aprj, arr_atoms, fresh_spec, tie_lam)


def use(fwd, b: ABind):
    # primal:  y = Use literal;  forward: no tangent (a constant)
    fwd.keep(b)

def generate(fwd, b: ABind):
    # primal:  y = Generate sh f
    # forward: (y, y_dot) = unzip (Generate sh (\ix -> (f ix, f_dot ix)))
    op = b.op
    f2 = jvp_lam(op.f, (False,), fwd.arr_tan) if fwd.reads_active(op.f) else None
    if f2 is None:
        return fwd.keep(b)
    fwd.split(b.outs[0], N.Generate(freshen(op.shape), f2))

def map_(fwd, b: ABind):
    # primal:  y = Map f a
    # forward: (y, y_dot) = unzip (ZipWith (\x x_dot -> (f x, f_dot x x_dot)) a a_dot)
    op = b.op
    ad = fwd.dot(op.a)
    if ad is None and not fwd.reads_active(op.f):
        return fwd.keep(b)
    f2 = jvp_lam(op.f, (ad is not None,), fwd.arr_tan)
    if f2 is None:
        return fwd.keep(b)
    pairs = N.ZipWith(f2, op.a, ad) if ad is not None else N.Map(f2, op.a)
    fwd.split(b.outs[0], pairs)

def zip_with(fwd, b: ABind):
    # primal:  y = ZipWith f a b  (on the intersection of the shapes)
    # forward: (y, y_dot) = unzip (ZipWith (\(x, x_dot) (z, z_dot) -> (f x z,
    #          f_dot x z x_dot z_dot)) (zip a a_dot) (zip b b_dot)); zip a a_dot has
    #          a's shape, so the outer ZipWith intersects exactly as the primal does
    op = b.op
    ad, bd = fwd.dot(op.a), fwd.dot(op.b)
    if ad is None and bd is None and not fwd.reads_active(op.f):
        return fwd.keep(b)
    f2 = jvp_lam(op.f, (ad is not None, bd is not None), fwd.arr_tan)
    if f2 is None:
        return fwd.keep(b)
    if ad is None and bd is None:
        return fwd.split(b.outs[0], N.ZipWith(f2, op.a, op.b))
    xa = fwd.zipped(op.a, ad) if ad is not None else op.a
    xb = fwd.zipped(op.b, bd) if bd is not None else op.b

    def body(p, q):
        args = [N.Prj(0, p) if ad is not None else p, N.Prj(0, q) if bd is not None else q]
        args += [N.Prj(1, p)] if ad is not None else []
        args += [N.Prj(1, q)] if bd is not None else []
        return let_apply(f2, args)

    lam = lam_of((xa.type.elt, xb.type.elt), body)
    fwd.split(b.outs[0], N.ZipWith(lam, xa, xb))

def fold(fwd, b: ABind):
    # primal:  y = Fold f z a
    # forward (+):       y_dot = Fold (+) z_dot a_dot
    # forward (max/min): fold (value, tangent sum, count) triples; y_dot = sum / count
    #                    (ties: the mean of the tied tangents)
    # forward (other):   (y, y_dot) = unzip (Fold f' (z, z_dot) (zip a a_dot)) with
    #                    f' (x, x_dot) (w, w_dot) = (f x w, d1 f * x_dot + d2 f * w_dot),
    #                    associative when f is
    op = b.op
    _reduction(fwd, b, op, lambda f, z, a: N.Fold(f, z, a))

def scan(fwd, b: ABind):
    # primal:  y = Scan{l,r}{,1} f z a
    # forward: as Fold, with the same scan over pairs (or triples for max/min)
    op = b.op
    _reduction(fwd, b, op, lambda f, z, a: N.Scan(f, z, a, op.left))

def _reduction(fwd, b, op, make):
    y, a = b.outs[0], op.a
    elt = a.type.elt
    ad = fwd.dot(a)
    zj = ExpTangent(op.z, fwd.arr_tan) if op.z is not None else None
    f_active = fwd.reads_active(op.f)
    if ad is None and not (zj is not None and zj.active) and not f_active:
        return fwd.keep(b)
    kind = None if f_active else combiner_op(op.f)
    if kind == "add":
        fwd.keep(b)
        zd = None if zj is None else zj.tangent()
        ad = ad if ad is not None else fwd.zeros_like(a)
        return fwd.set_dot(y, make(add_lam(elt), zd, ad))
    if kind in ("max", "min") and is_float(elt):
        xs = fwd.triples(a, ad)
        z3 = None if zj is None else zj.pair(N.Const(1, int64))
        return fwd.unzip_triples(y, make(tie_lam(kind, elt), z3, xs))
    f2 = jvp_lam(op.f, (True, True), fwd.arr_tan)
    if f2 is None:
        return fwd.keep(b)
    xs = fwd.zipped(a, ad)
    t = xs.type.elt
    comb = lam_of((t, t), lambda p, q: let_apply(f2, (N.Prj(0, p), N.Prj(0, q),
                                                 N.Prj(1, p), N.Prj(1, q))))
    fwd.split(y, make(comb, None if zj is None else zj.pair(), xs))

def permute(fwd, b: ABind):
    # primal:  y = Permute comb d f s  (f: discrete, no tangent)
    # forward (+):       y_dot = Permute (+) d_dot f s_dot
    # forward (max/min): permute (value, tangent sum, count) triples; y_dot = sum / count
    #                    (ties, with the default too: the mean of the tied tangents)
    # forward (other):   a scatter of (value, tangent) pairs with comb's JVP
    #                    (scatter_general.forward_rule)
    op = b.op
    y = b.outs[0]
    dd, sd = fwd.dot(op.defaults), fwd.dot(op.src)
    if dd is None and sd is None and not fwd.reads_active(op.comb):
        return fwd.keep(b)
    if projection_side(op.comb) is not None:
        # forward (projection): y_dot = Permute proj d_dot f s_dot (the winner is chosen
        #          by index alone, so the tangent scatter picks the winner's tangent)
        fwd.keep(b)
        dd = dd if dd is not None else fwd.zeros_like(op.defaults)
        sd = sd if sd is not None else fwd.zeros_like(op.src)
        return fwd.set_dot(y, N.Permute(freshen(op.comb), dd, freshen(op.f), sd))
    kind = None if fwd.reads_active(op.comb) else combiner_op(op.comb)
    elt = y.type.elt
    if kind == "add":
        fwd.keep(b)
        dd = dd if dd is not None else fwd.zeros_like(op.defaults)
        sd = sd if sd is not None else fwd.zeros_like(op.src)
        return fwd.set_dot(y, N.Permute(add_lam(elt), dd, freshen(op.f), sd))
    if kind in ("max", "min") and is_float(elt):
        d3, s3 = fwd.triples(op.defaults, dd), fwd.triples(op.src, sd)
        return fwd.unzip_triples(y, N.Permute(tie_lam(kind, elt), d3, freshen(op.f), s3))
    if kind == "mul" and is_float(elt):
        # dual numbers: (x, x') * (y, y') = (x y, x y' + x' y), associative and commutative
        def pairs(a, ad):
            if ad is None:
                return fwd.emit(N.Map(lam_of((elt,), lambda x: N.Tuple((x, zero(elt)))), a))
            return fwd.emit(N.ZipWith(lam_of((elt, elt), lambda x, d: N.Tuple((x, d))),
                                       a, ad))
        pair_t = N.Tuple((zero(elt), zero(elt))).type
        comb = lam_of((pair_t, pair_t), lambda u, v:
                    N.Tuple((prim("mul", N.Prj(0, u), N.Prj(0, v)),
                             prim("add", prim("mul", N.Prj(0, u), N.Prj(1, v)),
                                prim("mul", N.Prj(1, u), N.Prj(0, v))))))
        pv = fwd.emit(N.Permute(comb, pairs(op.defaults, dd), freshen(op.f),
                                 pairs(op.src, sd)))
        fwd.binds.append(ABind((y,), N.Map(prj_lam(pv.type.elt, 0), pv)))
        return fwd.set_dot(y, N.Map(prj_lam(pv.type.elt, 1), pv))
    # any other associative and commutative operator: a dual-number scatter
    try:
        return scatter_general.forward_rule(fwd, b, op, jvp_lam(op.comb, (True, True),
                                                                 fwd.arr_tan))
    except NotDifferentiableError as e:
        raise located_at(e, op) from None

def backpermute(fwd, b: ABind):
    # primal:  y = Backpermute sh f a;  forward: y_dot = Backpermute sh f a_dot
    op = b.op
    fwd.keep(b)
    ad = fwd.dot(op.a)
    if ad is not None:
        fwd.set_dot(b.outs[0], N.Backpermute(freshen(op.shape), freshen(op.f), ad))

def reshape(fwd, b: ABind):
    # primal:  y = Reshape sh a;  forward: y_dot = Reshape sh a_dot
    op = b.op
    fwd.keep(b)
    ad = fwd.dot(op.a)
    if ad is not None:
        fwd.set_dot(b.outs[0], N.Reshape(freshen(op.shape), ad))

def replicate(fwd, b: ABind):
    # primal:  y = Replicate spec a;  forward: y_dot = Replicate spec a_dot
    op = b.op
    fwd.keep(b)
    ad = fwd.dot(op.a)
    if ad is not None:
        fwd.set_dot(b.outs[0], N.Replicate(fresh_spec(op.spec), ad))

def slice_(fwd, b: ABind):
    # primal:  y = Slice a spec;  forward: y_dot = Slice a_dot spec
    op = b.op
    fwd.keep(b)
    ad = fwd.dot(op.a)
    if ad is not None:
        fwd.set_dot(b.outs[0], N.Slice(ad, fresh_spec(op.spec)))

def awhile(fwd, b: ABind):
    # primal:  y = Awhile cond body init
    # forward: (y, y_dot) = Awhile (cond . fst) (body, body_dot) (init, init_dot); the
    #          active state leaves are a fixpoint, as for the scalar While
    op = b.op
    t = op.type
    init = arr_atoms(op.init)
    act = [j for j, x in enumerate(init) if fwd.dot(x) is not None]
    while True:
        body, rt = _loop_body(fwd, op.body, t, act)
        more = {j for j, d in enumerate(rt) if d is not None}
        if more <= set(act):
            break
        act = sorted(set(act) | more)
    if not act:
        return fwd.keep(b)
    st = body.param.type
    s = N.Avar(N.fresh("s"), st)
    cond = N.ALam(s, N.Alet(op.cond.param, N.APrj(0, s), op.cond.body))
    dinit = tuple(fwd.dot(init[j]) if fwd.dot(init[j]) is not None
                  else fwd.zeros_like(init[j]) for j in act)
    w = N.Awhile(cond, body, N.ATuple((op.init, N.ATuple(dinit))), op.every)
    touts = tuple(tangent_var(b.outs[j]) for j in act)
    fwd.binds.append(ABind(tuple(b.outs) + touts, w))
    for j, d in zip(act, touts):
        fwd.arr_tan[b.outs[j].name] = d

def _loop_body(fwd, body: N.ALam, t, act: list):
    """``\\(s, s_dot) -> (body s, body_dot s s_dot)`` for the active leaves ``act``."""
    tl = atype_leaves(t)
    st = ATupleT((t, ATupleT(tuple(tl[j] for j in act))))
    s = N.Avar(N.fresh("s"), st)
    pl = [N.Avar(N.fresh("a"), x) for x in tl]
    pre = [ABind((v,), aprj(s, 0, *path)) for v, path in zip(pl, apaths(t))]
    dl = [tangent_var(pl[j]) for j in act]
    pre += [ABind((d,), aprj(s, 1, k)) for k, d in enumerate(dl)]
    blk = aflatten(body.body, {body.param.name: atree_like(t, iter(pl))})
    sub = fwd.sub_sweep({**fwd.arr_tan, **{pl[j].name: d for j, d in zip(act, dl)}})
    rt = sub.ablock(blk)
    res = aleaves(blk.result)
    tans = tuple(rt[j] if rt[j] is not None else sub.zeros_like(res[j]) for j in act)
    lam = N.ALam(s, ablock_term(ABlock(pre + sub.binds, (blk.result, tans))))
    return lam, rt
