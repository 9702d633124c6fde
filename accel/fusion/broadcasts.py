"""Generates that are broadcasts are stored without the dimensions they ignore.

A ``KGenerate`` whose element function does not read some components of its index is
constant along those dimensions: every element along them is the same value.  Reverse
AD writes such arrays whenever an adjoint term of a map over a large domain depends on
part of the index only (softmax attention written with ``generate``: the adjoint of the
scores, a function of (i, j), shared by the contributions to ``q[i, c]`` and
``k[j, c]`` over the (i, j, c) domain).  :func:`narrow_broadcasts` computes it once per
point of the components it reads and makes every later read drop the others: less
memory and work, and the reads become projections, so a sum of such a read times
another array is a matrix product (``contraction``).
"""

from __future__ import annotations

from ..ast import nodes as N
from ..ast.traverse import map_children, walk
from ..ast.types import ArrayT, shape_type
from ..simplify.rounds import tidy
from .contraction import components
from .kernels import LOOP_STEPS, KBlock, KGenerate, KPermute, map_blocks, sub_blocks
from .reductions import dim

__all__ = ["narrow_broadcasts"]


def narrow_broadcasts(blk: KBlock) -> KBlock:
    """``blk`` with each one-output generate that ignores index components computed
    over the others, and later reads of it re-indexed (in every nested block; arrays
    read in a nested block, passed to a loop, updated in place or returned are left
    alone)."""
    steps = [map_blocks(s, narrow_broadcasts) for s in blk.steps]
    results = {r.name for r in blk.result}
    i = 0
    while i < len(steps):
        s = steps[i]
        new = _narrowed(s, steps[i + 1:], results) if isinstance(s, KGenerate) else None
        if new is not None:
            steps[i:] = new
        i += 1
    return KBlock(tuple(steps), blk.result)


def _narrowed(g: KGenerate, later: list, results: set):
    """``[narrow generate, later steps re-indexed]``, or None."""
    if len(g.outs) != 1 or g.outs[0].name in results:
        return None
    q = g.f.params[0]
    rank = len(q.type.items)
    used = components(g.f.body, q)
    if used is None or len(used) == rank:
        return None
    a = g.outs[0]
    keep = sorted(used)
    full = N.Tuple(tuple(dim(g.shape, c) for c in range(rank)))
    q2 = N.Var(N.fresh("i"), shape_type(len(keep)))
    where = {c: j for j, c in enumerate(keep)}

    def body(x):
        if isinstance(x, N.Prj) and x.tup == q:
            return N.Prj(where[x.index], q2)
        return map_children(x, body)
    narrow = N.Avar(N.fresh("a"), ArrayT(a.type.elt, len(keep)))
    gen = KGenerate((narrow,), tidy(N.Tuple(tuple(full.items[c] for c in keep))),
                    N.Lam((q2,), body(g.f.body)))

    def read(x):
        if isinstance(x, N.Index) and x.array == a:
            ix = read(x.index)
            items = (ix.items if isinstance(ix, N.Tuple)
                     else tuple(N.Prj(c, ix) for c in range(rank)))
            return N.Index(narrow, N.Tuple(tuple(items[c] for c in keep)))
        if isinstance(x, N.Shape) and x.array == a:
            return full
        return map_children(x, read)

    out = [gen]
    for s in later:
        if not isinstance(s, LOOP_STEPS):
            if any(_mentions(b, a) for b in sub_blocks(s)) or a in getattr(s, "init", ()):
                return None
            out.append(s)
            continue
        if isinstance(s, KPermute) and s.into == a:
            return None
        fields = {k: (tidy(read(v)) if isinstance(v, (N.Exp, N.Lam)) else v)
                  for k, v in vars(s).items()}
        new = type(s)(**fields)
        if any(isinstance(n, N.Avar) and n == a for v in vars(new).values()
               if isinstance(v, N.Node) for n in walk(v)):
            return None  # read some other way
        out.append(new)
    return out


def _mentions(blk: KBlock, a: N.Avar) -> bool:
    """Whether ``a`` occurs anywhere in ``blk`` (its steps, nested blocks, result)."""
    if a in blk.result:
        return True
    for s in blk.steps:
        for v in vars(s).values():
            if isinstance(v, N.Node) and any(n == a for n in walk(v)):
                return True
            if isinstance(v, tuple) and a in v:
                return True
        if any(_mentions(b, a) for b in sub_blocks(s)):
            return True
    return False

