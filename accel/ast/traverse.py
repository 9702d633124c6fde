"""Generic traversals: children, rebuilding, free variables, substitution, renaming.

Passes use these so that each handles only the nodes it cares about.  ``LAYOUT`` (with
``rebuild``, ``subterms`` and ``with_fields``) is the same walk precomputed per node
class, for the passes that run it many times.
Binders are ``Let.var``, ``Lam.params``, ``Alet.var``, ``ALam.param`` and
``Program.params``; everything else is structural.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import fields

from .nodes import (ARR_NODES, EXP_NODES, ALam, Alet, APrj, Avar, Const, Lam, Let, Node, Prj,
                    Program, Use, Var, fresh)


# --------------------------------------------------------------------------- node layout
#
# The fast path for passes that visit every node many times (the simplifier): each node
# class's constructor fields, classified once, so that a pass reads a table instead of
# calling ``dataclasses.fields`` and ``isinstance`` per node.

# Field kinds: PLAIN plain value, NODE child node (or None), NODES tuple of optional nodes,
# BINDER one binder, BINDERS a tuple of binders.
PLAIN, NODE, NODES, BINDER, BINDERS = range(5)

_BINDER_FIELDS = {(Let, "var"): BINDER, (Alet, "var"): BINDER, (ALam, "param"): BINDER,
                  (Lam, "params"): BINDERS, (Program, "params"): BINDERS}
_TUPLE_FIELDS = ("items", "args", "spec")
_PLAIN_TYPES = ("int", "bool", "str", "float", "object", "Scalar", "np.ndarray")


def _layout(cls) -> tuple:
    """(field name, kind) for the constructor arguments of node class ``cls``, in order.
    Fields other than child nodes (names, types, indices, flags, options) are plain."""
    out = []
    for f in fields(cls):
        if not f.init:
            continue
        kind = _BINDER_FIELDS.get((cls, f.name))
        if kind is None:
            ann = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
            if f.name in _TUPLE_FIELDS:
                kind = NODES
            elif ann in _PLAIN_TYPES or f.name in ("ty", "name", "op", "value") or (
                    f.name == "index" and cls in (Prj, APrj)) or cls is Use:
                kind = PLAIN
            else:
                kind = NODE
        out.append((f.name, kind))
    return tuple(out)


LAYOUT = {cls: _layout(cls) for cls in EXP_NODES + ARR_NODES + (Lam, ALam, Program)}


def with_fields(n, **changes):
    """``n`` rebuilt with some fields replaced (the others, options included, kept)."""
    return type(n)(*[changes[name] if name in changes else getattr(n, name)
                     for name, _ in LAYOUT[type(n)]])


LEAVES = (Const, Var, Avar, Use)


def rebuild(n, f):
    """``n`` with ``f`` applied to each child node (not binders); ``n`` if none changed."""
    vals = []
    changed = False
    for name, kind in LAYOUT[type(n)]:
        v = getattr(n, name)
        if kind == NODE:
            if v is not None:
                nv = f(v)
                if nv is not v:
                    changed = True
                    v = nv
        elif kind == NODES:
            items = []
            ch = False
            for x in v:
                if x is not None:
                    nx = f(x)
                    if nx is not x:
                        ch = True
                        x = nx
                items.append(x)
            if ch:
                changed = True
                v = tuple(items)
        vals.append(v)
    return type(n)(*vals) if changed else n


def subterms(n) -> list:
    """The child nodes of ``n`` (binders excluded)."""
    out = []
    for name, kind in LAYOUT[type(n)]:
        if kind == NODE:
            v = getattr(n, name)
            if v is not None:
                out.append(v)
        elif kind == NODES:
            for x in getattr(n, name):
                if x is not None:
                    out.append(x)
    return out


def child_fields(n: Node) -> tuple:
    """The names of the fields of ``n`` that hold nodes (or tuples of optional nodes)."""
    t = type(n)
    names = _CHILD_FIELDS.get(t)
    if names is None:  # once per class: ``dataclasses.fields`` is slow (a third of tracing)
        names = _CHILD_FIELDS[t] = tuple(f.name for f in fields(n)
                                         if f.compare and f.name != "ty")
    return names


_CHILD_FIELDS: dict = {}


def children(n: Node) -> list:
    """The direct child nodes of ``n``, in field order."""
    out = []
    for name in child_fields(n):
        v = getattr(n, name)
        if isinstance(v, Node):
            out.append(v)
        elif isinstance(v, tuple):
            out.extend(x for x in v if isinstance(x, Node))
    return out


def map_children(n: Node, f) -> Node:
    """Rebuild ``n`` with ``f`` applied to every child node (``n`` itself if nothing changed)."""
    changed = False
    kw = {}
    for name in _init_fields(n):
        v = getattr(n, name)
        if isinstance(v, Node) and name != "ty":
            nv = f(v)
        elif isinstance(v, tuple) and name != "ty":
            nv = tuple(f(x) if isinstance(x, Node) else x for x in v)
        else:
            nv = v
        changed |= nv is not v and not (isinstance(v, tuple) and nv == v and all(
            a is b for a, b in zip(nv, v)))
        kw[name] = nv
    return type(n)(**kw) if changed else n


def _init_fields(n: Node) -> tuple:
    t = type(n)
    names = _INIT_FIELDS.get(t)
    if names is None:
        names = _INIT_FIELDS[t] = tuple(f.name for f in fields(n) if f.init)
    return names


_INIT_FIELDS: dict = {}


def binders(n: Node) -> tuple:
    """The variables that ``n`` binds in (some of) its children."""
    if isinstance(n, (Let, Alet)):
        return (n.var,)
    if isinstance(n, Lam):
        return n.params
    if isinstance(n, ALam):
        return (n.param,)
    if isinstance(n, Program):
        return n.params
    return ()


def free_vars(n: Node) -> frozenset:
    """Names of the free (expression and array) variables of ``n`` (cached on the node)."""
    fv = n.__dict__.get("_fv")
    if fv is not None:
        return fv
    # Fill the caches of the descendants deepest first, so that deep trees do not recurse.
    stack = [(n, False)]
    while stack:
        x, expanded = stack.pop()
        if "_fv" in x.__dict__:
            continue
        if expanded:
            _free_vars1(x)
        else:
            stack.append((x, True))
            stack.extend((c, False) for c in children(x) if "_fv" not in c.__dict__)
    return n.__dict__["_fv"]


def _free_vars1(n: Node) -> frozenset:
    """``free_vars`` for a node whose children's free variables are cached."""
    if isinstance(n, (Var, Avar)):
        fv = frozenset([n.name])
    elif isinstance(n, (Let, Alet)):
        fv = free_vars(n.bound) | (free_vars(n.body) - {n.var.name})
    else:
        fv = frozenset().union(*[free_vars(c) for c in children(n)]) if children(n) else \
            frozenset()
        bs = binders(n)
        if bs:
            fv = fv - {b.name for b in bs}
    object.__setattr__(n, "_fv", fv)
    return fv


