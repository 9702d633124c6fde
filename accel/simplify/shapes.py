"""Shape facts: the dimensions of array terms as cheap expressions in scope.

Invariant: a dimension is known only as an expression that is valid wherever it is
used (a constant, ``(shape v).k`` of an array variable in scope, or a small closed term
of primitives and element reads), so equal expressions are equal sizes; unknown
dimensions are None.  The rewrite rules read these facts to remove reshapes and
backpermutes to the same shape and the bounds checks of index parameters.
"""

from __future__ import annotations

from ..ast.nodes import (Acond, Alet, APrj, ATuple, Avar, Awhile, Backpermute, Const, Fold,
                         Generate, Index, Map, Permute, PrimApp, Prj, Replicate, Reshape, Scan,
                         Shape, Slice, Tuple, Unit, Use, Var, ZipWith)
from ..ast.types import ArrayT, ATupleT, int64
from .base import const_exp


def cheap_closed(e, budget: int = 16) -> bool:
    """``e`` is a small term of primitives, constants, shapes and element reads of array
    variables, with no scalar variable: valid (and worth comparing) wherever its arrays
    are in scope.  (The budget: the flattened interior of a 2-D array, ``((shape a).0 -
    2) * ((shape a).1 - 2)``, is nine nodes; unknown, an array read only for that size
    stayed alive and kept its producer materialised.)"""
    stack = [e]
    while stack:
        x = stack.pop()
        budget -= 1
        t = type(x)
        if budget < 0 or not (t is PrimApp or t is Index or t is Const or t is Tuple
                              or t is Prj or t is Shape):
            return False
        if t is PrimApp:
            stack.extend(x.args)
        elif t is Index:
            if type(x.array) is not Avar:
                return False
            stack.append(x.index)
        elif t is Tuple:
            stack.extend(x.items)
        elif t is Prj:
            stack.append(x.tup)
        elif t is Shape and type(x.array) is not Avar:
            return False
    return True


def default_dims(a: Avar) -> tuple:
    sh = Shape(a)
    return tuple([Prj(k, sh) for k in range(a.type.rank)])


def dims_exp(dims: tuple):
    """A shape expression for ``dims``: ``shape a`` when they are ``a``'s, else a tuple."""
    if dims and type(dims[0]) is Prj and type(dims[0].tup) is Shape:
        a = dims[0].tup.array
        if a.type.rank == len(dims) and all(
                type(x) is Prj and x.index == k and type(x.tup) is Shape and x.tup.array == a
                for k, x in enumerate(dims)):
            return dims[0].tup
    return Tuple(tuple(dims))


def meet_dims(x, y, ty):
    """The dimensions on which two trees of dimensions (see ``ShapeFacts.tree_dims``) of
    terms of type ``ty`` agree."""
    if x is None or y is None:
        return None
    if isinstance(ty, ATupleT):
        return tuple([meet_dims(a, b, t) for a, b, t in zip(x, y, ty.items)])
    return tuple([a if a is not None and a == b else None for a, b in zip(x, y)])


