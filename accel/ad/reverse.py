"""Reverse-mode AD of array programs (the thesis's sections 3.3-3.4).

The program is flattened into labelled bindings (``anf``).  The *primal* is
the program itself, with ``Map``/``ZipWith``/``Generate`` rewritten to also
return their expression temporaries (store mode) and ``Acond`` branches
exporting what the dual needs (with empty stand-ins).  The *dual* walks the
bindings backwards, threading a contribution map (label -> adjoint
contributions); fan-out is summed by ``elsum``, which skips empty and
smaller contributions by a bounds check.  Indexing inside scalar functions
becomes a ``Permute (+)`` into zeros.  The output is an ordinary program.

Each dual rule below starts with a comment: primal / reverse sweep.
"""

from __future__ import annotations

from ..ast import nodes as N
from ..ast.traverse import apply_lam as _apply, free_vars, freshen
from ..ast.types import ArrayT, Scalar, TupleT, bool_, has_float, int64, shape_type
from ..errors import NotDifferentiableError
from . import expr as X
from .recurrences import recurrence_dual
from .anf import (ABind, ABlock, ACondB, AFlattener, ablock_term, aflatten, bind_term, leaves,
                  paths, tree_like, type_leaves)
from .blocks import leaves_of, zero

MODES = ("store", "recompute")

#: Measured with benchmarks/ad_modes.py on the cpu backend: recomputing expression
#: temporaries in the dual fuses into fewer kernels and ran the GMM gradient ~15% faster
#: (and the map/fold/gather loss within noise) than storing them.
DEFAULT_MODE = "recompute"


# --------------------------------------------------------------------------- helpers


def add_exp(x: N.Exp, y: N.Exp, t) -> N.Exp:
    """Elementwise sum of two adjoint values of element type ``t``."""
    if isinstance(t, TupleT):
        return N.Tuple(tuple(add_exp(N.Prj(i, x), N.Prj(i, y), s) for i, s in enumerate(t.items)))
    if t == bool_:
        return x
    return N.PrimApp("add", (x, y))


def add_lam(t) -> N.Lam:
    x, y = N.Var(N.fresh("x"), t), N.Var(N.fresh("y"), t)
    return N.Lam((x, y), add_exp(x, y, t))


def lam1(t, body_fn) -> N.Lam:
    x = N.Var(N.fresh("x"), t)
    return N.Lam((x,), body_fn(x))


def prj(e: N.Exp, *path) -> N.Exp:
    for i in path:
        e = N.Prj(i, e)
    return e


def zeros_like(ref: N.Avar) -> N.Arr:
    t = ref.type
    return N.Generate(N.Shape(ref), lam1(shape_type(t.rank), lambda _: zero(t.elt)))


def empty_of(t: ArrayT) -> N.Arr:
    """GenEmpty: an array with no elements (rank 0: a single zero)."""
    sh = N.Tuple(tuple(N.Const(0, int64) for _ in range(t.rank)))
    return N.Generate(sh, lam1(shape_type(t.rank), lambda _: zero(t.elt)))


def init_ix(ix: N.Exp, rank: int) -> N.Exp:
    """All but the innermost component of an index of rank ``rank``."""
    return N.Tuple(tuple(N.Prj(k, ix) for k in range(rank - 1)))


def with_last(ix: N.Exp, rank: int, last: N.Exp) -> N.Exp:
    return N.Tuple(tuple(N.Prj(k, ix) for k in range(rank - 1)) + (last,))


def binop_of(lam: N.Lam):
    """The primitive name if ``lam`` is ``\\x y -> op x y`` (either order), else None."""
    if len(lam.params) != 2:
        return None
    body, env = lam.body, {}
    while isinstance(body, N.Let):
        env[body.var.name] = body.bound
        body = body.body
    while isinstance(body, N.Var) and body.name in env:
        body = env[body.name]
    if isinstance(body, N.PrimApp) and len(body.args) == 2:
        names = [a.name if isinstance(a, N.Var) else None for a in body.args]
        if sorted(names, key=str) == sorted((p.name for p in lam.params), key=str):
            return body.op
    return None


