"""Reverse rule of the elementwise constructs ``Map``, ``ZipWith`` and ``Generate``.

The element function is differentiated at the scalar level (``exp``); its dual
runs over the result's adjoint, in store mode on the temporaries the rewritten
primal keeps, in recompute mode recomputing them.  Indexing of active arrays
inside the function becomes index adjoints, scattered by the driver.
"""

from __future__ import annotations

from ...ast import nodes as N
from ...ast.traverse import freshen
from ...ast.types import ArrayT, shape_type
from ..anf import ABind
from ..blocks import leaves_of
from . import exp, lift_while
from .gather import affine_forms, gather_adjoint
from .terms import lam1, prj

def elementwise(rev, b, y, dy):
    # primal:  y = Map f a | ZipWith f a b | Generate sh f
    # reverse: dres = ZipWith D(f) dy ytmp  (store)  or  Generate (recompute);
    #          a += Map (fst . fst) dres, b += Map (snd . fst) dres, IAI -> Permute (+)
    op = b.op
    if lift_while.liftable(op, rev.active) is not None:
        # a while_ whose body reads active arrays: run it as an array-level awhile
        return rev.differentiate_instead(b, lift_while.lift(op, y, rev.active), y, dy)
    ad = exp.differentiate_lam(op.f, active=lambda arr: arr.name in rev.active)
    # Arguments reached only through discrete primitives (floor, comparisons, ...)
    # get no contribution at all, not a zero array: a zero adjoint would still run
    # the dual of everything upstream (the tie counts of a maximum under a floor).
    live = [any(x is not None for x in leaves_of(t)) for t in ad.param_adj]
    if not any(live) and not ad.index_adjoints:
        return
    if rev.mode == "store":
        P, D = exp.store_lambdas(ad)
        pt = P.type
        yt = N.Avar(N.fresh("a"), ArrayT(pt, y.type.rank))
        ytmp = N.Avar(N.fresh("a"), ArrayT(pt.items[1], y.type.rank))
        if isinstance(op, N.Generate):
            prim = N.Generate(op.shape, P)
        elif isinstance(op, N.Map):
            prim = N.Map(P, op.a)
        else:
            prim = N.ZipWith(P, op.a, op.b)
        rev.replace[id(b)] = [
            ABind((yt,), prim),
            ABind((y,), N.Map(lam1(pt, lambda r: N.Prj(0, r)), yt)),
            ABind((ytmp,), N.Map(lam1(pt, lambda r: N.Prj(1, r)), yt)),
        ]
        dres_term = N.ZipWith(D, dy, ytmp)
    else:
        ix = N.Var(N.fresh("i"), shape_type(y.type.rank))
        # (an output the caller gives, a loop's next state, is read, not recomputed)
        Dr = exp.recompute_lambda(ad, N.Index(y, ix) if y.name in rev.given else None)
        if isinstance(op, N.Generate):
            args = (ix,)
        elif isinstance(op, N.Map):
            args = (N.Index(op.a, ix),)
        else:
            args = (N.Index(op.a, ix), N.Index(op.b, ix))
        args = args + (N.Index(dy, ix),)
        body = Dr.body
        for p, a in reversed(list(zip(Dr.params, args))):
            body = N.Let(p, a, body)
        dres_term = N.Generate(N.Shape(dy), N.Lam((ix,), body))
    dres = rev.emit(dres_term)
    rt = dres.type.elt
    if isinstance(op, N.Map):
        if live[0]:
            rev.contribute(op.a, N.Map(lam1(rt, lambda r: prj(r, 0, 0)), dres))
    elif isinstance(op, N.ZipWith):
        same = op.a == op.b
        for k, arg in enumerate((op.a, op.b)):
            if live[k]:
                rev.contribute(arg, N.Map(lam1(rt, lambda r, k=k: prj(r, 0, k)), dres),
                                same)
    # reads through affine indices: a gather of their own component of the dual (its
    # own copy of the dual's term, so that fusion inlines it into the gather)
    plans = affine_forms(ad, ad.index_adjoints, y.type.rank, isinstance(op, N.Generate))
    for k, plan in enumerate(plans):
        if plan is not None:
            comp = rev.emit(N.Map(lam1(rt, lambda r, k=k: prj(r, 1, k)), freshen(dres_term)))
            rev.contribute(ad.index_adjoints[k].array,
                           gather_adjoint(plan, ad.index_adjoints[k].array, comp))
    rev.scatter_index_adjoints(ad.index_adjoints, dres, y.type.rank,
                               skip={k for k, p in enumerate(plans) if p is not None})
