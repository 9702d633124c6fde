"""Reverse rule of the array-level loop ``awhile`` (beyond the thesis, after Futhark's loop tape).

``awhile``: the primal runs the loop once to count its iterations ``n`` (and the
elements of the states to keep), then again writing every ``every``-th state into a
*loop tape* sized at run time.  The dual loop runs ``k = n-1 .. 0``: it takes state
``k`` from the tape (recomputing up to ``every - 1`` body steps from the last
checkpoint) and applies the body's vector-Jacobian product, accumulating the adjoints
of the arrays the body reads from outside.

Tapes.  A state leaf that provably keeps its shape (``loop_shapes.keeps_shape``: every
rank-0 leaf, and e.g. a ``map`` or a ``generate (shape x)`` of the leaf) has a tape of
rows, ``(ceil(n / every), ...shape)``, and a state is read back as a ``slice``.  Any
other leaf may change shape from one iteration to the next (Accelerate's ``awhile``
allows it), so its tape is *flat*: one 1-D value tape holding its kept states one after
the other in row-major order (its length, the sum of their sizes, is summed by the
counting pass), plus an offset tape and r dimension tapes (rank r) with one entry per
checkpoint; the dual rebuilds state k as ``generate dims (\\ix -> tape[off + linear
ix])``.  Between the two, a leaf whose new shape depends only on arrays from outside the
loop (``loop_shapes.settles``: ``h <- tanh(W h + b)`` written with ``zip_with``, whose
length is a ``min`` of sizes) has one shape from its second state on: its tape has rows
shaped as the counting pass's last state, the first state (the loop's initial value,
maybe of another shape) is not written, and the dual reads state 0 from the initial
value.  (The corpus RNN's taped loop: 7 launches an iteration instead of 9.)  A flat
tape for every leaf would be correct too, but costs a few host steps per iteration
more: the gradient of the RNN of ``tests/test_loop_tape.py``, T = 100, m = 10, took 60
ms instead of 23 ms on the cpu backend, on a loaded machine.  Each
iteration writes its state with a ``permute (\\new old -> new)`` into the loop-carried
tapes, which fusion updates in place (O(state) a step), and which has derivative rules
in both modes (so loop gradients differentiate again).  Memory: the sum of the kept
states' sizes (``ceil(n / every) * s`` for a fixed size s), plus ``(1 + r)`` integers
per checkpoint of a flat tape.

The scalar loop ``while_`` has its rule in ``exp`` (it has no arrays to keep a
tape in).
"""

from __future__ import annotations

