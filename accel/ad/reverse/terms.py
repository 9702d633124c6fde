"""Term builders shared by the array-level reverse rules.

Adjoint sums, zero and empty arrays, index helpers and the recogniser of a
combination function ``\\x y -> op x y``: small pure functions over AST nodes,
so that every rule module can build its dual without importing the driver.
"""

from __future__ import annotations

from ...ast import nodes as N
from ...ast.traverse import free_vars
from ...ast.types import ArrayT, TupleT, bool_, int64, shape_type
from ..blocks import zero


def add_exp(x: N.Exp, y: N.Exp, t) -> N.Exp:
    """Elementwise sum of two adjoint values of element type ``t``."""
    if isinstance(t, TupleT):
        return N.Tuple(tuple(add_exp(N.Prj(i, x), N.Prj(i, y), s) for i, s in enumerate(t.items)))
    if t == bool_:
        return x
    return N.PrimApp("add", (x, y))


def add_lam(t) -> N.Lam:
    x, y = N.Var(N.fresh("x"), t), N.Var(N.fresh("y"), t)
    return N.Lam((x, y), add_exp(x, y, t))


def lam1(t, body_fn) -> N.Lam:
    x = N.Var(N.fresh("x"), t)
    return N.Lam((x,), body_fn(x))


def prj(e: N.Exp, *path) -> N.Exp:
    for i in path:
        e = N.Prj(i, e)
    return e


def zeros_like(ref: N.Avar) -> N.Arr:
    t = ref.type
    return N.Generate(N.Shape(ref), lam1(shape_type(t.rank), lambda _: zero(t.elt)))


def empty_of(t: ArrayT) -> N.Arr:
    """GenEmpty: an array with no elements (rank 0: a single zero)."""
    sh = N.Tuple(tuple(N.Const(0, int64) for _ in range(t.rank)))
    return N.Generate(sh, lam1(shape_type(t.rank), lambda _: zero(t.elt)))


def init_ix(ix: N.Exp, rank: int) -> N.Exp:
    """All but the innermost component of an index of rank ``rank``."""
    return N.Tuple(tuple(N.Prj(k, ix) for k in range(rank - 1)))


def binop_of(lam: N.Lam):
    """The primitive name if ``lam`` is ``\\x y -> op x y`` (either order), else None."""
    if len(lam.params) != 2:
        return None
    body, env = lam.body, {}
    while isinstance(body, N.Let):
        env[body.var.name] = body.bound
        body = body.body
    while isinstance(body, N.Var) and body.name in env:
        body = env[body.name]
    if isinstance(body, N.PrimApp) and len(body.args) == 2:
        names = [a.name if isinstance(a, N.Var) else None for a in body.args]
        if sorted(names, key=str) == sorted((p.name for p in lam.params), key=str):
            return body.op
    return None


def indexes_active(n: N.Node, active: set) -> bool:
    return bool(free_vars(n) & active)
