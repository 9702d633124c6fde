"""Reverse rule of the array-level loop ``awhile`` (beyond the thesis, after Futhark's loop tape).

``awhile``: the primal runs the loop once to count its iterations ``n``, then
again writing every ``every``-th state into a *loop tape* (one array of shape
``(ceil(n / every), ...)`` per state array, sized at run time; states must keep
their shape).  The dual loop runs ``k = n-1 .. 0``: it takes state ``k`` from
the tape (recomputing up to ``every - 1`` body steps from the last checkpoint)
and applies the body's vector-Jacobian product, accumulating the adjoints of
the arrays the body reads from outside.

The scalar loop ``while_`` has its rule in ``exp`` (it has no arrays to keep a
tape in).
"""

from __future__ import annotations

from ...ast import nodes as N
from ...ast.traverse import free_vars, freshen, substitute, walk
from ...ast.types import ArrayT, ATupleT, bool_, int64, shape_type
from ...errors import NotDifferentiableError
from ..anf import ABind, leaves, tree_like, tree_term, type_leaves
from ..blocks import zero
from .terms import zeros_like


def _c(v, t=int64):
    return N.Const(v, t)


def _p(op, *args):
    return N.PrimApp(op, args)


def _the(a: N.Avar) -> N.Exp:
    return N.Index(a, N.Tuple(()))


def _unit(e: N.Exp) -> N.Arr:
    return N.Unit(e)


def _call(lam: N.ALam, arg: N.Arr) -> N.Arr:
    """``lam`` applied to the array term ``arg`` (binders freshened)."""
    lam = freshen(lam)
    return N.Alet(lam.param, arg, lam.body)


def _leaf_terms(t, v: N.Avar) -> list:
    """Projections of each leaf of a (tuple-typed) array variable."""
    if not isinstance(t, ATupleT):
        return [v]
    out = []

    def go(t, term):
        if isinstance(t, ATupleT):
            for i, s in enumerate(t.items):
                go(s, N.APrj(i, term))
        else:
            out.append(term)
    go(t, v)
    return out


def _bind_leaves(t, v: N.Avar, body_fn):
    """``let l_i = leaf i of v in body_fn([l_i])`` with Avar leaves."""
    terms = _leaf_terms(t, v)
    vs = [N.Avar(N.fresh("a"), s) for s in type_leaves(t)]
    body = body_fn(vs)
    for var, term in reversed(list(zip(vs, terms))):
        body = N.Alet(var, term, body)
    return body


def _tuple(items) -> N.Arr:
    return N.ATuple(tuple(items))


def inline_program(prog: N.Program, args: list) -> N.Arr:
    """The body of ``prog`` with its parameters bound to ``args`` (binders freshened)."""
    prog = freshen(prog)
    body = prog.body
    for p, a in reversed(list(zip(prog.params, args))):
        body = N.Alet(p, a, body)
    return body


