"""Forward-mode AD (dual numbers) as a source transformation of accel programs.

``jvp_program(prog, active)`` turns a program with parameters ``(p_1..p_n)`` into
one with parameters ``(p_1..p_n, t_1..t_k)`` (one tangent per active parameter)
returning ``ATuple(outputs..., output tangents...)``.  ``jvp(f, primals,
tangents)`` is the user-facing call of API.md.

Invariants:

- A tangent has the same type as its primal; the integer and bool leaves of a
  tangent are zeros.  Tangent variables are named ``x_dot``.
- A value is *active* iff it depends on an active input.  Inactive values have
  no tangent (``None``) and every rule skips them, so a partial derivative is
  never multiplied by a tangent known to be zero (``x ** y`` with a constant
  ``y`` at a negative ``x`` would otherwise give ``nan * 0``).
- Expression level: a scalar function is flattened into a block
  (``blocks.flatten``) and each scalar binding gets its tangent binding right
  after it; ``Index arr ix`` has tangent ``Index arr_dot ix``, where ``arr_dot``
  is the array-level tangent variable of ``arr``.
- Array level: the program is flattened into labelled bindings
  (``anf.aflatten``); each array binding is followed by its tangent binding.
  Element functions become functions over (primal, tangent) pairs whose result
  is split with ``Map fst`` / ``Map snd``.
- Ties of ``max``/``min`` reductions and permutes are split equally among all
  tied elements (the tangent is the mean of the tied tangents), consistently
  with reverse mode.  Other kinks follow ``rules.py``.
- The result is an ordinary typed program: every node is built with its
  checking constructor, and ``jvp_program`` type-checks its output.
"""

from __future__ import annotations

import numpy as np

from ..ast import nodes as N
from ..ast.pretty import show
from ..ast.traverse import free_vars, freshen
from ..ast.types import ATupleT, Scalar, TupleT, has_float, int64
from ..errors import NotDifferentiableError, ProgramTypeError, ShapeError
from .anf import ABind, ABlock, ACondB, ablock_term, aflatten
from .anf import leaves as aleaves
from .anf import paths as apaths
from .anf import tree_like as atree_like
from .anf import type_leaves as atype_leaves
from .blocks import (Block, Bind, CondB, Flattener, flatten, fresh_leaves, leaves_of, to_exp,
                     tree_like, type_leaves, zero)
from .rules import CASTS, DISCRETE, partials

# --------------------------------------------------------------------------- helpers


def _dot(v):
    """A fresh tangent variable ``x_dot`` for the (array or expression) variable ``v``."""
    base = v.name.rstrip("0123456789") or "x"
    return type(v)(N.fresh(base + "_dot"), v.type)


def _p(op, *args) -> N.Exp:
    return N.PrimApp(op, args)


def _prj(e, *path):
    for i in path:
        e = N.Prj(i, e)
    return e


def _paths(t, prefix=()):
    if isinstance(t, TupleT):
        return [p for i, s in enumerate(t.items) for p in _paths(s, prefix + (i,))]
    return [prefix]


def _lam(types, fn) -> N.Lam:
    """``\\x1 .. xn -> fn(x1, .., xn)`` with fresh parameters of ``types``."""
    vs = tuple(N.Var(N.fresh("x"), t) for t in types)
    return N.Lam(vs, fn(*vs))


def _apply(lam: N.Lam, args) -> N.Exp:
    """``lam`` applied to ``args`` (a let per parameter); ``lam`` must not be reused."""
    body = lam.body
    for p, a in reversed(list(zip(lam.params, args))):
        body = N.Let(p, a, body)
    return body


def _scale(p: N.Exp, d: N.Exp) -> N.Exp:
    """``p * d`` with the unit partials folded away."""
    if isinstance(p, N.Const):
        if p.value == 1:
            return d
        if p.value == -1:
            return _p("neg", d)
    return _p("mul", p, d)


def _is_float(t) -> bool:
    return isinstance(t, Scalar) and t.is_float


def _add_exp(x: N.Exp, y: N.Exp, t) -> N.Exp:
    """Leafwise sum of two tangents of element type ``t`` (bool leaves: ``x``)."""
    if isinstance(t, TupleT):
        return N.Tuple(tuple(_add_exp(N.Prj(i, x), N.Prj(i, y), s)
                             for i, s in enumerate(t.items)))
    if t.is_bool:
        return x
    return _p("add", x, y)


def _add_lam(t) -> N.Lam:
    return _lam((t, t), lambda x, y: _add_exp(x, y, t))


def _binop(lam: N.Lam):
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


# --------------------------------------------------------------------------- expressions