def _indexes_active(n: N.Node, active: set) -> bool:
    return bool(free_vars(n) & active)


# --------------------------------------------------------------------------- the sweep


class ARev:
    """The dual pass over an array block."""

    def __init__(self, active: set, mode: str, replace: dict):
        self.active = active
        self.mode = mode
        self.replace = replace  # id(ABind) -> replacement primal binds
        self.binds: list = []
        self.contribs: dict = {}
        self.vars: dict = {}

    # -- emission and contributions

    def emit(self, term: N.Arr):
        f = AFlattener()
        res = f.go(term, {})
        self.binds.extend(f.binds)
        return res

    def contribute(self, v, term: N.Arr, exact: bool = True):
        if isinstance(v, N.Avar) and v.name in self.active:
            self.contribs.setdefault(v.name, []).append((term, exact))
            self.vars[v.name] = v

    def adjoint(self, v: N.Avar):
        """EltwiseElsum of the contributions to ``v`` (None if there are none)."""
        items = self.contribs.pop(v.name, None)
        if not items:
            return None
        t = v.type
        vs = [(self.emit(term), ex) for term, ex in items]
        acc = None
        for a, ex in vs:
            if ex:
                acc = a if acc is None else self.emit(N.ZipWith(add_lam(t.elt), acc, a))
        small = [a for a, ex in vs if not ex]
        if small:
            ix = N.Var(N.fresh("i"), shape_type(t.rank))
            body = N.Index(acc, ix) if acc is not None else None
            for a in small:
                inb = N.Const(True, bool_)
                for d in range(t.rank):
                    lt = N.PrimApp("lt", (N.Prj(d, ix), N.Prj(d, N.Shape(a))))
                    inb = lt if d == 0 else N.PrimApp("and", (inb, lt))
                term = N.Cond(inb, N.Index(a, ix), zero(t.elt))
                body = term if body is None else add_exp(body, term, t.elt)
            acc = self.emit(N.Generate(N.Shape(v), N.Lam((ix,), body)))
        return acc

    # -- traversal

    def block(self, blk: ABlock):
        for b in reversed(blk.binds):
            self.bind(b)

    def bind(self, b: ABind):
        if isinstance(b.op, ACondB):
            return self.acond(b)
        if not any(o.name in self.contribs for o in b.outs):
            return
        op = b.op
        if isinstance(op, N.Awhile):
            from .loops import awhile_dual
            dys = [self.adjoint(o) if o.name in self.contribs else None for o in b.outs]
            return awhile_dual(self, b, op, dys)
        y = b.outs[0]
        dy = self.adjoint(y)
        if isinstance(op, N.Use):
            return
        if isinstance(op, (N.Map, N.ZipWith, N.Generate)):
            return self.elementwise(b, op, y, dy)
        rule = getattr(self, "dual_" + type(op).__name__.lower(), None)
        if rule is None:
            name = op.opname if isinstance(op, N.Scan) else type(op).__name__.lower()
            raise NotDifferentiableError(
                f"{name}: reverse-mode differentiation of {name} is not supported yet "
                "(its result carries a derivative here)")
        rule(op, y, dy)

    # -- rules

    def elementwise(self, b: ABind, op, y: N.Avar, dy: N.Avar):
        # primal:  y = Map f a | ZipWith f a b | Generate sh f
        # reverse: dres = ZipWith D(f) dy ytmp  (store)  or  Generate (recompute);
        #          a += Map (fst . fst) dres, b += Map (snd . fst) dres, IAI -> Permute (+)
        ad = X.differentiate_lam(op.f, active=lambda arr: arr.name in self.active)
        # Arguments reached only through discrete primitives (floor, comparisons, ...)
        # get no contribution at all, not a zero array: a zero adjoint would still run
        # the dual of everything upstream (the tie counts of a maximum under a floor).
        live = [any(x is not None for x in leaves_of(t)) for t in ad.param_adj]
        if not any(live) and not ad.iai:
            return
        if self.mode == "store":
            P, D = X.store_lambdas(ad)
            pt = P.type
            yt = N.Avar(N.fresh("a"), ArrayT(pt, y.type.rank))
            ytmp = N.Avar(N.fresh("a"), ArrayT(pt.items[1], y.type.rank))
            if isinstance(op, N.Generate):
                prim = N.Generate(op.shape, P)
            elif isinstance(op, N.Map):
                prim = N.Map(P, op.a)
            else:
                prim = N.ZipWith(P, op.a, op.b)
            self.replace[id(b)] = [
                ABind((yt,), prim),
                ABind((y,), N.Map(lam1(pt, lambda r: N.Prj(0, r)), yt)),
                ABind((ytmp,), N.Map(lam1(pt, lambda r: N.Prj(1, r)), yt)),
            ]
            dres = self.emit(N.ZipWith(D, dy, ytmp))
        else:
            Dr = X.recompute_lambda(ad)
            ix = N.Var(N.fresh("i"), shape_type(y.type.rank))
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
            dres = self.emit(N.Generate(N.Shape(dy), N.Lam((ix,), body)))
        rt = dres.type.elt
        if isinstance(op, N.Map):
            if live[0]:
                self.contribute(op.a, N.Map(lam1(rt, lambda r: prj(r, 0, 0)), dres))
        elif isinstance(op, N.ZipWith):
            same = op.a == op.b
            for k, arg in enumerate((op.a, op.b)):
                if live[k]:
                    self.contribute(arg, N.Map(lam1(rt, lambda r, k=k: prj(r, 0, k)), dres),
                                    same)
        self.index_adjoints(ad.iai, dres, y.type.rank)

    def index_adjoints(self, iai: list, dres: N.Avar, rank: int):
        # each Index into an active array: Permute (+) zeros (\i -> (exec, idx)) (map adj dres)
        rt = dres.type.elt
        for k, e in enumerate(iai):
            arr = e.array
            i = N.Var(N.fresh("i"), shape_type(rank))
            entry = prj(N.Index(dres, i), 1, k)
            f = N.Lam((i,), N.Tuple((N.Prj(2, entry), N.Prj(1, entry))))
            vals = N.Map(lam1(rt, lambda r: prj(r, 1, k, 0)), dres)
            self.contribute(arr, N.Permute(add_lam(arr.type.elt), zeros_like(arr), f, vals))

    def dual_backpermute(self, op: N.Backpermute, y, dy):
        # primal:  y = Backpermute sh f a
        # reverse: a += Permute (+) (zeros a) (\i -> (True, f i)) dy
        f = freshen(op.f)
        pf = N.Lam(f.params, N.Tuple((N.Const(True, bool_), f.body)))
        self.contribute(op.a, N.Permute(add_lam(y.type.elt), zeros_like(op.a), pf, dy))

    def dual_reshape(self, op: N.Reshape, y, dy):
        # primal:  y = Reshape sh a;   reverse: a += Reshape (shape a) dy
        self.contribute(op.a, N.Reshape(N.Shape(op.a), dy))

    def dual_replicate(self, op: N.Replicate, y, dy):
        # primal:  y = Replicate spec a
        # reverse: a += Fold (+) 0 (Reshape (kept, prod new) (Backpermute (kept, new) perm dy))
        spec, R, k = op.spec, y.type.rank, op.a.type.rank
        kept = [d for d, s in enumerate(spec) if s is None]
        new = [d for d, s in enumerate(spec) if s is not None]
        if not new:
            return self.contribute(op.a, dy)
        sa = N.Shape(op.a)
        sizes = [N.Prj(j, sa) for j in range(k)] + [freshen(spec[d]) for d in new]
        ix = N.Var(N.fresh("i"), shape_type(R))
        order = kept + new
        back = [None] * R
        for pos, d in enumerate(order):
            back[d] = N.Prj(pos, ix)
        moved = N.Backpermute(N.Tuple(tuple(sizes)), N.Lam((ix,), N.Tuple(tuple(back))), dy)
        prod = sizes[k]
        for s in sizes[k + 1:]:
            prod = N.PrimApp("mul", (prod, s))
        flat = N.Reshape(N.Tuple(tuple(sizes[:k]) + (prod,)), self.emit(moved))
        elt = y.type.elt
        z = zero(elt)
        self.contribute(op.a, N.Fold(add_lam(elt), z, self.emit(flat)))

    def dual_slice(self, op: N.Slice, y, dy):
        # primal:  y = Slice a spec
        # reverse: a += Generate (shape a) (\i -> if fixed dims of i match then dy[kept i] else 0)
        spec, k = op.spec, op.a.type.rank
        if all(s is None for s in spec):
            return self.contribute(op.a, dy)
        ix = N.Var(N.fresh("i"), shape_type(k))
        match = None
        for d, s in enumerate(spec):
            if s is not None:
                eq = N.PrimApp("eq", (N.Prj(d, ix), freshen(s)))
                match = eq if match is None else N.PrimApp("and", (match, eq))
        small = N.Tuple(tuple(N.Prj(d, ix) for d, s in enumerate(spec) if s is None))
        body = N.Cond(match, N.Index(dy, small), zero(y.type.elt))
        self.contribute(op.a, N.Generate(N.Shape(op.a), N.Lam((ix,), body)))

    def dual_fold(self, op: N.Fold, y, dy):
        # primal:  y = Fold f z a  (innermost dimension of length n)
        # reverse (+):       a += replicate dy along the inner dimension
        # reverse (max/min): a += dy / count where a == y  (ties split equally)
        # reverse (other):   with acc_i the running value, d1/d2 the partials of f,
        #                    a_i += dy * d2(acc_i, a_i) * prod_{j>i} d1(acc_j, a_j)
        #                    (the thesis's scan rule: Scanl for acc, Scanr (*) for products)
        a, r, elt = op.a, op.a.type.rank, op.a.type.elt
        kind = binop_of(op.f)
        ix = N.Var(N.fresh("i"), shape_type(r))
        bcast = N.Backpermute(N.Shape(a), N.Lam((ix,), init_ix(ix, r)), dy)
        if kind == "add" and (op.z is None or isinstance(op.z, N.Const)):
            return self.contribute(a, bcast)
        scalar = isinstance(elt, Scalar) and elt.is_float
        if kind in ("max", "min") and scalar:
            # every element equal to the result (the seed z too) gets an equal share
            j = N.Var(N.fresh("i"), shape_type(r))
            hit = lam1(shape_type(r), lambda i: N.Cond(
                N.PrimApp("eq", (N.Index(a, i), N.Index(y, init_ix(i, r)))),
                N.Const(1, elt), N.Const(0, elt)))
            hits = self.emit(N.Generate(N.Shape(a), hit))
            zhit = None
            if op.z is not None:
                zv = N.Var(N.fresh("z"), elt)
                zhit = lam1(shape_type(r - 1), lambda k: N.Let(zv, freshen(op.z), N.Cond(
                    N.PrimApp("eq", (zv, N.Index(y, k))), N.Const(1, elt), N.Const(0, elt))))
                start = self.emit(N.Generate(N.Shape(y), zhit))
                cnt = self.emit(N.ZipWith(add_lam(elt), start, self.emit(
                    N.Fold(add_lam(elt), N.Const(0, elt), hits))))
            else:
                cnt = self.emit(N.Fold(add_lam(elt), N.Const(0, elt), hits))
            o = init_ix(j, r)
            body = N.PrimApp("mul", (N.Index(hits, j), N.PrimApp(
                "div", (N.Index(dy, o), N.Index(cnt, o)))))
            self.contribute(a, N.Generate(N.Shape(a), N.Lam((j,), body)))
            if op.z is not None and _indexes_active(op.z, self.active):
                k = N.Var(N.fresh("i"), shape_type(r - 1))
                zrow = N.Generate(N.Shape(y), N.Lam((k,), N.PrimApp("mul", (
                    N.Index(start, k), N.PrimApp("div", (N.Index(dy, k), N.Index(cnt, k)))))))
                self.closed_exp(op.z, self.sum_all(self.emit(zrow)))
            return
        # any other operator: the accumulators come from a scan, then the recurrence rule
        accs = self.emit(N.Scan(freshen(op.f), freshen(op.z) if op.z is not None else None,
                                a, True))
        has_z = op.z is not None
        last = N.Prj(r - 1, N.Shape(accs))

        def dacc(ix, p):
            at_end = N.PrimApp("eq", (p, N.PrimApp("sub", (last, N.Const(1, int64)))))
            return N.Cond(at_end, N.Index(dy, init_ix(ix, r)), zero(elt))
        zrows = recurrence_dual(self, op.f, op.z, a, accs, dacc, has_z, True)
        if has_z and _indexes_active(op.z, self.active):
            self.closed_exp(op.z, self.sum_all(self.emit(zrows)))

    def dual_scan(self, op: N.Scan, y, dy):
        # primal:  y = Scan f z a  (scanl/scanr/scanl1/scanr1)
        # reverse: the recurrence rule (see recurrences.py): a backward affine scan of the
        #          adjoints, then each step's dual seeded with its accumulator's adjoint
        a, r = op.a, op.a.type.rank
        has_z = op.z is not None
        n_out = N.Prj(r - 1, N.Shape(y))

        def dacc(ix, p):
            last = p if op.left else N.PrimApp("sub", (N.PrimApp(
                "sub", (n_out, N.Const(1, int64))), p))
            return N.Index(dy, N.Tuple(tuple(N.Prj(k, ix) for k in range(r - 1)) + (last,)))
        zrows = recurrence_dual(self, op.f, op.z, a, y, dacc, has_z, op.left)
        if has_z and _indexes_active(op.z, self.active):
            self.closed_exp(op.z, self.sum_all(self.emit(zrows)))

    def dual_permute(self, op: N.Permute, y, dy):
        # primal:  y = Permute comb d f src   (y[t] = comb(src[i], y[t]) for f(i) = t)
        # reverse (+):   d += dy;  src[i] += dy[f i] (a gather; 0 where f i is ignore)
        # reverse (max/min): the winners share dy[t] equally (d[t] included)
        # reverse (*):   each factor gets dy[t] * (product of the others), zeros counted
        kind = binop_of(op.comb)
        elt, d, src = y.type.elt, op.defaults, op.src
        if kind not in ("add", "max", "min", "mul"):
            from ..ast.pretty import show
            raise NotDifferentiableError(
                f"permute: reverse mode is defined for the combination functions +, *, max "
                f"and min, not {show(op.comb)}")
        if kind != "add" and not (isinstance(elt, Scalar) and elt.is_float):
            raise NotDifferentiableError(f"permute: {kind} on {elt!r} elements")
        rs = src.type.rank
        z = zero(elt)

        def at_target(body_fn):
            # Generate over src: \i -> let t = f i in if keep then body(i, target) else 0
            i = N.Var(N.fresh("i"), shape_type(rs))
            t = N.Var(N.fresh("t"), op.f.type)
            body = N.Let(t, _apply(op.f, (i,)),
                         N.Cond(N.Prj(0, t), body_fn(i, N.Prj(1, t)), z))
            return N.Generate(N.Shape(src), N.Lam((i,), body))

        def over_defaults(body_fn):
            return N.Generate(N.Shape(d), lam1(shape_type(d.type.rank), body_fn))

        if kind == "add":
            self.contribute(d, dy)
            self.contribute(src, at_target(lambda i, t: N.Index(dy, t)))
            return
        one = N.Const(1, elt)

        def eq(a, b):
            return N.PrimApp("eq", (a, b))

        if kind in ("max", "min"):
            dhit = lambda t: N.Cond(eq(N.Index(d, t), N.Index(y, t)), one, z)  # noqa: E731
            shit = at_target(lambda i, t: N.Cond(eq(N.Index(src, i), N.Index(y, t)), one, z))
            cnt = self.emit(N.Permute(add_lam(elt), over_defaults(dhit), freshen(op.f),
                                      self.emit(shit)))

            def share(v, t):
                return N.Cond(eq(v, N.Index(y, t)), N.PrimApp("div", (
                    N.Index(dy, t), N.Index(cnt, t))), z)
            self.contribute(d, over_defaults(lambda t: share(N.Index(d, t), t)))
            self.contribute(src, at_target(lambda i, t: share(N.Index(src, i), t)))
            return
        # kind == "mul"
        nz = (lambda v: N.Cond(eq(v, z), one, v))  # noqa: E731
        isz = (lambda v: N.Cond(eq(v, z), one, z))  # noqa: E731
        mul = N.Lam((xv := N.Var(N.fresh("x"), elt), yv := N.Var(N.fresh("y"), elt)),
                    N.PrimApp("mul", (xv, yv)))
        j = N.Var(N.fresh("i"), shape_type(rs))
        prod = self.emit(N.Permute(mul, over_defaults(lambda t: nz(N.Index(d, t))),
                                   freshen(op.f), self.emit(N.Generate(N.Shape(src), N.Lam(
                                       (j,), nz(N.Index(src, j)))))))
        j2 = N.Var(N.fresh("i"), shape_type(rs))
        zeros = self.emit(N.Permute(add_lam(elt), over_defaults(lambda t: isz(N.Index(d, t))),
                                    freshen(op.f), self.emit(N.Generate(N.Shape(src), N.Lam(
                                        (j2,), isz(N.Index(src, j2)))))))

        def others(v, t):
            zt, pt = N.Index(zeros, t), N.Index(prod, t)
            nonzero = N.Cond(eq(zt, z), N.PrimApp("div", (pt, v)), z)
            iszero = N.Cond(eq(zt, one), pt, z)
            return N.PrimApp("mul", (N.Index(dy, t), N.Cond(eq(v, z), iszero, nonzero)))
        self.contribute(d, over_defaults(lambda t: others(N.Index(d, t), t)))
        self.contribute(src, at_target(lambda i, t: others(N.Index(src, i), t)))

    def sum_all(self, arr: N.Avar) -> N.Avar:
        t = arr.type
        size = N.Const(1, int64)
        for q in range(t.rank):
            size = N.PrimApp("mul", (size, N.Prj(q, N.Shape(arr))))
        flat = self.emit(N.Reshape(N.Tuple((size,)), arr))
        return self.emit(N.Fold(add_lam(t.elt), zero(t.elt), flat))

    def closed_exp(self, e: N.Exp, de: N.Avar):
        """Index adjoints of a closed expression ``e`` (used once) with adjoint ``de``."""
        lam = N.Lam((N.Var(N.fresh("i"), shape_type(0)),), freshen(e))
        ad = X.differentiate_lam(lam, active=lambda arr: arr.name in self.active)
        Dr = X.recompute_lambda(ad)
        ix = N.Var(N.fresh("i"), shape_type(0))
        body = N.Let(Dr.params[0], ix, N.Let(Dr.params[1], N.Index(de, ix), Dr.body))
        dres = self.emit(N.Generate(N.Tuple(()), N.Lam((ix,), body)))
        self.index_adjoints(ad.iai, dres, 0)

    def acond(self, b: ABind):
        # primal:  y = Acond c t e   (both branches export what the dual needs)
        # reverse: (adjoints of outer variables) = Acond c (dual of t) (dual of e),
        #          each branch giving empty arrays for variables it does not touch
        op = b.op
        adjs = [self.adjoint(o) if o.name in self.contribs else None for o in b.outs]
        if all(a is None for a in adjs):
            return
        subs = []
        for br in (op.t, op.e):
            sub = ARev(self.active, self.mode, self.replace)
            for leaf, a in zip(leaves(br.result), adjs):
                if a is not None:
                    sub.contribute(leaf, a)
            sub.block(br)
            subs.append(sub)
        outer = sorted(set(subs[0].contribs) | set(subs[1].contribs))
        ovars = [subs[0].vars.get(n) or subs[1].vars[n] for n in outer]
        blocks = []
        for sub in subs:
            vals = []
            for v in ovars:
                a = sub.adjoint(v) if v.name in sub.contribs else None
                vals.append(a if a is not None else sub.emit(empty_of(v.type)))
            blocks.append(ABlock(sub.binds, tuple(vals)))
        if not ovars:
            return
        outs = tuple(N.Avar(N.fresh("d"), v.type) for v in ovars)
        self.binds.append(ABind(outs, ACondB(op.c, blocks[0], blocks[1])))
        for v, o in zip(ovars, outs):
            self.contribute(v, o, exact=False)


