"""Adjoints of reads through affine index functions: gathers and folds, not scatters.

A read ``a[f(i)]`` inside ``Generate sh (\\i -> ...)`` contributes ``dres[i]`` to
``da[f(i)]``.  For a general ``f`` that is a ``Permute (+)`` into zeros: a scatter
with atomic adds, serialised where many ``i`` hit one target.  But most reads a
user writes have an *affine* index: each target coordinate is

* one domain coordinate plus an invariant offset (identity, transpose or any
  permutation, projection/broadcast, shift, reversal ``n - 1 - i``),
* an invariant (a fixed row ``a[0, i]``; all of them: a sum over the domain), or
* the sum of two domain coordinates plus an offset (a convolution ``x[i + k]``),

and every other domain coordinate does not appear in the index at all.  (Inside a
``Map`` or ``ZipWith`` function, whose parameters are elements, only the last kind
qualifies: a read at an invariant index, such as a scalar kept in a rank-0 array,
whose adjoint is then a sum over the domain rather than one contended atomic target.)  Then each
target is hit by the domain points that agree on the *solving* coordinates, so the
adjoint is a **gather**: ``da[t] = sum over the folded coordinates of dres[i(t, j)]``,
a ``Generate`` over (target, folded) and a ``Fold (+)`` over the folded dimension,
with no atomics.  A projection's adjoint is thus a fold over the dimensions it drops
(the matrix product's gradients), a permutation's a gather, a shift's a shifted
gather.  For a sum of two coordinates the one with the larger extent is solved for
at run time, so the fold runs over the smaller: the work stays within twice the
scatter's.  Its output is ``Generate``/``Fold``/``Index``, so it differentiates
again in both modes.

``affine_forms`` classifies each read of a differentiated elementwise function;
``gather_adjoint`` builds the adjoint term of one classified read.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...ast import nodes as N
from ...ast.types import int64, shape_type
from ...ast.traverse import substitute
from ..blocks import CondB, flatten, fresh_leaves, leaves_of, zero
from .terms import add_lam


@dataclass(frozen=True)
class Affine:
    """``sum(coefs[k] * i_k) + const``: ``const`` an invariant int64 term or None (0)."""

    coefs: tuple  # ((coordinate, coefficient), ...), sorted, no zero coefficients
    const: object = None

    def plus(self, other: "Affine", sign: int = 1) -> "Affine":
        c = dict(self.coefs)
        for k, v in other.coefs:
            c[k] = c.get(k, 0) + sign * v
        const = self.const
        if other.const is not None:
            oc = other.const if sign > 0 else _p("neg", other.const)
            const = oc if const is None else _p("add", const, oc)
        return Affine(tuple(sorted((k, v) for k, v in c.items() if v)), const)

    def scaled(self, s: int) -> "Affine":
        const = None if self.const is None else _p("mul", N.Const(s, int64), self.const)
        return Affine(tuple((k, v * s) for k, v in self.coefs if v * s), const)


def _p(op, *args) -> N.Exp:
    return N.PrimApp(op, tuple(args))


def _definitions(binds, out: dict) -> dict:
    """Name -> defining op of every variable bound in ``binds`` (None for those bound
    by a conditional, a loop or a tuple-valued op: not analysed, not invariant)."""
    for b in binds:
        for v in b.outs:
            out[v.name] = None
        if isinstance(b.op, CondB):
            _definitions(b.op.t.binds, out)
            _definitions(b.op.e.binds, out)
        elif len(b.outs) == 1:
            out[b.outs[0].name] = b.op
    return out


class _Linearise:
    """Affine forms of int64 atoms over the coordinates of a ``Generate`` index."""

    def __init__(self, binds, coords: dict):
        self.defs = _definitions(binds, {})
        self.coords = coords  # leaf name -> coordinate number
        self.memo: dict = {}

    def atom(self, a) -> Affine | None:
        if isinstance(a, N.Const):
            return Affine((), None if a.type == int64 and not a.value else a)
        if not isinstance(a, N.Var):
            return None
        if a.name in self.coords:
            return Affine(((self.coords[a.name], 1),))
        if a.name not in self.memo:
            self.memo[a.name] = self._bound(a)
        return self.memo[a.name]

    def _bound(self, v: N.Var) -> Affine | None:
        if v.name not in self.defs:  # free in the function: invariant
            return Affine((), v)
        op = self.defs[v.name]
        if isinstance(op, N.PrimApp):
            args = [self.atom(x) for x in op.args]
            if any(x is None for x in args):
                return None
            if all(not x.coefs for x in args):
                return Affine((), N.PrimApp(op.op, tuple(_const(x, y) for x, y in
                                                         zip(args, op.args))))
            if v.type != int64:
                return None
            if op.op == "add":
                return args[0].plus(args[1])
            if op.op == "sub":
                return args[0].plus(args[1], -1)
            if op.op == "neg":
                return args[0].scaled(-1)
            if op.op == "mul":
                for x, y in ((args[0], op.args[1]), (args[1], op.args[0])):
                    if isinstance(y, N.Const):
                        return x.scaled(int(y.value))
            return None
        if isinstance(op, N.Index):
            ix = [self.atom(x) for x in op.index.items]
            if any(x is None or x.coefs for x in ix):
                return None
            return Affine((), N.Index(op.array, N.Tuple(tuple(
                _const(x, y) for x, y in zip(ix, op.index.items)))))
        if isinstance(op, N.Prj) and isinstance(op.tup, N.Shape):
            return Affine((), op)
        return None


def _const(form: Affine, atom) -> N.Exp:
    """The invariant value of an atom whose form has no coordinates."""
    return form.const if form.const is not None else N.Const(0, atom.type)


@dataclass
class Plan:
    """How to gather the adjoint of one read: per target dimension, its solving
    coordinate(s) (one, or two chosen between at run time) and the invariant offset."""

    forms: list  # Affine per target dimension
    solvers: list  # per target dimension: (k,) or (a, b)
    folded: list  # domain coordinates in no form


def plan_read(forms: list, rank: int) -> Plan | None:
    """The gather plan of a read whose target coordinates have ``forms`` (over a
    domain of ``rank`` coordinates), or None when the scatter must stay."""
    if any(f is None for f in forms):
        return None
    seen: dict = {}
    for d, f in enumerate(forms):
        for k, _ in f.coefs:
            seen.setdefault(k, []).append(d)
    solvers = []
    for f in forms:
        ks = tuple(k for k, c in f.coefs)
        if len(ks) > 2 or any(abs(c) != 1 or len(seen[k]) != 1 for k, c in f.coefs):
            return None
        solvers.append(ks)
    folded = [k for k in range(rank) if k not in seen]
    return Plan(list(forms), solvers, folded)


def affine_forms(ad, reads: list, rank: int, is_generate: bool) -> list:
    """Per index adjoint of the differentiated elementwise function ``ad`` over a domain
    of ``rank`` dimensions: its Plan or None.  ``reads`` are the index adjoints (each
    with ``primal_index``).  A ``Generate`` function's parameter is the domain index;
    a ``Map``/``ZipWith`` function's are elements, so only its reads at invariant
    indices (a scalar held in an array, ``a[0]``) are planned: summed over the domain."""
    params = [x for t in ad.param_trees for x in leaves_of(t) if isinstance(x, N.Var)]
    coords = {v.name: k for k, v in enumerate(params)} if is_generate else {}
    lin = _Linearise(ad.primal.binds, coords)
    for v in params:  # an element parameter is not invariant
        lin.defs.setdefault(v.name, None)
    return [plan_read([lin.atom(x) for x in e.primal_index], rank) for e in reads]


def _min(a, b):
    return _p("min", a, b)


def _max(a, b):
    return _p("max", a, b)


def _and(a, b):
    return b if a is None else _p("and", a, b)


def _add(e, x):
    """``e + x`` for an int64 term ``e`` (or None: 0) and a term or int ``x``."""
    if isinstance(x, int):
        if x == 0:
            return e
        x = N.Const(x, int64)
    return x if e is None else _p("add", e, x)


def _scale(s: int, e):
    return e if s == 1 else _p("mul", N.Const(s, int64), e)


def index_function_plan(f: N.Lam, target_rank: int) -> Plan | None:
    """The gather plan of an index function ``\\i -> ix`` (a ``Backpermute``'s)."""
    leaves = fresh_leaves(f.params[0].type, "i")
    blk = flatten(f.body, {f.params[0].name: tuple(leaves)})
    lin = _Linearise(blk.binds, {v.name: k for k, v in enumerate(leaves)})
    ix = leaves_of(blk.result)
    if len(ix) != target_rank:
        return None
    return plan_read([lin.atom(x) for x in ix], len(leaves))


def gather_adjoint(plan: Plan, arr: N.Avar, comp: N.Avar, pick=None) -> N.Arr:
    """The adjoint of ``arr`` from one read, gathered from ``comp``, an array over the
    reading function's domain: by default its elements are the read's ``(adjoint,
    index, executed)``; ``pick(element)`` gives ``(adjoint, executed or None)``."""
    if pick is None:
        def pick(x):
            return N.Prj(0, x), N.Prj(2, x)
    q = comp.type.rank
    elt = arr.type.elt
    zero_i = N.Const(0, int64)
    n = [N.Prj(c, N.Shape(comp)) for c in range(q)]
    r = arr.type.rank
    # extent of each target coordinate: [lo, hi) clipped to the array; the
    # arithmetic is kept literal-free where it can be, so that the common cases
    # (lo = 0, hi = n) read as such
    lo, ext = [], []
    for d, f in enumerate(plan.forms):
        low, high, lo_k, hi_k = f.const, f.const, 0, 1
        for c, s in f.coefs:
            if s < 0:
                low, lo_k = _add(low, _scale(s, n[c])), lo_k - s
            else:
                high, hi_k = _add(high, _scale(s, n[c])), hi_k - s
        low, high = _add(low, lo_k), _add(high, hi_k)
        lo_d = None if low is None else _max(low, zero_i)
        lo.append(lo_d)
        top = _min(N.Prj(d, N.Shape(arr)), high)
        ext.append(top if lo_d is None else _max(_p("sub", top, lo_d), zero_i))
    # the folded slots: plain folded coordinates, then per two-solver dimension the
    # coordinate not solved for (the one with the smaller extent)
    pairs = [(d, s) for d, s in enumerate(plan.solvers) if len(s) == 2]
    slot_sizes = [n[c] for c in plan.folded] + [_min(n[a], n[b]) for _, (a, b) in pairs]
    length = None
    for s in slot_sizes:
        length = s if length is None else _p("mul", length, s)
    length = N.Const(1, int64) if length is None else length

    g = N.Var(N.fresh("g"), shape_type(r + 1))
    t = [_add(lo[d], N.Prj(d, g)) for d in range(r)]
    j = N.Prj(r, g)
    slots = []
    for k, s in enumerate(reversed(slot_sizes)):
        last = k == len(slot_sizes) - 1
        slots.append(j if last else _p("mod", j, s))
        j = j if last else _p("floordiv", j, s)
    slots.reverse()
    coord: dict = dict(zip(plan.folded, slots))
    for (d, (a, b)), slot in zip(pairs, slots[len(plan.folded):]):
        pick_a = _p("ge", n[a], n[b])
        coord[a] = N.Cond(pick_a, _solve(plan.forms[d], a, t[d], {b: slot}), slot)
        coord[b] = N.Cond(pick_a, slot, _solve(plan.forms[d], b, t[d], {a: slot}))
    valid = None
    for d, s in enumerate(plan.solvers):
        if len(s) == 1:
            coord[s[0]] = _solve(plan.forms[d], s[0], t[d], {})
        for c in s:
            valid = _and(valid, _and(_p("ge", coord[c], zero_i), _p("lt", coord[c], n[c])))
    ix = N.Tuple(tuple(coord[c] for c in range(q)))
    e = N.Var(N.fresh("e"), comp.type.elt)
    value, executed = pick(e)
    val = N.Let(e, N.Index(comp, ix),
                value if executed is None else N.Cond(executed, value, zero(elt)))
    body = val if valid is None else N.Cond(valid, val, zero(elt))
    if slot_sizes:
        summed = N.Fold(add_lam(elt), zero(elt),
                        N.Generate(N.Tuple(tuple(ext) + (length,)), N.Lam((g,), body)))
    else:  # nothing folded: a gather, over the target extents only
        h = N.Var(N.fresh("g"), shape_type(r))
        body = substitute(body, {g.name: N.Tuple(tuple(N.Prj(d, h) for d in range(r))
                                                 + (N.Const(0, int64),))})
        summed = N.Generate(N.Tuple(tuple(ext)), N.Lam((h,), body))
    folded = N.Avar(N.fresh("a"), summed.type)
    # embed the folded extents into the array's shape
    u = N.Var(N.fresh("u"), shape_type(r))
    inside, rel = None, []
    for d in range(r):
        x = N.Prj(d, u) if lo[d] is None else _p("sub", N.Prj(d, u), lo[d])
        rel.append(x)
        if lo[d] is not None:
            inside = _and(inside, _p("ge", x, zero_i))
        inside = _and(inside, _p("lt", x, ext[d]))
    read = N.Index(folded, N.Tuple(tuple(rel)))
    body = read if inside is None else N.Cond(inside, read, zero(elt))
    return N.Alet(folded, summed, N.Generate(N.Shape(arr), N.Lam((u,), body)))


def _solve(form: Affine, k: int, t: N.Exp, known: dict) -> N.Exp:
    """Coordinate ``k`` from ``t = form`` given the other coordinates ``known``."""
    rest = t if form.const is None else _p("sub", t, form.const)
    sign = 1
    for c, s in form.coefs:
        if c == k:
            sign = s
        else:
            rest = _p("sub", rest, _p("mul", N.Const(s, int64), known[c]))
    return rest if sign == 1 else _p("neg", rest)

