"""Horizontal fusion: generates of one shape that do not read each other are one kernel.

Adjacent materialisations of the same shape share one loop, so e.g. all gradient arrays
of equal shape are written by a single kernel, and a loop body's counter updates (every
rank-0 generate) are one launch.  A generate of ``shared.shared_generates`` (sharing an
expensive subterm with another) also joins an earlier one of its shape past steps it
does not read: the merged function computes the subterm once.
"""

from __future__ import annotations

from ..ast import nodes as N
from ..ast.traverse import free_vars, freshen, substitute
from ..ast.types import shape_type
from .kernels import KGenerate

__all__ = ["merge_generates"]


def merge_generates(steps: list, shared: frozenset = frozenset()) -> list:
    """Merge adjacent same-shape KGenerate steps that do not read each other's outputs;
    a generate of ``shared`` (``shared.shared_generates``) also joins an earlier one of
    ``shared`` with its shape past steps whose outputs it does not read."""
    out: list = []
    for s in steps:
        at = None
        if isinstance(s, KGenerate):
            reads = free_vars(s.f) | free_vars(s.shape)
            for j in range(len(out) - 1, -1, -1):
                prev = out[j]
                if (isinstance(prev, KGenerate) and _same_shape(s, prev)
                        and not {v.name for v in prev.outs} & reads
                        and (j == len(out) - 1 or _shares(s, prev, shared))):
                    at = j
                    break
                if _outs(prev) & reads or not _shares(s, s, shared):
                    break
        if at is None:
            out.append(s)
        else:
            out[at] = _merge(out[at], s)
    return out


def _same_shape(a: KGenerate, b: KGenerate) -> bool:
    """The same shape term, or both rank 0 (``shape t`` of a loop counter ``t`` is
    ``()``: a loop body's counter updates are one launch, not one each)."""
    return a.shape == b.shape or not (a.shape.type.items or b.shape.type.items)


def _outs(s) -> set:
    return {v.name for v in (s.outs if hasattr(s, "outs") else (s.out,))}


def _shares(a: KGenerate, b: KGenerate, shared: frozenset) -> bool:
    return any(v.name in shared for v in a.outs) and any(v.name in shared for v in b.outs)


def _merge(a: KGenerate, b: KGenerate) -> KGenerate:
    r = len(a.shape.type.items)
    ix = N.Var(N.fresh("i"), shape_type(r))

    def parts(g):
        f = freshen(g.f)  # (unique binders in the merged function)
        e = substitute(f.body, {f.params[0].name: ix})
        if len(g.outs) == 1:
            return [e]
        v = N.Var(N.fresh("r"), e.type)
        return [("let", v, e)] + [N.Prj(k, v) for k in range(len(g.outs))]

    items, lets = [], []
    for g in (a, b):
        ps = parts(g)
        if ps and isinstance(ps[0], tuple):
            lets.append(ps[0][1:])
            ps = ps[1:]
        items.extend(ps)
    body = N.Tuple(tuple(items))
    for v, e in reversed(lets):
        body = N.Let(v, e, body)
    return KGenerate(a.outs + b.outs, a.shape, N.Lam((ix,), body))
