"""Reverse rule of ``Scan`` (scanl/scanr/scanl1/scanr1), by the recurrence rule.
"""

from __future__ import annotations

from ...ast import nodes as N
from ...ast.types import int64
from .recurrences import recurrence_dual
from .terms import indexes_active

def scan(rev, b, y, dy):
    # primal:  y = Scan f z a  (scanl/scanr/scanl1/scanr1)
    # reverse: the recurrence rule (see recurrences.py): a backward affine scan of the
    #          adjoints, then each step's dual seeded with its accumulator's adjoint
    op = b.op
    a, r = op.a, op.a.type.rank
    has_z = op.z is not None
    n_out = N.Prj(r - 1, N.Shape(y))

    def dacc(ix, p):
        last = p if op.left else N.PrimApp("sub", (N.PrimApp(
            "sub", (n_out, N.Const(1, int64))), p))
        return N.Index(dy, N.Tuple(tuple(N.Prj(k, ix) for k in range(r - 1)) + (last,)))
    zrows = recurrence_dual(rev, op.f, op.z, a, y, dacc, has_z, op.left)
    if has_z and indexes_active(op.z, rev.active):
        rev.closed_exp(op.z, rev.sum_all(rev.emit(zrows)))
