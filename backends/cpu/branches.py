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
from accel.ast.types import Scalar, bool_

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


def window(f: N.Lam, comp: int):
    """``(tests, lower, upper)`` when ``f`` compares component ``comp`` of its index, plus
    an integer constant, with terms of constants and array sizes (``let``-bound names
    looked through) both from below and from above, else None.

    This is the window test of a shifted read's adjoint: ``dx[i] = .. (if 0 <= i - 1 <
    n then dy[i - 1] else 0) + (if 0 <= i + 1 < n then dy[i + 1] else 0) ..`` (a
    stencil's or a convolution's, reverse mode's ``backpermute`` adjoint).  Every test
    holds for the indices in ``[max lower, min upper)``, the interior, where ``f`` with
    them all decided computes the same values without a compare; outside it (the
    border, a few indices) ``f`` runs as it is.  ``lower`` and ``upper`` are pairs
    ``(term, shift)``: a test holds from ``term + shift`` on, or below it.  The terms
    read no element, so they may be evaluated before the loop whatever ``f`` reads."""
    (ix,) = f.params
    outer = free_vars(f)
    lets: dict = {}
    tests: list = []
    stack = [f.body]
    while stack:
        e = stack.pop()
        if isinstance(e, N.Let):
            lets[e.var.name] = e.bound
        elif isinstance(e, N.PrimApp) and e.op in FLIP and len(e.args) == 2:
            tests.append(e)
        if not isinstance(e, (N.Lam, N.While)):
            stack.extend(children(e))
    found, lower, upper = [], [], []
    for t in tests:
        for side, op in ((0, t.op), (1, FLIP[t.op])):
            off = _offset(t.args[side], ix.name, comp, lets)
            if off is None:
                continue
            b = _substituted(t.args[1 - side], lets)
            if b is None or not free_vars(b) <= outer or not sizes_only(b):
                continue
            if t not in found:
                found.append(t)
                # i + off OP b  <=>  i OP b - off
                (upper if BELOW[op] else lower).append((b, SHIFT[op] - off))
            break
    if not (lower and upper):
        return None
    return found, lower, upper


def _offset(e, ix: str, comp: int, lets: dict, depth: int = 0):
    """``c`` when ``e`` is component ``comp`` of the index ``ix`` plus the integer
    constant ``c`` (through ``let``-bound names), else None."""
    if depth > 16:
        return None
    if isinstance(e, N.Var) and e.name in lets:
        return _offset(lets[e.name], ix, comp, lets, depth + 1)
    if isinstance(e, N.Prj):
        t = e.tup
        return 0 if isinstance(t, N.Var) and t.name == ix and e.index == comp else None
    if isinstance(e, N.PrimApp) and e.op in ("add", "sub") and len(e.args) == 2:
        a, b = e.args
        if _int_const(b):
            off = _offset(a, ix, comp, lets, depth + 1)
            c = int(b.value)
            return None if off is None else off + (c if e.op == "add" else -c)
        if e.op == "add" and _int_const(a):
            off = _offset(b, ix, comp, lets, depth + 1)
            return None if off is None else off + int(a.value)
    return None


def _int_const(e) -> bool:
    return isinstance(e, N.Const) and is_int(e)


def _substituted(e, lets: dict, depth: int = 0):
    """``e`` with the ``lets`` substituted (None past 16 levels)."""
    if depth > 16:
        return None
    if isinstance(e, N.Var):
        return _substituted(lets[e.name], lets, depth + 1) if e.name in lets else e
    bad = []

    def sub(c):
        r = _substituted(c, lets, depth + 1)
        if r is None:
            bad.append(c)
            return c
        return r
    y = map_children(e, sub)
    return None if bad else y


def is_int(e) -> bool:
    """Whether ``e`` is an integer-typed expression."""
    t = getattr(e, "type", None)
    return isinstance(t, Scalar) and t.is_int


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
    y = _substituted(e, lets)
    if y is None or ix in free_vars(y) or not free_vars(y) <= outer:
        return None
    stack = [y]
    while stack:
        x = stack.pop()
        if isinstance(x, (N.Shape, N.Avar, N.Var)):
            continue
        if not isinstance(x, (N.Const, N.PrimApp, N.Prj, N.Tuple, N.Index)):
            return None
        stack.extend(children(x))
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
