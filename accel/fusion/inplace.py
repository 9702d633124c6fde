"""In-place permutes: a scatter into an array that is dead afterwards updates it.

``Permute comb d f src`` means "a copy of ``d`` with some elements combined",
so a backend that follows the letter copies ``d`` first: O(size d) per permute,
whatever the number of elements scattered.  A loop that scatters one row per
iteration into a loop-carried array (the tape of ``awhile`` in reverse mode, or
a user's ``permute`` into a state array) then costs O(T * size), quadratic in
the trip count.  When the permute is the *last use* of ``d`` and ``d``'s buffer
belongs to nobody else, the copy is unobservable and the permute may update
``d``'s buffer in place.  This pass marks such permutes (``KPermute.into``); a
backend may honour the mark (and skip writing the defaults) or ignore it, both
are correct.

A buffer "belongs to nobody else" (is *owned* by the block) when it was
allocated by a loop step of the same block (a generate, fold, scan or permute:
never an argument, a constant, or a conditional's or loop's result, which may
alias another array), or when it is a parameter of a loop body marked *owned*
in ``KAwhile.owned``: the body's result for that parameter is such a freshly
built array appearing once among the results, so from the second iteration on
the parameter's buffer is the previous iteration's private result.  A backend
honouring ``into`` must therefore give an owned parameter a private copy of
its initial value once, before the loop (O(size) once, not per iteration).
Loop conditions never update in place: the body reads the same state after.
"""

from __future__ import annotations

from dataclasses import replace

from ..ast import nodes as N
from ..ast.traverse import free_vars
from .kernels import (KAcond, KAwhile, KBlock, KernelProgram, KFold, KGenerate, KPermute, KScan,
                      step_outs)

_ALLOCATING = (KGenerate, KFold, KScan, KPermute)

__all__ = ["block_free", "mark_inplace", "step_free"]


def mark_inplace(kp: KernelProgram) -> KernelProgram:
    """``kp`` with permutes into owned, dead arrays marked ``into`` (see the module)."""
    return KernelProgram(kp.params, _block(kp.body, frozenset()), kp.result_type)


def step_free(s) -> frozenset:
    """Names of the arrays a step reads (nested blocks included)."""
    if isinstance(s, KAcond):
        return free_vars(s.c) | block_free(s.t) | block_free(s.e)
    if isinstance(s, KAwhile):
        inner = (block_free(s.cond) | block_free(s.body)) - {p.name for p in s.params}
        return inner | {v.name for v in s.init}
    if isinstance(s, KPermute):
        return (free_vars(s.out_shape) | free_vars(s.defaults) | free_vars(s.shape)
                | free_vars(s.target) | free_vars(s.value) | free_vars(s.comb))
    if isinstance(s, KGenerate):
        return free_vars(s.shape) | free_vars(s.f)
    if isinstance(s, (KFold, KScan)):
        fv = free_vars(s.shape) | free_vars(s.n) | free_vars(s.f) | free_vars(s.src)
        return fv | (free_vars(s.z) if s.z is not None else frozenset())
    return frozenset()


def block_free(b: KBlock) -> frozenset:
    """Names of the arrays the steps and the result of a block read (its own included)."""
    out: set = {v.name for v in b.result}
    for s in b.steps:
        out |= step_free(s)
    return frozenset(out)


def _identity_read(lam: N.Lam) -> str | None:
    """``d`` if ``lam`` is ``\\ix -> d[ix]`` (the defaults read unchanged), else None."""
    (ix,) = lam.params
    b = lam.body
    if (isinstance(b, N.Index) and isinstance(b.index, N.Var)
            and b.index.name == ix.name):
        return b.array.name
    return None


def _readers_first(steps: list) -> list:
    """``steps`` with the later readers of a permute's defaults moved before it where
    they do not depend on what lies between (then the defaults may be dead at the
    permute): e.g. reverse mode's scatter adjoint, a permute zeroing the written targets
    of an adjoint and a gather of the same adjoint at those targets, which fusion may
    order either way."""
    steps = list(steps)
    i = 0
    while i < len(steps):
        s = steps[i]
        d = _identity_read(s.defaults) if isinstance(s, KPermute) else None
        if d is not None:
            made: set = set()  # outputs of the steps from i up to j
            j = i
            while j < len(steps):
                t = steps[j]
                if j > i and d in step_free(t) and not (step_free(t) & made):
                    steps.insert(i, steps.pop(j))
                    i += 1
                else:
                    made.update(o.name for o in _outs(t))
                j += 1
        i += 1
    return steps


def _outs(s) -> tuple:
    return tuple(s.outs) if isinstance(s, (KAcond, KAwhile)) else step_outs(s)


def _block(b: KBlock, owned: frozenset) -> KBlock:
    """``b`` marked, where ``owned`` are the names whose buffers ``b`` may update."""
    steps = _readers_first(b.steps)
    later: list = [frozenset({v.name for v in b.result})]  # names read after step i
    for s in reversed(steps[1:]):
        later.append(later[-1] | step_free(s))
    later.reverse()
    own = set(owned)
    out = []
    for i, s in enumerate(steps):
        if isinstance(s, KPermute):
            d = _identity_read(s.defaults)
            if d is not None and d in own and d not in later[i] and d not in (
                    free_vars(s.shape) | free_vars(s.target) | free_vars(s.value)):
                s = replace(s, into=N.Avar(d, s.out.type))
        elif isinstance(s, KAcond):
            s = replace(s, t=_block(s.t, frozenset()), e=_block(s.e, frozenset()))
        elif isinstance(s, KAwhile):
            s = _awhile(s)
        if isinstance(s, _ALLOCATING):
            own.update(o.name for o in step_outs(s))
        out.append(s)
    return KBlock(tuple(out), b.result)


def _awhile(s: KAwhile) -> KAwhile:
    fresh = {o.name for t in s.body.steps if isinstance(t, _ALLOCATING) for o in step_outs(t)}
    names = [r.name for r in s.body.result]
    owned = tuple(p.name for p, r in zip(s.params, names)
                  if r in fresh and names.count(r) == 1)
    body = _block(s.body, frozenset(owned))
    return replace(s, cond=_block(s.cond, frozenset()), body=body,
                   owned=tuple(p for p in owned if _updates(body, p)))


def _updates(b: KBlock, name: str) -> bool:
    return any(isinstance(s, KPermute) and s.into is not None and s.into.name == name
               for s in b.steps)
