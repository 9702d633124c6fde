"""Local rewrite rules on arrays: identity and constant arrays, producer composition.

Invariant: no rule duplicates work.  ``Map (\\x -> x) a = a``; maps and zips of
constant arrays become ``Generate``; a zip with a constant array whose function ignores
it is its other argument; a ``Fold`` of a constant array that its function leaves alone
is a ``Generate``; reshapes/backpermutes to the same shape vanish; a ``Map``/``ZipWith``
of a producer used only there takes the producer's function in (the producer was
inlined because it was used once, so nothing is recomputed).  A ``Permute`` whose index
function is ``A.ignore`` on every path writes nothing and is its defaults.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..ast.nodes import (Avar, Backpermute, Cond, Const, Fold, Generate, Index, Lam, Let, Map,
                         Permute, Prj, Replicate, Reshape, Tuple, Var, ZipWith, fresh)
from ..ast.traverse import free_vars, freshen, with_fields
from ..ast.types import bool_, shape_type
from .base import const_exp, is_param, trivial
from .shapes import dims_exp

if TYPE_CHECKING:
    from .local import Local


def _compose(f: Lam, k: int, g: Lam, params: tuple):
    """``f`` with its parameter ``k`` bound to ``g``'s body, as a function of ``params``."""
    return Lam(params, Let(f.params[k], g.body, f.body))


def _r_map(self: Local, n: Map):
    if not self.zeros:
        return None
    f, a = n.f, n.a
    if is_param(f.body, f, 0):
        return a
    # producer composition (the producer is used once here: inlined)
    if type(a) is Map or type(a) is ZipWith:
        return with_fields(a, f=_compose(f, 0, a.f, a.f.params))
    if type(a) is Generate:
        return with_fields(a, f=_compose(f, 0, a.f, a.f.params))
    if const_exp(n.f.body):
        sh = self.shape_of(n.a)
        if sh is not None:
            return self.generate(sh, n.f.body)
    ca = self.const_array(n.a)
    if ca is not None and ca[1] is not None:
        r = self.applied(n.f, (ca[0],))
        if const_exp(r):
            return self.generate(ca[1], r)
    return None


def _r_zipwith(self: Local, n: ZipWith):
    if not self.zeros:
        return None
    f = n.f
    same = self.same_shape(n.a, n.b)
    sa = self.shape_of(n.a) if same else None
    body = f.body
    if same and is_param(body, f, 0):
        return n.a
    if same and is_param(body, f, 1):
        return n.b
    if same and const_exp(body):
        return self.generate(sa, body)
    if same:  # an argument the function ignores: a map of the other (forward mode's
        # unzips of (primal, tangent) arrays read one side of a zip of both)
        fv = free_vars(body)
        for k in (0, 1):
            if f.params[k].name not in fv:
                return Map(Lam((f.params[1 - k],), body), n.b if k == 0 else n.a)
    if type(n.a) is Map:  # maps compose into the zip (Map keeps the shape)
        g = n.a.f
        return ZipWith(_compose(f, 0, g, (g.params[0], f.params[1])), n.a.a, n.b)
    if type(n.b) is Map:
        g = n.b.f
        return ZipWith(_compose(f, 1, g, (f.params[0], g.params[0])), n.a, n.b.a)
    if not same:
        return None
    ca, cb = self.const_array(n.a), self.const_array(n.b)
    if ca is not None and cb is not None:
        r = self.applied(f, (ca[0], cb[0]))
        if const_exp(r):
            return self.generate(sa, r)
    if cb is not None:  # a zip with a constant array is a map
        x = f.params[0]
        r = self.applied(f, (x, cb[0]))
        return n.a if r == x else Map(Lam((x,), r), n.a)
    if ca is not None:
        y = f.params[1]
        r = self.applied(f, (ca[0], y))
        return n.b if r == y else Map(Lam((y,), r), n.b)
    return None


def _r_generate(self: Local, n: Generate):
    if not self.zeros:
        return None
    body, i = n.f.body, n.f.params[0]
    if (type(body) is Index and type(body.index) is Var and body.index.name == i.name
            and self.shape_is(body.array, n.shape)):
        return body.array
    return None