class _EFwd:
    """Forward sweep over a flat scalar block: primal bindings interleaved with tangents.

    ``tan`` maps scalar variable names to their tangent atoms (active variables only);
    ``arr_tan`` maps array variable names to their tangent array variables.
    """

    def __init__(self, arr_tan: dict, tan: dict):
        self.arr_tan = arr_tan
        self.tan = tan
        self.binds: list = []

    def child(self) -> "_EFwd":
        return _EFwd(self.arr_tan, dict(self.tan))

    def emit(self, term: N.Exp):
        f = Flattener()
        res = f.go(term, {})
        self.binds.extend(f.binds)
        return res

    def of(self, atom):
        """The tangent atom of ``atom`` (None if it is inactive or a constant)."""
        if isinstance(atom, N.Var) and _is_float(atom.type):
            return self.tan.get(atom.name)
        return None

    def block(self, blk: Block) -> list:
        """Process ``blk``'s bindings; return the tangents of its result leaves."""
        for b in blk.binds:
            self.bind(b)
        return [self.of(x) for x in leaves_of(blk.result)]

    def bind(self, b: Bind):
        op = b.op
        if isinstance(op, CondB):
            return self.cond(b, op)
        if isinstance(op, N.While):
            return self.while_(b, op)
        self.binds.append(b)
        if isinstance(op, N.PrimApp):
            self.prim(b.outs[0], op)
        elif isinstance(op, N.Index):
            self.index(b, op)
        # Prj of a Shape (discrete) or of a free tuple variable: no tangent

    def prim(self, v: N.Var, op: N.PrimApp):
        # primal:  v = op args;  tangent: v_dot = sum_i d op / d arg_i * arg_i_dot
        if not _is_float(v.type) or op.op in DISCRETE:
            return
        ds = [self.of(a) for a in op.args]
        if all(d is None for d in ds):
            return
        if op.op in CASTS:
            term = _p(op.op, ds[0])
        else:
            term = None
            for p, d in zip(partials(op.op, op.args, v), ds):
                if p is None or d is None:
                    continue
                s = _scale(p, d)
                term = s if term is None else _p("add", term, s)
            if term is None:
                return
        self.tan[v.name] = self.emit(term)

    def index(self, b: Bind, op: N.Index):
        # primal:  v = arr[ix];  tangent: v_dot = arr_dot[ix]
        ad = self.arr_tan.get(op.array.name)
        if ad is None:
            return
        touts = tuple(_dot(o) for o in b.outs)
        self.binds.append(Bind(touts, N.Index(ad, op.index)))
        for o, t in zip(b.outs, touts):
            if _is_float(o.type):
                self.tan[o.name] = t

    def cond(self, b: Bind, op: CondB):
        # primal:  v = if c then t else e;  tangent: (v, v_dot) = if c then (t, t_dot) else
        # (e, e_dot), with zeros where a branch's result is inactive
        subs = []
        for br in (op.t, op.e):
            s = self.child()
            subs.append((s, s.block(br), br))
        act = [j for j, o in enumerate(b.outs)
               if _is_float(o.type) and any(rt[j] is not None for _, rt, _ in subs)]
        if not act:
            self.binds.append(b)
            return
        blocks = []
        for s, rt, br in subs:
            tans = tuple(rt[j] if rt[j] is not None else zero(b.outs[j].type) for j in act)
            blocks.append(Block(s.binds, (br.result, tans)))
        touts = tuple(_dot(b.outs[j]) for j in act)
        self.binds.append(Bind(tuple(b.outs) + touts, CondB(op.c, blocks[0], blocks[1])))
        for j, t in zip(act, touts):
            self.tan[b.outs[j].name] = t

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

    def while_(self, b: Bind, op: N.While):
        # primal:  v = while cond body init
        # tangent: (v, v_dot) = while (cond . fst) (body, body_dot) (init, init_dot); the
        # active state leaves are a fixpoint: active in init, or made active by the body
        t = op.type
        tl = type_leaves(t)
        init = self.atoms(op.init)
        act = [j for j, x in enumerate(init) if self.of(x) is not None]
        while True:
            body, rt = self.loop_body(op.body, t, act)
            more = {j for j, d in enumerate(rt) if d is not None and _is_float(tl[j])}
            if more <= set(act):
                break
            act = sorted(set(act) | more)
        if not act:
            self.binds.append(b)
            return
        st = body.params[0].type
        s = N.Var(N.fresh("s"), st)
        cond = N.Lam((s,), N.Let(op.cond.params[0], N.Prj(0, s), op.cond.body))
        dinit = tuple(self.of(init[j]) if self.of(init[j]) is not None else zero(tl[j])
                      for j in act)
        w = N.While(cond, body, N.Tuple((op.init, N.Tuple(dinit))))
        touts = tuple(_dot(b.outs[j]) for j in act)
        self.binds.append(Bind(tuple(b.outs) + touts, w))
        for j, d in zip(act, touts):
            self.tan[b.outs[j].name] = d

    def loop_body(self, body: N.Lam, t, act: list):
        """``\\(s, s_dot) -> (body s, body_dot s s_dot)`` for the active leaves ``act``."""
        tl = type_leaves(t)
        st = TupleT((t, TupleT(tuple(tl[j] for j in act))))
        s = N.Var(N.fresh("s"), st)
        pl = fresh_leaves(t, "p")
        pre = [Bind((v,), _prj(s, 0, *path)) for v, path in zip(pl, _paths(t))]
        dl = [_dot(pl[j]) for j in act]
        pre += [Bind((d,), _prj(s, 1, k)) for k, d in enumerate(dl)]
        blk = flatten(body.body, {body.params[0].name: tree_like(t, iter(pl))})
        sub = _EFwd(self.arr_tan, {**self.tan, **{pl[j].name: d for j, d in zip(act, dl)}})
        rt = sub.block(blk)
        tans = tuple(rt[j] if rt[j] is not None else zero(tl[j]) for j in act)
        lam = N.Lam((s,), to_exp(Block(pre + sub.binds, (blk.result, tans))))
        return lam, rt


