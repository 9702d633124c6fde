"""What a ``permute``'s combination function is, for both AD modes.

The reverse and forward ``Permute`` rules (``reverse/scatter.py``, ``forward/arr.py``)
pick their rule by ``combination``:

- ``"new"`` / ``"old"``: a projection (``accel.ast.projection``).  ``\\new old -> new``
  is a scatter in which, among colliding writes, the last source index in row-major
  order wins (API.md); ``\\new old -> old`` keeps the defaults.
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
from ..ast.projection import projection_side
from ..ast.types import TupleT
from ..errors import NotDifferentiableError
from .blocks import flatten, fresh_leaves, leaves_of, tree_like

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
    leaf, bool leaves being ``x``; tuples for ``add`` only; else None."""
    if len(lam.params) != 2 or lam.params[0].type != lam.params[1].type:
        return None
    t = lam.params[0].type
    xs, ys = fresh_leaves(t, "x"), fresh_leaves(t, "y")
    env = {lam.params[0].name: tree_like(t, iter(xs)), lam.params[1].name: tree_like(t, iter(ys))}
    try:
        blk = flatten(lam.body, env)
    except TypeError:
        return None
    bound = {b.outs[0].name: b.op for b in blk.binds
             if len(b.outs) == 1 and isinstance(b.op, N.PrimApp)}
    ops = set()
    for r, x, y in zip(leaves_of(blk.result), xs, ys):
        if x.type.is_bool and isinstance(r, N.Var) and r.name == x.name:
            continue
        op = bound.get(r.name) if isinstance(r, N.Var) else None
        if op is None or len(op.args) != 2 or not all(isinstance(a, N.Var) for a in op.args):
            return None
        if sorted(a.name for a in op.args) != sorted((x.name, y.name)):
            return None
        ops.add(op.op)
    if len(ops) != 1:
        return None
    op = ops.pop()
    if op != "add" and isinstance(t, TupleT):
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
