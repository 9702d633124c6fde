"""Bounds of integer index terms over a box of indices: a guard decided for a whole
block of a fold's rows.

Reverse mode guards the adjoint of a read through a shifted index with a window test.
The image adjoint of a convolution ``y[i, j] = sum_ab img[i + a, j + b] * k[a, b]`` is
``dimg[u, v] = sum_ab (if 0 <= u - a < oh & 0 <= v - b < ow then dy[u - a, v - b] * k[a, b]
else 0)`` (with ``a, b`` the quotient and remainder of one window index).  The test
fails only near the border, but evaluated for every element it costs compares (and
divisions) and keeps the loop scalar: LLVM may not load speculatively under it.

A block of adjacent rows folded over an inner range is a box of indices.  Bounding each
integer term of the test over the box (interval arithmetic on sums, differences,
products, floored quotients and remainders by a positive size, ``min``/``max`` and
conditionals on sizes) proves the test for every index of the box at once, and the
block is then folded with the guard decided: the same values, computed without it.
Only terms made of the index, constants and array sizes are bounded (no element is
read to decide), and a test that cannot be bounded is left where it is.
"""

from __future__ import annotations

import re

from accel.ast import nodes as N
from accel.ast.traverse import free_vars, substitute
from accel.backends.numba.trees import flat

from .branches import is_int, sizes_only

__all__ = ["guard", "holds", "row_box"]

#: ``a OP b`` holds for all of the box when (side of a, comparison, side of b) does.
_PROOF = {"lt": ("hi", "<", "lo"), "le": ("hi", "<=", "lo"),
          "gt": ("lo", ">", "hi"), "ge": ("lo", ">=", "hi")}

_ATOM = re.compile(r"\((\w+) \+ (\d+)\)|(\w+)")


def guard(f: N.Lam):
    """``(test, lets)`` when ``f``'s body is ``let``s around ``if test then .. else ..``
    with ``test`` a conjunction of comparisons of integers that reads the index
    parameter (``lets``: the let-bound names -> their terms), else None."""
    (ix,) = f.params
    lets: dict = {}
    e = f.body
    while isinstance(e, N.Let):
        lets[e.var.name] = e.bound
        e = e.body
    if not isinstance(e, N.Cond) or _conjuncts(e.c) is None:
        return None
    if not _reads(e.c, ix.name, lets):
        return None
    return e.c, lets


def _conjuncts(c) -> list | None:
    """The integer comparisons ``c`` is a conjunction of, or None."""
    if isinstance(c, N.PrimApp):
        if c.op == "and":
            parts = [_conjuncts(a) for a in c.args]
            return None if any(p is None for p in parts) else [t for p in parts for t in p]
        if c.op in _PROOF and len(c.args) == 2 and all(is_int(a) for a in c.args):
            return [c]
    return None


def _reads(e, ix: str, lets: dict, depth: int = 0) -> bool:
    """Whether ``e`` depends on the index ``ix`` (through ``lets`` too)."""
    if depth > 32:
        return True
    for v in free_vars(e):
        if v == ix or (v in lets and _reads(lets[v], ix, lets, depth + 1)):
            return True
    return False


def row_box(rows: list) -> list:
    """``[(lo, hi)]`` atoms per index component of a block of rows (each row's index
    atoms are ``v`` or ``(v + c)``, as ``fold._row_blocks`` writes them)."""
    box = []
    for k in range(len(rows[0])):
        atoms = [row[k] for row in rows]
        parsed = [_ATOM.fullmatch(a) for a in atoms]
        if all(parsed):
            bases = {m.group(1) or m.group(3) for m in parsed}
            if len(bases) == 1:
                (base,) = bases
                shifts = [int(m.group(2) or 0) for m in parsed]
                lo, hi = min(shifts), max(shifts)
                box.append((f"({base} + {lo})" if lo else base,
                            f"({base} + {hi})" if hi else base))
                continue
        box.append((f"min({', '.join(atoms)})", f"max({', '.join(atoms)})"))
    return box