def _tangent_tree(t, rt: list):
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
        pl = _destructure(p, pre)
        env[p.name] = tree_like(p.type, iter(pl))
        if act:
            d = _dot(p)
            tparams.append(d)
            for x, y in zip(pl, _destructure(d, pre)):
                if _is_float(x.type):
                    tan[x.name] = y
    blk = flatten(lam.body, env)
    fwd = _EFwd(arr_tan, tan)
    rt = fwd.block(blk)
    if all(d is None for d in rt):
        return None
    body = to_exp(Block(pre + fwd.binds, (blk.result, _tangent_tree(lam.type, rt))))
    return freshen(N.Lam(tuple(lam.params) + tuple(tparams), body))


def _destructure(p: N.Var, pre: list) -> list:
    """The scalar leaves of parameter ``p`` (projections bound in ``pre`` for tuples)."""
    if not isinstance(p.type, TupleT):
        return [p]
    pl = fresh_leaves(p.type, "p")
    pre.extend(Bind((v,), _prj(p, *path)) for v, path in zip(pl, _paths(p.type)))
    return pl


class _ExpJ:
    """The jvp of a closed array-level expression (a fold seed): ``(e, e_dot)``."""

    def __init__(self, e: N.Exp, arr_tan: dict):
        self.e = e
        blk = flatten(e, {})
        fwd = _EFwd(arr_tan, {})
        rt = fwd.block(blk)
        self.active = any(d is not None for d in rt)
        self.binds, self.res = fwd.binds, blk.result
        self.tan = _tangent_tree(e.type, rt)

    def pair(self, *extra) -> N.Exp:
        """``(e, e_dot, *extra)`` (``e_dot`` zero when inactive)."""
        if not self.active:
            return N.Tuple((freshen(self.e), zero(self.e.type)) + extra)
        return freshen(to_exp(Block(self.binds, (self.res, self.tan) + extra)))

    def tangent(self) -> N.Exp:
        if not self.active:
            return zero(self.e.type)
        return freshen(to_exp(Block(self.binds, self.tan)))


# --------------------------------------------------------------------------- arrays


def _fst_lam(t, i: int) -> N.Lam:
    return _lam((t,), lambda p: N.Prj(i, p))


def _zeros_like_term(v: N.Avar) -> N.Arr:
    elt = v.type.elt
    return N.Map(_lam((elt,), lambda _: zero(elt)), v)


