"""Reads of an array at the unravelling of a flat index by its own shape.

``sum_all`` folds an array through a reshape to one dimension, and reading a manifest
array by a flat position ``j`` through a reshape reaches the kernel as ``a ! (j // d1,
j % d1)`` (rank 3: ``(j // (d1 * d2), (j // d2) % d1, j % d2)``) where ``d1``, ``d2``
are ``a``'s own dimensions.  The offset of that element is ``j`` itself (floor division
and modulo: ``(j // d) * d + j % d = j`` for every ``j`` and ``d > 0``; an array with a
dimension 0 has no element to read), but written so it costs an integer division per
component, 20-40 cycles each, and AVX2 has no vector division, so the loop around it
does not vectorise either: the pairwise RBF kernel's ``sum(exp(c * d))`` over a (1000,
1000) array took 5.9 ms (two threads) dividing.  :func:`flat_position` recognises the
pattern, and the kernel reads ``a`` at ``j``.  The first component must be a plain
quotient (no outer ``% d0``): a wrapped one would read another element than ``j`` out
of range, and the unchecked read keeps the offset the original arithmetic gives.
Let-bound variables are looked through by name, which relies on the passes' binders being
unique (fusion's ``apply`` and the simplifier freshen every binder they copy).
"""

from __future__ import annotations

from accel.ast import nodes as N
from accel.ast.types import int64

__all__ = ["flat_position"]


def flat_position(arr: N.Arr, index: N.Exp, lets: dict):
    """The flat index ``j`` when ``arr ! index`` reads at the unravelling of ``j`` by the
    array's own dimensions (see the module docstring), else None.  ``lets``: the bound
    expressions of the let-bound variables in scope, looked through (a quotient shared
    by two components is let-bound)."""
    def look(e):
        for _ in range(32):
            if not (isinstance(e, N.Var) and e.name in lets):
                return e
            e = lets[e.name]
        return e

    index = look(index)
    if not isinstance(arr, N.Avar) or not isinstance(index, N.Tuple) or len(index.items) < 2:
        return None
    r = len(index.items)
    j = None
    for q, item in enumerate(index.items):
        item = look(item)
        if q > 0:  # (j // prod) % d_q
            if not (isinstance(item, N.PrimApp) and item.op == "mod"
                    and _is_dim(look(item.args[1]), arr, q)):
                return None
            item = look(item.args[0])
        base, dims = _quotient(item, arr, look)
        if dims is None or sorted(dims) != list(range(q + 1, r)) or base.type != int64:
            return None
        if j is None:
            j = base
        elif base != j:
            return None
    return j


def _is_dim(e, arr: N.Avar, q: int) -> bool:
    return (isinstance(e, N.Prj) and e.index == q and isinstance(e.tup, N.Shape)
            and isinstance(e.tup.array, N.Avar) and e.tup.array.name == arr.name)


def _quotient(e, arr: N.Avar, look):
    """``(j, [dimension numbers])`` for ``j // (d_a * d_b ...)`` (nested quotients and
    products of ``arr``'s dimensions in any order; no quotient: ``(e, [])``)."""
    dims: list = []
    while isinstance(e, N.PrimApp) and e.op == "floordiv":
        factors = _factors(look(e.args[1]), arr, look)
        if factors is None:
            return e, None
        dims += factors
        e = look(e.args[0])
    return e, dims


def _factors(e, arr: N.Avar, look):
    if isinstance(e, N.PrimApp) and e.op == "mul":
        a, b = _factors(look(e.args[0]), arr, look), _factors(look(e.args[1]), arr, look)
        return None if a is None or b is None else a + b
    if isinstance(e, N.Prj) and _is_dim(e, arr, e.index):
        return [e.index]
    return None
