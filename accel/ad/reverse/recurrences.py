"""Reverse rules for folds and scans with any operator (beyond the thesis).

A fold or scan is a recurrence ``acc_{p+1} = g(acc_p, x_p)`` over the innermost
dimension.  Its adjoints satisfy the *linear* backward recurrence

    lam_p = dout_p + J_p^T lam_{p+1},     J_p = d g / d acc at step p

which is itself a scan, with the associative operator that composes affine
maps ``(c1, M1) . (c2, M2) = (c1 + M1 c2, M1 M2)`` (Futhark's scan rule), so it
stays parallel.  Then each step's full dual, seeded with ``lam_{p+1}``, gives
the adjoint of ``x_p`` and the index adjoints of arrays ``g`` reads.  Tuple
elements give matrix Jacobians (one reverse sweep of ``g`` per output leaf).
Right scans are left scans in reversed coordinates with ``g(acc, x) = f(x, acc)``.
"""

from __future__ import annotations

from ...ast import nodes as N
from ...ast.traverse import apply_lam as _apply, freshen
from ...ast.types import TupleT, int64, shape_type
from ...errors import NotDifferentiableError
from ..blocks import type_leaves, zero
from . import exp


def _leaf_paths(t, prefix=()):
    if isinstance(t, TupleT):
        return [p for i, s in enumerate(t.items) for p in _leaf_paths(s, prefix + (i,))]
    return [prefix]


def _prj(e, path):
    for i in path:
        e = N.Prj(i, e)
    return e


def _c(v, t) -> N.Exp:
    return N.Const(v, t)


def _p(op, *args) -> N.Exp:
    return N.PrimApp(op, args)


class Recurrence:
    """Index helpers for one fold/scan: rank, inner length, coordinates, operator."""

    def __init__(self, f: N.Lam, a: N.Avar, left: bool):
        self.a, self.left, self.r = a, left, a.type.rank
        self.elt = a.type.elt
        self.n = N.Prj(self.r - 1, N.Shape(a))
        if left:
            self.g = f
        else:  # g(acc, x) = f(x, acc)
            self.g = N.Lam((f.params[1], f.params[0]), f.body)
        paths = _leaf_paths(self.elt)
        leaves = type_leaves(self.elt)
        self.fpaths = [p for p, s in zip(paths, leaves) if s.is_float]
        ft = {s for s in leaves if s.is_float}
        if len(ft) != 1:
            raise NotDifferentiableError(
                f"fold/scan: reverse mode needs floating elements of one precision, got "
                f"{self.elt!r}")
        self.ft = ft.pop()

    def pos(self, ix: N.Exp, j: N.Exp) -> N.Exp:
        """The index of left-coordinate position ``j`` in a row (rank r) of ``a``."""
        last = j if self.left else _p("sub", _p("sub", self.n, _c(1, int64)), j)
        return N.Tuple(tuple(N.Prj(k, ix) for k in range(self.r - 1)) + (last,))

    def out_pos(self, ix: N.Exp, p: N.Exp, length: N.Exp) -> N.Exp:
        """The index in an output row of ``length`` elements of left position ``p``."""
        last = p if self.left else _p("sub", _p("sub", length, _c(1, int64)), p)
        return N.Tuple(tuple(N.Prj(k, ix) for k in range(self.r - 1)) + (last,))

    # -- Jacobian of g with respect to the accumulator, as a tuple of k*k entries
    def jacobian(self) -> N.Lam:
        g = self.g
        rows = []
        for pl in self.fpaths:
            lam = N.Lam(g.params, _prj(g.body, pl)) if pl else g
            gl = exp.gradient_lambda(freshen(lam))
            rows.append(gl)
        acc, x = (N.Var(N.fresh("x"), p.type) for p in g.params)
        entries = []
        for pm in self.fpaths:  # M[m][l] = d g_l / d acc_m
            for gl in rows:
                body = _apply(gl, (acc, x))
                entries.append(_prj(N.Prj(0, body), pm))
        return N.Lam((acc, x), N.Tuple(tuple(entries)))

    def identity_jacobian(self) -> bool:
        """Whether ``d g / d acc`` is the identity at every step, written as constants
        (``g(acc, x) = acc + x``, componentwise for tuples)."""
        k = len(self.fpaths)
        body = self.jacobian().body
        for i in range(k):
            for j in range(k):
                v = _constant(body.items[i * k + j])
                if v is None or v != (1 if i == j else 0):
                    return False
        return True

    def sum_op(self) -> N.Lam:
        """``+`` on the adjoints of the floating leaves (one float, or a tuple of k)."""
        k = len(self.fpaths)
        t = self.ft if k == 1 else TupleT((self.ft,) * k)
        u, v = N.Var(N.fresh("u"), t), N.Var(N.fresh("v"), t)
        if k == 1:
            return N.Lam((u, v), _p("add", u, v))
        return N.Lam((u, v), N.Tuple(tuple(_p("add", N.Prj(i, u), N.Prj(i, v))
                                           for i in range(k))))

    def compose(self) -> N.Lam:
        """The affine-map composition operator on (c, M) tuples."""
        k = len(self.fpaths)
        t = TupleT((self.ft,) * (k + k * k))
        u, v = N.Var(N.fresh("u"), t), N.Var(N.fresh("v"), t)

        def c(w, i):
            return N.Prj(i, w)

        def m(w, i, j):
            return N.Prj(k + i * k + j, w)

        items = []
        for i in range(k):
            s = c(u, i)
            for j in range(k):
                s = _p("add", s, _p("mul", m(u, i, j), c(v, j)))
            items.append(s)
        for i in range(k):
            for j in range(k):
                s = None
                for q in range(k):
                    term = _p("mul", m(u, i, q), m(v, q, j))
                    s = term if s is None else _p("add", s, term)
                items.append(s)
        return N.Lam((u, v), N.Tuple(tuple(items)))


