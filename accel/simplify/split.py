"""Splitting AD's pair arrays: an array of tuples read only through projecting maps
becomes one array per projected component.

Invariant: the split happens only when every use of the array is a projecting ``Map``
or ``shape``, and when the work the components' functions redo (their cost together
minus the whole function's, ``accel.ast.cost``) is at most ``SPLIT_COST`` or, if more,
what the whole array would cost in element writes and reads (each scalar leaf written
once, each use's component read): a wide tuple array of AD's contributions (an adjoint with a
value, an index and a flag per read) costs more to write and read back than a few
operations redone per component (softmax attention written with ``generate``: the
gradient's (T, T, d) array of contributions, 11 leaves an element, was 290 MB).
Why: AD pairs an adjoint with its contributions per element; fusion would materialise
the whole tuple array (several consumers read it), while each component alone is read
once and fuses into its consumer.
"""

from __future__ import annotations

from ..ast.cost import cost
from ..ast.nodes import Alet, Avar, Generate, Map, Prj, Program, Shape, ZipWith, fresh
from ..ast.traverse import LEAVES, freshen, rebuild, with_fields
from ..ast.types import leaves
from .base import wrap_lets
from .rename import simplifier_pass
from .rounds import tidy
from .uses import Uses, element_path

#: An array of tuples is split (see ``ElementSplit``) when its components' functions together
#: cost at most this much more than the whole function (or than the array's traffic).
SPLIT_COST = 4


def _traffic(elt, paths) -> int:
    """What the whole array of tuples costs in element reads and writes (``cost``'s
    unit): every scalar leaf written once, and each use's component read."""
    n = len(leaves(elt))
    for path in paths:
        t = elt
        for i in path:
            t = t.items[i]
        n += len(leaves(t))
    return n


class ElementSplit:
    """Split a let-bound array of tuples that is read only through projecting maps
    (``Map (\\x -> x.0.1) a``, and ``shape a``) into one array per projected component.

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
        if t is Map and type(n.a) is Avar and n.a.name in self.env:
            return self.env[n.a.name][element_path(n.f)]
        if t is Shape and n.array.name in self.env:
            return Shape(next(iter(self.env[n.array.name].values())))
        if t is Alet:
            return self.chain(n)
        return rebuild(n, self.go)

    def parts(self, v, b, paths):
        """``{path: the producer of that component}``, or None when ``v`` stays whole."""
        u = self.u
        name = v.name
        if type(b) not in (Generate, Map, ZipWith):
            return None
        if len(paths) + u.shapes.get(name, 0) != u.cnt.get(name, 0):
            return None  # read some other way too
        out = {}
        for path in dict.fromkeys(paths):
            body = b.f.body  # the projection goes into the producer's function
            for i in path:  # (not a Map over a copy of it, which CSE would merge)
                body = Prj(i, body)
            out[path] = tidy(freshen(with_fields(b.f, body=body)))  # unique binders
        redone = sum(map(cost, out.values())) - cost(b.f)
        if len(out) > 1 and redone > max(SPLIT_COST, _traffic(b.type.elt, paths)):
            return None  # the components share more work than the whole array's traffic
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


@simplifier_pass
def split_element_tuples(prog: Program) -> Program:
    """Arrays of tuples read only through projections become one array per component
    (see ``ElementSplit``)."""
    return ElementSplit(Uses(prog)).go(prog)
