"""Folds that are (batched) matrix products.

After fusion a sum is a ``KFold`` whose source is a scalar function of the full index
``(rows..., k)``.  Whatever the program looked like (``generate`` with indexing,
``replicate`` + ``zip_with``, ``backpermute``, or reverse AD's gathered adjoints of
those), a matrix product arrives here as the same thing: a ``+``-fold from zero whose
source is a product of two *projected reads* (each index component of the array is one
component of the fold's index, all distinct, after leading components at fixed
positions) and other factors (below).  :func:`contraction` recognises that form and
says which index component plays which part:

    out[b, m, n] = c * sum_k A[..b, m, k..] * B[..b, k, n..]     (any order of the dims
                                                                  of A, B; b optional)

* ``k``, the folded component, is read by both arrays;
* a *batch* component is read by both arrays (at most one, at any dimension of the
  output and of either array: GMM's ``sum_c L[k, r, c] * xc[n, k, c]`` over (N, K, D));
* an ``m`` component is read only by ``A``, an ``n`` component only by ``B`` (at most one
  each, not both absent; the output's non-batch dimensions are ``m`` and ``n`` in
  either order, one of them absent for a matrix-vector product);
* ``c`` is a product of index-free factors (constants, shapes, reads at fixed indices);
* factors that depend on the output's index but not on ``k`` (softmax's row sums in
  ``p[i, j] / z[i] * v[j, c]``) multiply the product's elements after the sum.

A backend runs such a fold as a call of a tuned matrix-multiply (BLAS on the CPU)
instead of its generic fold loops: the multiply-adds are the same, only their
association order differs (the API promises results up to floating-point
reassociation).  The analysis lives here, not in a backend, because it is a property of
the kernel program; a backend without a matrix product (the GPU today) ignores it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ast import nodes as N
from ..ast.traverse import free_vars, map_children
from ..ast.types import ArrayT, Scalar, int64, shape_type
from ..simplify.rounds import tidy
from .kernels import KBlock, KFold, KGenerate, map_blocks
from .reductions import dim, expand, index_uses, is_sum

__all__ = ["Contraction", "components", "contraction", "fits", "fixed_in_bounds",
           "materialise_operands",
           "product"]


@dataclass(frozen=True)
class Contraction:
    """A fold recognised as ``out = scale * post * A . B`` (see the module docstring).

    ``a_axes``/``b_axes`` give, for each dimension of ``a``/``b`` after the leading
    ``a_fixed``/``b_fixed`` ones (read at those index-free positions: a row of a
    matrix), the component of the fold's index it is read at (component ``rank``, the
    output's rank, is the folded one).  ``batch``, ``m``, ``n`` are output dimensions
    or None.  ``scale`` holds index-free scalar expressions whose product multiplies
    the sum; ``post`` functions of the fold's index (``src``'s parameter ``index``)
    that do not read the folded component and multiply each element of the result.
    The fold is that product only where each ``(d, x)`` of ``guards`` holds on the
    whole domain (extent ``d`` of the fold's index at most ``x``) and each array's
    dimensions equal the extents of the index components it is read at: the backend
    checks both before the call and runs the fold as it is otherwise."""

    index: N.Var
    a: N.Avar
    a_axes: tuple
    a_fixed: tuple
    b: N.Avar
    b_axes: tuple
    b_fixed: tuple
    batch: int | None
    m: int | None
    n: int | None
    scale: tuple
    post: tuple
    guards: tuple
    shapes: tuple = ()  # ``(Shape a, Shape b)``: one node each, for hosts that memoise by node


def contraction(s: KFold) -> Contraction | None:
    """The matrix product ``s`` computes, or None when it is not one."""
    found = _product_of(s, others=False)
    if found is None:
        return None
    p, rank, t, factors, guards = found
    reads = [f for f in factors if not isinstance(f, (_Inv, _Post))]
    if len(reads) != 2:
        return None
    (a, a_axes, a_fixed, _), (b, b_axes, b_fixed, _) = (
        (r.array, r.axes, r.fixed, r.e) for r in reads)
    if a.type.elt != t or b.type.elt != t:
        return None
    sa, sb = set(a_axes), set(b_axes)
    if rank not in sa or rank not in sb or (sa | sb) != set(range(rank + 1)):
        return None
    batch = sorted(sa & sb - {rank})
    ms, ns = sorted(sa - sb), sorted(sb - sa)
    if len(batch) > 1 or len(ms) > 1 or len(ns) > 1 or not (ms or ns):
        return None
    return Contraction(p, a, tuple(a_axes), a_fixed, b, tuple(b_axes), b_fixed,
                       batch[0] if batch else None, ms[0] if ms else None, ns[0] if ns else None,
                       tuple(f.e for f in factors if isinstance(f, _Inv)),
                       tuple(f.e for f in factors if isinstance(f, _Post)), tuple(guards),
                       (N.Shape(a), N.Shape(b)))


def fits(c: Contraction, ext: tuple, ev) -> bool:
    """Whether the fold of ``c`` is that product for the extents ``ext`` of its index (the
    output's, then the folded one): each operand's dimensions after its fixed ones equal
    the extents it is read at, and the guards hold.  ``ev`` evaluates an index-free term
    (a shape to a tuple of ints, a scalar to an int); a backend checks this before
    running the fold as a matrix product.  Only sizes are read: the fixed indices (a
    loop counter's row, ``xs[t]``) are left to :func:`fixed_in_bounds`, so that a host
    deciding on this once holds its decision for every value of them."""
    for sh, axes, fixed in zip(c.shapes, (c.a_axes, c.b_axes), (c.a_fixed, c.b_fixed)):
        dims = tuple(int(d) for d in ev(sh))
        if dims[len(fixed):] != tuple(ext[a] for a in axes):
            return False
    return all(ext[d] <= int(ev(x)) for d, x in c.guards)


def fixed_in_bounds(c: Contraction, ev) -> bool:
    """Whether the fixed leading indices of both operands are in bounds (where they are
    not, the fold's own loops read, and may check, out of bounds).  A backend whose
    product kernel checks them itself (the cpu backend's, which reports the failure as
    an ``OutOfBoundsError``) need not ask."""
    for sh, fixed in zip(c.shapes, (c.a_fixed, c.b_fixed)):
        if fixed:
            dims = tuple(int(d) for d in ev(sh))
            if not all(0 <= int(ev(f)) < d for f, d in zip(fixed, dims)):
                return False
    return True


def _product_of(s, others: bool):
    """``(index, rank, element type, factors, guards)`` of a float ``+``-fold whose
    source (lets inlined) is a product of :func:`_factors`' kinds, else None."""
    if not isinstance(s, KFold) or not is_sum(s):
        return None
    t = s.out.type.elt
    if not (isinstance(t, Scalar) and t.is_float):
        return None
    p = s.src.params[0]
    rank = len(p.type.items) - 1
    body = expand(s.src.body)
    if body is None:
        return None
    factors: list = []
    guards: list = []
    if not _factors(body, p, rank, factors, guards, others):
        return None
    return p, rank, t, factors, guards


def materialise_operands(blk: KBlock) -> KBlock:
    """``blk`` with the operands of matrix products materialised where fusion inlined
    them: a ``+``-fold whose source is a product of two groups of factors, each a
    function of its own subset of the index (both with the folded component), becomes a
    ``KGenerate`` of each group that is not already a projected read, over that subset,
    and a fold of their reads, which :func:`contraction` recognises.  An MLP's
    ``sum_k tanh(h[i, k] + b[k]) * w[j, k]`` is the typical case.  Besides making the
    product a BLAS call, this evaluates the group once per point of its subset instead
    of once per point of the whole domain (``tanh`` once per (i, k), not per (i, j, k)).
    A product under a guard ``if g then t else 0`` whose ``g`` compares index components
    (a triangular ``c < r``, GMM's L_k read from ``icf``) is materialised only as
    :func:`_guarded_groups` says: each operand under the exact condition for its point to
    be read at all, so no element is read that the fold would not read."""
    steps: list = []
    changed = False
    for s in blk.steps:
        new = map_blocks(s, materialise_operands)
        if isinstance(new, KFold) and contraction(new) is None:
            hoisted = _hoisted(new)
            if hoisted is not None:
                steps.extend(hoisted)
                changed = True
                continue
        changed |= new is not s
        steps.append(new)
    return KBlock(tuple(steps), blk.result) if changed else blk


def _hoisted(s: KFold):
    """``[generates..., fold]`` for :func:`materialise_operands`, or None."""
    found, guard = _guarded_product(s)  # ``if g then (product) else 0``, g on the index
    if found is None:
        found = _product_of(s, others=True)
        if found is None:
            return None
        if found[4]:  # factors guarded by ``p.d < x``: the same rule as a guard's
            guard = [("lt", N.Prj(d, found[0]), x) for d, x in found[4]]
    p, rank, t, factors, _ = found
    groups: dict = {}  # the index components a group reads -> its factors
    rest = []
    for f in factors:
        if isinstance(f, (_Inv, _Post)):
            rest.append(f)
            continue
        used = set(f.axes) if isinstance(f, _Read) else components(f.e, p)
        if used is None or rank not in used:
            return None
        groups.setdefault(frozenset(used), []).append(f)
    for used in sorted(groups, key=len):  # more than two: a group of fewer components
        wider = [u for u in groups if used < u]  # joins a superset's
        if len(groups) > 2 and wider:
            groups[max(wider, key=len)].extend(groups.pop(used))
    if len(groups) != 2 or any(len(u) == rank + 1 and not (len(g) == 1 and isinstance(
            g[0], _Read)) for u, g in groups.items()):
        return None  # (materialising an operand over the whole domain saves nothing)
    conds = {used: None for used in groups}
    if guard is not None:
        found = _guarded_groups(s, p, rank, guard, list(groups))
        if found is None:
            return None
        conds, mask = found
        plain = {u for u, g in groups.items() if len(g) == 1 and isinstance(g[0], _Read)}
        for f in rest:  # under the guard, factors go with a group that reads their point
            used = components(f.e, p)  # (rather one that is materialised anyway)
            homes = sorted((u for u in groups if used is not None and used <= u),
                           key=lambda u: u in plain)
            if not homes:
                return None
            groups[homes[0]].append(_Other(f.e))
        rest = [] if mask is None else [_Post(N.Cond(mask, N.Const(1.0, t), N.Const(0.0, t)))]
    elif all(len(g) == 1 and isinstance(g[0], _Read) for g in groups.values()):
        return None
    steps, operands = [], []
    for used, group in groups.items():
        if len(group) == 1 and isinstance(group[0], _Read) and _bounds_only(conds[used], p):
            read = group[0].e  # guards ``p.d < x`` stay: the host checks them at launch
            operands.append(read if conds[used] is None
                            else N.Cond(conds[used], read, N.Const(0.0, t)))
            continue
        comps = sorted(used)
        extents = tuple(s.n if c == rank else dim(s.shape, c) for c in comps)
        q = N.Var(N.fresh("i"), shape_type(len(comps)))
        elt = product(tuple(_reindexed(f.e, p, q, comps) for f in group))
        if conds[used] is not None:
            elt = N.Cond(_reindexed(conds[used], p, q, comps), elt, N.Const(0.0, t))
        arr = N.Avar(N.fresh("a"), ArrayT(t, len(comps)))
        steps.append(KGenerate((arr,), N.Tuple(extents), N.Lam((q,), tidy(elt))))
        operands.append(N.Index(arr, N.Tuple(tuple(N.Prj(c, p) for c in comps))))
    fold = KFold(s.out, s.shape, s.n, s.f, s.z,
                 N.Lam((p,), product(tuple(f.e for f in rest) + tuple(operands))))
    return steps + [fold] if contraction(fold) is not None else None


_COMPARE = {"lt": "lt", "le": "le", "gt": "lt", "ge": "le"}  # gt/ge: arguments swapped


def _guarded_product(s: KFold):
    """``(found, atoms)`` for a sum whose source is ``if g then t else 0`` with ``t`` a
    product (``_product_of``'s ``found``) and ``g`` a conjunction of comparisons of
    integer index expressions (``atoms``: ``(op, u, v)`` for ``u op v``, op ``lt``/``le``),
    else ``(None, None)``."""
    if not isinstance(s, KFold) or not is_sum(s):
        return None, None
    body = expand(s.src.body)
    if not (isinstance(body, N.Cond) and isinstance(body.e, N.Const) and body.e.value == 0):
        return None, None
    p = s.src.params[0]
    atoms, stack = [], [body.c]
    while stack:
        c = stack.pop()
        if isinstance(c, N.PrimApp) and c.op == "and":
            stack.extend(c.args)
        elif isinstance(c, N.PrimApp) and c.op in _COMPARE and c.args[0].type == int64:
            u, v = c.args if c.op in ("lt", "le") else reversed(c.args)
            if index_uses(p, c) & {-1}:
                return None, None
            atoms.append((_COMPARE[c.op], u, v))
        else:
            return None, None
    t = s.out.type.elt
    rank = len(p.type.items) - 1
    factors: list = []
    guards: list = []
    if not _factors(body.t, p, rank, factors, guards, True) or guards:
        return None, None
    return (p, rank, t, factors, guards), atoms


def _guarded_groups(s: KFold, p: N.Var, rank: int, atoms: list, groups: list):
    """The condition under which each group's point is read by the fold (a group reads
    the index components of its key): the guard's comparisons on its components, and for
    each comparison with one other component ``b`` (in no other comparison) its exact
    elimination over ``b``'s range (``u < p.b`` for some ``b`` below ``E_b`` is
    ``u + 1 < E_b``; ``p.b < v`` is ``0 < v``; likewise ``<=``), with every other
    component's range non-empty.  None when a comparison cannot be eliminated so, or no
    group reads every component of the guard's comparisons that read the folded component
    (its operand holds them exactly).  The others, on the output's index only, also
    multiply the sum as a mask: ``(conditions, mask or None)``."""
    def extent(c):
        return s.n if c == rank else dim(s.shape, c)
    comps = [index_uses(p, N.Tuple((u, v))) for _, u, v in atoms]
    inner = set().union(*[c for c in comps if rank in c])
    if not any(inner <= g for g in groups):
        return None
    lifted = [N.PrimApp(op, (u, v)) for (op, u, v), c in zip(atoms, comps) if rank not in c]
    out = {}
    one, zero = N.Const(1, int64), N.Const(0, int64)
    for g in groups:
        conds = [N.PrimApp("lt", (zero, extent(c))) for c in range(rank + 1) if c not in g]
        for k, ((op, u, v), used) in enumerate(zip(atoms, comps)):
            outside = used - g
            if not outside:
                conds.append(N.PrimApp(op, (u, v)))
                continue
            (b,) = outside if len(outside) == 1 else (None,)
            if b is None or any(b in c for j, c in enumerate(comps) if j != k):
                return None
            pb = N.Prj(b, p)
            if u == pb and b not in index_uses(p, v):  # some b in range with b op v
                conds.append(N.PrimApp(op, (zero, v)))
            elif v == pb and b not in index_uses(p, u):  # some b in range with u op b
                bound = N.PrimApp("sub", (extent(b), one))
                conds.append(N.PrimApp(op, (u, bound)))
            else:
                return None
        out[g] = None if not conds else _conjunction(conds)
    return out, (_conjunction(lifted) if lifted else None)


def _bounds_only(c, p: N.Var) -> bool:
    """Whether condition ``c`` (or None) is a conjunction of ``p.d < x``, ``x`` free of
    ``p``: the guards :func:`contraction` leaves to the host."""
    stack = [] if c is None else [c]
    while stack:
        x = stack.pop()
        if isinstance(x, N.PrimApp) and x.op == "and":
            stack.extend(x.args)
        elif not (isinstance(x, N.PrimApp) and x.op == "lt" and isinstance(x.args[0], N.Prj)
                  and x.args[0].tup == p and p.name not in free_vars(x.args[1])):
            return False
    return True


def _conjunction(conds: list) -> N.Exp:
    e = conds[0]
    for c in conds[1:]:
        e = N.PrimApp("and", (e, c))
    return e


def components(e, p: N.Var):
    """The components of index ``p`` that ``e`` reads, or None if it uses ``p`` whole."""
    used = index_uses(p, e)
    return None if -1 in used else used


def _reindexed(e, p: N.Var, q: N.Var, comps: list):
    """``e`` with component ``comps[j]`` of ``p`` read as component ``j`` of ``q``."""
    where = {c: j for j, c in enumerate(comps)}

    def go(x):
        if isinstance(x, N.Prj) and x.tup == p:
            return N.Prj(where[x.index], q)
        return map_children(x, go) if isinstance(x, N.Node) else x
    return go(e)


def product(factors: tuple) -> N.Exp:
    """``f0 * f1 * ...``"""
    e = factors[0]
    for f in factors[1:]:
        e = N.PrimApp("mul", (e, f))
    return e


@dataclass(frozen=True)
class _Inv:
    """An index-free factor."""

    e: N.Exp


@dataclass(frozen=True)
class _Read:
    """A projected read ``e`` of ``array`` (see ``Contraction``)."""

    array: N.Avar
    axes: tuple
    fixed: tuple
    e: N.Exp


@dataclass(frozen=True)
class _Other:
    """Any other factor that reads the folded component."""

    e: N.Exp


@dataclass(frozen=True)
class _Post:
    """A factor that depends on the output's index only (not on the folded component):
    it multiplies the sum after it is taken."""

    e: N.Exp


def _unguarded(e, p: N.Var):
    """``(t, guards)`` for a factor ``e = if p.d < x & ... then t else 0`` with index-free
    bounds ``x`` (``guards``: the ``(d, x)``), or ``(e, [])``.  Reverse AD's gathers clip
    their domain to the arrays they read and guard the reads so; where every guard holds
    on the whole domain (the host checks it before the call) the factor is ``t``."""
    if not (isinstance(e, N.Cond) and isinstance(e.e, N.Const) and e.e.value == 0):
        return e, []
    stack, guards = [e.c], []
    while stack:
        c = stack.pop()
        if isinstance(c, N.PrimApp) and c.op == "and":
            stack.extend(c.args)
        elif (isinstance(c, N.PrimApp) and c.op == "lt" and isinstance(c.args[0], N.Prj)
              and c.args[0].tup == p and p.name not in free_vars(c.args[1])):
            guards.append((c.args[0].index, c.args[1]))
        else:
            return e, []
    return e.t, guards


def _factors(e, p: N.Var, k: int, out: list, guards: list, others: bool = False) -> bool:
    """Append the factors of the product ``e`` to ``out`` (``_Inv``, ``_Post``,
    ``_Read`` for a projected read and, when ``others``, ``_Other`` for anything else)
    and the guards of guarded factors to ``guards``; False if some factor is none of
    them."""
    def go(x):
        return _factors(x, p, k, out, guards, others)

    if p.name not in free_vars(e):
        out.append(_Inv(e))
        return True
    if _without(e, p, k):
        out.append(_Post(e))
        return True
    t, gs = _unguarded(e, p)
    if gs:
        guards.extend(gs)
        return go(t)
    if isinstance(e, N.PrimApp) and e.op == "mul":
        return all(go(x) for x in e.args)
    if isinstance(e, N.PrimApp) and e.op == "neg":
        out.append(_Inv(N.Const(-1.0, e.type)))
        return go(e.args[0])
    if isinstance(e, N.PrimApp) and e.op == "add" and e.args[0] == e.args[1]:
        out.append(_Inv(N.Const(2.0, e.type)))
        return go(e.args[0])
    if isinstance(e, N.PrimApp) and e.op == "div" and _without(e.args[1], p, k):
        inv = N.PrimApp("div", (N.Const(1.0, e.type), e.args[1]))
        out.append(_Inv(inv) if p.name not in free_vars(e.args[1]) else _Post(inv))
        return go(e.args[0])
    read = _read(e, p, k)
    if read is not None:
        out.append(read)
        return True
    if others:
        out.append(_Other(e))
    return others


def _read(e, p: N.Var, k: int):
    """``e`` as a ``_Read`` if it is a projected read (after leading index-free
    components), else None."""
    if not (isinstance(e, N.Index) and isinstance(e.array, N.Avar)):
        return None
    if e.index == p:  # the identity read ``a ! index``
        return _Read(e.array, tuple(range(k + 1)), (), e) if e.array.type.rank == k + 1 \
            else None
    if not isinstance(e.index, N.Tuple):
        return None
    items = e.index.items
    j = 0  # leading components at fixed (index-free) positions: a row ``xs[t, ...]``
    while j < len(items) and p.name not in free_vars(items[j]):
        j += 1
    axes: list = []
    for c in items[j:]:
        if not (isinstance(c, N.Prj) and c.tup == p) or c.index in axes:
            return None
        axes.append(c.index)
    return _Read(e.array, tuple(axes), tuple(items[:j]), e)


def _without(e, p: N.Var, k: int) -> bool:
    """Whether ``e`` reads index ``p`` only through components other than ``k``."""
    return not index_uses(p, e) & {k, -1}

