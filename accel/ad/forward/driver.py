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

from ...ast import nodes as N
from ...ast.traverse import free_vars
from ...ast.types import ATupleT, has_float, int64
from ...errors import NotDifferentiableError, ProgramTypeError, ShapeError
from ..anf import ABind, ABlock, ACondB, ablock_term, aflatten
from ..anf import leaves as aleaves
from ..anf import paths as apaths
from ..anf import tree_like as atree_like
from ..anf import type_leaves as atype_leaves
from ..blocks import zero
from ..wrt import resolve_wrt
from . import arr
from .terms import tangent_var, prim, lam_of, prj_lam, zeros_like_term, aprj

#: array node type -> ``rule(fwd, bind)``: emits the binding and its tangent binding
RULES = {
    N.Use: arr.use,
    N.Generate: arr.generate,
    N.Map: arr.map_,
    N.ZipWith: arr.zip_with,
    N.Fold: arr.fold,
    N.Scan: arr.scan,
    N.Permute: arr.permute,
    N.Backpermute: arr.backpermute,
    N.Reshape: arr.reshape,
    N.Replicate: arr.replicate,
    N.Slice: arr.slice_,
    N.Awhile: arr.awhile,
}


class ArrayForward:
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
        d = tangent_var(v)
        self.binds.append(ABind((d,), term))
        self.arr_tan[v.name] = d

    def zeros_like(self, v: N.Avar) -> N.Avar:
        return self.emit(zeros_like_term(v))

    def reads_active(self, n) -> bool:
        """Whether ``n`` (a function or expression) indexes an active array."""
        return n is not None and any(x in self.arr_tan for x in free_vars(n))

    def split(self, y: N.Avar, pairs: N.Arr):
        """Bind ``y = Map fst pairs`` and ``y_dot = Map snd pairs``."""
        pv = self.emit(pairs)
        t = pv.type.elt
        self.binds.append(ABind((y,), N.Map(prj_lam(t, 0), pv)))
        self.set_dot(y, N.Map(prj_lam(t, 1), pv))

    def zipped(self, a: N.Avar, ad: N.Avar | None) -> N.Avar:
        """``zip a a_dot`` (``a`` paired with zeros if it is inactive)."""
        elt = a.type.elt
        if ad is None:
            return self.emit(N.Map(lam_of((elt,), lambda x: N.Tuple((x, zero(elt)))), a))
        return self.emit(N.ZipWith(lam_of((elt, elt), lambda x, d: N.Tuple((x, d))), a, ad))

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
        rule = RULES.get(type(op))
        if rule is None:  # pragma: no cover - a new node without a rule
            raise NotDifferentiableError(f"jvp: no forward rule for {type(op).__name__}")
        rule(self, b)

    def sub_sweep(self, arr_tan: dict) -> "ArrayForward":
        """A sweep over a nested block (a loop body) with the tangents ``arr_tan``."""
        return ArrayForward(arr_tan)
    def keep(self, b: ABind):
        self.binds.append(b)

    def triples(self, a: N.Avar, ad: N.Avar | None) -> N.Avar:
        """``(x, x_dot, 1)`` for each element of ``a`` (``x_dot`` zero if inactive)."""
        elt = a.type.elt
        one = N.Const(1, int64)
        if ad is None:
            return self.emit(N.Map(lam_of((elt,), lambda x: N.Tuple((x, zero(elt), one))), a))
        return self.emit(N.ZipWith(lam_of((elt, elt), lambda x, d: N.Tuple((x, d, one))), a, ad))

    def unzip_triples(self, y: N.Avar, term: N.Arr):
        pv = self.emit(term)
        t = pv.type.elt
        elt = t.items[0]
        self.binds.append(ABind((y,), N.Map(prj_lam(t, 0), pv)))
        mean = lam_of((t,), lambda p: prim("div", N.Prj(1, p), prim("to_" + elt.name, N.Prj(2, p))))
        self.set_dot(y, N.Map(mean, pv))

    def acond(self, b: ABind, op: ACondB):
        # primal:  y = Acond c t e
        # forward: (y, y_dot) = Acond c (t, t_dot) (e, e_dot)  (zeros for an inactive side)
        subs = []
        for br in (op.t, op.e):
            s = ArrayForward(self.arr_tan)
            subs.append((s, s.ablock(br), br))
        act = [j for j in range(len(b.outs)) if any(rt[j] is not None for _, rt, _ in subs)]
        if not act:
            return self.keep(b)
        blocks = []
        for s, rt, br in subs:
            res = aleaves(br.result)
            tans = tuple(rt[j] if rt[j] is not None else s.zeros_like(res[j]) for j in act)
            blocks.append(ABlock(s.binds, (br.result, tans)))
        touts = tuple(tangent_var(b.outs[j]) for j in act)
        self.binds.append(ABind(tuple(b.outs) + touts, ACondB(op.c, blocks[0], blocks[1])))
        for j, d in zip(act, touts):
            self.arr_tan[b.outs[j].name] = d


