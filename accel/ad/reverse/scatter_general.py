"""AD of ``permute`` with a general associative and commutative combination function
(the reverse rule; the forward rule is ``forward/scatter_general.py``).

``y = Permute comb d f src``: every target ``t`` ends as ``y[t] = d[t] ⊙ x_1 ⊙ ... ⊙ x_k``
over the source elements ``x_j`` whose index function sends them to ``t`` (in any order,
since ``⊙`` is associative and commutative).  ``+ * max min`` keep their O(n) fast paths
in ``reverse/scatter.py`` and ``forward/arr.py``; these rules handle every other operator,
on scalars and on tuples.

**Forward mode** (a dual-number scatter, O(n + m)):

    (y, y_dot) = unzip (Permute comb' (zip d d_dot) f (zip src src_dot))
    comb' (x, x_dot) (w, w_dot) = (x ⊙ w,  d1⊙(x, w) x_dot + d2⊙(x, w) w_dot)

``comb'`` is associative and commutative wherever ``⊙`` is smooth: the tangent part of
``(a ⊙' b) ⊙' c`` is the directional derivative of ``(a ⊙ b) ⊙ c`` and that of
``a ⊙' (b ⊙' c)`` the one of ``a ⊙ (b ⊙ c)``, the same function.  So the tangent of
``y[t]`` is exactly ``sum_j d/dx_j (d[t] ⊙ x_1 ⊙ ... ⊙ x_k) x_dot_j`` whatever order the
backend combines in, and no grouping is needed (the grouping that reverse mode needs below
would give the same sum at a higher cost).

**Reverse mode** (Futhark's ``reduce_by_index`` rule, Schenck et al., SC22):

1. One list of ``N = n + m`` elements: the ``n`` source elements with their target's
   linear index as key (``m`` for an ignored element), then the ``m`` defaults, each with
   its own index as key, so that every target's group is non-empty and the defaults need
   no separate rule.
2. Group by key with a stable LSD radix sort: one pass per bit of ``m`` (``floor(log2 m)
   + 1`` passes, an ``awhile`` over integers, so it is never differentiated), each a map,
   an exclusive ``+`` scan for the new positions and a ``Permute (+)`` into zeros (a
   permutation: no collisions).  Work O(N log m), depth O(log N log m).
3. Inclusive segmented scans of ``⊙`` from the left and from the right (operator on
   ``(flag, value)`` pairs; the flag marks a group boundary), read one position over: the
   exclusive prefix ``pre_p`` and suffix ``suf_p`` of each sorted element within its group.
4. The adjoint of sorted element ``x_p`` in group ``t`` is the vector-Jacobian product of
   ``⊙`` in its second argument at ``(pre_p ⊙ suf_p, x_p)`` with ``y_adj[t]`` (commutativity
   lets the rest of the group sit on one side); a group of one passes ``y_adj[t]`` through.
   The VJP is the reverse derivative of the scalar function (``expr.py``), so tuples work.
5. ``Permute (+)`` the sorted adjoints back to element order (a permutation) and read the
   source's and the defaults' adjoints from it.

Everything is accel AST (scans, permutes, gathers, one integer ``awhile``), so the result
runs on every backend and differentiates again.  A combination function that indexes an
array being differentiated is refused in reverse mode: its derivative would need every
application of ``⊙``, not just the last one per element.  Both modes refuse a projection
(``\\new old -> new`` is not commutative; it needs a rule of its own) and an operator that
sampling shows is not associative and commutative (``operator_check``), so a wrong
operator gives a clear ``NotDifferentiableError`` (as far as six samples can tell).
``benchmarks/permute_general.py`` measures the cost against the fast paths and JAX.
"""

from __future__ import annotations

from ...ast import nodes as N
from ...ast.pretty import show
from ...ast.traverse import apply_lam, free_vars, freshen
from ...ast.types import TupleT, bool_, int64, shape_type
from ...errors import NotDifferentiableError
from ..blocks import zero
from ..operator_check import check_associative_commutative, refuse_projection
from . import exp


def _c(v) -> N.Exp:
    return N.Const(v, int64)


def _p(op, *args) -> N.Exp:
    return N.PrimApp(op, args)


def _lam(types, fn) -> N.Lam:
    vs = tuple(N.Var(N.fresh("x"), t) for t in types)
    return N.Lam(vs, fn(*vs))


def _size(arr: N.Avar) -> N.Exp:
    s = _c(1)
    for k in range(arr.type.rank):
        s = _p("mul", s, N.Prj(k, N.Shape(arr)))
    return s