class _AFwd:
    """Forward sweep over a flat array block: primal bindings interleaved with tangents."""

    def __init__(self, arr_tan: dict):
        self.arr_tan = dict(arr_tan)
        self.binds: list = []

    # ------------------------------------------------------------------ plumbing

    def emit(self, op: N.Arr):
        outs = tuple(N.Avar(N.fresh("a"), s) for s in atype_leaves(op.type))
        self.binds.append(ABind(outs, op))
        return atree_like(op.type, iter(outs))

    def dot(self, v):
        return self.arr_tan.get(v.name) if isinstance(v, N.Avar) else None

    def set_dot(self, v: N.Avar, term: N.Arr):
        d = _dot(v)
        self.binds.append(ABind((d,), term))
        self.arr_tan[v.name] = d

    def zeros_like(self, v: N.Avar) -> N.Avar:
        return self.emit(_zeros_like_term(v))

    def reads_active(self, n) -> bool:
        """Whether ``n`` (a function or expression) indexes an active array."""
        return n is not None and any(x in self.arr_tan for x in free_vars(n))

    def split(self, y: N.Avar, pairs: N.Arr):
        """Bind ``y = Map fst pairs`` and ``y_dot = Map snd pairs``."""
        pv = self.emit(pairs)
        t = pv.type.elt
        self.binds.append(ABind((y,), N.Map(_fst_lam(t, 0), pv)))
        self.set_dot(y, N.Map(_fst_lam(t, 1), pv))

    def zipped(self, a: N.Avar, ad: N.Avar | None) -> N.Avar:
        """``zip a a_dot`` (``a`` paired with zeros if it is inactive)."""
        elt = a.type.elt
        if ad is None:
            return self.emit(N.Map(_lam((elt,), lambda x: N.Tuple((x, zero(elt)))), a))
        return self.emit(N.ZipWith(_lam((elt, elt), lambda x, d: N.Tuple((x, d))), a, ad))

    # ------------------------------------------------------------------ blocks

    def ablock(self, blk: ABlock) -> list:
        """Process ``blk``'s bindings; return the tangents of its result leaves."""
        for b in blk.binds:
            self.bind(b)
        return [self.dot(v) for v in aleaves(blk.result)]

    def bind(self, b: ABind):
        op = b.op
        if isinstance(op, ACondB):
            return self.acond(b, op)
        rule = getattr(self, "fwd_" + type(op).__name__.lower(), None)
        if rule is None:  # pragma: no cover - a new node without a rule
            raise NotDifferentiableError(f"jvp: no forward rule for {type(op).__name__}")
        rule(b, op)

    def keep(self, b: ABind):
        self.binds.append(b)

    def fwd_use(self, b, op):
        self.keep(b)

    def fwd_generate(self, b, op: N.Generate):
        # primal:  y = Generate sh f
        # forward: (y, y_dot) = unzip (Generate sh (\ix -> (f ix, f_dot ix)))
        f2 = jvp_lam(op.f, (False,), self.arr_tan) if self.reads_active(op.f) else None
        if f2 is None:
            return self.keep(b)
        self.split(b.outs[0], N.Generate(freshen(op.shape), f2))

    def fwd_map(self, b, op: N.Map):
        # primal:  y = Map f a
        # forward: (y, y_dot) = unzip (ZipWith (\x x_dot -> (f x, f_dot x x_dot)) a a_dot)
        ad = self.dot(op.a)
        if ad is None and not self.reads_active(op.f):
            return self.keep(b)
        f2 = jvp_lam(op.f, (ad is not None,), self.arr_tan)
        if f2 is None:
            return self.keep(b)
        pairs = N.ZipWith(f2, op.a, ad) if ad is not None else N.Map(f2, op.a)
        self.split(b.outs[0], pairs)

    def fwd_zipwith(self, b, op: N.ZipWith):
        # primal:  y = ZipWith f a b  (on the intersection of the shapes)
        # forward: (y, y_dot) = unzip (ZipWith (\(x, x_dot) (z, z_dot) -> (f x z,
        #          f_dot x z x_dot z_dot)) (zip a a_dot) (zip b b_dot)); zip a a_dot has
        #          a's shape, so the outer ZipWith intersects exactly as the primal does
        ad, bd = self.dot(op.a), self.dot(op.b)
        if ad is None and bd is None and not self.reads_active(op.f):
            return self.keep(b)
        f2 = jvp_lam(op.f, (ad is not None, bd is not None), self.arr_tan)
        if f2 is None:
            return self.keep(b)
        if ad is None and bd is None:
            return self.split(b.outs[0], N.ZipWith(f2, op.a, op.b))
        xa = self.zipped(op.a, ad) if ad is not None else op.a
        xb = self.zipped(op.b, bd) if bd is not None else op.b

        def body(p, q):
            args = [N.Prj(0, p) if ad is not None else p, N.Prj(0, q) if bd is not None else q]
            args += [N.Prj(1, p)] if ad is not None else []
            args += [N.Prj(1, q)] if bd is not None else []
            return _apply(f2, args)

        lam = _lam((xa.type.elt, xb.type.elt), body)
        self.split(b.outs[0], N.ZipWith(lam, xa, xb))

    def fwd_fold(self, b, op: N.Fold):
        # primal:  y = Fold f z a
        # forward (+):       y_dot = Fold (+) z_dot a_dot
        # forward (max/min): fold (value, tangent sum, count) triples; y_dot = sum / count
        #                    (ties: the mean of the tied tangents)
        # forward (other):   (y, y_dot) = unzip (Fold f' (z, z_dot) (zip a a_dot)) with
        #                    f' (x, x_dot) (w, w_dot) = (f x w, d1 f * x_dot + d2 f * w_dot),
        #                    associative when f is
        self.reduction(b, op, lambda f, z, a: N.Fold(f, z, a))

    def fwd_scan(self, b, op: N.Scan):
        # primal:  y = Scan{l,r}{,1} f z a
        # forward: as Fold, with the same scan over pairs (or triples for max/min)
        self.reduction(b, op, lambda f, z, a: N.Scan(f, z, a, op.left))

    def reduction(self, b, op, make):
        y, a = b.outs[0], op.a
        elt = a.type.elt
        ad = self.dot(a)
        zj = _ExpJ(op.z, self.arr_tan) if op.z is not None else None
        f_active = self.reads_active(op.f)
        if ad is None and not (zj is not None and zj.active) and not f_active:
            return self.keep(b)
        kind = None if f_active else _binop(op.f)
        if kind == "add":
            self.keep(b)
            zd = None if zj is None else zj.tangent()
            ad = ad if ad is not None else self.zeros_like(a)
            return self.set_dot(y, make(_add_lam(elt), zd, ad))
        if kind in ("max", "min") and _is_float(elt):
            xs = self.triples(a, ad)
            z3 = None if zj is None else zj.pair(N.Const(1, int64))
            return self.unzip_triples(y, make(_tie_lam(kind, elt), z3, xs))
        f2 = jvp_lam(op.f, (True, True), self.arr_tan)
        if f2 is None:
            return self.keep(b)
        xs = self.zipped(a, ad)
        t = xs.type.elt
        comb = _lam((t, t), lambda p, q: _apply(f2, (N.Prj(0, p), N.Prj(0, q),
                                                     N.Prj(1, p), N.Prj(1, q))))
        self.split(y, make(comb, None if zj is None else zj.pair(), xs))

    def triples(self, a: N.Avar, ad: N.Avar | None) -> N.Avar:
        """``(x, x_dot, 1)`` for each element of ``a`` (``x_dot`` zero if inactive)."""
        elt = a.type.elt
        one = N.Const(1, int64)
        if ad is None:
            return self.emit(N.Map(_lam((elt,), lambda x: N.Tuple((x, zero(elt), one))), a))
        return self.emit(N.ZipWith(_lam((elt, elt), lambda x, d: N.Tuple((x, d, one))), a, ad))

    def unzip_triples(self, y: N.Avar, term: N.Arr):
        pv = self.emit(term)
        t = pv.type.elt
        elt = t.items[0]
        self.binds.append(ABind((y,), N.Map(_fst_lam(t, 0), pv)))
        mean = _lam((t,), lambda p: _p("div", N.Prj(1, p), _p("to_" + elt.name, N.Prj(2, p))))
        self.set_dot(y, N.Map(mean, pv))

    def fwd_permute(self, b, op: N.Permute):
        # primal:  y = Permute comb d f s  (f: discrete, no tangent)
        # forward (+):       y_dot = Permute (+) d_dot f s_dot
        # forward (max/min): permute (value, tangent sum, count) triples; y_dot = sum / count
        #                    (ties, with the default too: the mean of the tied tangents)
        y = b.outs[0]
        dd, sd = self.dot(op.defaults), self.dot(op.src)
        if dd is None and sd is None and not self.reads_active(op.comb):
            return self.keep(b)
        kind = None if self.reads_active(op.comb) else _binop(op.comb)
        elt = y.type.elt
        if kind == "add":
            self.keep(b)
            dd = dd if dd is not None else self.zeros_like(op.defaults)
            sd = sd if sd is not None else self.zeros_like(op.src)
            return self.set_dot(y, N.Permute(_add_lam(elt), dd, freshen(op.f), sd))
        if kind in ("max", "min") and _is_float(elt):
            d3, s3 = self.triples(op.defaults, dd), self.triples(op.src, sd)
            return self.unzip_triples(y, N.Permute(_tie_lam(kind, elt), d3, freshen(op.f), s3))
        if kind == "mul" and _is_float(elt):
            # dual numbers: (x, x') * (y, y') = (x y, x y' + x' y), associative and commutative
            def pairs(a, ad):
                if ad is None:
                    return self.emit(N.Map(_lam((elt,), lambda x: N.Tuple((x, zero(elt)))), a))
                return self.emit(N.ZipWith(_lam((elt, elt), lambda x, d: N.Tuple((x, d))),
                                           a, ad))
            pair_t = N.Tuple((zero(elt), zero(elt))).type
            comb = _lam((pair_t, pair_t), lambda u, v:
                        N.Tuple((_p("mul", N.Prj(0, u), N.Prj(0, v)),
                                 _p("add", _p("mul", N.Prj(0, u), N.Prj(1, v)),
                                    _p("mul", N.Prj(1, u), N.Prj(0, v))))))
            pv = self.emit(N.Permute(comb, pairs(op.defaults, dd), freshen(op.f),
                                     pairs(op.src, sd)))
            self.binds.append(ABind((y,), N.Map(_fst_lam(pv.type.elt, 0), pv)))
            return self.set_dot(y, N.Map(_fst_lam(pv.type.elt, 1), pv))
        raise NotDifferentiableError(
            "permute: forward-mode differentiation needs the combination function to be (+), "
            f"*, max or min, got {show(op.comb)}")

    def fwd_backpermute(self, b, op: N.Backpermute):
        # primal:  y = Backpermute sh f a;  forward: y_dot = Backpermute sh f a_dot
        self.keep(b)
        ad = self.dot(op.a)
        if ad is not None:
            self.set_dot(b.outs[0], N.Backpermute(freshen(op.shape), freshen(op.f), ad))

    def fwd_reshape(self, b, op: N.Reshape):
        # primal:  y = Reshape sh a;  forward: y_dot = Reshape sh a_dot
        self.keep(b)
        ad = self.dot(op.a)
        if ad is not None:
            self.set_dot(b.outs[0], N.Reshape(freshen(op.shape), ad))

    def fwd_replicate(self, b, op: N.Replicate):
        # primal:  y = Replicate spec a;  forward: y_dot = Replicate spec a_dot
        self.keep(b)
        ad = self.dot(op.a)
        if ad is not None:
            self.set_dot(b.outs[0], N.Replicate(_fresh_spec(op.spec), ad))

    def fwd_slice(self, b, op: N.Slice):
        # primal:  y = Slice a spec;  forward: y_dot = Slice a_dot spec
        self.keep(b)
        ad = self.dot(op.a)
        if ad is not None:
            self.set_dot(b.outs[0], N.Slice(ad, _fresh_spec(op.spec)))

    def acond(self, b: ABind, op: ACondB):
        # primal:  y = Acond c t e
        # forward: (y, y_dot) = Acond c (t, t_dot) (e, e_dot)  (zeros for an inactive side)
        subs = []
        for br in (op.t, op.e):
            s = _AFwd(self.arr_tan)
            subs.append((s, s.ablock(br), br))
        act = [j for j in range(len(b.outs)) if any(rt[j] is not None for _, rt, _ in subs)]
        if not act:
            return self.keep(b)
        blocks = []
        for s, rt, br in subs:
            res = aleaves(br.result)
            tans = tuple(rt[j] if rt[j] is not None else s.zeros_like(res[j]) for j in act)
            blocks.append(ABlock(s.binds, (br.result, tans)))
        touts = tuple(_dot(b.outs[j]) for j in act)
        self.binds.append(ABind(tuple(b.outs) + touts, ACondB(op.c, blocks[0], blocks[1])))
        for j, d in zip(act, touts):
            self.arr_tan[b.outs[j].name] = d

    def fwd_awhile(self, b: ABind, op: N.Awhile):
        # primal:  y = Awhile cond body init
        # forward: (y, y_dot) = Awhile (cond . fst) (body, body_dot) (init, init_dot); the
        #          active state leaves are a fixpoint, as for the scalar While
        t = op.type
        init = _arr_atoms(op.init)
        act = [j for j, x in enumerate(init) if self.dot(x) is not None]
        while True:
            body, rt = self.loop_body(op.body, t, act)
            more = {j for j, d in enumerate(rt) if d is not None}
            if more <= set(act):
                break
            act = sorted(set(act) | more)
        if not act:
            return self.keep(b)
        st = body.param.type
        s = N.Avar(N.fresh("s"), st)
        cond = N.ALam(s, N.Alet(op.cond.param, N.APrj(0, s), op.cond.body))
        dinit = tuple(self.dot(init[j]) if self.dot(init[j]) is not None
                      else self.zeros_like(init[j]) for j in act)
        w = N.Awhile(cond, body, N.ATuple((op.init, N.ATuple(dinit))), op.every)
        touts = tuple(_dot(b.outs[j]) for j in act)
        self.binds.append(ABind(tuple(b.outs) + touts, w))
        for j, d in zip(act, touts):
            self.arr_tan[b.outs[j].name] = d

    def loop_body(self, body: N.ALam, t, act: list):
        """``\\(s, s_dot) -> (body s, body_dot s s_dot)`` for the active leaves ``act``."""
        tl = atype_leaves(t)
        st = ATupleT((t, ATupleT(tuple(tl[j] for j in act))))
        s = N.Avar(N.fresh("s"), st)
        pl = [N.Avar(N.fresh("a"), x) for x in tl]
        pre = [ABind((v,), _aprj(s, 0, *path)) for v, path in zip(pl, apaths(t))]
        dl = [_dot(pl[j]) for j in act]
        pre += [ABind((d,), _aprj(s, 1, k)) for k, d in enumerate(dl)]
        blk = aflatten(body.body, {body.param.name: atree_like(t, iter(pl))})
        sub = _AFwd({**self.arr_tan, **{pl[j].name: d for j, d in zip(act, dl)}})
        rt = sub.ablock(blk)
        res = aleaves(blk.result)
        tans = tuple(rt[j] if rt[j] is not None else sub.zeros_like(res[j]) for j in act)
        lam = N.ALam(s, ablock_term(ABlock(pre + sub.binds, (blk.result, tans))))
        return lam, rt


