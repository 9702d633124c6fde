"""Branches on an index compared with array sizes: found in a kernel's function and
decided where the index's range is known.

Reverse mode writes ``if i.k < e then ... else 0`` wherever an adjoint covers a domain
other than its primal's (a ``zip_with``'s adjoint over the meet of its arguments'
shapes, ``W[i] * h[i]`` with ``W`` and ``h`` of unrelated lengths).  Left in a loop,
such a branch keeps LLVM from vectorizing it: the loads under it may not be executed
speculatively.  Over a range of indices where the branch goes one way, the function with
the branch decided computes the same values; the kernels pick those ranges (a generate
splits its element loop at the size, a fold decides the branch for a block of rows).
"""

from __future__ import annotations

from accel.ast import nodes as N
from accel.ast.traverse import children, free_vars, map_children
from accel.ast.types import bool_

#: ``i OP e`` written as ``e FLIP[OP] i``.
FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}
#: ``i OP e`` holds for all ``i`` below ``e + SHIFT[OP]`` when ``BELOW[OP]``, else for
#: all ``i`` from there on.
SHIFT = {"lt": 0, "le": 1, "gt": 1, "ge": 0}
BELOW = {"lt": True, "le": True, "gt": False, "ge": False}

TRUE, FALSE = N.Const(True, bool_), N.Const(False, bool_)


def index_branch(f: N.Lam, components, reads: bool = False):
    """``(test, op, e, k)`` for the first branch of ``f``'s body on component ``k`` (one
    of ``components``) of its index parameter compared with a term ``e`` that does not
    depend on the index (``op`` as if the index were on the left), or None.

    ``e`` is arithmetic on constants and array sizes, or, with ``reads``, may also read
    elements at positions that do not depend on the index (a tape's size at the loop's
    step ``t - 1``, as reverse mode reads a state's shape back), through ``let``-bound
    names (returned substituted).  Evaluated once outside the branch, such a read must
    be one ``f`` makes for every index anyway: only a test ``f`` always evaluates (not
    inside another branch; ``&`` and ``|`` evaluate both sides) qualifies, and the
    caller evaluates ``e`` only for a non-empty range of indices."""
    (ix,) = f.params
    outer = free_vars(f)
    lets: dict = {}  # let-bound names on the always-evaluated spine -> their terms
    stack = [(f.body, True)]
    while stack:
        e, always = stack.pop()
        if isinstance(e, N.Let):
            if always:
                lets[e.var.name] = e.bound
            stack += [(e.body, always), (e.bound, always)]
        elif isinstance(e, N.Cond):
            for t in _tests(e.c):
                for side, op in ((0, t.op), (1, FLIP[t.op])):
                    a, b = t.args[side], t.args[1 - side]
                    if not (isinstance(a, N.Prj) and isinstance(a.tup, N.Var)
                            and a.tup.name == ix.name and a.index in components):
                        continue
                    if free_vars(b) <= outer and sizes_only(b):
                        return t, op, b, a.index
                    if reads and always:
                        b = _invariant(b, lets, ix.name, outer)
                        if b is not None:
                            return t, op, b, a.index
            stack += [(e.e, False), (e.t, False), (e.c, always)]
        elif not isinstance(e, (N.Lam, N.While)):
            stack.extend((c, always) for c in reversed(children(e)))
    return None


def _tests(c):
    """The comparisons ``c`` is a conjunction or disjunction of (or ``c`` itself)."""
    if isinstance(c, N.PrimApp):
        if c.op in FLIP and len(c.args) == 2:
            return [c]
        if c.op in ("and", "or"):
            return [t for a in c.args for t in _tests(a)]
    return []


def _invariant(e, lets: dict, ix: str, outer: set):
    """``e`` with the ``lets`` substituted, if then it reads only variables from outside
    ``f`` (so not the index ``ix``) and is made of constants, primitives, sizes and
    element reads; else None."""
    def go(x, depth=0):
        if depth > 16:
            return None
        if isinstance(x, N.Var):
            if x.name in lets:
                return go(lets[x.name], depth + 1)
            return x if x.name in outer else None
        if isinstance(x, (N.Shape, N.Avar)):
            return x
        if not isinstance(x, (N.Const, N.PrimApp, N.Prj, N.Tuple, N.Index)):
            return None
        bad = []

        def sub(c):
            r = go(c, depth + 1)
            if r is None:
                bad.append(c)
                return c
            return r
        y = map_children(x, sub)
        return None if bad else y
    y = go(e)
    if y is None or ix in free_vars(y) or not free_vars(y) <= outer:
        return None
    return y


def sizes_only(e) -> bool:
    """``e`` is arithmetic on constants and array sizes: evaluated outside the branch,
    it reads no element (which the branch might have guarded)."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, N.Shape):
            continue
        if not isinstance(x, (N.Const, N.PrimApp, N.Prj, N.Tuple)):
            return False
        stack.extend(children(x))
    return True


def decide(e, test, value):
    """``e`` with every occurrence of the term ``test`` replaced by ``value``."""
    if e == test:
        return value
    return map_children(e, lambda c: decide(c, test, value))