def holds(g, ix: N.Var, test, lets: dict, box: list) -> str | None:
    """Emit (into the kernel being written by ``g``) the bounds of ``test``'s terms for
    indices ``ix`` in ``box`` (``[(lo, hi)]`` atoms per component, inclusive) and return
    an expression true only if ``test`` holds for all of them; None if some term cannot
    be bounded (nothing emitted that matters: the caller keeps the guard)."""
    b = _Bounds(g, ix.name, box, lets)
    conds = []
    for t in _conjuncts(test):
        x, y = b.of(t.args[0]), b.of(t.args[1])
        if x is None or y is None:
            return None
        side_x, py, side_y = _PROOF[t.op]
        conds.append(f"(({x[side_x == 'hi']}) {py} ({y[side_y == 'hi']}))")
    v = g.fresh("inbox")
    g.emit(f"{v} = {' and '.join(b.ok + conds)}")
    return v


class _Bounds:
    """Inclusive bounds ``(lo, hi)`` (atoms) of integer terms over the box."""

    def __init__(self, g, ix: str, box: list, lets: dict):
        self.g, self.ix, self.box, self.lets = g, ix, box, lets
        self.memo: dict = {}  # let-bound name -> its bounds
        self.ok: list = []  # conditions the bounds assume (positive divisors)

    def of(self, e):
        if isinstance(e, N.Var) and e.name in self.lets:
            if e.name not in self.memo:
                self.memo[e.name] = self.of(self.lets[e.name])
            return self.memo[e.name]
        if isinstance(e, N.Prj) and isinstance(e.tup, N.Var) and e.tup.name == self.ix:
            return self.box[e.index]
        if not is_int(e) and not (isinstance(e, N.Cond) and is_int(e.t)):
            return None
        if not _reads(e, self.ix, self.lets):
            v = self.invariant(e)
            return None if v is None else (v, v)
        if isinstance(e, N.Cond):
            c = self.invariant(e.c)
            t, f = self.of(e.t), self.of(e.e)
            if c is None or t is None or f is None:
                return None
            return (self.emit(f"({t[0]}) if {c} else ({f[0]})"),
                    self.emit(f"({t[1]}) if {c} else ({f[1]})"))
        if not isinstance(e, N.PrimApp):
            return None
        args = [self.of(a) for a in e.args]
        if any(a is None for a in args):
            return None
        return self.prim(e.op, args)

    def prim(self, op: str, args: list):
        emit = self.emit
        if op == "neg":
            (lo, hi), = args
            return emit(f"-({hi})"), emit(f"-({lo})")
        if op in ("add", "sub", "min", "max"):
            (a0, a1), (b0, b1) = args
            if op == "add":
                return emit(f"({a0}) + ({b0})"), emit(f"({a1}) + ({b1})")
            if op == "sub":
                return emit(f"({a0}) - ({b1})"), emit(f"({a1}) - ({b0})")
            return emit(f"{op}({a0}, {b0})"), emit(f"{op}({a1}, {b1})")
        if op == "mul":
            (a0, a1), (b0, b1) = args
            ps = f"({a0}) * ({b0}), ({a0}) * ({b1}), ({a1}) * ({b0}), ({a1}) * ({b1})"
            return emit(f"min({ps})"), emit(f"max({ps})")
        if op in ("floordiv", "mod"):
            (a0, a1), (d0, d1) = args
            if d0 != d1:  # a divisor that depends on the index: not bounded
                return None
            self.ok.append(f"({d0} > 0)")
            q0 = emit(f"({a0}) // {d0} if {d0} > 0 else 0")
            if op == "floordiv":
                return q0, emit(f"({a1}) // {d0} if {d0} > 0 else 0")
            one = emit(f"{q0} == (({a1}) // {d0} if {d0} > 0 else 0)")  # no wrap-around
            return (emit(f"({a0}) - {q0} * {d0} if {one} else 0"),
                    emit(f"({a1}) - {q0} * {d0} if {one} else {d0} - 1"))
        return None

    def invariant(self, e):
        """The atom of ``e``, a term of constants and sizes (and let-bound such terms),
        emitted once; None if it reads anything else."""
        e = self._inline(e, 0)
        if e is None or not sizes_only(e):
            return None
        return flat(self.g.exp(e))[0]

    def _inline(self, e, depth: int):
        if depth > 32:
            return None
        fv = free_vars(e)
        if not fv:
            return e
        if self.ix in fv:
            return None
        env = {}
        for name in fv:
            if name not in self.lets:
                continue  # an array (its size) or a variable ``sizes_only`` refuses
            env[name] = self._inline(self.lets[name], depth + 1)
            if env[name] is None:
                return None
        return substitute(e, env)

    def emit(self, expr: str) -> str:
        v = self.g.fresh("bd")
        self.g.emit(f"{v} = {expr}")
        return v
