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


def index_branch(f: N.Lam, components):
    """``(test, op, e, k)`` for the first branch of ``f``'s body on component ``k`` (one
    of ``components``) of its index parameter compared with a term ``e`` of array
    sizes (``op`` as if the index were on the left), or None."""
    (ix,) = f.params
    outer = free_vars(f)
    stack = [f.body]
    while stack:
        e = stack.pop()
        if isinstance(e, N.Cond):
            t = e.c
            if isinstance(t, N.PrimApp) and t.op in FLIP:
                for side, op in ((0, t.op), (1, FLIP[t.op])):
                    a, b = t.args[side], t.args[1 - side]
                    if (isinstance(a, N.Prj) and isinstance(a.tup, N.Var)
                            and a.tup.name == ix.name and a.index in components
                            and free_vars(b) <= outer and sizes_only(b)):
                        return t, op, b, a.index
            stack.extend((e.e, e.t, e.c))
        elif not isinstance(e, (N.Lam, N.While)):
            stack.extend(reversed(children(e)))
    return None


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
