"""Splitting AD's pair arrays: an array of tuples read only through projections
becomes one array per projected component.

Invariant: the split happens only when every use of the array is a ``Map`` or ``ZipWith``
whose function reads the element through one projection path (``uses.param_path``), or
``shape``, and when the work the components' functions redo (their cost together
minus the whole function's, ``accel.ast.cost``) is at most ``SPLIT_COST`` or, if more,
what the whole array would cost in element writes and reads (each scalar leaf written
once, each use's component read, each at ``MEMORY_COST``): a wide tuple array of AD's
contributions (an adjoint with a value, an index and a flag per read) costs more to write
and read back than a few operations redone per component (softmax attention written with
``generate``: the gradient's (T, T, d) array of contributions, 11 leaves an element, was
290 MB).
Why: AD pairs an adjoint with its contributions per element; fusion would materialise
the whole tuple array (several consumers read it), while each component alone is read
once and fuses into its consumer.
"""

from __future__ import annotations

from ..ast.cost import cost
from ..ast.nodes import (Alet, Avar, Cond, Generate, Index, Lam, Let, Map, Node, Prj, Program,
                         Shape, Tuple, Var, ZipWith, fresh)
from ..ast.traverse import LEAVES, free_vars, freshen, map_children, rebuild, with_fields
from ..ast.types import leaves
from .base import wrap_lets
from .rename import simplifier_pass
from .rounds import tidy
from .uses import Uses, chain, param_path

#: An array of tuples is split (see ``ElementSplit``) when its components' functions together
#: cost at most this much more than the whole function (or than the array's traffic).
SPLIT_COST = 4

#: What writing or reading back one element of a materialised array costs in ``cost``'s
#: unit (one float operation): the element goes through memory, not a register, and a
#: large array streams through DRAM at a few operations' time per element.  With 1, the
#: gradient of ``sum (exp (-|x_i - y_j|^2))`` written with ``replicate`` kept an (N, M, D)
#: array of (adjoint, -adjoint) pairs for 5 operations redone against 4 "traffic", and
#: ran 4x slower than the same program written with ``generate``.
MEMORY_COST = 2


def _project(e, i: int):
    """``e.i``, pushed through lets, tuples and conditionals."""
    if type(e) is Let:
        return Let(e.var, e.bound, _project(e.body, i))
    if type(e) is Tuple:
        return e.items[i]
    if type(e) is Cond:
        return Cond(e.c, _project(e.t, i), _project(e.e, i))
    return Prj(i, e)


def _live_lets(e):
    """``e`` without the lets of its outer chain that nothing reads: a component of a
    large function (BA's derivative: 55 components sharing one let chain of 1200
    nodes) needs few of them, and tidying a component costs per let."""
    chain_ = []
    while type(e) is Let:
        chain_.append(e)
        e = e.body
    need = set(free_vars(e))
    kept = []
    for let in reversed(chain_):
        if let.var.name in need:
            kept.append(let)
            need |= free_vars(let.bound)
    for let in kept:
        e = Let(let.var, let.bound, e)
    return e


def _traffic(elt, paths) -> int:
    """What the whole array of tuples costs in element reads and writes (``cost``'s
    unit): every scalar leaf written once, and each use's component read."""
    n = len(leaves(elt))
    for path in paths:
        t = elt
        for i in path:
            t = t.items[i]
        n += len(leaves(t))
    return MEMORY_COST * n


