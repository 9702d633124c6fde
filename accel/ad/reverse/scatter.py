"""Reverse rules of ``Permute`` (scatter), one function per combination operator.

``permute`` picks the rule by the combination function (``combination.combination``:
``+`` on numbers or leafwise on tuples, ``*``, ``max``, ``min``, or a projection) from
``COMBINATION_RULES``; a new combination operator is one more function and one more
table entry.  Each rule contributes to the defaults ``d`` and the source ``src``
through the two target helpers of ``Targets``.

The scatter (``\\new old -> new``: the last source in row-major order wins) is the
derivative of a gather from each target's winner.  The winners are computed in accel
itself, a ``Permute max`` of the sources' linear indices into an array of ``-1``: cost
O(n + m), no sorting, and an integer array, so the derivative program differentiates
again in both modes (it is gathers and a ``Permute (+)`` for reverse over reverse).
"""

from __future__ import annotations

from ...ast import nodes as N
from ...ast.traverse import apply_lam, freshen
from ...ast.types import Scalar, int64, shape_type
from ...errors import NotDifferentiableError
from ..blocks import zero
from ..combination import combination, located_at
from . import scatter_general
from .gather import index_function_plan
from .terms import add_lam, lam1, zeros_like

class Scatter:
    """One ``Permute`` being differentiated: its parts and the two adjoint layouts.

    ``at_target(body)`` is an array over ``src`` (``body(i, f i)`` where ``f i`` is kept,
    zero where it is ``ignore``); ``over_defaults(body)`` an array over the defaults.
    """

    def __init__(self, op: N.Permute, y: N.Avar, dy: N.Avar):
        self.op, self.y, self.dy = op, y, dy
        self.d, self.src, self.elt = op.defaults, op.src, y.type.elt
        self.z = zero(self.elt)

    def at_target(self, body_fn):
        # Generate over src: \i -> let t = f i in if keep then body(i, target) else 0
        i = N.Var(N.fresh("i"), shape_type(self.src.type.rank))
        t = N.Var(N.fresh("t"), self.op.f.type)
        body = N.Let(t, apply_lam(self.op.f, (i,)),
                     N.Cond(N.Prj(0, t), body_fn(i, N.Prj(1, t)), self.z))
        return N.Generate(N.Shape(self.src), N.Lam((i,), body))

    def over_defaults(self, body_fn):
        return N.Generate(N.Shape(self.d), lam1(shape_type(self.d.type.rank), body_fn))


def _eq(a, b):
    return N.PrimApp("eq", (a, b))


def permute(rev, b, y, dy):
    # primal:  y = Permute comb d f src   (y[t] = comb(src[i], y[t]) for f(i) = t)
    # reverse: by the combination function, from COMBINATION_RULES; any other operator:
    #          grouped by target, segmented scans (scatter_general.reverse_rule)
    op = b.op
    kind = combination(op.comb)
    elt = y.type.elt
    fast = kind in COMBINATION_RULES and (
        kind not in ("mul", "max", "min") or (isinstance(elt, Scalar) and elt.is_float))
    if not fast:
        # any other associative and commutative operator: the grouped rule
        try:
            return scatter_general.reverse_rule(rev, op, y, dy)
        except NotDifferentiableError as e:
            raise located_at(e, op) from None
    COMBINATION_RULES[kind](rev, Scatter(op, y, dy))


def permute_add(rev, s: Scatter):
    # primal:  y = Permute (+) d f src
    # reverse: d += dy;  src[i] += dy[f i] (a gather; 0 where f i is ignore)
    rev.contribute(s.d, s.dy)
    rev.contribute(s.src, s.at_target(lambda i, t: N.Index(s.dy, t)))


def permute_extremum(rev, s: Scatter):
    # primal:  y = Permute max|min d f src
    # reverse: the winners share dy[t] equally (d[t] included):
    #          cnt = Permute (+) (d == y) f (src == y[f i]);  x += dy[t] / cnt[t] where x == y[t]
    op, y, dy, d, src, elt, z = s.op, s.y, s.dy, s.d, s.src, s.elt, s.z
    one = N.Const(1, elt)
    dhit = lambda t: N.Cond(_eq(N.Index(d, t), N.Index(y, t)), one, z)  # noqa: E731
    shit = s.at_target(lambda i, t: N.Cond(_eq(N.Index(src, i), N.Index(y, t)), one, z))
    cnt = rev.emit(N.Permute(add_lam(elt), s.over_defaults(dhit), freshen(op.f),
                             rev.emit(shit)))

    def share(v, t):
        return N.Cond(_eq(v, N.Index(y, t)), N.PrimApp("div", (
            N.Index(dy, t), N.Index(cnt, t))), z)
    rev.contribute(d, s.over_defaults(lambda t: share(N.Index(d, t), t)))
    rev.contribute(src, s.at_target(lambda i, t: share(N.Index(src, i), t)))


