"""A sampled check that a combination function is associative and commutative.

The API requires ``permute``'s combination function to be associative and commutative
(or a projection).  The primal cannot tell (the backends simply combine in their order),
but the grouped derivative rule of ``reverse/scatter_general`` would silently give a wrong
gradient for, say, ``\\new old -> new - old``.  So before using it, the operator is
evaluated on a few sample values (NumPy, through the primitive registry) and a clear
``NotDifferentiableError`` names it when ``f(a, b) != f(b, a)`` or ``f(f(a, b), c) !=
f(a, f(b, c))`` beyond rounding.  A function that reads arrays or loops is not sampled
(it is taken at its word).
"""

from __future__ import annotations

import numpy as np

from ..ast import nodes as N
from ..ast.prims import PRIMS
from ..ast.types import TupleT
from ..errors import NotDifferentiableError

_FLOATS = np.array([0.3, 0.7, 1.3, 2.1, -0.4, 0.9])
_INTS = np.array([1, 2, 3, 5, 7, 4])


class _Unsampled(Exception):
    """The function uses a construct the sampler does not evaluate."""


def _eval(e: N.Exp, env: dict):
    if isinstance(e, N.Const):
        return e.value
    if isinstance(e, N.Var):
        if e.name not in env:
            raise _Unsampled
        return env[e.name]
    if isinstance(e, N.Let):
        return _eval(e.body, {**env, e.var.name: _eval(e.bound, env)})
    if isinstance(e, N.Tuple):
        return tuple(_eval(x, env) for x in e.items)
    if isinstance(e, N.Prj):
        return _eval(e.tup, env)[e.index]
    if isinstance(e, N.PrimApp):
        return PRIMS[e.op].impl(*(np.asarray(_eval(a, env)) for a in e.args))
    if isinstance(e, N.Cond):
        c, t, f = _eval(e.c, env), _eval(e.t, env), _eval(e.e, env)
        return _where(np.asarray(c), t, f)
    raise _Unsampled


def _where(c, t, f):
    if isinstance(t, tuple):
        return tuple(_where(c, a, b) for a, b in zip(t, f))
    return np.where(c, t, f)


def _sample(t, shift: int):
    if isinstance(t, TupleT):
        return tuple(_sample(s, shift + 2 * i + 1) for i, s in enumerate(t.items))
    base = _INTS if t.is_int else _FLOATS if t.is_float else _INTS % 2 == 1
    return np.roll(base, shift).astype(np.dtype(t.name))


def _leaves(v):
    return [x for s in v for x in _leaves(s)] if isinstance(v, tuple) else [np.asarray(v)]


def _close(u, v) -> bool:
    for a, b in zip(_leaves(u), _leaves(v)):
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            ok = np.isclose(a, b, rtol=1e-6, atol=1e-9) | ~(np.isfinite(a) & np.isfinite(b))
            if not ok.all():
                return False
        elif not np.array_equal(a, b):
            return False
    return True


def refuse_projection(comb: N.Lam):
    """A projection (``\\new old -> new``) is not commutative: it is no case of this rule."""
    body = comb.body
    while isinstance(body, N.Let):
        body = body.body
    if isinstance(body, N.Var) and body.name in {p.name for p in comb.params}:
        from ..ast.pretty import show
        raise NotDifferentiableError(
            f"permute: the grouped rule for associative and commutative combination "
            f"functions does not apply to the projection {show(comb)}")


def check_associative_commutative(comb: N.Lam, op: str = "permute"):
    """Raise ``NotDifferentiableError`` if sampling shows ``comb`` is not associative and
    commutative."""
    t = comb.params[0].type
    a, b, c = (_sample(t, k) for k in (0, 1, 3))

    def f(x, y):
        return _eval(comb.body, {comb.params[0].name: x, comb.params[1].name: y})

    try:
        with np.errstate(all="ignore"):
            comm = _close(f(a, b), f(b, a))
            assoc = _close(f(f(a, b), c), f(a, f(b, c)))
    except _Unsampled:
        return
    if not (comm and assoc):
        from ..ast.pretty import show
        what = " and ".join(w for w, ok in (("commutative", comm), ("associative", assoc))
                            if not ok)
        raise NotDifferentiableError(
            f"{op}: the combination function {show(comb)} is not {what} (sampled), so "
            f"permute has no derivative rule for it: use +, *, max, min, a projection, or an "
            f"associative and commutative function")


__all__ = ["check_associative_commutative", "refuse_projection"]