def _linear(ix: N.Exp, arr: N.Avar) -> N.Exp:
    """The row-major linear position of index tuple ``ix`` in ``arr``."""
    lin = _c(0)
    for k in range(arr.type.rank):
        lin = _p("add", _p("mul", lin, N.Prj(k, N.Shape(arr))), N.Prj(k, ix))
    return lin


def _unravel(flat: N.Exp, arr: N.Avar) -> N.Exp:
    """The index tuple of row-major linear position ``flat`` in ``arr``."""
    r = arr.type.rank
    comps, rest = [], flat
    for k in reversed(range(r)):
        ext = N.Prj(k, N.Shape(arr))
        comps.append(_p("mod", rest, ext) if k > 0 else rest)
        rest = _p("floordiv", rest, ext)
    return N.Tuple(tuple(reversed(comps)))


def _gen1(size: N.Exp, body_fn) -> N.Generate:
    """``Generate (size) (\\(p) -> body_fn(p))`` over a rank-1 index."""
    ix = N.Var(N.fresh("i"), shape_type(1))
    return N.Generate(N.Tuple((size,)), N.Lam((ix,), body_fn(N.Prj(0, ix))))


def _at(arr: N.Avar, p: N.Exp) -> N.Exp:
    return N.Index(arr, N.Tuple((p,)))


def _place(kv_t, size: N.Exp, pos_fn, vals: N.Arr) -> N.Permute:
    """``Permute (+) zeros (\\p -> pos_fn p) vals``: ``pos_fn`` must be a permutation."""
    add = _lam((kv_t, kv_t), lambda a, b: _add(a, b, kv_t))
    ix = N.Var(N.fresh("i"), shape_type(1))
    f = N.Lam((ix,), N.Tuple((N.Const(True, bool_), N.Tuple((pos_fn(N.Prj(0, ix)),)))))
    return N.Permute(add, _gen1(size, lambda _: zero(kv_t)), f, vals)


def _add(a, b, t):
    if isinstance(t, TupleT):
        return N.Tuple(tuple(_add(N.Prj(i, a), N.Prj(i, b), s) for i, s in enumerate(t.items)))
    if t == bool_:
        return a
    return _p("add", a, b)


# --------------------------------------------------------------------------- grouping


def radix_sort_keys(emit, keys: N.Avar, bound: N.Exp) -> N.Avar:
    """``(key, position)`` pairs of the rank-1 int64 ``keys`` (values in ``[0, bound]``),
    stably sorted by key: an LSD radix sort, one scan-and-permute pass per bit of ``bound``.
    """
    n = N.Prj(0, N.Shape(keys))
    pair_t = TupleT((int64, int64))
    kv0 = emit(_gen1(n, lambda p: N.Tuple((_at(keys, p), p))))
    st = N.Avar(N.fresh("st"), N.ATuple((kv0, N.Unit(_c(1)))).type)
    # cond: the digit weight still has a bit of ``bound`` to look at
    cs = N.Avar(N.fresh("st"), st.type)
    w = N.Avar(N.fresh("w"), N.Unit(_c(1)).type)
    cond = N.ALam(cs, N.Alet(w, N.APrj(1, cs), N.Unit(
        _p("le", N.Index(w, N.Tuple(())), bound))))
    kv = N.Avar(N.fresh("kv"), kv0.type)
    w2 = N.Avar(N.fresh("w"), w.type)
    sc = N.Avar(N.fresh("sc"), keys.type)
    weight = N.Index(w2, N.Tuple(()))

    def bit(p):
        return _p("mod", _p("floordiv", N.Prj(0, _at(kv, p)), weight), _c(2))

    zeros_before = N.Scan(_lam((int64, int64), lambda a, b: _p("add", a, b)), _c(0),
                          N.Map(_lam((pair_t,), lambda e: _p("sub", _c(1), _p(
                              "mod", _p("floordiv", N.Prj(0, e), weight), _c(2)))), kv), True)

    def newpos(p):
        z = _at(sc, p)
        ones = _p("add", _at(sc, n), _p("sub", p, z))
        return N.Cond(_p("eq", bit(p), _c(1)), ones, z)

    step = N.ATuple((_place(pair_t, n, newpos, kv), N.Unit(_p("mul", weight, _c(2)))))
    body = N.ALam(st, N.Alet(kv, N.APrj(0, st), N.Alet(w2, N.APrj(1, st),
                                                       N.Alet(sc, zeros_before, step))))
    loop = emit(N.Awhile(cond, body, N.ATuple((kv0, N.Unit(_c(1))))))
    return loop[0] if isinstance(loop, tuple) else emit(N.APrj(0, loop))