# --------------------------------------------------------------------------- assembly


def _activity(blk: ABlock, active: set):
    for b in blk.binds:
        if isinstance(b.op, ACondB):
            _activity(b.op.t, active)
            _activity(b.op.e, active)
        if free_vars(bind_term(b)) & active:
            # integer and bool arrays carry no derivative, whatever they are computed from
            active.update(o.name for o in b.outs if has_float(o.type))


def _rebuild_primal(blk: ABlock, replace: dict, needed: set) -> ABlock:
    out = []
    for b in blk.binds:
        if id(b) in replace:
            out.extend(replace[id(b)])
            continue
        if isinstance(b.op, ACondB):
            t = _rebuild_primal(b.op.t, replace, needed)
            e = _rebuild_primal(b.op.e, replace, needed)
            tx = [v for bb in t.binds for v in bb.outs if v.name in needed]
            ex = [v for bb in e.binds for v in bb.outs if v.name in needed]
            if tx or ex:
                t = _export(t, tx, ex, True)
                e = _export(e, tx, ex, False)
                b = ABind(tuple(b.outs) + tuple(tx) + tuple(ex), ACondB(b.op.c, t, e))
            else:
                b = ABind(b.outs, ACondB(b.op.c, t, e))
        out.append(b)
    return ABlock(out, blk.result)