def fresh_like(v, ty=None):
    """A fresh variable named like ``v`` (of type ``ty``, else ``v``'s)."""
    return type(v)(fresh(v.name.rstrip("0123456789") or "v"), v.ty if ty is None else ty)


def substitute(n: Node, env: dict) -> Node:
    """Replace free variables by name (``env``: name -> node), avoiding capture."""
    if not env:
        return n
    fv = free_vars(n)
    if not any(k in fv for k in env):
        return n
    if isinstance(n, (Var, Avar)):
        return env.get(n.name, n)
    bs = binders(n)
    if bs:
        env = {k: v for k, v in env.items() if k not in {b.name for b in bs}}
        danger = set()
        for v in env.values():
            danger |= free_vars(v)
        clash = [b for b in bs if b.name in danger]
        if clash:
            ren = {b.name: fresh_like(b) for b in clash}
            n = _rebind(n, ren)
            env = dict(env)
    if isinstance(n, (Let, Alet)):
        return type(n)(n.var, substitute(n.bound, env), substitute(n.body, env))
    return map_children(n, lambda c: c if c in binders(n) else substitute(c, env))


def _rebind(n: Node, ren: dict) -> Node:
    """Rename the binders of ``n`` listed in ``ren`` (name -> new variable)."""
    if isinstance(n, (Let, Alet)):
        nv = ren[n.var.name]
        return type(n)(nv, n.bound, substitute(n.body, {n.var.name: nv}))
    if isinstance(n, Lam):
        ps = tuple(ren.get(p.name, p) for p in n.params)
        return Lam(ps, substitute(n.body, {k: v for k, v in ren.items()}))
    if isinstance(n, ALam):
        return ALam(ren[n.param.name], substitute(n.body, ren))
    if isinstance(n, Program):
        ps = tuple(ren.get(p.name, p) for p in n.params)
        return Program(ps, substitute(n.body, ren))
    return n


def freshen(n: Node, env: dict | None = None) -> Node:
    """A copy of ``n`` whose binders all have fresh names (for duplicating code); ``env``
    (name -> node) also replaces free variables, as ``substitute`` would (fresh binders
    cannot capture them), in the same walk."""
    def go(n, env):
        if isinstance(n, (Var, Avar)):
            return env.get(n.name, n)
        bs = binders(n)
        if isinstance(n, (Let, Alet)):
            nv = fresh_like(n.var)
            return type(n)(nv, go(n.bound, env), go(n.body, {**env, n.var.name: nv}))
        if bs:
            new = {b.name: fresh_like(b) for b in bs}
            env2 = {**env, **new}
            if isinstance(n, Lam):
                return Lam(tuple(new[p.name] for p in n.params), go(n.body, env2))
            if isinstance(n, ALam):
                return ALam(new[n.param.name], go(n.body, env2))
            return Program(tuple(new[p.name] for p in n.params), go(n.body, env2))
        if not children(n):
            return n
        return map_children(n, lambda c: go(c, env))
    return go(n, dict(env) if env else {})


def count_nodes(n: Node) -> int:
    """The number of nodes in the tree (shared subtrees counted each time)."""
    return sum(1 for _ in walk(n))


def walk(n: Node):
    """All nodes of the tree, pre-order."""
    stack = [n]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(children(x)))


def apply_lam(lam, args):
    """``lam`` applied to argument expressions: one ``Let`` per parameter, binders fresh
    (so the same function can be applied many times in one program)."""
    from .nodes import Let
    lam = freshen(lam)
    body = lam.body
    for p, a in reversed(list(zip(lam.params, args))):
        body = Let(p, a, body)
    return body


@contextlib.contextmanager
def recursion_headroom(limit: int = 100_000):
    """Raise (never lower) the recursion limit for a pass over deeply nested programs."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)
