"""A materialised generate left with one reader, at that reader's own index, is computed
in the reader.

Fusion materialises an array it would otherwise recompute in several readers.  The
rewrites of reductions after fusion (``reductions``) may remove readers: in the gradient
of ``log (sum (exp (x - m))) + m``, the generate of ``exp (x - m) / s`` had two readers,
the gradient and the sum of its negation (the adjoint of the maximum); once that sum is
read off the primal's (``reductions._scaled``), writing the generate and reading it back
costs a store and a load per element for nothing.

The rule: a single-output ``KGenerate`` that is not a block result, whose only read in
the rest of its block is one ``g ! ix`` where ``ix`` is the index of the element
function of a later ``KGenerate`` or the source of a later ``KFold`` over the same
dimensions as ``g`` (so that the read is in bounds), outside any nested function (a
fold's combination, a scalar loop), has its element function substituted for that
read; ``shape g`` anywhere becomes ``g``'s shape.  Each element is then computed once,
where it is used, as fusion would have done had it seen one reader.
"""

from __future__ import annotations

from ..ast import nodes as N
from ..ast.traverse import children, free_vars
from ..simplify.rounds import tidy
from .reductions import dim, element, retarget
from .kernels import KAcond, KAwhile, KBlock, KFold, KGenerate, KUse, map_blocks, sub_blocks

__all__ = ["reinline_generates"]


def reinline_generates(blk: KBlock) -> KBlock:
    """``blk`` with every generate that the module docstring describes computed in its
    one reader, in every nested block."""
    steps = [map_blocks(s, reinline_generates) for s in blk.steps]
    results = {r.name for r in blk.result}
    i = 0
    while i < len(steps):
        g = steps[i]
        at = None
        if (isinstance(g, KGenerate) and len(g.outs) == 1
                and g.outs[0].name not in results):
            at = _one_reader(g, steps[i + 1:])
        if at is None:
            i += 1
            continue
        k = i + 1 + at
        name = g.outs[0].name
        out = g.outs[0]

        def shape_only(e, g=g, out=out):  # ``shape g`` is g's shape; reads stay
            return g.shape if e is None else N.Index(out, e)
        if _domain(retarget(steps[k], name, shape_only)) != _domain(g):
            i += 1  # (a read out of bounds must still fail)
            continue
        steps[k] = retarget(steps[k], name, lambda e, g=g: g.shape if e is None
                            else element(g.f, e))
        steps[i + 1:] = [retarget(s, name, shape_only) for s in steps[i + 1:]]
        del steps[i]
    return KBlock(tuple(steps), blk.result)


def _one_reader(g: KGenerate, later: list):
    """The position in ``later`` of the one step reading ``g`` as the module docstring
    says, or None."""
    name = g.outs[0].name
    rank = len(g.f.params[0].type.items)
    found = None
    for pos, s in enumerate(later):
        if isinstance(s, KUse):
            continue
        if isinstance(s, (KAcond, KAwhile)):
            if any(_reads(x, name) for x in _nested_terms(s)):
                return None
            continue
        fn = s.f if isinstance(s, KGenerate) else s.src if isinstance(s, KFold) else None
        for x in vars(s).values():
            reads = _reads(x, name) if isinstance(x, N.Node) else []
            if not reads:
                continue
            if x is not fn or found is not None or len(reads) != 1:
                return None
            ix = fn.params[0]
            if reads[0] is None or reads[0].index != ix or len(ix.type.items) != rank:
                return None
            found = pos
    return found


def _domain(s) -> list:
    """The dimensions of the index space of a generate's function or a fold's source."""
    if isinstance(s, KGenerate):
        return [dim(s.shape, k) for k in range(len(s.f.params[0].type.items))]
    return [dim(s.shape, k) for k in range(len(s.src.params[0].type.items) - 1)] + [tidy(s.n)]


def _reads(e, name: str) -> list:
    """The reads ``name ! i`` in ``e`` (None for one inside a nested function, or a use
    of ``name`` other than a read or its shape)."""
    out = []
    stack = [(e, False)]
    while stack:
        x, nested = stack.pop()
        if not isinstance(x, N.Node) or name not in free_vars(x):
            continue
        if isinstance(x, N.Index) and isinstance(x.array, N.Avar) and x.array.name == name:
            out.append(None if nested else x)
            stack.append((x.index, nested))
            continue
        if isinstance(x, N.Shape):
            continue
        if isinstance(x, N.Avar):
            out.append(None)
            continue
        inner = nested or (isinstance(x, N.Lam) and x is not e)
        stack.extend((c, inner) for c in children(x))
    return out


def _nested_terms(s) -> list:
    out = [s.c] if isinstance(s, KAcond) else list(getattr(s, "init", ()))
    for b in sub_blocks(s):
        for t in b.steps:
            out += _nested_terms(t) if isinstance(t, (KAcond, KAwhile)) else [
                v for v in vars(t).values() if isinstance(v, N.Node)]
        out += list(b.result)
    return out