def _export(blk: ABlock, tx: list, ex: list, is_t: bool) -> ABlock:
    f = AFlattener()
    mine, other = (tx, ex) if is_t else (ex, tx)
    stand = tuple(f.go(empty_of(v.type), {}) for v in other)
    vals = tuple(mine)
    res = (blk.result, vals, stand) if is_t else (blk.result, stand, vals)
    return ABlock(blk.binds + f.binds, res)


def reverse_program(prog: N.Program, wrt: tuple, seeds: str = "one",
                    mode: str | None = None, with_value: bool = False) -> N.Program:
    """The reverse-mode derivative of ``prog``.

    ``seeds="one"``: ``prog`` returns a rank-0 float array; the result is the
    gradient w.r.t. the parameters at positions ``wrt`` (a tuple of arrays),
    preceded by the value if ``with_value``.  ``seeds="params"``: one
    cotangent parameter per result leaf is appended (vjp); the result is
    (outputs..., input cotangents...).
    """
    mode = mode or DEFAULT_MODE
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    blk = aflatten(prog.body, {})
    active = {prog.params[i].name for i in wrt}
    _activity(blk, active)
    rev = ARev(active, mode, {})
    outs = leaves(blk.result)
    extra = ()
    if seeds == "one":
        (res,) = outs
        seed = rev.emit(N.Generate(N.Tuple(()), lam1(shape_type(0),
                                                      lambda _: N.Const(1, res.type.elt))))
        rev.contribute(res, seed)
    else:
        extra = tuple(N.Avar(N.fresh("ct"), o.type) for o in outs)
        for o, c in zip(outs, extra):
            rev.contribute(o, c)
    rev.block(blk)
    grads = []
    for i in wrt:
        p = prog.params[i]
        g = rev.adjoint(p) if p.name in rev.contribs else None
        grads.append(g if g is not None else rev.emit(zeros_like(p)))
    dual = ABlock(rev.binds, tuple(grads))
    needed = set(free_vars(ablock_term(dual)))
    primal = _rebuild_primal(blk, rev.replace, needed)
    if seeds == "one":
        result = ((outs[0],) if with_value else ()) + tuple(grads)
    else:
        result = tuple(outs) + tuple(grads)
    body = ablock_term(ABlock(primal.binds + rev.binds, result))
    return freshen(N.Program(prog.params + extra, body))


__all__ = ["reverse_program", "paths", "tree_like", "type_leaves"]
