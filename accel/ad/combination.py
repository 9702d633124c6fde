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

Any other function goes to the grouped rule for associative and commutative operators
(``reverse/scatter_general.py``, ``forward/scatter_general.py``), which refuses what
sampling shows is neither; its errors name the function
and cite the user's ``permute`` line (``Permute.loc``, recorded by the frontend) through
``located_at``, not the line of the ``vjp``/``jvp`` call.
"""

from __future__ import annotations

from ..ast import nodes as N
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


def located_at(e: NotDifferentiableError, op: N.Permute) -> NotDifferentiableError:
    """``e`` citing the user's ``permute`` line (once): the vjp/jvp call's own line, which
    the API's error wrapper would add, would only mislead."""
    if op.loc and not getattr(e, "_accel_located", False):
        e.args = (f"{e.args[0]} (at {op.loc})",) + e.args[1:]
        e._accel_located = True
    return e
