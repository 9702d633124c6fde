"""Which leaves of an ``awhile`` state provably keep their shape from one iteration to the next.

Reverse mode keeps a loop's states in a tape.  A leaf whose shape never changes gets a
tape of rows (``(checkpoints, ...shape)``, a state read back is a ``slice``, its shape
known on the host once per call); any other leaf gets a flat tape with an offset and the
dimensions of each kept state (``loop``), which costs a few more host steps per
iteration.  This module decides, without running anything, that a leaf keeps its shape:
it computes each dimension of the body's result as a *monomial*, a constant times a
product of symbols (dimension q of state leaf l, or of an array from outside the loop),
and compares it with the leaf's own.  The answer is conservative: "unknown" (a
dimension read from an array element, a nested loop, a fold's rank change) means
"may change", which is always correct, only slower.

>>> keeps_shape(body)   # [True, False]: leaf 0 keeps its shape, leaf 1 may not

A leaf that may change shape can still *settle*: when its new shape depends only on
arrays from outside the loop (``settles``), every state after the first has one shape,
and the tape keeps those in rows too (``loop``).  A zip_with's dimension is the smaller
of its arguments' (``("min", {dims})`` here).
"""

from __future__ import annotations

from ...ast import nodes as N
from ...ast.types import ATupleT, ArrayT

__all__ = ["keeps_shape", "settles"]


def _mono(c: int, syms=()) -> tuple:
    return (c, tuple(sorted(syms)))


def _is_min(d) -> bool:
    return d is not None and d[0] == "min"


def _mul(a, b):
    if a is None or b is None or _is_min(a) or _is_min(b):
        return None
    return _mono(a[0] * b[0], a[1] + b[1])


def _min(a, b):
    """The smaller of two dimensions (a zip_with's): ``("min", {dims})`` unless equal."""
    if a is None or b is None:
        return None
    if a == b:
        return a
    items: set = set()
    for d in (a, b):
        items |= d[1] if _is_min(d) else {d}
    return ("min", frozenset(items))


def _symbols(d) -> set:
    if _is_min(d):
        return set().union(*(_symbols(x) for x in d[1]))
    return set(d[1])


class _Shapes:
    def __init__(self):
        self.env: dict = {}  # array variable name -> its dims (or a list for tuples)
        self.senv: dict = {}  # scalar variable name -> monomial (or a list for tuples)

    def exp(self, e):
        """A shape or dimension expression as a monomial (a list for tuples), or None."""
        t = type(e)
        if t is N.Const:
            return _mono(int(e.value)) if e.ty.is_int else None
        if t is N.Var:
            return self.senv.get(e.name)
        if t is N.Let:
            self.senv[e.var.name] = self.exp(e.bound)
            return self.exp(e.body)
        if t is N.Tuple:
            return [self.exp(x) for x in e.items]
        if t is N.Shape:
            d = self.arr(e.array)
            return None if d is None else list(d)
        if t is N.Prj:
            tup = self.exp(e.tup)
            return tup[e.index] if isinstance(tup, list) else None
        if t is N.PrimApp and e.op == "mul" and len(e.args) == 2:
            return _mul(self.exp(e.args[0]), self.exp(e.args[1]))
        if t is N.PrimApp and e.op == "min" and len(e.args) == 2:
            return _min(self.exp(e.args[0]), self.exp(e.args[1]))
        return None

    def shape_exp(self, e, rank: int):
        d = self.exp(e)
        if not isinstance(d, list) or len(d) != rank:
            return None
        return tuple(d)

    def arr(self, a):
        """The dims of array term ``a`` (a tuple of monomials or None; a list of those
        for an array tuple), or None when unknown."""
        t = type(a)
        if t is N.Avar:
            if a.name in self.env:
                return self.env[a.name]
            if isinstance(a.type, ArrayT):  # from outside the loop: fixed
                return tuple(_mono(1, (("v", a.name, q),)) for q in range(a.type.rank))
            return None
        if t is N.Alet:
            self.env[a.var.name] = self.arr(a.bound)
            return self.arr(a.body)
        if t is N.ATuple:
            return [self.arr(x) for x in a.items]
        if t is N.APrj:
            tup = self.arr(a.tup)
            return tup[a.index] if isinstance(tup, list) else None
        if t is N.Unit:
            return ()
        if t is N.Map:
            return self.arr(a.a)
        if t is N.ZipWith:
            da, db = self.arr(a.a), self.arr(a.b)
            if da is None or db is None:
                return None
            return tuple(_min(x, y) for x, y in zip(da, db))
        if t in (N.Generate, N.Backpermute, N.Reshape):
            return self.shape_exp(a.shape, a.type.rank)
        if t is N.Permute:
            return self.arr(a.defaults)
        if t is N.Fold:
            d = self.arr(a.a)
            return None if d is None else d[:-1]
        if t is N.Replicate:
            d = self.arr(a.a)
            if d is None:
                return None
            kept = iter(d)
            return tuple(next(kept) if x is None else self.exp(x) for x in a.spec)
        if t is N.Slice:
            d = self.arr(a.a)
            return None if d is None else tuple(x for x, s in zip(d, a.spec) if s is None)
        if t is N.Acond:
            dt, de = self.arr(a.t), self.arr(a.e)
            return dt if dt is not None and dt == de else None
        return None


def _result_dims(body: N.ALam) -> tuple:
    """Per leaf of the loop state: (its type, the dims ``body`` gives it as a tuple of
    dimensions or None, the dims it was given)."""
    from ..anf import type_leaves
    T = body.param.type
    tl = type_leaves(T)
    sh = _Shapes()
    k = iter(range(len(tl)))

    def param_dims(t):
        if isinstance(t, ATupleT):
            return [param_dims(s) for s in t.items]
        leaf = next(k)
        return tuple(_mono(1, (("p", leaf, q),)) for q in range(t.rank))
    mine = param_dims(T)
    sh.env[body.param.name] = mine
    out = sh.arr(body.body)

    def leaves_of(d, t):
        if isinstance(t, ATupleT):
            if not isinstance(d, list):
                return [None] * len(type_leaves(t))
            return [x for di, ti in zip(d, t.items) for x in leaves_of(di, ti)]
        return [d]
    return list(zip(tl, leaves_of(out, T), leaves_of(mine, T)))


def keeps_shape(body: N.ALam) -> list:
    """For each leaf of the loop state (``body``'s parameter), whether ``body`` returns
    it with the shape it was given (rank-0 leaves always do)."""
    return [t.rank == 0 or (g is not None and g == w) for t, g, w in _result_dims(body)]


def settles(body: N.ALam) -> list:
    """For each leaf of the loop state, whether the shape ``body`` returns it with
    depends only on arrays from outside the loop and constants, not on the state: every
    state after the first then has one shape (the first, the loop's initial value, may
    have another).  ``h <- tanh(W h + b)`` written with ``zip_with`` is such a leaf: its
    new length is ``min(rows of W, length of b)``, whatever the length of ``h``."""
    return [g is not None and all(x is not None and not any(sym[0] == "p" for sym in _symbols(x))
                                  for x in g)
            for _, g, _ in _result_dims(body)]