def _aprj(a, *path):
    for i in path:
        a = N.APrj(i, a)
    return a


def _arr_atoms(term: N.Arr) -> list:
    if isinstance(term, N.ATuple):
        return [x for i in term.items for x in _arr_atoms(i)]
    if isinstance(term.type, ATupleT):
        return [x for i in range(len(term.type.items)) for x in _arr_atoms(N.APrj(i, term))]
    return [term]


def _fresh_spec(spec: tuple) -> tuple:
    return tuple(None if s is None else freshen(s) for s in spec)


def _tie_lam(kind: str, elt) -> N.Lam:
    """Combine (value, tangent sum, count) triples under max/min; ties add up."""
    t = TupleT((elt, elt, int64))
    wins = "gt" if kind == "max" else "lt"

    def body(p, q):
        x, s, c = N.Prj(0, p), N.Prj(1, p), N.Prj(2, p)
        y, u, d = N.Prj(0, q), N.Prj(1, q), N.Prj(2, q)
        pick = N.Cond(_p(wins, x, y), N.Tuple((s, c)),
                      N.Cond(_p(wins, y, x), N.Tuple((u, d)),
                             N.Tuple((_p("add", s, u), _p("add", c, d)))))
        r = N.Var(N.fresh("r"), pick.type)
        return N.Let(r, pick, N.Tuple((_p(kind, x, y), N.Prj(0, r), N.Prj(1, r))))

    return _lam((t, t), body)


