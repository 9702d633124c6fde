"""Generates of one shape that compute the same expensive subterm are materialised.

Reverse mode writes one ``generate`` per array a scalar function reads, each recomputing
the primal's subterms its partial derivative needs: the RNN step ``h' = tanh (W * h + x)``
gives ``W``'s adjoint ``h * (1 - tanh(..)^2) * dh'`` and ``h``'s ``W * (1 - tanh(..)^2) *
dh'``, both over ``h``'s shape.  Inlined into their readers (each is read once), every
element computes the ``tanh`` twice.  Materialised side by side instead, the two
generates are one kernel (horizontal fusion: ``fuse.merge_generates``) whose function
computes the subterm once (``simplify.tidy`` shares common subterms), at the price of
writing and reading one array.  The rule: within one block, ``generate``s whose shapes
are the same term and whose functions share a transcendental (or a division) that
depends on the index (``ast.cost.EXPENSIVE``: at least 8 float operations, next to a
store and a load) are materialised.
"""

from __future__ import annotations

from ..ast import nodes as N
from ..ast.alpha import alpha_key
from ..ast.cost import EXPENSIVE
from ..ast.traverse import children

__all__ = ["shared_generates"]

#: Functions larger than this (nodes) are not compared (the keys are built by walking
#: terms with their lets substituted).
MAX_NODES = 400


def shared_generates(binds) -> frozenset:
    """Names bound by the ``generate``s of ``binds`` that share an expensive subterm of
    their index with another ``generate`` of the same shape among them."""
    groups: dict = {}
    for b in binds:
        op = b.op
        if isinstance(op, N.Generate):
            shape = alpha_key(op.shape)
            for k in _expensive(op.f):
                groups.setdefault((shape, k), set()).add(b.outs[0].name)
    out: set = set()
    for names in groups.values():
        if len(names) > 1:
            out |= names
    return frozenset(out)


def _expensive(f: N.Lam) -> set:
    """Keys of the expensive primitive applications of ``f``'s body that depend on its
    index, equal for equal terms after substituting lets (the index renamed)."""
    (ix,) = f.params
    if _size(f.body) > MAX_NODES:
        return set()
    found: set = set()

    def key(e, env):  # (key, depends on the index)
        if isinstance(e, N.Var):
            if e.name == ix.name:
                return ("ix",), True
            return env.get(e.name, (("var", e.name), False))
        if isinstance(e, N.Let):
            env = dict(env)
            env[e.var.name] = key(e.bound, env)
            return key(e.body, env)
        if isinstance(e, N.Const):
            return ("const", e.value, repr(e.ty)), False
        if isinstance(e, (N.Avar, N.Lam, N.While)):
            return ("node", alpha_key(e)), False
        parts = [key(c, env) for c in children(e)]
        dep = any(d for _, d in parts)
        k = (type(e).__name__, getattr(e, "op", None), getattr(e, "index", None)
             if isinstance(e, N.Prj) else None) + tuple(p for p, _ in parts)
        if isinstance(e, N.PrimApp) and e.op in EXPENSIVE and dep:
            found.add(k)
        return k, dep
    key(f.body, {})
    return found


def _size(e) -> int:
    n, stack = 0, [e]
    while stack and n <= MAX_NODES:
        x = stack.pop()
        n += 1
        stack.extend(children(x))
    return n
