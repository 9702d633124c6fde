"""What a ``permute``'s combination function is, for both AD modes.

The reverse and forward ``Permute`` rules (``reverse/scatter.py``, ``forward/arr.py``)
pick their rule by ``combination``:

- ``"new"`` / ``"old"``: a projection (``accel.ast.patterns.projection_side``).
  ``\\new old -> new`` is a scatter in which, among colliding writes, the last source
  index in row-major order wins (API.md); ``\\new old -> old`` keeps the defaults.
- ``"add"``, ``"mul"``, ``"max"``, ``"min"``: the operator applied to every leaf (either
  argument order).  Tuples are recognised for ``(+)`` only, which reverse mode itself
  emits for the index adjoints of arrays of tuples (bool leaves keep the first
  argument, as ``add_exp`` writes them): its adjoint must differentiate again.

Any other function gets ``not_differentiable``: the error names the function and the
line of the user's ``permute`` (``Permute.loc``, recorded by the frontend), not the line
of the ``vjp``/``jvp`` call.
"""

from __future__ import annotations

from ..ast import nodes as N
from ..ast.pretty import show
from ..ast.patterns import leafwise_binop, projection_side
from ..ast.types import TupleT
from ..errors import NotDifferentiableError

#: The reductions with rules of their own (the projections are ``"new"``/``"old"``).
REDUCTIONS = ("add", "mul", "max", "min")


def combination(lam: N.Lam) -> str | None:
    """``"new"``/``"old"`` for a projection, else ``leafwise_op(lam)``."""
    side = projection_side(lam)
    if side is not None:
        return ("new", "old")[side]
    return leafwise_op(lam)


def leafwise_op(lam: N.Lam) -> str | None:
    """``op`` (one of ``REDUCTIONS``) if ``lam`` is ``\\x y -> op x y`` on every numeric
    leaf (``patterns.leafwise_binop``); tuples for ``add`` only; else None."""
    op = leafwise_binop(lam)
    if op != "add" and isinstance(lam.params[0].type, TupleT):
        return None  # the product and tie rules are written for scalars
    return op if op in REDUCTIONS else None


def not_differentiable(op: N.Permute, mode: str) -> NotDifferentiableError:
    """The error for a combination function no rule covers, at the user's ``permute``."""
    where = f" (at {op.loc})" if op.loc else ""
    e = NotDifferentiableError(
        f"permute: {mode}-mode differentiation needs the combination function to be (+), "
        f"*, max, min or a projection (\\new old -> new, \\new old -> old), got "
        f"{show(op.comb)}{where}")
    if op.loc:
        e._accel_located = True  # the vjp/jvp call's own line would only mislead
    return e