class ShapeFacts:
    """The shape queries of the rewriter ``Local``; reads its ``bound`` (let-bound
    terms), ``dims`` (better-known dimensions of array variables), ``tuple_dims`` (the
    same for tuple-of-arrays variables and loops: trees of dimensions), ``memo`` and
    ``ibounds`` (the dimensions index parameters range over)."""

    # -- shapes (tuples of per-dimension cheap expressions, None where unknown)

    def dim_of_exp(self, e):
        """The canonical form of a dimension expression, or None."""
        t = type(e)
        if t is Const:
            return e
        if t is Prj:
            tup = e.tup
            if type(tup) is Shape:
                return self.dims_of(tup.array)[e.index]
            if type(tup) is Tuple:
                return self.dim_of_exp(tup.items[e.index])
        if (t is PrimApp or t is Index) and cheap_closed(e):
            return e  # e.g. ``to_int64 (a5 ! (0,))``: pure, so equal terms are equal sizes
        return None

    def exp_dims(self, sh):
        """The dimensions given by the shape expression ``sh``."""
        t = type(sh)
        if t is Shape:
            return self.dims_of(sh.array)
        if t is Tuple:
            return tuple([self.dim_of_exp(x) for x in sh.items])
        return None

    def dims_of(self, a):
        """The dimensions of array term ``a`` (entries None where unknown), or None.
        An array variable's are always complete (``(shape v).k`` by default)."""
        t = type(a)
        if t is Avar:
            if not isinstance(a.type, ArrayT):
                return None
            d = self.dims.get(a.name)
            return default_dims(a) if d is None else d
        return self._remembered(a, t, self._dims_of)

    def _remembered(self, a, t, compute):
        """``compute(a, t)``, remembered in ``memo`` by the term's identity."""
        hit = self.memo.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
        r = compute(a, t)
        self.memo[id(a)] = (a, r)
        return r

    def _dims_of(self, a, t):
        if t is Generate or t is Backpermute or t is Reshape:
            return self.exp_dims(a.shape)
        if t is Map or t is Permute:
            return self.dims_of(a.a if t is Map else a.defaults)
        if t is ZipWith:
            da, db = self.dims_of(a.a), self.dims_of(a.b)
            if da is None or db is None:
                return None
            return tuple([x if x is not None and x == y else None for x, y in zip(da, db)])
        if t is Fold or t is Scan:
            d = self.dims_of(a.a)
            if d is None:
                return None
            if t is Fold:
                return d[:-1]
            return d if a.z is None else d[:-1] + (None,)
        if t is Replicate or t is Slice:
            d = self.dims_of(a.a)
            if d is None:
                return None
            out, k = [], 0
            for x in a.spec:
                if x is None:
                    out.append(d[k])
                    k += 1
                elif t is Replicate:
                    out.append(self.dim_of_exp(x))
                else:
                    k += 1
            return tuple(out)
        if t is Use:
            return tuple([Const(x, int64) for x in a.array.shape])
        if t is Unit:
            return ()
        if t is APrj or t is Avar or t is Alet or t is Acond or t is Awhile:
            return self.tree_dims(a)
        return None

    def tree_dims(self, a):
        """The dimensions of each array in the (tuple-of-arrays) term ``a``: a tree
        shaped like its type, with a tuple of dimensions (entries None where unknown)
        or None at each array leaf; None where nothing is known.  Tuple-typed terms are
        remembered in ``memo`` like ``dims_of``'s: a projection of a let-bound tuple
        walks the whole tuple, and reverse mode's nested loops project from tuples of
        tuples, so unremembered walks multiplied (20 million calls for GradBench's saddle
        to second order, 84 s of simplification)."""
        t = type(a)
        if isinstance(a.type, ArrayT):
            if t is not APrj and t is not Alet and t is not Acond and t is not Awhile:
                return self.dims_of(a)
        elif t is not Avar and t is not Awhile:  # (a loop's: ``tuple_dims``, once known)
            return self._remembered(a, t, self._tree_dims)
        return self._tree_dims(a, t)

    def _tree_dims(self, a, t):
        if t is APrj:
            d = self.tree_dims(a.tup)
            return None if d is None else d[a.index]
        if t is ATuple:
            return tuple([self.tree_dims(x) for x in a.items])
        if t is Alet:
            while type(a) is Alet:
                a = a.body
            return self.tree_dims(a)
        if t is Acond:
            return meet_dims(self.tree_dims(a.t), self.tree_dims(a.e), a.type)
        if t is Avar:
            d = self.tuple_dims.get(a.name)
            if d is not None:
                return d
            b = self.bound.get(a.name)
            return None if b is None else self.tree_dims(b)
        hit = self.tuple_dims.get(id(a))
        return hit[1] if hit is not None and hit[0] is a else None

    def full_dims(self, a):
        d = self.dims_of(a)
        return None if d is None or None in d else d

    def shape_of(self, a):
        """The shape of array term ``a`` as a cheap expression in scope, or None."""
        d = self.full_dims(a)
        return None if d is None else dims_exp(d)

    def same_shape(self, a, b) -> bool:
        da = self.full_dims(a)
        return da is not None and da == self.full_dims(b)

    def shape_is(self, a, sh) -> bool:
        """Array ``a`` has the shape given by the expression ``sh``."""
        da = self.full_dims(a)
        return da is not None and da == self.exp_dims(sh)

    def index_bound(self, e):
        """The dimension that ``e`` (``i.k`` of an index parameter) is known to be below."""
        if type(e) is Prj and type(e.tup) is Var:
            b = self.ibounds.get(e.tup.name)
            if b is not None:
                return b[e.index]
        return None

    def is_index(self, e) -> bool:
        return type(e) is Prj and type(e.tup) is Var and e.tup.name in self.ibounds

    def const_array(self, a):
        """``(value, shape)`` if every element of ``a`` is the constant ``value``."""
        t = type(a)
        if t is Avar:
            b = self.bound.get(a.name)
            if b is None:
                return None
            r = self.const_array(b)
            if r is None:
                return None
            return r[0], self.shape_of(a)
        if t is Generate and const_exp(a.f.body):
            return a.f.body, a.shape
        if t is Unit and const_exp(a.exp):
            return a.exp, Tuple(())
        return None