def _seg_op(comb: N.Lam, elt, left: bool) -> N.Lam:
    """The segmented-scan operator on ``(flag, value)``: ``flag`` 1 marks a group boundary
    (its start for the left scan, its end for the right scan, which calls ``f(x, acc)``)."""
    t = TupleT((int64, elt))

    def op(a, b):
        flag = _p("max", N.Prj(0, a), N.Prj(0, b))
        cut = b if left else a
        val = N.Cond(_p("eq", N.Prj(0, cut), _c(1)), N.Prj(1, cut),
                     apply_lam(comb, (N.Prj(1, a), N.Prj(1, b))))
        return N.Tuple((flag, val))
    return _lam((t, t), op)


# --------------------------------------------------------------------------- reverse


def reverse_rule(rev, op: N.Permute, y: N.Avar, dy: N.Avar):
    """Contribute the adjoints of ``op.defaults`` and ``op.src`` (``rev`` is the array-level
    reverse sweep: ``emit``, ``contribute``, ``active``)."""
    comb, d, src, elt = op.comb, op.defaults, op.src, y.type.elt
    refuse_projection(comb)
    check_associative_commutative(comb)
    if free_vars(comb) & rev.active:
        raise NotDifferentiableError(
            f"permute: reverse mode needs a combination function that reads no array being "
            f"differentiated, got {show(comb)}")
    emit = rev.emit
    n, m = _size(src), _size(d)
    total = _p("add", n, m)

    def key(e):
        t = N.Var(N.fresh("t"), op.f.type)
        of_src = N.Let(t, apply_lam(op.f, (_unravel(e, src),)),
                       N.Cond(N.Prj(0, t), _linear(N.Prj(1, t), d), m))
        return N.Cond(_p("lt", e, n), of_src, _p("sub", e, n))

    keys = emit(_gen1(total, key))
    kv = radix_sort_keys(emit, keys, m)

    def k_at(p):
        return N.Prj(0, _at(kv, p))

    def value(p):
        e = N.Var(N.fresh("e"), int64)
        return N.Let(e, N.Prj(1, _at(kv, p)), N.Cond(
            _p("lt", e, n), N.Index(src, _unravel(e, src)),
            N.Index(d, _unravel(_p("sub", e, n), d))))

    def starts(p):
        return N.Cond(_p("eq", p, _c(0)), N.Const(True, bool_),
                      _p("ne", k_at(_p("sub", p, _c(1))), k_at(p)))

    def ends(p):
        return N.Cond(_p("eq", p, _p("sub", total, _c(1))), N.Const(True, bool_),
                      _p("ne", k_at(_p("add", p, _c(1))), k_at(p)))

    def flagged(edge):
        return emit(_gen1(total, lambda p: N.Tuple((
            N.Cond(edge(p), _c(1), _c(0)), value(p)))))

    incl_l = emit(N.Scan(_seg_op(comb, elt, True), None, flagged(starts), True))
    incl_r = emit(N.Scan(_seg_op(comb, elt, False), None, flagged(ends), False))
    lam = exp.differentiate_lam(freshen(comb), active=lambda arr: False)
    vjp = exp.recompute_lambda(lam)  # (x, w, adj) -> ((x_adj, w_adj), iai)

    def adjoint(p):
        k = N.Var(N.fresh("k"), int64)
        g = N.Var(N.fresh("g"), elt)
        pre = N.Prj(1, _at(incl_l, _p("sub", p, _c(1))))
        suf = N.Prj(1, _at(incl_r, _p("add", p, _c(1))))
        has_pre, has_suf = _p("not", starts(p)), _p("not", ends(p))
        rest = N.Cond(has_pre, N.Cond(has_suf, apply_lam(comb, (pre, suf)), pre), suf)
        dyt = N.Index(dy, _unravel(k, d))
        through = N.Prj(1, N.Prj(0, apply_lam(vjp, (g, value(p), dyt))))
        inner = N.Cond(_p("or", has_pre, has_suf), N.Let(g, rest, through), dyt)
        return N.Let(k, k_at(p), N.Cond(_p("eq", k, m), zero(elt), inner))

    sorted_adj = emit(_gen1(total, adjoint))
    placed = emit(_place(elt, total, lambda p: N.Prj(1, _at(kv, p)), sorted_adj))
    rev.contribute(src, N.Generate(N.Shape(src), _lam(
        (shape_type(src.type.rank),), lambda i: _at(placed, _linear(i, src)))))
    rev.contribute(d, N.Generate(N.Shape(d), _lam(
        (shape_type(d.type.rank),), lambda j: _at(placed, _p("add", n, _linear(j, d))))))


__all__ = ["radix_sort_keys", "reverse_rule"]