def _r_backpermute_const(self: Local, n: Backpermute):
    ca = self.const_array(n.a)
    if ca is not None and (n.a.type.rank == 0 or self.adjoint_zeros):
        return self.generate(n.shape, ca[0])
    return None


def _r_replicate(self: Local, n: Replicate):
    if not self.zeros:
        return None
    ca = self.const_array(n.a)
    d = None if ca is None else self.full_dims(n.a)
    if d is None:
        return None
    items, k = [], 0
    for s in n.spec:
        if s is None:
            items.append(d[k])
            k += 1
        else:
            items.append(s)
    return self.generate(Tuple(tuple(items)), ca[0])


def _init_shape(sh):
    """The shape without its innermost dimension."""
    r = len(sh.type.items)
    if type(sh) is Tuple:
        return Tuple(sh.items[:-1])
    if trivial(sh):
        return Tuple(tuple(Prj(k, sh) for k in range(r - 1)))
    s = Var(fresh("sh"), sh.type)
    return Let(s, sh, Tuple(tuple(Prj(k, s) for k in range(r - 1))))


def _r_fold(self: Local, n: Fold):
    if not self.zeros or n.z is None or not const_exp(n.z):
        return None
    ca = self.const_array(n.a)
    if ca is None:
        return None
    r = self.applied(n.f, (n.z, ca[0]))
    if r != n.z:
        return None
    d = self.full_dims(n.a)
    return self.generate(_init_shape(ca[1]) if d is None else dims_exp(d[:-1]), n.z)


def _element(a, i: Var):
    """Element ``i`` of array term ``a`` (a variable, or a generate or map of one), or
    None."""
    if type(a) is Avar:
        return Index(a, i)
    if type(a) is Generate:
        f = freshen(a.f)
        return Let(f.params[0], i, f.body)
    if type(a) is Map:
        x = _element(a.a, i)
        f = freshen(a.f)
        return None if x is None else Let(f.params[0], x, f.body)
    return None


def _never_targets(e) -> bool:
    """Whether a permute's target expression is ``A.ignore`` on every path (through lets
    and both branches of conditionals): such a permute writes nothing."""
    while type(e) is Let:
        e = e.body
    if type(e) is Cond:
        return _never_targets(e.t) and _never_targets(e.e)
    return type(e) is Tuple and e.items[0] == Const(False, bool_)


def _r_permute(self: Local, n: Permute):
    f = n.f
    if self.zeros and _never_targets(f.body):
        return n.defaults
    if (type(f.body) is Tuple and f.body.items[0] == Const(True, bool_)
            and f.body.items[1] in (f.params[0], Tuple(()))
            and f.params[0].type == shape_type(n.defaults.type.rank)):
        # every source element goes to its own index: elementwise, when the shapes agree
        ds, dd = self.dims_of(n.src), self.dims_of(n.defaults)
        if ds is not None and ds == dd and None not in ds:
            i = Var(fresh("i"), f.params[0].type)
            a, b = _element(n.src, i), _element(n.defaults, i)
            if a is not None and b is not None:
                new, old = (Var(fresh("x"), p.type) for p in n.comb.params)
                body = Let(new, a, Let(old, b, self.applied(n.comb, (new, old))))
                return Generate(dims_exp(dd), Lam((i,), body))
    if not (self.zeros and self.adjoint_zeros):
        return None
    cs = self.const_array(n.src)
    if cs is None:
        return None
    d = n.comb.params[1]
    if self.applied(n.comb, (cs[0], d)) == d:
        return n.defaults
    return None


def _r_reshape(self: Local, n: Reshape):
    if not self.zeros:
        return None
    if self.shape_is(n.a, n.shape):
        return n.a
    if self.adjoint_zeros:
        ca = self.const_array(n.a)
        if ca is not None:
            return self.generate(n.shape, ca[0])
    return None


def _r_backpermute(self: Local, n: Backpermute):
    if not self.zeros:
        return None
    if is_param(n.f.body, n.f, 0) and self.shape_is(n.a, n.shape):
        return n.a
    return _r_backpermute_const(self, n)


ARRAY_RULES = {
    Map: _r_map, ZipWith: _r_zipwith, Fold: _r_fold, Permute: _r_permute, Reshape: _r_reshape,
    Backpermute: _r_backpermute, Generate: _r_generate, Replicate: _r_replicate,
}
