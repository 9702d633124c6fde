"""Reverse rules of the constructs that only move elements: ``Backpermute``,
``Reshape``, ``Replicate``, ``Slice`` (and ``Use``, a constant).

Each adjoint is the transposed movement of the result's adjoint: a gather's is a
scatter-add, a replication's a sum over the replicated dimensions.
"""

from __future__ import annotations

from ...ast import nodes as N
from ...ast.traverse import freshen
from ...ast.types import bool_, shape_type
from ..blocks import zero
from .gather import Affine, Plan, gather_adjoint, index_function_plan
from .terms import add_lam, zeros_like

def use(rev, b, y, dy):
    # primal:  y = Use literal;   reverse: nothing (a constant has no inputs)
    return None

def backpermute(rev, b, y, dy):
    # primal:  y = Backpermute sh f a
    # reverse: a += Permute (+) (zeros a) (\i -> (True, f i)) dy, or where f is affine
    #          (a shift, a transpose, ...: gather.py) the gather of dy through f's inverse
    op = b.op
    plan = index_function_plan(op.f, op.a.type.rank)
    if plan is not None:
        return rev.contribute(op.a, gather_adjoint(plan, op.a, dy, lambda x: (x, None)))
    f = freshen(op.f)
    pf = N.Lam(f.params, N.Tuple((N.Const(True, bool_), f.body)))
    rev.contribute(op.a, N.Permute(add_lam(y.type.elt), zeros_like(op.a), pf, dy))

def reshape(rev, b, y, dy):
    # primal:  y = Reshape sh a;   reverse: a += Reshape (shape a) dy
    op = b.op
    rev.contribute(op.a, N.Reshape(N.Shape(op.a), dy))

def replicate(rev, b, y, dy):
    # primal:  y = Replicate spec a   (a read of a through a projection of y's index)
    # reverse: a += Fold (+) 0 over the new dimensions of dy (gather.py: the adjoint
    #          of a projected read, so that every formulation of a broadcast gets it)
    op = b.op
    kept = [d for d, s in enumerate(op.spec) if s is None]
    new = [d for d, s in enumerate(op.spec) if s is not None]
    if not new:
        return rev.contribute(op.a, dy)
    plan = Plan([Affine(((d, 1),)) for d in kept], [(d,) for d in kept], new)
    rev.contribute(op.a, gather_adjoint(plan, op.a, dy, lambda x: (x, None)))

def slice_(rev, b, y, dy):
    # primal:  y = Slice a spec
    # reverse: a += Generate (shape a) (\i -> if fixed dims of i match then dy[kept i] else 0)
    #          (a's adjoint accumulated in a loop: Permute (+) (zeros a) (\j -> embed j) dy,
    #          which the driver scatters into the accumulator: O(size y) a step, not O(a))
    op = b.op
    spec, k = op.spec, op.a.type.rank
    if all(s is None for s in spec):
        return rev.contribute(op.a, dy)
    if op.a.name in rev.accumulating:
        j = N.Var(N.fresh("i"), shape_type(y.type.rank))
        kept = iter(range(y.type.rank))
        full = N.Tuple(tuple(N.Prj(next(kept), j) if s is None else freshen(s) for s in spec))
        return rev.contribute(op.a, N.Permute(add_lam(y.type.elt), zeros_like(op.a), N.Lam(
            (j,), N.Tuple((N.Const(True, bool_), full))), dy))
    ix = N.Var(N.fresh("i"), shape_type(k))
    match = None
    for d, s in enumerate(spec):
        if s is not None:
            eq = N.PrimApp("eq", (N.Prj(d, ix), freshen(s)))
            match = eq if match is None else N.PrimApp("and", (match, eq))
    small = N.Tuple(tuple(N.Prj(d, ix) for d, s in enumerate(spec) if s is None))
    body = N.Cond(match, N.Index(dy, small), zero(y.type.elt))
    rev.contribute(op.a, N.Generate(N.Shape(op.a), N.Lam((ix,), body)))
