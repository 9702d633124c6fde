"""Scatters whose targets ignore part of their domain sum over that part first.

A ``permute (+)`` adds ``value(ix)`` into ``out[t(ix)]`` for every source index ``ix``.
When the target (and whether the element is kept at all) does not depend on some
component ``j`` of ``ix``, every element along ``j`` goes to the same place: summing
them first (a ``KFold`` over ``j``, no atomics, vectorised) and scattering the sums
(a permute over the domain without ``j``) adds the same values in another order.
Reverse AD writes such scatters for a read through a computed index that a program
broadcasts over points: GMM's ``L_k`` entries read from ``icf`` at a triangular
position inside an (N, K, D, D) product scatter N*K*D*D contributions into a K*D*D
sized target; summed over the points first, the scatter has K*D*D elements and the sum
over the points is an ordinary fold (a matrix product when the values are a product
of two operands, ``contraction``).

Only ``+`` scatters of floats are rewritten (the API allows reassociating their sums),
and only components whose extent is not known to be 1.  The sum is empty when the
summed extent is 0; the scatter over the rest then keeps nothing (its targets would be
taken at a point outside the domain).
"""

from __future__ import annotations

from ..ast import nodes as N
from ..ast.types import ArrayT, Scalar, bool_, int64, shape_type
from ..simplify.rounds import tidy
from .contraction import components
from .kernels import KBlock, KFold, KPermute, map_blocks
from .reductions import dim, expand

__all__ = ["sum_before_scatter"]


def sum_before_scatter(blk: KBlock) -> KBlock:
    """``blk`` with each ``+`` permute whose target ignores a component of its domain
    rewritten as a fold over that component and a permute of the sums (repeatedly: a
    target that ignores several components gets a fold over each)."""
    steps: list = []
    for s in blk.steps:
        s = map_blocks(s, sum_before_scatter)
        while isinstance(s, KPermute):
            split = _presummed(s)
            if split is None:
                break
            fold, s = split
            steps.append(fold)
        steps.append(s)
    return KBlock(tuple(steps), blk.result)


def _is_add(f: N.Lam) -> bool:
    b = f.body
    return (isinstance(b, N.PrimApp) and b.op == "add" and len(f.params) == 2
            and set(b.args) == set(f.params))


def _presummed(s: KPermute):
    """``(fold, permute)`` summing ``s``'s values over one component its target ignores,
    or None."""
    elt = s.out.type.elt
    if s.into is not None or not (isinstance(elt, Scalar) and elt.is_float) or not _is_add(s.comb):
        return None
    i = s.target.params[0]
    rank = len(i.type.items)
    target = expand(s.target.body)
    if target is None or not isinstance(target, N.Tuple) or len(target.items) != 2:
        return None
    used = components(target, i)
    if used is None:
        return None
    free = [c for c in range(rank) if c not in used and not _unit(dim(s.shape, c))]
    if not free:
        return None
    j = max(free, key=lambda c: c)  # the last one: the fold reads along the innermost
    kept = [c for c in range(rank) if c != j]
    ext = dim(s.shape, j)
    keep, where = target.items
    if keep.type != bool_:
        return None

    # the fold: rows over the kept components, the inner loop over j
    q = N.Var(N.fresh("i"), shape_type(rank))
    full = {c: N.Prj(k, q) for k, c in enumerate(kept)}
    full[j] = N.Prj(rank - 1, q)
    at = N.Tuple(tuple(full[c] for c in range(rank)))
    v = s.value.params[0]
    src = N.Cond(N.Let(i, at, keep), N.Let(v, at, s.value.body), N.Const(0.0, elt))
    sums = N.Avar(N.fresh("a"), ArrayT(elt, rank - 1))
    fold = KFold(sums, tidy(N.Tuple(tuple(dim(s.shape, c) for c in kept))), ext, s.comb,
                 N.Const(0.0, elt), N.Lam((q,), tidy(src)))

    # the scatter of the sums: targets taken at j = 0, nothing kept when j is empty
    r = N.Var(N.fresh("i"), shape_type(rank - 1))
    base = {c: N.Prj(k, r) for k, c in enumerate(kept)}
    base[j] = N.Const(0, int64)
    at0 = N.Tuple(tuple(base[c] for c in range(rank)))
    nonempty = N.PrimApp("lt", (N.Const(0, int64), ext))
    tgt = N.Let(i, at0, N.Tuple((N.PrimApp("and", (nonempty, keep)), where)))
    w = N.Var(N.fresh("i"), shape_type(rank - 1))
    perm = KPermute(s.out, s.out_shape, s.defaults, fold.shape, N.Lam((r,), tidy(tgt)),
                    N.Lam((w,), N.Index(sums, w)), s.comb)
    return fold, perm


def _unit(e) -> bool:
    return isinstance(e, N.Const) and e.value == 1