# --------------------------------------------------------------------------- programs


def _resolve_active(prog: N.Program, active) -> tuple:
    n = len(prog.params)
    if active is None:
        return tuple(i for i, p in enumerate(prog.params) if has_float(p.type))
    if isinstance(active, (int, np.integer)):
        active = (active,)
    out = set()
    for i in active:
        if not isinstance(i, (int, np.integer)) or not 0 <= int(i) < n:
            raise ProgramTypeError(f"jvp: active parameter {i!r} is not a position of a "
                                   f"program with {n} parameters")
        out.add(int(i))
    return tuple(sorted(out))


def jvp_program(prog: N.Program, active: tuple | None = None) -> N.Program:
    """The forward-mode derivative program of ``prog``.

    Its parameters are ``prog``'s followed by one tangent per active parameter
    (``active``: parameter positions, default every parameter with a floating
    leaf; tangents in parameter order, of the parameters' types); its body
    returns ``ATuple(outputs..., output tangents...)`` over the leaves of
    ``prog``'s result.  Example: for ``\\x -> Map (\\v -> v * v) x`` the result
    is ``\\x x_dot -> (Map (\\v -> v * v) x, ZipWith (\\v d -> 2 v d) x x_dot)``
    (up to pair splitting).
    """
    from ..ast.typecheck import typecheck
    from ..frontend import _with_captured
    idx = _resolve_active(prog, active)
    pre, env, arr_tan, tparams = [], {}, {}, []
    for i, p in enumerate(prog.params):
        pl = _adestructure(p, pre)
        if isinstance(p.type, ATupleT):
            env[p.name] = atree_like(p.type, iter(pl))
        if i in idx:
            d = _dot(p)
            tparams.append(d)
            for x, y in zip(pl, _adestructure(d, pre)):
                if has_float(x.type):
                    arr_tan[x.name] = y
    blk = aflatten(prog.body, env)
    fwd = _AFwd(arr_tan)
    rt = fwd.ablock(blk)
    outs = aleaves(blk.result)
    tans = [d if d is not None else fwd.zeros_like(o) for o, d in zip(outs, rt)]
    body = ablock_term(ABlock(pre + fwd.binds, tuple(outs) + tuple(tans)))
    out = N.Program(tuple(prog.params) + tuple(tparams), body)
    typecheck(_with_captured(out))  # captured outer arrays are free here
    return out


