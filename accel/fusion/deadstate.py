"""Dead loop state: components of an ``awhile`` state that nothing needs are dropped.

A state component is needed when the loop's output for it is read after the loop, when
the condition reads it, or when the body's computation of a needed component reads it.
The others are computed every iteration for nothing.  Reverse mode makes such loops:
the primal of ``awhile`` runs the loop once only to count its iterations (and sizes,
``ad.reverse.loop``), so every array of the state is computed twice, e.g. the RNN of
``benchmarks/loops.py``, whose condition reads only the step counter: without this
pass its gradient ran the 10,000 ``tanh`` of a step three times, not twice.  Dropping a
component drops its parameter, initial value, output and result, and the body's steps
that only it needed.  (A dropped computation could have failed a bounds check: as for
any dead code, its error is not raised.)
"""

from __future__ import annotations

from dataclasses import replace

from .inplace import block_free, step_free
from .kernels import KAcond, KAwhile, KBlock, KernelProgram, step_outs

__all__ = ["drop_dead_state"]


def drop_dead_state(kp: KernelProgram) -> KernelProgram:
    """``kp`` without the dead state components of its loops (nested ones too)."""
    return KernelProgram(kp.params, _block(kp.body), kp.result_type)


def _outs(s) -> tuple:
    return tuple(s.outs) if isinstance(s, (KAcond, KAwhile)) else step_outs(s)


def _block(b: KBlock) -> KBlock:
    """``b`` with its loops' dead components dropped (steps read after a loop are
    those after it in ``b`` and ``b``'s result)."""
    later = {v.name for v in b.result}
    out = []
    for s in reversed(b.steps):
        if isinstance(s, KAwhile):
            s = _awhile(s, later)
        elif isinstance(s, KAcond):
            s = replace(s, t=_block(s.t), e=_block(s.e))
        later |= step_free(s)
        out.append(s)
    return KBlock(tuple(reversed(out)), b.result)


def _slice(b: KBlock, names: set) -> list:
    """The steps of ``b`` that computing ``names`` needs, in order."""
    need = set(names)
    keep = []
    for s in reversed(b.steps):
        if any(o.name in need for o in _outs(s)):
            keep.append(s)
            need |= step_free(s)
    keep.reverse()
    return keep


def _awhile(s: KAwhile, later: set) -> KAwhile:
    """``s`` without the components nothing needs (``later``: names read after it)."""
    params = [p.name for p in s.params]
    results = [r.name for r in s.body.result]
    cond_reads = block_free(s.cond)
    live = {i for i, (o, p) in enumerate(zip(s.outs, params))
            if o.name in later or p in cond_reads} or {0}  # (a loop keeps some state)
    while True:
        steps = _slice(s.body, {results[i] for i in live})
        reads = {results[i] for i in live}
        for t in steps:
            reads |= step_free(t)
        more = {i for i, p in enumerate(params) if p in reads} - live
        if not more:
            break
        live |= more
    if len(live) == len(params):
        return replace(s, cond=_block(s.cond), body=_block(s.body))
    keep = sorted(live)
    body = KBlock(tuple(steps), tuple(s.body.result[i] for i in keep))
    kept = {params[i] for i in keep}
    return replace(s, outs=tuple(s.outs[i] for i in keep),
                   params=tuple(s.params[i] for i in keep),
                   cond=_block(s.cond), body=_block(body),
                   init=tuple(s.init[i] for i in keep),
                   owned=tuple(p for p in s.owned if p in kept))