from ...ast import nodes as N
from ...ast.traverse import free_vars, freshen, substitute, walk
from ...ast.types import ArrayT, ATupleT, bool_, has_float, int64, shape_type
from ...errors import NotDifferentiableError
from ..anf import ABind, leaves, tree_like, tree_term, type_leaves
from ..blocks import zero
from .loop_shapes import keeps_shape, settles
from .terms import empty_of, zeros_like


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
    UT = ArrayT(int64, 0)
    m = len(tl)
    # -- the body's vector-Jacobian product, over the state and the outer active arrays
    outer = sorted((free_vars(op.body) & rev.active) - {op.body.param.name})
    outer_vars = [_find_avar(op.body, name) for name in outer]
    xp = tuple(N.Avar(N.fresh("a"), t) for t in tl)
    op_ = tuple(N.Avar(N.fresh("a"), v.type) for v in outer_vars)
    bprog_body = N.Alet(op.body.param, tree_term(tree_like(T, iter(xp))), op.body.body)
    bprog_body = substitute(bprog_body, {v.name: w for v, w in zip(outer_vars, op_)})
    bprog = N.Program(xp + op_, bprog_body)
    vprog = rev.vjp_program(bprog, tuple(range(len(tl), len(tl) + len(outer_vars))))

    # per leaf: whether the dual reads it (with checkpoints the body recomputes states
    # from whole ones: then every leaf), and a tape of rows for it, else a flat tape
    floats = [has_float(t) for t in tl]  # (the others carry no adjoint)
    needed = _read_leaves(vprog, xp, floats) if every == 1 else [True] * m
    fixed = keeps_shape(op.body)
    # a leaf whose shape settles after the first iteration gets a tape of rows shaped
    # as the counting pass's last state; state 0 is read from the loop's initial value
    settled = [not f and st and isinstance(i, N.Avar)
               for f, st, i in zip(fixed, settles(op.body), init)]
    flex = [leaf for leaf in range(m) if needed[leaf] and not fixed[leaf] and not settled[leaf]]
    # without checkpoints, the body's result at step k is state k + 1 (the final state for
    # the last step): the body's vjp is given the leaves on tapes of rows and reads them
    # instead of recomputing the body (``reverse_program``'s given_outputs)
    given = [every == 1 and needed[leaf] and (fixed[leaf] or settled[leaf])
             for leaf in range(m)]
    if any(given):
        vprog = rev.vjp_program(bprog, tuple(range(len(tl), len(tl) + len(outer_vars))),
                                given_outputs=tuple(given))

    def kept(kv):  # is state k a checkpoint?
        return _p("eq", _p("mod", _the(kv), _c(every)), _c(0)) if every > 1 else \
            N.Const(True, bool_)

    def with_sums(items, sums):  # a loop state's components, the sums last if any
        return _tuple(tuple(items) + ((_tuple(sums),) if flex else ()))

    # -- count pass: (x, k, tot, last) -> (body x, k + 1, tot + |x| if k % every == 0,
    # dims of x) (tot, one per flat-taped leaf: the elements of the states its tape will
    # keep; last, one per dimension of a settled leaf: the shape of the last state, that
    # of every state but the first when there are two or more)
    FT = ATupleT((UT,) * len(flex))
    sdims = [(leaf, q) for leaf in range(m) if settled[leaf] for q in range(tl[leaf].rank)]
    XT = ATupleT((UT,) * (len(flex) + len(sdims)))
    counted = bool(flex or sdims)
    CT = ATupleT((T, UT) + ((XT,) if counted else ()))
    s = N.Avar(N.fresh("s"), CT)
    x = N.Avar(N.fresh("a"), T)
    cnt_cond = N.ALam(s, N.Alet(x, N.APrj(0, s), _call(op.cond, x)))
    s2 = N.Avar(N.fresh("s"), CT)
    x2, k2 = N.Avar(N.fresh("a"), T), N.Avar(N.fresh("a"), UT)
    tot2 = N.Avar(N.fresh("a"), XT)

    def counts(items, sums):
        return _tuple(tuple(items) + ((_tuple(sums),) if counted else ()))

    def count_next(xl, tl_):
        tots = [_unit(_p("add", _the(t), N.Cond(kept(k2), _size(xl[leaf]), _c(0))))
                for t, leaf in zip(tl_, flex)]
        last = [_unit(N.Prj(q, N.Shape(xl[leaf]))) for leaf, q in sdims]
        return counts((_call(op.body, x2), _unit(_p("add", _the(k2), _c(1)))), tots + last)
    cnt_body = N.ALam(s2, _lets(
        [(x2, N.APrj(0, s2)), (k2, N.APrj(1, s2))] + ([(tot2, N.APrj(2, s2))] if counted else []),
        _bind_leaves(T, x2, lambda xl: _bind_leaves(XT, tot2, lambda tl_: count_next(xl, tl_))
                     if counted else count_next(xl, []))))
    cnt_init = counts((tree_term(_term_tree(op.init)), _unit(_c(0))),
                      [_unit(_c(0))] * len(flex)
                      + [_unit(N.Prj(q, N.Shape(init[leaf]))) for leaf, q in sdims])
    kk = N.Avar(N.fresh("a"), UT)
    tots = dict(zip(flex, (N.Avar(N.fresh("a"), UT) for _ in flex)))
    rows_dims = {d: N.Avar(N.fresh("a"), UT) for d in sdims}  # a settled leaf's rows
    cnt_outs = (tuple(N.Avar(N.fresh("a"), t) for t in tl) + (kk,) + tuple(tots.values())
                + tuple(rows_dims.values()))
    n = kk
    # number of checkpoints: ceil(n / every)
    cap_e = _p("floordiv", _p("add", _the(n), _c(every - 1)), _c(every))

    # -- taped pass: (x, k, tapes, offs) -> (body x, k + 1, tapes with x written, offs')
    # A leaf that keeps its shape has a tape of rows (checkpoints, ...shape).  Any other
    # leaf of rank r has a flat tape, its kept states one after the other, row-major,
    # and an offset tape and r dimension tapes with one entry per checkpoint; offs (one
    # per such leaf) is where the next state goes.
    layout, ttypes = [], []  # layout[l]: index of leaf l's (value) tape among the tapes
    for leaf, t in enumerate(tl):
        layout.append(len(ttypes))
        if not needed[leaf]:
            continue
        if fixed[leaf] or settled[leaf]:
            ttypes.append(ArrayT(t.elt, t.rank + 1))
        else:
            ttypes.append(ArrayT(t.elt, 1))
            ttypes.extend([ArrayT(int64, 1)] * (1 + t.rank))
    TT = ATupleT(tuple(ttypes))
    ST = ATupleT((T, UT, TT) + ((FT,) if flex else ()))
    st = N.Avar(N.fresh("s"), ST)
    xs = N.Avar(N.fresh("a"), T)
    tape_cond = N.ALam(st, N.Alet(xs, N.APrj(0, st), _call(op.cond, xs)))
    st2 = N.Avar(N.fresh("s"), ST)
    x3, k3, tp3, of3 = (N.Avar(N.fresh("a"), T), N.Avar(N.fresh("a"), UT),
                        N.Avar(N.fresh("a"), TT), N.Avar(N.fresh("a"), FT))

    def write(tape, keep, src, target):
        """``tape`` with ``src``'s element at ``target(i)`` (when ``keep``)."""
        r = src.type.rank
        i = N.Var(N.fresh("i"), shape_type(r))
        second = N.Lam((u := N.Var(N.fresh("x"), src.type.elt),
                        N.Var(N.fresh("y"), src.type.elt)), u)
        return N.Permute(second, tape, N.Lam((i,), N.Tuple((keep, target(i)))), src)

    def next_state(xl, tpl, ofl):
        keep = kept(k3)
        row = _p("floordiv", _the(k3), _c(every))
        tapes, offs = list(tpl), []
        for leaf, (xl_, t) in enumerate(zip(xl, tl)):
            j, r, sh = layout[leaf], t.rank, N.Shape(xl_)
            if not needed[leaf]:
                continue
            if fixed[leaf] or settled[leaf]:
                # (a settled leaf's state 0 is the loop's initial value, maybe of
                # another shape than the rows: not written)
                tapes[j] = write(tpl[j], _p("and", keep, _p("gt", _the(k3), _c(0)))
                                 if settled[leaf] else keep, xl_, lambda i: N.Tuple(
                                     (row,) + tuple(N.Prj(q, i) for q in range(r))))
                continue
            off = _the(ofl[flex.index(leaf)])
            # (the state flattened, written at off + j: an injective scatter, whose
            # adjoint does not read the tape)
            tapes[j] = write(tpl[j], keep, N.Reshape(N.Tuple((_size(xl_),)), xl_),
                             lambda i: N.Tuple((_p("add", off, N.Prj(0, i)),)))
            tapes[j + 1] = write(tpl[j + 1], keep, _unit(off), lambda i: N.Tuple((row,)))
            for q in range(r):
                tapes[j + 2 + q] = write(tpl[j + 2 + q], keep, _unit(N.Prj(q, sh)),
                                         lambda i: N.Tuple((row,)))
            offs.append(_unit(_p("add", off, N.Cond(keep, _size(xl_), _c(0)))))
        return with_sums((_call(op.body, x3), _unit(_p("add", _the(k3), _c(1))),
                          _tuple(tapes)), offs)

    def taped_next(xl, tpl):
        if not flex:
            return next_state(xl, tpl, [])
        return _bind_leaves(FT, of3, lambda ofl: next_state(xl, tpl, ofl))
    body_t = _lets([(x3, N.APrj(0, st2)), (k3, N.APrj(1, st2)), (tp3, N.APrj(2, st2))]
                   + ([(of3, N.APrj(3, st2))] if flex else []),
                   _bind_leaves(T, x3, lambda xl: _bind_leaves(TT, tp3,
                                                               lambda tpl: taped_next(xl, tpl))))
    tape_body = N.ALam(st2, body_t)
    tapes0 = []
    for leaf, t in enumerate(tl):
        if not needed[leaf]:
            continue
        if fixed[leaf] or settled[leaf]:
            sh = N.Tuple((cap_e,) + tuple(_the(rows_dims[(leaf, q)]) if settled[leaf] else
                                          N.Prj(q, N.Shape(init[leaf])) for q in range(t.rank)))
            tapes0.append(_gen_zero(sh, t.elt))
        else:
            tapes0.append(_gen_zero(N.Tuple((_the(tots[leaf]),)), t.elt))
            tapes0.extend(_gen_zero(N.Tuple((cap_e,)), int64) for _ in range(1 + t.rank))
    taped_init = with_sums((tree_term(_term_tree(op.init)), _unit(_c(0)), _tuple(tapes0)),
                           [_unit(_c(0))] * len(flex))
    tape_vars = tuple(N.Avar(N.fresh("tape"), t) for t in TT.items)
    kdone = N.Avar(N.fresh("a"), UT)
    offs_done = tuple(N.Avar(N.fresh("a"), UT) for _ in flex)
    rev.replace[id(b)] = [
        ABind(cnt_outs, N.Awhile(cnt_cond, cnt_body, cnt_init)),
        ABind(tuple(b.outs) + (kdone,) + tape_vars + offs_done,
              N.Awhile(tape_cond, tape_body, taped_init)),
    ]

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
        row = _p("floordiv", kexp, _c(every))
        rows = []
        for leaf, t in enumerate(tl):
            j, r = layout[leaf], t.rank
            if not needed[leaf]:  # (a stand-in the dual does not read)
                rows.append(empty_of(t))
                continue
            flat = tape_vars[j]
            if fixed[leaf]:
                rows.append(N.Slice(flat, (row,) + (None,) * r))
                continue
            if settled[leaf]:  # row 0 is the initial value
                first = _p("eq", row, _c(0))
                i = N.Var(N.fresh("i"), shape_type(r))
                dims = tuple(N.Cond(first, N.Prj(q, N.Shape(init[leaf])),
                                    _the(rows_dims[(leaf, q)])) for q in range(r))
                rows.append(N.Generate(N.Tuple(dims), N.Lam((i,), N.Cond(
                    first, N.Index(init[leaf], i),
                    N.Index(flat, N.Tuple((row,) + tuple(N.Prj(q, i) for q in range(r))))))))
                continue
            off = N.Index(tape_vars[j + 1], N.Tuple((row,)))
            dims = [N.Index(tape_vars[j + 2 + q], N.Tuple((row,))) for q in range(r)]
            i = N.Var(N.fresh("i"), shape_type(r))
            lin = _linear([N.Prj(q, i) for q in range(r)], dims)
            rows.append(N.Generate(N.Tuple(tuple(dims)), N.Lam((i,), N.Index(
                flat, N.Tuple((_p("add", off, lin),))))))
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

    def _next_state(leaf: int, t, kexp):
        """Leaf ``leaf`` of the state after step ``kexp``: tape row ``kexp + 1``, or the
        loop's result after the last step (rows and result have one shape)."""
        nxt = _p("add", kexp, _c(1))
        last = _p("eq", nxt, _the(kdone))
        i = N.Var(N.fresh("i"), shape_type(t.rank))
        out = b.outs[leaf]
        return N.Generate(N.Shape(out), N.Lam((i,), N.Cond(last, N.Index(out, i), N.Index(
            tape_vars[layout[leaf]], N.Tuple((nxt,) + tuple(N.Prj(q, i)
                                                           for q in range(t.rank)))))))

    xk = N.Avar(N.fresh("a"), T)
    vres = N.Avar(N.fresh("a"), vprog.type)

    def dual_body_fn():
        xleaves = [N.Avar(N.fresh("a"), t) for t in tl]
        lamleaves = [N.APrj(i, lam4) for i in range(m)]
        accleaves = [N.APrj(i, acc4) for i in range(len(outer_vars))]
        nexts = [_next_state(leaf, t, kprev) for leaf, t in enumerate(tl) if given[leaf]]
        call = inline_program(vprog, list(xleaves) + list(outer_vars) + list(lamleaves)
                              + list(accleaves) + nexts)  # the accumulators: adjoints start there
        nouts = m  # vprog returns the body's outputs (m leaves), then the gradients
        new_lam = [N.APrj(nouts + i, vres) if floats[i] else lamleaves[i] for i in range(m)]
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