class ElementSplit:
    """Split a let-bound array of tuples that is read only through projections
    (``Map (\\x -> x.0.1) a``, ``ZipWith (\\x y -> x.0.0 + y) a b``, and ``shape a``)
    into one array per projected component.

    AD produces such arrays (an adjoint and its contributions, paired per element); fusion
    would have to materialise the whole tuple array because several consumers read it,
    while each component alone is read once and fuses into its consumer.  Not done when
    the components share expensive work (each would recompute it).
    """

    def __init__(self, uses: Uses):
        self.u = uses
        self.env = {}  # array name -> {element path: the component's array variable}
        self.changes = 0

    def go(self, n):
        t = type(n)
        if t in LEAVES:
            return n
        if t is Map or t is ZipWith:
            args = (n.a,) if t is Map else (n.a, n.b)
            if any(type(a) is Avar and a.name in self.env for a in args):
                return self.reread(n, args)
        if t is Prj:
            path, base = chain(n)
            if type(base) is Index and type(base.array) is Avar and base.array.name in self.env:
                return Index(self.env[base.array.name][path], self.go(base.index))
        if (t is Let and type(n.bound) is Index and type(n.bound.array) is Avar
                and n.bound.array.name in self.env):
            return self.go(_reread_let(n, self.env[n.bound.array.name]))
        if t is Shape and n.array.name in self.env:
            return Shape(next(iter(self.env[n.array.name].values())))
        if t is Alet:
            return self.chain(n)
        return rebuild(n, self.go)

    def reread(self, n, args):
        """``n`` (a ``Map``/``ZipWith``) reading the split arrays' components: the
        parameter of a split argument becomes the component's element."""
        f, new = n.f, []
        for k, a in enumerate(args):
            if type(a) is Avar and a.name in self.env:
                path = param_path(f, k)
                comp = self.env[a.name][path]
                f = _reparam(f, k, path, comp.type.elt)
                new.append(comp)
            else:
                new.append(self.go(a))
        f = with_fields(f, body=self.go(f.body))
        if _identity(f) and len(new) == 1:
            return new[0]
        return Map(f, new[0]) if len(new) == 1 else ZipWith(f, new[0], new[1])

    def parts(self, v, b, paths):
        """``{path: the producer of that component}``, or None when ``v`` stays whole."""
        u = self.u
        name = v.name
        if type(b) not in (Generate, Map, ZipWith):
            return None
        if u.projuses.get(name, 0) + u.shapes.get(name, 0) != u.cnt.get(name, 0):
            return None  # read some other way too
        out = {}
        limit = cost(b.f) + max(SPLIT_COST, _traffic(b.type.elt, paths))
        total = 0
        for path in dict.fromkeys(paths):
            body = b.f.body  # the projection goes into the producer's function
            for i in path:  # (not a Map over a copy of it, which CSE would merge)
                body = _project(body, i)
            body = _live_lets(body)  # (tidy would drop them too, at a cost per let)
            out[path] = tidy(freshen(with_fields(b.f, body=body)))  # unique binders
            total += cost(out[path])
            if len(out) > 1 and total > limit:  # (costs only add up: decided already)
                return None  # the components share more work than the array's traffic
        return {path: with_fields(b, f=f) for path, f in out.items()}

    def chain(self, n):
        head = n
        binds = []
        changed = False
        while type(n) is Alet:
            v, b = n.var, self.go(n.bound)
            paths = self.u.eltprj.get(v.name)
            parts = self.parts(v, b, paths) if paths else None
            if parts is not None:
                m = {}
                for path, part in parts.items():
                    nv = Avar(fresh("a"), part.type)
                    binds.append((nv, part))
                    m[path] = nv
                self.env[v.name] = m
                changed = True
                self.changes += 1
            else:
                binds.append((v, b))
                changed |= b is not n.bound
            n = n.body
        body = self.go(n)
        if not changed and body is n:
            return head
        return wrap_lets(binds, body, Alet)


def _reread_let(n, comps: dict):
    """``let e = a ! ix in body`` (``body`` projecting ``e`` only) with each ``e.path``
    read from the component array of that path instead."""
    name, ix = n.var.name, n.bound.index

    def go(e):
        path, base = chain(e)
        if path and type(base) is Var and base.name == name:
            return Index(comps[path], ix)
        return map_children(e, go) if isinstance(e, Node) else e
    return go(n.body)


def _identity(f: Lam) -> bool:
    return len(f.params) == 1 and type(f.body) is Var and f.body.name == f.params[0].name


def _reparam(f: Lam, k: int, path: tuple, elt) -> Lam:
    """``f`` with parameter ``k`` (read only as ``x.path``) replaced by a parameter of
    type ``elt`` that is that component."""
    x = f.params[k]
    y = Var(fresh("x"), elt)

    def go(e):
        p, base = [], e
        while type(base) is Prj:
            p.append(base.index)
            base = base.tup
        if type(base) is Var and base.name == x.name and tuple(reversed(p)) == path:
            return y
        return map_children(e, go) if isinstance(e, Node) else e
    return Lam(f.params[:k] + (y,) + f.params[k + 1:], go(f.body))


@simplifier_pass
def split_element_tuples(prog: Program) -> Program:
    """Arrays of tuples read only through projections become one array per component
    (see ``ElementSplit``)."""
    return ElementSplit(Uses(prog)).go(prog)
