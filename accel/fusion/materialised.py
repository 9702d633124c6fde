"""Reads of a materialised array instead of recomputations of its elements.

Fusion inlines cheap producers into every reader, and the simplifier inlines them before
fusion too, so a kernel may recompute an expression that an earlier ``KGenerate`` of the
same block already wrote.  In the GMM objective, ``xc[n,k,d] = x[n mod S, d] - mu[k,d]``
is materialised (it is read more than four times), yet the (N, K) sum of squares
recomputes ``x[n mod S, d] - mu[k,d]``: an integer division per element of its loop.
:func:`read_materialised` replaces such a subexpression of a later kernel by a read of
the array, when the subexpression is the generate's element function with each index
component read as a component of the kernel's own index over a dimension no larger
than the generate's (so the read is in bounds).  The values are the same expressions,
evaluated once.
"""

from __future__ import annotations

from ..ast import nodes as N
from ..ast.traverse import children, map_children
from ..simplify.rounds import tidy
from .kernels import KBlock, KFold, KGenerate, map_blocks
from .reductions import dim, expand, known_shapes, match_under

__all__ = ["read_materialised"]

#: Element functions with fewer operations (reads and primitives) are not worth a read.
MIN_OPS = 3


def read_materialised(blk: KBlock) -> KBlock:
    """``blk`` with later kernels reading earlier generates' elements (see the module
    docstring), in every nested block."""
    steps = []
    for s in blk.steps:
        steps.append(map_blocks(s, read_materialised))
    for i, g in enumerate(steps):
        pattern = _pattern(g)
        if pattern is not None:
            steps[i + 1:] = [_rewrite_step(s, g, pattern, steps[:j])
                             for j, s in enumerate(steps[i + 1:], i + 1)]
    return KBlock(tuple(steps), blk.result)


def _pattern(g):
    """The let-free element function of a generate worth reading, or None."""
    if not isinstance(g, KGenerate) or len(g.outs) != 1:
        return None
    if not g.f.params[0].type.items:  # rank 0
        return None
    body = expand(g.f.body)
    return None if body is None or _ops(body) < MIN_OPS else body


def _ops(e) -> int:
    n, stack = 0, [e]
    while stack:
        x = stack.pop()
        n += isinstance(x, (N.PrimApp, N.Index))
        stack.extend(children(x))
    return n


def _rewrite_step(s, g: KGenerate, pattern, earlier: list):
    """``s`` reading ``g`` where it recomputes ``pattern``; dimensions are compared with
    the shapes of ``earlier`` steps' arrays written out (``known_shapes``: a generate
    over ``min (shape h).0 (shape x).0`` with ``h`` a fold over ``(shape x).0`` is
    ``(shape x).0`` long, as a zip_with's adjoint writes it)."""
    if isinstance(s, KGenerate):
        dims = [dim(s.shape, m) for m in range(len(s.shape.type.items))]
        f = _rewrite_lam(s.f, dims, g, pattern, earlier)
        return s if f is s.f else KGenerate(s.outs, s.shape, f)
    if isinstance(s, KFold):
        dims = [dim(s.shape, m) for m in range(len(s.shape.type.items))] + [tidy(s.n)]
        src = _rewrite_lam(s.src, dims, g, pattern, earlier)
        return s if src is s.src else KFold(s.out, s.shape, s.n, s.f, s.z, src)
    return s


def _rewrite_lam(lam: N.Lam, dims: list, g: KGenerate, pattern, earlier: list) -> N.Lam:
    body = expand(lam.body)
    if body is None:
        return lam
    ig, ix = g.f.params[0], lam.params[0]
    dims = [known_shapes(d, earlier) for d in dims]
    gdims = [known_shapes(dim(g.shape, k), earlier) for k in range(len(ig.type.items))]
    found = [False]

    def go(t):
        env: dict = {}
        if _bind(pattern, t, ig, ix, env) and set(env) == set(range(len(gdims))) and all(
                _le(dims[m], gdims[k]) for k, m in env.items()):
            found[0] = True
            return N.Index(g.outs[0], N.Tuple(tuple(N.Prj(env[k], ix)
                                                    for k in range(len(gdims)))))
        return map_children(t, go)

    new = go(body)
    return N.Lam(lam.params, tidy(new)) if found[0] else lam


def _bind(p, t, ig: N.Var, ix: N.Var, env: dict) -> bool:
    """Whether ``t`` is ``p`` with each component ``ig.k`` read as a component ``ix.m``
    of the kernel's index (``env[k] = m``, the same ``m`` for every read of ``ig.k``)."""
    def leaf(p, t):
        if isinstance(p, N.Prj) and p.tup == ig:
            if not (isinstance(t, N.Prj) and t.tup == ix):
                return False
            return env.setdefault(p.index, t.index) == t.index
        if p == ig:  # the whole index: the kernel's own, component by component
            rank = len(ig.type.items)
            return t == ix and len(ix.type.items) == rank and all(
                env.setdefault(k, k) == k for k in range(rank))
        return None
    return match_under(p, t, ig, leaf)


def _le(e, d) -> bool:
    """Whether the size ``e`` is at most ``d`` for every value of the arguments: equal,
    constants in order, a ``min`` with an argument that is, or at most every argument
    of a ``min``."""
    if e == d:
        return True
    if isinstance(e, N.Const) and isinstance(d, N.Const):
        return e.value <= d.value
    if isinstance(d, N.PrimApp) and d.op == "min" and all(_le(e, a) for a in d.args):
        return True
    return isinstance(e, N.PrimApp) and e.op == "min" and any(_le(a, d) for a in e.args)