def _read_leaves(vprog: N.Program, xp: tuple, floats: list) -> list:
    """Per state parameter of the body's vjp program ``vprog``, whether its gradients
    (the results after the body's outputs; those of the ``floats`` leaves and of the
    outer arrays) read it: a state the body only writes into, like the loop tape of a
    loop being differentiated again, needs no tape of its own."""
    binds, body = [], vprog.body
    while isinstance(body, N.Alet):
        binds.append((body.var, body.bound))
        body = body.body
    m = len(xp)
    items = body.items if isinstance(body, N.ATuple) else (body,)
    roots = [r for i, r in enumerate(items[m:]) if i >= m or floats[i]]
    live = set()
    for r in roots:
        live |= free_vars(r)
    for v, bound in reversed(binds):
        if v.name in live:
            live |= free_vars(bound)
    return [p.name in live for p in vprog.params[:m]]


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


def _size(a: N.Arr) -> N.Exp:
    """The number of elements of ``a``."""
    out = _c(1)
    for q in range(a.type.rank):
        out = _p("mul", out, N.Prj(q, N.Shape(a)))
    return out


def _linear(ix: list, dims: list) -> N.Exp:
    """The row-major position of index ``ix`` in an array of dimensions ``dims``."""
    out = _c(0)
    for i, d in zip(ix, dims):
        out = _p("add", _p("mul", out, d), i)
    return out


def _gen_zero(shape: N.Exp, elt) -> N.Arr:
    r = len(shape.type.items)
    return N.Generate(shape, N.Lam((N.Var(N.fresh("i"), shape_type(r)),), zero(elt)))


def _let_exp_in_arr(v: N.Var, e: N.Exp, a: N.Arr) -> N.Arr:
    """Bind a scalar for use in array-level expressions: substitute it (it is cheap)."""
    return substitute(a, {v.name: e})