def permute_mul(rev, s: Scatter):
    # primal:  y = Permute (*) d f src
    # reverse: each factor gets dy[t] * (product of the others), zeros counted:
    #          prod = product of the nonzero factors, zeros = their number;
    #          x += dy[t] * (prod / x if zeros == 0; prod if x == 0 and zeros == 1; else 0)
    op, dy, d, src, elt, z = s.op, s.dy, s.d, s.src, s.elt, s.z
    rs = src.type.rank
    one = N.Const(1, elt)
    nz = (lambda v: N.Cond(_eq(v, z), one, v))  # noqa: E731
    isz = (lambda v: N.Cond(_eq(v, z), one, z))  # noqa: E731
    mul = N.Lam((xv := N.Var(N.fresh("x"), elt), yv := N.Var(N.fresh("y"), elt)),
                N.PrimApp("mul", (xv, yv)))
    j = N.Var(N.fresh("i"), shape_type(rs))
    prod = rev.emit(N.Permute(mul, s.over_defaults(lambda t: nz(N.Index(d, t))),
                              freshen(op.f), rev.emit(N.Generate(N.Shape(src), N.Lam(
                                  (j,), nz(N.Index(src, j)))))))
    j2 = N.Var(N.fresh("i"), shape_type(rs))
    zeros = rev.emit(N.Permute(add_lam(elt), s.over_defaults(lambda t: isz(N.Index(d, t))),
                               freshen(op.f), rev.emit(N.Generate(N.Shape(src), N.Lam(
                                   (j2,), isz(N.Index(src, j2)))))))

    def others(v, t):
        zt, pt = N.Index(zeros, t), N.Index(prod, t)
        nonzero = N.Cond(_eq(zt, z), N.PrimApp("div", (pt, v)), z)
        iszero = N.Cond(_eq(zt, one), pt, z)
        return N.PrimApp("mul", (N.Index(dy, t), N.Cond(_eq(v, z), iszero, nonzero)))
    rev.contribute(d, s.over_defaults(lambda t: others(N.Index(d, t), t)))
    rev.contribute(src, s.at_target(lambda i, t: others(N.Index(src, i), t)))


def _linear(ix: N.Exp, sh: N.Exp, rank: int) -> N.Exp:
    """The row-major linear index of ``ix`` in shape ``sh``."""
    lin = N.Const(0, int64)
    for d in range(rank):
        lin = N.PrimApp("add", (N.PrimApp("mul", (lin, N.Prj(d, sh))), N.Prj(d, ix)))
    return lin


def winners(rev, s: Scatter) -> N.Avar:
    """Each target's winning source (its linear index), -1 where nothing lands:
    ``Permute max (fill -1) f (Generate (shape src) linear)``."""
    rs = s.src.type.rank
    i = N.Var(N.fresh("i"), shape_type(rs))
    lin = rev.emit(N.Generate(N.Shape(s.src), N.Lam((i,), _linear(i, N.Shape(s.src), rs))))
    none = rev.emit(s.over_defaults(lambda t: N.Const(-1, int64)))
    a, b = N.Var(N.fresh("x"), int64), N.Var(N.fresh("y"), int64)
    return rev.emit(N.Permute(N.Lam((a, b), N.PrimApp("max", (a, b))), none,
                              freshen(s.op.f), lin))


def injective(f: N.Lam, target_rank: int) -> bool:
    """Whether the permute index function ``f`` sends distinct sources to distinct
    targets: each target coordinate is one source coordinate (plus an invariant), each
    source coordinate in exactly one (``gather.index_function_plan`` with nothing
    folded), e.g. the loop tape's ``\\i -> (row, i)``."""
    g = freshen(f)
    plan = index_function_plan(N.Lam(g.params, N.Prj(1, g.body)), target_rank)
    return plan is not None and not plan.folded and all(len(x) <= 1 for x in plan.solvers)


def permute_scatter(rev, s: Scatter):
    # primal:  y = Permute (\new old -> new) d f src   (the last source wins)
    # reverse: w = Permute max (fill -1) f (Generate (shape src) linear)
    #          d   += \t -> if w[t] == -1 then dy[t] else 0
    #          src += \i -> if w[f i] == linear i then dy[f i] else 0  (0 where ignored)
    #          (f injective: no collisions, every written source wins:
    #           d += Permute (\new old -> new) dy f (zeros src);  src += \i -> dy[f i],
    #           O(size src) where dy is updated in place, as the loop tape's adjoint is)
    if injective(s.op.f, s.d.type.rank):
        rev.contribute(s.d, N.Permute(freshen(s.op.comb), s.dy, freshen(s.op.f),
                                      zeros_like(s.src)))
        rev.contribute(s.src, s.at_target(lambda i, t: N.Index(s.dy, t)))
        return
    w = winners(rev, s)
    rs = s.src.type.rank
    rev.contribute(s.d, s.over_defaults(lambda t: N.Cond(
        _eq(N.Index(w, t), N.Const(-1, int64)), N.Index(s.dy, t), s.z)))
    rev.contribute(s.src, s.at_target(lambda i, t: N.Cond(
        _eq(N.Index(w, t), _linear(i, N.Shape(s.src), rs)), N.Index(s.dy, t), s.z)))


def permute_keep(rev, s: Scatter):
    # primal:  y = Permute (\new old -> old) d f src  (= d);  reverse: d += dy
    rev.contribute(s.d, s.dy)


#: combination operator (as ``combination.combination`` names it) -> its reverse rule
COMBINATION_RULES = {
    "add": permute_add,
    "max": permute_extremum,
    "min": permute_extremum,
    "mul": permute_mul,
    "new": permute_scatter,
    "old": permute_keep,
}
