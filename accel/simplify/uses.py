"""Use counts: how and where each variable occurs (the facts inlining and splitting read).

Invariant: one walk records, per variable, its number of occurrences, the nesting depth
(functions, loop bodies, ``Acond`` branches) of its binder and uses, whether it is read
through ``Index``/``Shape``, which tuple components are projected, and which element
path each ``Map``/``ZipWith`` reads of an array whose elements its function only projects;
the passes decide from these without walking again.
"""

from __future__ import annotations

from ..ast.nodes import (Acond, ALam, Alet, APrj, Avar, Const, Index, Lam, Let, Map, Prj, Shape,
                         Use, Var, ZipWith)
from ..ast.traverse import subterms
from .base import is_param


class Uses:
    """Occurrences of every variable, with the nesting depth of functions, loop bodies
    and ``Acond`` branches at binders and uses, ``Index``/``Shape`` (indirect) uses
    and the components of projection-only uses."""

    def __init__(self, root):
        cnt, udepth, bdepth, indirect, nonprj, prj = {}, {}, {}, set(), {}, {}
        # array name -> element paths its projected reads take; how many of its uses are
        # such reads (every path of the use recorded); shape uses
        eltprj, projuses, shapes = {}, {}, {}

        def projected(name, paths):
            eltprj.setdefault(name, []).extend(paths)
            projuses[name] = projuses.get(name, 0) + 1
        stack = [(root, 0)]
        while stack:
            n, d = stack.pop()
            t = type(n)
            if t is Var or t is Avar:
                name = n.name
                cnt[name] = cnt.get(name, 0) + 1
                udepth[name] = d
                nonprj[name] = nonprj.get(name, 0) + 1
            elif t is Const or t is Use:
                pass
            elif t is Prj or t is APrj:
                tup = n.tup
                if type(tup) is Var or type(tup) is Avar:
                    name = tup.name
                    cnt[name] = cnt.get(name, 0) + 1
                    udepth[name] = d
                    s = prj.get(name)
                    if s is None:
                        prj[name] = s = set()
                    s.add(n.index)
                else:
                    path, base = chain(n)
                    if type(base) is Index and type(base.array) is Avar:
                        projected(base.array.name, [path])  # ``(a ! ix).i.j``
                        stack.append((base, d))
                    else:
                        stack.append((tup, d))
            elif t is Index or t is Shape:
                name = n.array.name
                if t is Shape:
                    shapes[name] = shapes.get(name, 0) + 1
                cnt[name] = cnt.get(name, 0) + 1
                udepth[name] = d
                nonprj[name] = nonprj.get(name, 0) + 1
                indirect.add(name)
                if t is Index:
                    stack.append((n.index, d))
            elif t is Let or t is Alet:
                if t is Let and type(n.bound) is Index and type(n.bound.array) is Avar:
                    paths = var_paths(n.var.name, n.body)  # ``let e = a ! ix in e.0 ...``
                    if paths:
                        projected(n.bound.array.name, sorted(paths))
                bdepth[n.var.name] = d
                stack.append((n.bound, d))
                stack.append((n.body, d))
            elif t is Lam or t is ALam:
                stack.append((n.body, d + 1))
            elif t is Acond:
                stack.append((n.c, d))
                stack.append((n.t, d + 1))
                stack.append((n.e, d + 1))
            else:
                if t is Map or t is ZipWith:
                    for k, a in enumerate((n.a,) if t is Map else (n.a, n.b)):
                        path = param_path(n.f, k) if type(a) is Avar else None
                        if path is not None:
                            projected(a.name, [path])
                for c in subterms(n):
                    stack.append((c, d))
        self.cnt, self.udepth, self.bdepth = cnt, udepth, bdepth
        self.indirect, self.nonprj, self.prj = indirect, nonprj, prj
        self.eltprj, self.projuses, self.shapes = eltprj, projuses, shapes


def chain(e):
    """``(path, base)`` of a projection chain ``base.i.j...`` (``path`` = ``(i, j, ...)``)."""
    path = []
    while type(e) is Prj:
        path.append(e.index)
        e = e.tup
    return tuple(reversed(path)), e


def var_paths(name: str, body) -> set | None:
    """The paths ``(i, j, ...)`` through which ``body`` reads the tuple variable ``name``
    (every use ``x.i.j...``, maximal chains), or None if it is used otherwise."""
    paths: set = set()
    stack = [body]
    while stack:
        e = stack.pop()
        t = type(e)
        if t is Prj:
            path, base = chain(e)
            if type(base) is Var and base.name == name:
                paths.add(path)
                continue
            stack.append(base)
        elif t is Var:
            if e.name == name:
                return None
        elif (t is Let or t is Lam) and name in (
                (e.var.name,) if t is Let else tuple(v.name for v in e.params)):
            return None  # shadowed (binders are unique after ``freshen``; be safe)
        else:
            stack.extend(subterms(e))
    return paths


def param_path(f: Lam, k: int):
    """``(i, j, ...)`` if ``f`` reads its parameter ``k`` only as ``x.i.j...`` with that one
    path (each use projected at least once), else None."""
    paths = var_paths(f.params[k].name, f.body)
    return next(iter(paths)) if paths and len(paths) == 1 else None


def element_path(f: Lam):
    """``(i, j, ...)`` if ``f`` is ``\\x -> x.i.j...`` (a projection of its argument)."""
    body, path = f.body, []
    while type(body) is Prj:
        path.append(body.index)
        body = body.tup
    if path and is_param(body, f, 0):
        return tuple(reversed(path))
    return None
