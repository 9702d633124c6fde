"""Local rewrite rules on expressions, projections and conditionals.

Invariant: every rule returns an equal term (or None): constants folded with the
registry's NumPy implementation exactly as the interpreter would, algebraic identities
only where exact in IEEE arithmetic (``x * 1``, ``x - 0.0``, ``x + (-0.0)``, integer
``x + 0``; ``x + 0.0`` only with ``adjoint_zeros``, where the sign of a zero does not
matter), and comparisons of index parameters decided from ``0 <= i.k < dim``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..ast.alpha import alpha_eq
from ..ast.nodes import (Acond, Alet, APrj, ATuple, Avar, Awhile, Cond, Const, Generate, Index, Let,
                         Node, PrimApp, Prj, Shape, Tuple, Unit, Var, While)
from ..ast.prims import PRIMS
from ..ast.traverse import free_vars, map_children, substitute, with_fields
from ..ast.types import TupleT, bool_, int64
from .base import is_param, trivial
from .linear import collected
from .shapes import dims_exp

if TYPE_CHECKING:
    from .local import Local


def is_zero(e, sign: int = 0) -> bool:
    """``e`` is a constant 0 (``sign`` -1/+1 restricts a float zero to -0.0/+0.0)."""
    if type(e) is not Const or e.ty == bool_ or e.value != 0:
        return False
    if sign and e.ty.is_float:
        neg = np.signbit(e.value)
        return neg if sign < 0 else not neg
    return True


def is_one(e) -> bool:
    return type(e) is Const and e.ty != bool_ and e.value == 1


def _fold_prim(e: PrimApp):
    """``e`` (all arguments constant) evaluated as the interpreter would, or None."""
    try:
        args = [np.array([a.value], dtype=a.ty.dtype) for a in e.args]
        r = np.asarray(PRIMS[e.op].impl(*args)).astype(e.type.dtype).reshape(-1)
        if r.shape != (1,):
            return None
        return Const(r[0], e.type)
    except Exception:  # an implementation that cannot fold: leave the term alone
        return None


def _push_prj(self: Local, n, make_prj, let_t, cond_t):
    """Push a projection through a let chain or a conditional (or None)."""
    tup = n.tup
    if type(tup) is let_t:
        chain = []
        while type(tup) is let_t:
            chain.append(tup)
            tup = tup.body
        body = self.post(make_prj(n.index, tup))
        for orig in reversed(chain):
            body = let_t(orig.var, orig.bound, body)
        return body
    if type(tup) is cond_t:
        return with_fields(tup, t=self.post(make_prj(n.index, tup.t)),
                     e=self.post(make_prj(n.index, tup.e)))
    return None


def _r_prj(self: Local, n: Prj):
    if not self.project:
        return None
    tup = n.tup
    if type(tup) is Tuple:
        return tup.items[n.index]
    if type(tup) is Var:
        b = self.bound.get(tup.name)
        if type(b) is Tuple and trivial(b.items[n.index]):
            return b.items[n.index]
    elif type(tup) is not Prj and type(tup) is not Index:
        return _push_prj(self, n, Prj, Let, Cond)
    return _generated_component(self, n)


def _generated_component(self: Local, n: Prj):
    """``(a ! ix).path`` where ``a = generate sh f`` and that component of ``f`` is a
    constant or (a projection of) the index: the constant, or that part of ``ix``.

    AD packs a scatter's target index and its ``executed`` flag into the tuples of the
    array it scatters from; read back through the materialised array, the scatter looks
    data-dependent, while forwarded it is ``i -> (True, i)`` (see ``_r_permute``)."""
    path = []
    e = n
    while type(e) is Prj:
        path.append(e.index)
        e = e.tup
    if type(e) is Var:
        e = self.bound.get(e.name)
    if type(e) is not Index or type(e.array) is not Avar:
        return None
    g = self.bound.get(e.array.name)
    if type(g) is not Generate:
        return None
    if e.array.type.rank:  # only reads known to be in bounds (others must still fail)
        dims = self.dims_of(e.array)
        if (type(e.index) is not Var or dims is None or None in dims
                or self.ibounds.get(e.index.name) != dims):
            return None
    body, lets = g.f.body, {}
    for k in reversed(path):
        while True:
            if type(body) is Let:
                lets[body.var.name] = body.bound
                body = body.body
            elif type(body) is Var and body.name in lets:
                body = lets[body.name]
            else:
                break
        if type(body) is not Tuple:
            return None
        body = body.items[k]
    while type(body) is Var and body.name in lets:
        body = lets[body.name]
    if type(body) is Const or (type(body) is Tuple and not body.items):  # () of rank 0
        return body
    inner, steps = body, []
    while type(inner) is Prj:
        steps.append(inner.index)
        inner = inner.tup
    if not is_param(inner, g.f, 0):
        return None
    out = e.index
    for k in reversed(steps):
        out = Prj(k, out)
    return out


def _r_aprj(self: Local, n: APrj):
    if not self.project:
        return None
    tup = n.tup
    if type(tup) is ATuple:
        return tup.items[n.index]
    if type(tup) is Avar:
        b = self.bound.get(tup.name)
        if type(b) is ATuple and type(b.items[n.index]) is Avar:
            return b.items[n.index]
        return None
    return _push_prj(self, n, APrj, Alet, Acond)


def _eta(n, prj_t):
    items = n.items
    if not items or type(items[0]) is not prj_t:
        return None
    t = items[0].tup
    if len(t.type.items) != len(items):
        return None
    for k, x in enumerate(items):
        if type(x) is not prj_t or x.index != k or not (x.tup is t or x.tup == t):
            return None
    return t


def _r_tuple(self: Local, n: Tuple):
    return _eta(n, Prj) if self.project else None


def _r_atuple(self: Local, n: ATuple):
    return _eta(n, APrj) if self.project else None


def _r_primapp(self: Local, n: PrimApp):
    if not self.fold:
        return None
    args = n.args
    if all(type(a) is Const for a in args):
        return _fold_prim(n)
    op = n.op
    ty = n.type
    if len(args) == 1:
        x = args[0]
        if op in ("neg", "not") and type(x) is PrimApp and x.op == op:
            return x.args[0]
        if op.startswith("to_") and x.type == ty:
            return x
        return None
    x, y = args
    fl = ty.is_float if ty != bool_ else False
    if (op == "add" or op == "sub") and ty == int64:
        r = collected(n, self.bound)
        if r is not None:
            return r
    if op == "add":
        if fl:
            if is_zero(y, -1) or (self.adjoint_zeros and is_zero(y)):
                return x
            if is_zero(x, -1) or (self.adjoint_zeros and is_zero(x)):
                return y
        elif is_zero(y):
            return x
        elif is_zero(x):
            return y
    elif op == "sub":
        if is_zero(y, 1) or ((not fl or self.adjoint_zeros) and is_zero(y)):
            return x
        if is_zero(x, -1) or ((not fl or self.adjoint_zeros) and is_zero(x)):
            return PrimApp("neg", (y,))
    elif op == "mul":
        if is_one(y):
            return x
        if is_one(x):
            return y
        if not fl and (is_zero(x) or is_zero(y)):
            return Const(0, ty)
    elif op == "div" or op == "floordiv":
        if is_one(y) and (fl or op == "floordiv"):
            return x
    elif op in ("and", "or") and ty == bool_:
        absorbing = op == "or"  # True absorbs or, False absorbs and
        for a, b in ((x, y), (y, x)):
            if type(a) is Const:
                return a if a.value == absorbing else b
    elif op in ("max", "min"):
        if x == y:
            return x
    elif op in ("lt", "le", "gt", "ge"):
        if op in ("gt", "ge"):
            op, x, y = ("lt" if op == "gt" else "le"), y, x
        r = _index_compare(self, op == "le", x, y)
        if r is not None:
            return Const(r, bool_)
    return None


def _index_compare(self: Local, le: bool, x, y):
    """``x < y`` (or ``x <= y``) when known from ``0 <= i.k < dim`` for an index
    parameter ``i`` of a ``Generate``/``Backpermute``/``Permute`` function, else None."""
    def canon(e):
        c = self.dim_of_exp(e)
        return e if c is None else c
    if self.is_index(x):
        hi = self.index_bound(x)
        if hi is not None and _at_most(hi, canon(y)):
            return True  # i.k < dim, i.k < d when dim = min d e
        if not le and is_zero(y):
            return False  # i.k < 0
    if self.is_index(y):
        hi = self.index_bound(y)
        if hi is not None and _at_most(hi, canon(x)):
            return False  # dim < i.k, dim <= i.k
        if le and is_zero(x):
            return True  # 0 <= i.k
    return None


def _at_most(dim, e) -> bool:
    """``dim <= e`` is known: they are equal, or ``dim`` is a ``min`` with an argument
    that is (a zip's shape is the meet of its arguments': its indices are below each)."""
    if dim == e:
        return True
    return type(dim) is PrimApp and dim.op == "min" and any(_at_most(a, e) for a in dim.args)


def _r_cond(self: Local, n: Cond):
    if not self.fold:
        return None
    c = n.c
    if type(c) is Const:
        return n.t if c.value else n.e
    if alpha_eq(n.t, n.e):
        return n.t
    if type(n.t) is Const and type(n.e) is Const and n.t.ty == bool_:
        if n.t.value and not n.e.value:
            return c
        if not n.t.value and n.e.value:
            return PrimApp("not", (c,))
    if type(c) is PrimApp and c.op == "not":
        return with_fields(n, c=c.args[0], t=n.e, e=n.t)
    if _agrees_when_equal(c, n.t, n.e):
        return n.e
    if type(c) is Var:  # inside a branch its condition is known (AD nests the same test)
        fv_t, fv_e = free_vars(n.t), free_vars(n.e)
        if c.name in fv_t or c.name in fv_e:
            return with_fields(n, t=substitute(n.t, {c.name: Const(True, bool_)}),
                               e=substitute(n.e, {c.name: Const(False, bool_)}))
    return None


def _agrees_when_equal(c, t, e) -> bool:
    """Whether ``if c then t else e`` is ``e``: ``c`` is ``x == k`` (``k`` an integer
    constant, ``x`` a variable or a component of a tuple variable) and ``t`` is ``e`` with ``k`` for
    ``x``.  Reverse mode writes such branches at the first element of a scan's adjoint
    (``if i.0 == 0 then a ! (0,) else a ! i``): an identity that kept a copy of the
    scan."""
    if type(c) is not PrimApp or c.op != "eq":
        return False
    x, k = c.args
    if type(x) is Const:
        x, k = k, x
    if type(k) is not Const or not getattr(k.ty, "is_int", False):
        return False  # (floats: -0.0 == 0.0, yet 1 / x tells them apart)
    if type(x) is Var:
        return alpha_eq(t, substitute(e, {x.name: k}))
    if type(x) is not Prj or type(x.tup) is not Var or type(x.tup.ty) is not TupleT:
        return False
    v = x.tup  # v as the tuple of its components, with component x.index k
    parts = tuple(k if i == x.index else Prj(i, v) for i in range(len(v.ty.items)))
    return alpha_eq(t, _projected(substitute(e, {v.name: Tuple(parts)})))


def _projected(e):
    """``e`` with projections of tuples taken."""
    if not isinstance(e, Node):
        return e
    e = map_children(e, _projected)
    if type(e) is Prj and type(e.tup) is Tuple:
        return e.tup.items[e.index]
    return e


def _r_while(self: Local, n: While):
    if self.fold and type(n.cond.body) is Const and not n.cond.body.value:
        return n.init
    return None


def _r_shape(self: Local, n: Shape):
    if not self.fold:
        return None
    d = self.dims.get(n.array.name)
    if d is not None:
        s = dims_exp(d)
        if s != n:
            return s
    return None


def _r_index(self: Local, n: Index):
    if self.zeros and self.adjoint_zeros:
        r = self.const_array(n.array)
        if r is not None:
            return r[0]
    return None


def _r_acond(self: Local, n: Acond):
    if not self.fold:
        return None
    if type(n.c) is Const:
        return n.t if n.c.value else n.e
    if alpha_eq(n.t, n.e):
        return n.t
    return None


def _r_awhile(self: Local, n: Awhile):
    if not self.fold:
        return None
    body = n.cond.body
    while type(body) is Alet:
        body = body.body
    if type(body) is Unit and type(body.exp) is Const and not body.exp.value:
        return n.init
    return None


EXP_RULES = {
    Prj: _r_prj, APrj: _r_aprj, Tuple: _r_tuple, ATuple: _r_atuple, PrimApp: _r_primapp,
    Cond: _r_cond, While: _r_while, Shape: _r_shape, Index: _r_index, Acond: _r_acond,
    Awhile: _r_awhile,
}