def recurrence_dual(rev, f: N.Lam, z, a: N.Avar, accs: N.Avar, dacc, has_z: bool,
                    left: bool):
    """Contribute adjoints of ``a`` (and index adjoints of ``f``) for a fold/scan.

    ``accs`` holds the accumulators in output coordinates (a scan's output); ``dacc(ix, p)``
    gives the direct adjoint of left position ``p`` of row ``ix`` (an expression).  Returns
    the array of per-row ``z`` adjoints (``lam_0``) when ``has_z``.
    """
    R = Recurrence(f, a, left)
    r, ft, k = R.r, R.ft, len(R.fpaths)
    zero_f = _c(0, ft)
    P = _p("add", R.n, _c(1, int64)) if has_z else R.n  # number of accumulators per row
    jac = R.jacobian()

    def acc_at(ix, p):
        return N.Index(accs, R.out_pos(ix, p, P))

    # elements (c_p, M_p) for p in [0, P)
    ix = N.Var(N.fresh("i"), shape_type(r))
    p = N.Prj(r - 1, ix)
    shp = N.Tuple(tuple(N.Prj(q, N.Shape(a)) for q in range(r - 1)) + (P,))
    d = dacc(ix, p)
    cs = [_prj(d, pl) for pl in R.fpaths]
    if has_z:
        step_ok = _p("lt", p, R.n)
        args = (acc_at(ix, p), N.Index(a, R.pos(ix, p)))
    else:
        step_ok = _p("lt", _p("add", p, _c(1, int64)), R.n)
        args = (acc_at(ix, p), N.Index(a, R.pos(ix, _p("add", p, _c(1, int64)))))
    if R.identity_jacobian():
        # acc + x (componentwise): lam_p = dout_p + lam_{p+1}, a suffix sum of the
        # direct adjoints (the rows' ends cut it as M = 0 did): a scan of k floats,
        # not of k + k^2 (a cumulative sum's gradient: one scalar scanr1 (+))
        elem = cs[0] if k == 1 else N.Tuple(tuple(cs))
        compose = R.sum_op()
    else:
        mv = N.Var(N.fresh("m"), jac.type)
        zeros = N.Tuple(tuple(zero_f for _ in range(k * k)))
        mexp = N.Cond(step_ok, _apply(jac, args), zeros)
        elem = N.Let(mv, mexp, N.Tuple(tuple(cs) + tuple(N.Prj(q, mv) for q in range(k * k))))
        compose = R.compose()
    elems = rev.emit(N.Generate(shp, N.Lam((ix,), elem)))
    lam = rev.emit(N.Scan(compose, None, elems, False))  # scanr1: suffix compositions

    def lam_at(ix, q):  # adjoint tree of accumulator q (left coordinates), a Tuple term
        v = N.Index(lam, N.Tuple(tuple(N.Prj(s, ix) for s in range(r - 1)) + (q,)))
        vv = N.Var(N.fresh("l"), v.type)
        if isinstance(v.type, TupleT):
            vals = {pl: N.Prj(i, vv) for i, pl in enumerate(R.fpaths)}
        else:
            vals = {R.fpaths[0]: vv}
        tree = _tree_with(R.elt, vals)
        return N.Let(vv, v, tree)

    # per element of a: the dual of g at its step, seeded with the next accumulator's adjoint
    ad = exp.differentiate_lam(freshen(R.g), active=lambda arr: arr.name in rev.active)
    dual = exp.recompute_lambda(ad)
    i2 = N.Var(N.fresh("i"), shape_type(r))
    j = N.Prj(r - 1, i2)
    if has_z:
        call = _apply(dual, (acc_at(i2, j), N.Index(a, R.pos(i2, j)),
                             lam_at(i2, _p("add", j, _c(1, int64)))))
        body = call
    else:
        jm = _p("sub", j, _c(1, int64))
        call = _apply(dual, (acc_at(i2, _p("max", jm, _c(0, int64))), N.Index(a, R.pos(i2, j)),
                             lam_at(i2, j)))
        first = N.Tuple((N.Tuple((zero(R.elt), lam_at(i2, _c(0, int64)))),
                         zero(call.type.items[1])))
        body = N.Cond(_p("eq", j, _c(0, int64)), first, call)
    # dres over a in left coordinates; map back to a's layout
    dres = rev.emit(N.Generate(N.Shape(a), N.Lam((i2,), body)))
    i3 = N.Var(N.fresh("i"), shape_type(r))
    back = R.pos(i3, N.Prj(r - 1, i3))  # reversal is its own inverse
    xadj = N.Generate(N.Shape(a), N.Lam((i3,), N.Prj(1, N.Prj(0, N.Index(dres, back)))))
    rev.contribute(a, xadj)
    rev.scatter_index_adjoints(ad.index_adjoints, dres, r)
    if has_z:
        i4 = N.Var(N.fresh("i"), shape_type(r - 1))
        return N.Generate(N.Tuple(tuple(N.Prj(q, N.Shape(a)) for q in range(r - 1))),
                          N.Lam((i4,), lam_at(i4, _c(0, int64))))
    return None


def _constant(e):
    """The value of ``e`` if it is a constant once projections of tuples and (pure) lets
    are taken, else None."""
    path = []
    while True:
        if isinstance(e, N.Prj):
            path.append(e.index)
            e = e.tup
        elif isinstance(e, N.Let):
            e = e.body
        elif isinstance(e, N.Tuple) and path:
            e = e.items[path.pop()]
        else:
            break
    return e.value if isinstance(e, N.Const) and not path else None


def _tree_with(t, vals: dict, prefix=()):
    if isinstance(t, TupleT):
        return N.Tuple(tuple(_tree_with(s, vals, prefix + (i,)) for i, s in enumerate(t.items)))
    return vals.get(prefix, zero(t))

