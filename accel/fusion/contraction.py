"""Folds that are (batched) matrix products.

After fusion a sum is a ``KFold`` whose source is a scalar function of the full index
``(rows..., k)``.  Whatever the program looked like (``generate`` with indexing,
``replicate`` + ``zip_with``, ``backpermute``, or reverse AD's gathered adjoints of
those), a matrix product arrives here as the same thing: a ``+``-fold from zero whose
source is a product of two *projected reads* (each index component of the array is one
component of the fold's index, all distinct, after leading components at fixed
positions) and factors that do not depend on the
index.  :func:`contraction` recognises that form and says which index component plays
which part:

    out[b, m, n] = c * sum_k A[..b, m, k..] * B[..b, k, n..]     (any order of the dims
                                                                  of A, B; b optional)

* ``k``, the folded component, is read by both arrays;
* a *batch* component is read by both arrays (at most one, the first dimension of the
  output and of both arrays);
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
from ..ast.traverse import children, free_vars
from ..ast.types import Scalar
from .kernels import KFold
from .reductions import expand, is_sum

__all__ = ["Contraction", "contraction"]


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


def contraction(s: KFold) -> Contraction | None:
    """The matrix product ``s`` computes, or None when it is not one."""
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
    if not _factors(body, p, rank, factors, guards):
        return None
    reads = [f for f in factors if not isinstance(f, (_Inv, _Post))]
    if len(reads) != 2:
        return None
    (a, a_axes, a_fixed), (b, b_axes, b_fixed) = reads
    if a.type.elt != t or b.type.elt != t:
        return None
    sa, sb = set(a_axes), set(b_axes)
    if rank not in sa or rank not in sb or (sa | sb) != set(range(rank + 1)):
        return None
    batch = sorted(sa & sb - {rank})
    ms, ns = sorted(sa - sb), sorted(sb - sa)
    if len(batch) > 1 or len(ms) > 1 or len(ns) > 1 or not (ms or ns):
        return None
    if batch and (batch[0] != 0 or a_axes[0] != 0 or b_axes[0] != 0):
        return None
    return Contraction(p, a, tuple(a_axes), a_fixed, b, tuple(b_axes), b_fixed,
                       batch[0] if batch else None, ms[0] if ms else None, ns[0] if ns else None,
                       tuple(f.e for f in factors if isinstance(f, _Inv)),
                       tuple(f.e for f in factors if isinstance(f, _Post)), tuple(guards))


@dataclass(frozen=True)
class _Inv:
    """An index-free factor."""

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


def _factors(e, p: N.Var, k: int, out: list, guards: list) -> bool:
    """Append the factors of the product ``e`` to ``out`` (``_Inv``, ``_Post`` or
    ``(array, axes)`` for a projected read) and the guards of guarded factors to
    ``guards``; False if some factor is none of them."""
    if p.name not in free_vars(e):
        out.append(_Inv(e))
        return True
    if _without(e, p, k):
        out.append(_Post(e))
        return True
    t, gs = _unguarded(e, p)
    if gs:
        guards.extend(gs)
        return _factors(t, p, k, out, guards)
    if isinstance(e, N.PrimApp) and e.op == "mul":
        return all(_factors(x, p, k, out, guards) for x in e.args)
    if isinstance(e, N.PrimApp) and e.op == "neg":
        out.append(_Inv(N.Const(-1.0, e.type)))
        return _factors(e.args[0], p, k, out, guards)
    if isinstance(e, N.PrimApp) and e.op == "add" and e.args[0] == e.args[1]:
        out.append(_Inv(N.Const(2.0, e.type)))
        return _factors(e.args[0], p, k, out, guards)
    if isinstance(e, N.PrimApp) and e.op == "div" and _without(e.args[1], p, k):
        inv = N.PrimApp("div", (N.Const(1.0, e.type), e.args[1]))
        out.append(_Inv(inv) if p.name not in free_vars(e.args[1]) else _Post(inv))
        return _factors(e.args[0], p, k, out, guards)
    if isinstance(e, N.Index) and isinstance(e.array, N.Avar) and e.index == p:
        if e.array.type.rank != k + 1:  # the identity read ``a ! index``
            return False
        out.append((e.array, list(range(k + 1)), ()))
        return True
    if isinstance(e, N.Index) and isinstance(e.array, N.Avar) and isinstance(e.index, N.Tuple):
        items = e.index.items
        j = 0  # leading components at fixed (index-free) positions: a row ``xs[t, ...]``
        while j < len(items) and p.name not in free_vars(items[j]):
            j += 1
        axes = []
        for c in items[j:]:
            if not (isinstance(c, N.Prj) and c.tup == p) or c.index in axes:
                return False
            axes.append(c.index)
        out.append((e.array, axes, tuple(items[:j])))
        return True
    return False


def _without(e, p: N.Var, k: int) -> bool:
    """Whether ``e`` reads index ``p`` only through components other than ``k``."""
    stack = [e]
    while stack:
        x = stack.pop()
        if p.name not in free_vars(x):
            continue
        if isinstance(x, N.Prj) and x.tup == p:
            if x.index == k:
                return False
        elif x == p:
            return False
        else:
            stack.extend(children(x))
    return True