def _adestructure(p: N.Avar, pre: list) -> list:
    if not isinstance(p.type, ATupleT):
        return [p]
    pl = [N.Avar(N.fresh("a"), t) for t in atype_leaves(p.type)]
    pre.extend(ABind((v,), _aprj(p, *path)) for v, path in zip(pl, apaths(p.type)))
    return pl


# --------------------------------------------------------------------------- jvp


def _nest(t, it):
    """Rebuild a result shaped like array type ``t`` from its leaves."""
    if isinstance(t, ATupleT):
        return tuple(_nest(i, it) for i in t.items)
    return next(it)


def _check_tangent(i: int, p_type, primal, tangent, traced: bool):
    """Validate the tangent of parameter ``i`` against its primal (raise naming it)."""
    if traced:
        if tangent.type.rank != p_type.rank:
            raise ShapeError(f"jvp: the tangent of parameter {i} has rank "
                             f"{tangent.type.rank}, but the parameter has type {p_type!r}")
        if tangent.type != p_type:
            raise ProgramTypeError(f"jvp: the tangent of parameter {i} has type "
                                   f"{tangent.type!r}, but the parameter has type {p_type!r}")
        return
    if tangent.shape != primal.shape:
        raise ShapeError(f"jvp: the tangent of parameter {i} has shape {tangent.shape}, but "
                         f"the primal has shape {primal.shape}")
    if tangent.dtype != primal.dtype:
        raise ProgramTypeError(f"jvp: the tangent of parameter {i} has dtype {tangent.dtype}, "
                               f"but the primal has dtype {primal.dtype}")


