"""Float-in: move each let binding into the conditional branch that alone uses it.

The frontend binds every traced operation where it runs, so a value computed only for
one branch of ``cond``/``acond`` is bound before the conditional; run after tracing,
this pass moves it into the branch, so only the taken branch computes anything.
Imports only ``accel.ast``.
"""

from __future__ import annotations

from .ast import nodes as N
from .ast.traverse import children, free_vars, freshen, map_children, substitute


def float_in(n: N.Node) -> N.Node:
    """Move each let binding into the branch of the conditional that alone uses it.

    Bindings used by both branches (and nowhere else) are copied into each, so
    only the taken branch computes anything.  Bindings used nowhere are dropped.
    """

    def go(n):
        if isinstance(n, (N.Let, N.Alet)):
            chain = []
            while isinstance(n, (N.Let, N.Alet)):
                chain.append(n)
                n = n.body
            body = go(n)
            for b in reversed(chain):
                bound = go(b.bound)
                body = _push(b.var, bound, body) or type(b)(b.var, bound, body)
            return body
        if not children(n):
            return n
        return map_children(n, go)

    return go(n)


def _push(var, bound, body):
    """``let var = bound in body`` with the binding moved inward, or None."""
    name = var.name
    if isinstance(body, (N.Let, N.Alet)):
        in_b, in_rest = name in free_vars(body.bound), name in free_vars(body.body)
        if in_b and in_rest:
            return None
        if not in_b and not in_rest:
            return body
        if in_rest:
            r = _push(var, bound, body.body)
            return None if r is None else type(body)(body.var, body.bound, r)
        r = _push_cond(var, bound, body.bound)
        return None if r is None else type(body)(body.var, r, body.body)
    if name not in free_vars(body):
        return body
    return _push_cond(var, bound, body)


def _push_cond(var, bound, t):
    if not isinstance(t, (N.Cond, N.Acond)) or var.name in free_vars(t.c):
        return None
    make = N.Let if isinstance(t, N.Cond) else N.Alet
    branches, used = [], 0
    for br in (t.t, t.e):
        if var.name in free_vars(br):
            v, b = var, bound
            if used:
                v = type(var)(N.fresh(var.name.rstrip("0123456789")), var.ty)
                b = freshen(bound)
                br = substitute(br, {var.name: v})
            used += 1
            br = _push(v, b, br) or make(v, b, br)
        branches.append(br)
    return type(t)(t.c, branches[0], branches[1])
