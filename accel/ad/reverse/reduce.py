"""Reverse rule of ``Fold`` (the thesis's section 3.4, plus any operator).

``+`` broadcasts the adjoint; ``max``/``min`` split it equally among the tied
winners; any other operator goes through the recurrence rule (``recurrences``)
over the accumulators of a scan.
"""

from __future__ import annotations

from ...ast import nodes as N
from ...ast.traverse import freshen
from ...ast.types import Scalar, int64, shape_type
from ..blocks import zero
from .recurrences import recurrence_dual
from .terms import add_lam, binop_of, indexes_active, init_ix, lam1

def fold(rev, b, y, dy):
    # primal:  y = Fold f z a  (innermost dimension of length n)
    # reverse (+):       a += replicate dy along the inner dimension
    # reverse (max/min): a += dy / count where a == y  (ties split equally)
    # reverse (other):   with acc_i the running value, d1/d2 the partials of f,
    #                    a_i += dy * d2(acc_i, a_i) * prod_{j>i} d1(acc_j, a_j)
    #                    (the thesis's scan rule: Scanl for acc, Scanr (*) for products)
    op = b.op
    a, r, elt = op.a, op.a.type.rank, op.a.type.elt
    kind = binop_of(op.f)
    ix = N.Var(N.fresh("i"), shape_type(r))
    bcast = N.Backpermute(N.Shape(a), N.Lam((ix,), init_ix(ix, r)), dy)
    if kind == "add" and (op.z is None or isinstance(op.z, N.Const)):
        return rev.contribute(a, bcast)
    scalar = isinstance(elt, Scalar) and elt.is_float
    if kind in ("max", "min") and scalar:
        # every element equal to the result (the seed z too) gets an equal share
        j = N.Var(N.fresh("i"), shape_type(r))
        hit = lam1(shape_type(r), lambda i: N.Cond(
            N.PrimApp("eq", (N.Index(a, i), N.Index(y, init_ix(i, r)))),
            N.Const(1, elt), N.Const(0, elt)))
        hits = rev.emit(N.Generate(N.Shape(a), hit))
        zhit = None
        if op.z is not None:
            zv = N.Var(N.fresh("z"), elt)
            zhit = lam1(shape_type(r - 1), lambda k: N.Let(zv, freshen(op.z), N.Cond(
                N.PrimApp("eq", (zv, N.Index(y, k))), N.Const(1, elt), N.Const(0, elt))))
            start = rev.emit(N.Generate(N.Shape(y), zhit))
            cnt = rev.emit(N.ZipWith(add_lam(elt), start, rev.emit(
                N.Fold(add_lam(elt), N.Const(0, elt), hits))))
        else:
            cnt = rev.emit(N.Fold(add_lam(elt), N.Const(0, elt), hits))
        o = init_ix(j, r)
        body = N.PrimApp("mul", (N.Index(hits, j), N.PrimApp(
            "div", (N.Index(dy, o), N.Index(cnt, o)))))
        rev.contribute(a, N.Generate(N.Shape(a), N.Lam((j,), body)))
        if op.z is not None and indexes_active(op.z, rev.active):
            k = N.Var(N.fresh("i"), shape_type(r - 1))
            zrow = N.Generate(N.Shape(y), N.Lam((k,), N.PrimApp("mul", (
                N.Index(start, k), N.PrimApp("div", (N.Index(dy, k), N.Index(cnt, k)))))))
            rev.closed_exp(op.z, rev.sum_all(rev.emit(zrow)))
        return
    # any other operator: the accumulators come from a scan, then the recurrence rule
    accs = rev.emit(N.Scan(freshen(op.f), freshen(op.z) if op.z is not None else None,
                            a, True))
    has_z = op.z is not None
    last = N.Prj(r - 1, N.Shape(accs))

    def dacc(ix, p):
        at_end = N.PrimApp("eq", (p, N.PrimApp("sub", (last, N.Const(1, int64)))))
        return N.Cond(at_end, N.Index(dy, init_ix(ix, r)), zero(elt))
    zrows = recurrence_dual(rev, op.f, op.z, a, accs, dacc, has_z, True)
    if has_z and indexes_active(op.z, rev.active):
        rev.closed_exp(op.z, rev.sum_all(rev.emit(zrows)))