def jvp(f, primals: tuple, tangents: tuple, *, backend: str | None = None):
    """Forward mode: ``(outputs, output tangents)`` of program ``f`` at ``primals``.

    ``primals`` and ``tangents`` are tuples with one entry per parameter (the
    tangent of a non-floating parameter is ignored and may be None).  Given
    NumPy arrays it runs (on ``backend``, default: the default backend) and
    returns NumPy arrays; given ``Acc`` values inside a traced program it
    returns ``Acc`` values.  Outputs are shaped like ``f``'s result.

    >>> jvp(lambda x: A.map(lambda v: v * v, x), (np.array([3.0]),), (np.array([1.0]),))
    (array([9.]), array([6.]))
    """
    from ..frontend import Acc, _acc, _current, arg_type, call_program, located, trace_program

    @located
    def go():
        if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
            raise ProgramTypeError("jvp: primals and tangents must be tuples (one entry per "
                                   "parameter)")
        if len(primals) != len(tangents):
            raise ProgramTypeError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
        traced = _current() is not None
        if traced:
            ps = [_acc(p, "jvp") for p in primals]
            sig = tuple(p.type for p in ps)
        else:
            if any(isinstance(p, Acc) for p in list(primals) + list(tangents)):
                raise ProgramTypeError("jvp: Acc values outside a traced program")
            ps = [np.asarray(p) for p in primals]
            sig = tuple(arg_type(p, i) for i, p in enumerate(ps))
        prog = trace_program(f, sig)
        idx = _resolve_active(prog, None)
        ts = []
        for i in idx:
            t = tangents[i]
            if t is None:
                raise ProgramTypeError(f"jvp: parameter {i} is floating; its tangent cannot "
                                       "be None")
            t = _acc(t, "jvp") if traced else np.asarray(t)
            _check_tangent(i, sig[i], ps[i], t, traced)
            ts.append(t)
        jprog = jvp_program(prog, idx)
        if traced:
            out = call_program(jprog, ps + ts)
        else:
            from ..pipeline import convert_args, optimise, prepare
            if backend is None:
                from .api import default_backend
                name = default_backend()
            else:
                name = backend
            runner = prepare(optimise(jprog), name, False)
            out = runner(convert_args(ps + ts, "jvp"))
        out = out if isinstance(out, tuple) else (out,)
        n = len(out) // 2
        t = prog.type
        return _nest(t, iter(out[:n])), _nest(t, iter(out[n:]))

    return go()


__all__ = ["jvp", "jvp_program", "jvp_lam"]