def awhile(rev, b: ABind, dys: list):
    """Primal replacement (count + taped loop) and the dual loop of ``b = awhile``."""
    # primal:  y = awhile c f x0, rewritten to: n = (iterations); (y, tape) = awhile (taped f)
    # reverse: for k = n-1 .. 0:  x_k = tape[k / every] advanced (k mod every) steps;
    #          (lam, outer adjoints) += vjp(f)(x_k, lam);   x0 += lam
    op = b.op
    T = op.init.type
    tl = type_leaves(T)
    for t in tl:
        if not isinstance(t, ArrayT):
            raise NotDifferentiableError(f"awhile: state of type {T!r}")
    every = max(1, int(op.every))
    init = leaves(_term_tree(op.init))
    CT = ATupleT((T, ArrayT(int64, 0)))

    # -- count pass: (x, k) -> (body x, k + 1) while cond x
    s = N.Avar(N.fresh("s"), CT)
    x = N.Avar(N.fresh("a"), T)
    kk = N.Avar(N.fresh("a"), ArrayT(int64, 0))
    cnt_cond = N.ALam(s, N.Alet(x, N.APrj(0, s), _call(op.cond, x)))
    s2 = N.Avar(N.fresh("s"), CT)
    x2, k2 = N.Avar(N.fresh("a"), T), N.Avar(N.fresh("a"), ArrayT(int64, 0))
    cnt_body = N.ALam(s2, _lets([(x2, N.APrj(0, s2)), (k2, N.APrj(1, s2))], _tuple((
        _call(op.body, x2), _unit(_p("add", _the(k2), _c(1)))))))
    cnt_init = _tuple((tree_term(_term_tree(op.init)), _unit(_c(0))))
    cnt_outs = tuple(N.Avar(N.fresh("a"), t) for t in tl) + (kk,)
    n = kk
    # number of checkpoints: ceil(n / every)
    cap_e = _p("floordiv", _p("add", _the(n), _c(every - 1)), _c(every))

    # -- taped pass: (x, k, tapes) -> (body x, k + 1, tapes with row k/every = x if k%every==0)
    TT = ATupleT(tuple(ArrayT(t.elt, t.rank + 1) for t in tl))
    ST = ATupleT((T, ArrayT(int64, 0), TT))
    st = N.Avar(N.fresh("s"), ST)
    xs = N.Avar(N.fresh("a"), T)
    tape_cond = N.ALam(st, N.Alet(xs, N.APrj(0, st), _call(op.cond, xs)))
    st2 = N.Avar(N.fresh("s"), ST)
    x3, k3, tp3 = (N.Avar(N.fresh("a"), T), N.Avar(N.fresh("a"), ArrayT(int64, 0)),
                   N.Avar(N.fresh("a"), TT))

    def write_tapes(xleaves, tleaves):
        out = []
        for xl, tp in zip(xleaves, tleaves):
            r = xl.type.rank
            i = N.Var(N.fresh("i"), shape_type(r))
            row = _p("floordiv", _the(k3), _c(every))
            tgt = N.Tuple((row,) + tuple(N.Prj(q, i) for q in range(r)))
            keep = _p("eq", _p("mod", _the(k3), _c(every)), _c(0)) if every > 1 else \
                N.Const(True, bool_)
            second = N.Lam((u := N.Var(N.fresh("x"), xl.type.elt),
                            N.Var(N.fresh("y"), xl.type.elt)), u)
            out.append(N.Permute(second, tp, N.Lam((i,), N.Tuple((keep, tgt))), xl))
        return _tuple(out)

    def next_state(xl, tpl):
        return _tuple((_call(op.body, x3), _unit(_p("add", _the(k3), _c(1))),
                       write_tapes(xl, tpl)))

    body_t = _lets([(x3, N.APrj(0, st2)), (k3, N.APrj(1, st2)), (tp3, N.APrj(2, st2))],
                   _bind_leaves(T, x3, lambda xl: _bind_leaves(TT, tp3,
                                                               lambda tpl: next_state(xl, tpl))))
    tape_body = N.ALam(st2, body_t)
    tapes0 = []
    for leaf in init:
        sh = N.Tuple((cap_e,) + tuple(N.Prj(q, N.Shape(leaf)) for q in range(leaf.type.rank)))
        tapes0.append(_gen_zero(sh, leaf.type.elt))
    taped_init = _tuple((tree_term(_term_tree(op.init)), _unit(_c(0)), _tuple(tapes0)))
    tape_vars = tuple(N.Avar(N.fresh("tape"), t) for t in TT.items)
    kdone = N.Avar(N.fresh("a"), ArrayT(int64, 0))
    rev.replace[id(b)] = [
        ABind(cnt_outs, N.Awhile(cnt_cond, cnt_body, cnt_init)),
        ABind(tuple(b.outs) + (kdone,) + tape_vars, N.Awhile(tape_cond, tape_body, taped_init)),
    ]

    # -- the body's vector-Jacobian product, over the state and the outer active arrays
    outer = sorted((free_vars(op.body) & rev.active) - {op.body.param.name})
    outer_vars = [_find_avar(op.body, name) for name in outer]
    xp = tuple(N.Avar(N.fresh("a"), t) for t in tl)
    op_ = tuple(N.Avar(N.fresh("a"), v.type) for v in outer_vars)
    bprog_body = N.Alet(op.body.param, tree_term(tree_like(T, iter(xp))), op.body.body)
    bprog_body = substitute(bprog_body, {v.name: w for v, w in zip(outer_vars, op_)})
    bprog = N.Program(xp + op_, bprog_body)
    vprog = rev.vjp_program(bprog, tuple(range(len(tl), len(tl) + len(outer_vars))))
    m = len(tl)

    # -- dual loop over (k, lam, accs) from k = n down to 1
    DT = ATupleT((ArrayT(int64, 0), ATupleT(tuple(tl)),
                  ATupleT(tuple(v.type for v in outer_vars))))
    d = N.Avar(N.fresh("s"), DT)
    kd = N.Avar(N.fresh("a"), ArrayT(int64, 0))
    dcond = N.ALam(d, N.Alet(kd, N.APrj(0, d), _unit(_p("gt", _the(kd), _c(0)))))
    d2 = N.Avar(N.fresh("s"), DT)
    k4 = N.Avar(N.fresh("a"), ArrayT(int64, 0))
    lam4 = N.Avar(N.fresh("a"), ATupleT(tuple(tl)))
    acc4 = N.Avar(N.fresh("a"), DT.items[2])
    kprev = N.Var(N.fresh("k"), int64)

    def state_at(kexp):  # the loop state before iteration k (leaves), from the tape
        rows = []
        for tvar in tape_vars:
            r = tvar.type.rank - 1
            rows.append(N.Slice(tvar, (_p("floordiv", kexp, _c(every)),) + (None,) * r))
        start = _retree(T, rows) if isinstance(T, ATupleT) else rows[0]
        if every == 1:
            return start
        # recompute (k mod every) body steps from the checkpoint
        RT = ATupleT((T, ArrayT(int64, 0)))
        q = N.Avar(N.fresh("s"), RT)
        qk = N.Avar(N.fresh("a"), ArrayT(int64, 0))
        steps = _p("mod", kexp, _c(every))
        rc = N.ALam(q, N.Alet(qk, N.APrj(1, q), _unit(_p("lt", _the(qk), steps))))
        q2 = N.Avar(N.fresh("s"), RT)
        qx, qk2 = N.Avar(N.fresh("a"), T), N.Avar(N.fresh("a"), ArrayT(int64, 0))
        rb = N.ALam(q2, _lets([(qx, N.APrj(0, q2)), (qk2, N.APrj(1, q2))], _tuple((
            _call(op.body, qx), _unit(_p("add", _the(qk2), _c(1)))))))
        return N.APrj(0, N.Awhile(rc, rb, _tuple((start, _unit(_c(0))))))

    xk = N.Avar(N.fresh("a"), T)
    vres = N.Avar(N.fresh("a"), vprog.type)

    def dual_body_fn():
        xleaves = [N.Avar(N.fresh("a"), t) for t in tl]
        lamleaves = [N.APrj(i, lam4) for i in range(m)]
        accleaves = [N.APrj(i, acc4) for i in range(len(outer_vars))]
        call = inline_program(vprog, list(xleaves) + list(outer_vars) + list(lamleaves)
                              + list(accleaves))  # the accumulators: adjoints start there
        nouts = m  # vprog returns the body's outputs (m leaves), then the gradients
        new_lam = [N.APrj(nouts + i, vres) for i in range(m)]
        new_acc = [N.APrj(nouts + m + i, vres) for i in range(len(outer_vars))]
        inner = N.Alet(vres, call, _tuple((
            _unit(kprev), _tuple(new_lam), _tuple(new_acc))))
        for xl, term in reversed(list(zip(xleaves, _leaf_terms(T, xk)))):
            inner = N.Alet(xl, term, inner)
        return N.Alet(xk, state_at(kprev), inner)

    dbody_inner = dual_body_fn()
    dbody = _lets([(k4, N.APrj(0, d2)), (lam4, N.APrj(1, d2)), (acc4, N.APrj(2, d2))],
                  _let_exp_in_arr(kprev, _p("sub", _the(k4), _c(1)), dbody_inner))
    lam0 = [dy if dy is not None else zeros_like(o) for dy, o in zip(dys, b.outs)]
    dinit = _tuple((_unit(_the(kdone)), _tuple(lam0),
                    _tuple([zeros_like(v) for v in outer_vars])))
    res = rev.emit(N.Awhile(dcond, N.ALam(d2, dbody), dinit))
    res = res if isinstance(res, tuple) else (res,)
    # res leaves: k, lam leaves (m), acc leaves
    flat = leaves(res)
    lam_fin, acc_fin = flat[1:1 + m], flat[1 + m:]
    for leaf, adj in zip(init, lam_fin):
        rev.contribute(leaf, adj)
    for v, adj in zip(outer_vars, acc_fin):
        rev.contribute(v, adj)


def _lets(binds: list, body: N.Arr) -> N.Arr:
    for v, t in reversed(binds):
        body = N.Alet(v, t, body)
    return body


def _term_tree(a: N.Arr):
    if isinstance(a, N.ATuple):
        return tuple(_term_tree(i) for i in a.items)
    return a


def _retree(t, rows):
    return tree_term(tree_like(t, iter(rows)))


def _find_avar(n: N.Node, name: str) -> N.Avar:
    for x in walk(n):
        if isinstance(x, N.Avar) and x.name == name:
            return x
    raise KeyError(name)


def _gen_zero(shape: N.Exp, elt) -> N.Arr:
    r = len(shape.type.items)
    return N.Generate(shape, N.Lam((N.Var(N.fresh("i"), shape_type(r)),), zero(elt)))


def _let_exp_in_arr(v: N.Var, e: N.Exp, a: N.Arr) -> N.Arr:
    """Bind a scalar for use in array-level expressions: substitute it (it is cheap)."""
    return substitute(a, {v.name: e})
