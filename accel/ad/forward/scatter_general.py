"""Forward mode of ``permute`` with a general associative and commutative combination
function: a dual-number scatter (why it is exact: ``reverse/scatter_general.py``)."""

from __future__ import annotations

from ...ast import nodes as N
from ...ast.traverse import apply_lam, freshen
from ..blocks import zero
from ..operator_check import check_associative_commutative, refuse_projection


def _lam(types, fn) -> N.Lam:
    vs = tuple(N.Var(N.fresh("x"), t) for t in types)
    return N.Lam(vs, fn(*vs))


def forward_rule(fwd, b, op: N.Permute, comb_jvp: N.Lam | None):
    """Bind ``y`` and ``y_dot`` for ``b`` (``fwd`` is the array-level forward sweep;
    ``comb_jvp`` is ``\\x w x_dot w_dot -> (x ⊙ w, tangent)``, None if it carries none)."""
    refuse_projection(op.comb)
    check_associative_commutative(op.comb)
    y = b.outs[0]
    if comb_jvp is None:
        fwd.keep(b)
        return fwd.set_dot(y, N.Map(_lam((y.type.elt,), lambda _: zero(y.type.elt)), y))
    xd = fwd.zipped(op.defaults, fwd.dot(op.defaults))
    xs = fwd.zipped(op.src, fwd.dot(op.src))
    t = xs.type.elt
    comb = _lam((t, t), lambda u, v: apply_lam(comb_jvp, (N.Prj(0, u), N.Prj(0, v),
                                                          N.Prj(1, u), N.Prj(1, v))))
    fwd.split(y, N.Permute(comb, xd, freshen(op.f), xs))


__all__ = ["forward_rule"]