# --------------------------------------------------------------------------- programs


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
    from ...ast.typecheck import typecheck
    from ...frontend import with_captured
    idx, _ = resolve_wrt("jvp", prog, active, forward=True)
    pre, env, arr_tan, tparams = [], {}, {}, []
    for i, p in enumerate(prog.params):
        pl = adestructure(p, pre)
        if isinstance(p.type, ATupleT):
            env[p.name] = atree_like(p.type, iter(pl))
        if i in idx:
            d = tangent_var(p)
            tparams.append(d)
            for x, y in zip(pl, adestructure(d, pre)):
                if has_float(x.type):
                    arr_tan[x.name] = y
    blk = aflatten(prog.body, env)
    fwd = ArrayForward(arr_tan)
    rt = fwd.ablock(blk)
    outs = aleaves(blk.result)
    tans = [d if d is not None else fwd.zeros_like(o) for o, d in zip(outs, rt)]
    body = ablock_term(ABlock(pre + fwd.binds, tuple(outs) + tuple(tans)))
    out = N.Program(tuple(prog.params) + tuple(tparams), body)
    typecheck(with_captured(out))  # captured outer arrays are free here
    return out


def adestructure(p: N.Avar, pre: list) -> list:
    if not isinstance(p.type, ATupleT):
        return [p]
    pl = [N.Avar(N.fresh("a"), t) for t in atype_leaves(p.type)]
    pre.extend(ABind((v,), aprj(p, *path)) for v, path in zip(pl, apaths(p.type)))
    return pl


# --------------------------------------------------------------------------- jvp


def nest(t, it):
    """Rebuild a result shaped like array type ``t`` from its leaves."""
    if isinstance(t, ATupleT):
        return tuple(nest(i, it) for i in t.items)
    return next(it)


def check_tangent(i: int, p_type, primal, tangent, traced: bool):
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
    from ...frontend import (Acc, arg_type, as_acc, call_program, current_context, located,
                             trace_program)

    @located
    def go():
        if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
            raise ProgramTypeError("jvp: primals and tangents must be tuples (one entry per "
                                   "parameter)")
        if len(primals) != len(tangents):
            raise ProgramTypeError(f"jvp: {len(primals)} primals but {len(tangents)} tangents")
        traced = current_context() is not None
        if traced:
            ps = [as_acc(p, "jvp") for p in primals]
            sig = tuple(p.type for p in ps)
        else:
            if any(isinstance(p, Acc) for p in list(primals) + list(tangents)):
                raise ProgramTypeError("jvp: Acc values outside a traced program")
            ps = [np.asarray(p) for p in primals]
            sig = tuple(arg_type(p, i) for i, p in enumerate(ps))
        prog = trace_program(f, sig)
        idx, _ = resolve_wrt("jvp", prog, None, forward=True)
        ts = []
        for i in idx:
            t = tangents[i]
            if t is None:
                raise ProgramTypeError(f"jvp: parameter {i} is floating; its tangent cannot "
                                       "be None")
            t = as_acc(t, "jvp") if traced else np.asarray(t)
            check_tangent(i, sig[i], ps[i], t, traced)
            ts.append(t)
        jprog = jvp_program(prog, idx)
        if traced:
            out = call_program(jprog, ps + ts)
        else:
            from ...pipeline import convert_args, optimise, prepare
            if backend is None:
                from ..api import default_backend
                name = default_backend()
            else:
                name = backend
            runner = prepare(optimise(jprog), name, False)
            out = runner(convert_args(ps + ts, "jvp"))
        out = out if isinstance(out, tuple) else (out,)
        n = len(out) // 2
        t = prog.type
        return nest(t, iter(out[:n])), nest(t, iter(out[n:]))

    return go()
