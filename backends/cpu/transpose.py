"""Transposed copies of the small arrays that folds read across their rows.

The cpu backend folds adjacent rows of a fold together (``fold._row_blocks``): rows
``r .. r+15`` of the last dimension accumulate side by side, and a read whose last index
is the row's last index is 16 consecutive loads, which LLVM's SLP vectorizer turns into
vector loads, multiplies and adds.  A matrix-vector product written as a fold,

    y[i, k, r] = sum_j L[k, r, j] * x[i, k, j]        (the GMM's Q_k (x_i - mu_k))

reads ``L`` with the *fold* index last: the block's loads are ``D`` apart and nothing
vectorizes.  :func:`transpose_reads` gives such a fold a transposed copy of ``L`` (its
last two dimensions swapped, one ``KGenerate`` before the fold) and reads
``LT[k, j, r]`` instead.  The copy is made only when the fold re-reads the array along
another of its row dimensions (``i`` above), so that it costs a fraction of the fold;
folds of one block share one copy per array.  A GPU reads the other way round (a row's
elements by consecutive threads), so this is the cpu backend's choice, not fusion's.
"""

from __future__ import annotations

from dataclasses import replace

from accel.ast import nodes as N
from accel.ast.traverse import map_children, walk
from accel.fusion.contraction import contraction
from accel.fusion.kernels import KAcond, KAwhile, KBlock, KernelProgram, KFold, KGenerate

__all__ = ["transpose_reads"]


def transpose_reads(kp: KernelProgram) -> KernelProgram:
    """``kp`` with folds reading transposed copies where that makes their rows contiguous."""
    body = _block(kp.body)
    return kp if body is kp.body else KernelProgram(kp.params, body, kp.result_type)


def _block(blk: KBlock) -> KBlock:
    steps: list = []
    copies: dict = {}  # array name -> its transposed copy (an Avar bound in this block)
    changed = False
    for s in blk.steps:
        if isinstance(s, KFold):
            new = _fold(s, copies, steps)
        elif isinstance(s, KAcond):
            new = KAcond(s.outs, s.c, _block(s.t), _block(s.e))
        elif isinstance(s, KAwhile):
            new = replace(s, cond=_block(s.cond), body=_block(s.body))
        else:
            new = s
        changed |= new != s
        steps.append(new)
    return KBlock(tuple(steps), blk.result) if changed else blk


def _fold(s: KFold, copies: dict, steps: list) -> KFold:
    ix = s.src.params[0]
    rank = len(ix.type.items) - 1  # rows' rank; component ``rank`` is the fold index
    if rank < 2 or contraction(s) is not None:  # BLAS reads either layout (``contract``)
        return s
    last, j = N.Prj(rank - 1, ix), N.Prj(rank, ix)

    def transposable(e) -> bool:
        if not isinstance(e, N.Index) or not isinstance(e.index, N.Tuple):
            return False
        items = e.index.items
        if len(items) < 2 or items[-1] != j or items[-2] != last:
            return False
        # re-read along a row dimension its index does not use: the copy is amortised
        used = {n.index for it in items[:-2] for n in walk(it)
                if isinstance(n, N.Prj) and n.tup == ix}
        return any(p not in used for p in range(rank - 1))

    def rewrite(e):
        if transposable(e):
            items = e.index.items
            return N.Index(_copy(e.array, copies, steps),
                           N.Tuple(items[:-2] + (items[-1], items[-2])))
        return map_children(e, rewrite)

    body = rewrite(s.src.body)
    if body is s.src.body:
        return s
    return KFold(s.out, s.shape, s.n, s.f, s.z, N.Lam(s.src.params, body))


def _copy(a: N.Avar, copies: dict, steps: list) -> N.Avar:
    """The transposed copy of ``a`` (a ``KGenerate`` appended to ``steps`` the first time)."""
    t = copies.get(a.name)
    if t is None:
        rank = a.type.rank
        sh = N.Shape(a)
        dims = [N.Prj(d, sh) for d in range(rank)]
        shape = N.Tuple(tuple(dims[:-2] + [dims[-1], dims[-2]]))
        ix = N.Var(N.fresh("i"), shape.type)
        at = [N.Prj(d, ix) for d in range(rank)]
        f = N.Lam((ix,), N.Index(a, N.Tuple(tuple(at[:-2] + [at[-1], at[-2]]))))
        t = copies[a.name] = N.Avar(N.fresh("a"), a.type)
        steps.append(KGenerate((t,), shape, f))
    return t
