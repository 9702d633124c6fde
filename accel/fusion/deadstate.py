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

A component whose *shape* is needed but not its elements (the counting pass sums the
sizes of states whose shape may change, and a condition may test a size) is carried as
its dimensions instead: one rank-0 integer array per dimension, the next ones computed
from the shape terms of the steps that made the next state (a ``generate``'s or a
``fold``'s shape), the elements never computed.  When a shape term reads an element, the
step it reads is kept; a step whose shape has no term (a scan, a nested loop) keeps the
component whole.  The corpus RNN (its state's length is ``min`` of sizes, not provably
fixed, so reverse mode counts sizes) then counts its 100 steps without a matrix-vector
product.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ast import nodes as N
from ..ast.traverse import children, map_children
from ..ast.types import ArrayT, int64, shape_type
from ..simplify.rounds import tidy
from .horizontal import merge_generates
from .inplace import step_free
from .kernels import (LOOP_STEPS, KAcond, KAwhile, KBlock, KernelProgram, KFold, KGenerate,
                      KPermute, KUse, step_outs)

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
        before = ()
        if isinstance(s, KAwhile):
            before, s = _awhile(s, later)
        elif isinstance(s, KAcond):
            s = replace(s, t=_block(s.t), e=_block(s.e))
        later |= step_free(s)
        out.append(s)
        out.extend(reversed(before))
    return KBlock(tuple(reversed(out)), b.result)


def _awhile(s: KAwhile, later: set):
    """``(steps before, s)``: ``s`` without the components nothing needs and with those
    whose shape only is needed carried as their dimensions (computed from the initial
    state by the steps before); ``later``: names read after it."""
    params = [p.name for p in s.params]
    results = [r.name for r in s.body.result]
    cond_v, cond_s = _block_reads(s.cond)
    live = {i for i, (o, p) in enumerate(zip(s.outs, params))
            if o.name in later or p in cond_v} or {0}  # (a loop keeps some state)
    sized = {i for i, p in enumerate(params) if p in cond_s} - live
    while True:
        steps, shaped, need_v, need_s = _slice(s.body, {results[i] for i in live},
                                               {results[i] for i in sized})
        more = {i for i, p in enumerate(params) if p in need_v} - live
        more_s = {i for i, p in enumerate(params) if p in need_s} - live - sized - more
        if not more and not more_s:
            break
        live |= more
        sized = (sized | more_s) - live
    if len(live) == len(params):
        return (), replace(s, cond=_block(s.cond), body=_block(s.body))
    # the sized components' dimensions: parameters, initial values, next values
    dims: dict = {}  # sized parameter's name -> its dimension arrays (rank 0 int64)
    before, init, outs, body_res, extra = [], [], [], [], []
    for i in sorted(live | sized):
        p = s.params[i]
        if i in live:
            init.append(s.init[i])
            outs.append(s.outs[i])
            continue
        ds = tuple(N.Avar(N.fresh("a"), ArrayT(int64, 0)) for _ in range(p.type.rank))
        dims[p.name] = ds
        if ds:
            first = tuple(N.Avar(N.fresh("a"), ArrayT(int64, 0)) for _ in ds)
            before.append(_dims_step(first, N.Shape(s.init[i])))
            init.extend(first)
            outs.extend(N.Avar(N.fresh("a"), ArrayT(int64, 0)) for _ in ds)
    subst = _Shapes(dims, shaped)
    for i in sorted(live | sized):
        r = s.body.result[i]
        if i in live:
            body_res.append(r)
        elif s.params[i].type.rank:
            nxt = tuple(N.Avar(N.fresh("a"), ArrayT(int64, 0)) for _ in range(r.type.rank))
            extra.append(_dims_step(nxt, subst(N.Shape(r))))
            body_res.extend(nxt)
    keep = [params[i] for i in sorted(live)]
    body_steps = [subst.step(t) for t in steps]
    kept_ids = {id(t) for t in body_steps + extra}
    merged = [t if id(t) in kept_ids else replace(t, f=tidy(t.f))  # (merged ones)
              for t in merge_generates(body_steps + extra)]  # (rank 0: with the counters)
    body = KBlock(tuple(merged), tuple(body_res))
    cond = KBlock(tuple(subst.step(t) for t in s.cond.steps), s.cond.result)
    new_params = []
    for i, p in enumerate(s.params):
        if i in live:
            new_params.append(p)
        elif i in sized:
            new_params.extend(dims[p.name])
    loop = replace(s, outs=tuple(outs), params=tuple(new_params), cond=_block(cond),
                   body=_block(body), init=tuple(init),
                   owned=tuple(p for p in s.owned if p in keep))
    return tuple(before), loop


def _slice(b: KBlock, values: set, shapes: set):
    """What computing the elements of ``values`` and the shapes of ``shapes`` (names)
    needs of ``b``: ``(steps kept whole, {name: step whose shape term stands for its
    output's shape}, names whose elements are read, names whose shapes are read)``."""
    need_v, need_s = set(values), set(shapes)
    keep, shaped = [], {}
    for s in reversed(b.steps):
        outs = {o.name for o in _outs(s)}
        term = _shape_term(s)
        if outs & need_v or (outs & need_s and term is None):
            keep.append(s)
            v, sh = _step_reads(s)
        elif outs & need_s:
            for o in outs:
                shaped[o] = s
            v, sh = _reads(term)
        else:
            continue
        need_v |= v
        need_s |= sh
    keep.reverse()
    return keep, shaped, need_v, need_s


def _shape_term(s):
    """The shape of the output(s) of ``s`` as a term of what it reads, or None."""
    if isinstance(s, (KGenerate, KFold)):
        return s.shape
    if isinstance(s, KPermute):
        return s.out_shape
    if isinstance(s, KUse):
        return N.Tuple(tuple(N.Const(int(d), int64) for d in np.shape(s.array)))
    return None


def _reads(*exps):
    """``(names whose elements, names whose shapes only)`` the terms read."""
    values, shapes = set(), set()
    stack = [e for e in exps if e is not None]
    while stack:
        e = stack.pop()
        if isinstance(e, N.Shape):
            shapes.add(e.array.name)
        elif isinstance(e, N.Avar):
            values.add(e.name)
        elif isinstance(e, N.Node):
            stack.extend(children(e))
    return values, shapes - values


def _step_reads(s):
    if isinstance(s, LOOP_STEPS) and getattr(s, "into", None) is None:
        return _reads(*_terms(s))
    return set(step_free(s)), set()  # (loops, conditionals, in-place: every read whole)


def _terms(s) -> list:
    """The shape terms and functions of a loop step."""
    return [v for v in vars(s).values() if isinstance(v, (N.Exp, N.Lam))]


def _block_reads(b: KBlock):
    values, shapes = {v.name for v in b.result}, set()
    for s in b.steps:
        v, sh = _step_reads(s)
        values |= v
        shapes |= sh
    return values, shapes - values


def _dims_step(outs: tuple, shape: N.Exp) -> KGenerate:
    """``outs = generate () (\\_ -> shape)``, one rank-0 array per dimension."""
    ds = tuple(N.Prj(k, shape) for k in range(len(outs)))
    f = N.Lam((N.Var(N.fresh("i"), shape_type(0)),), ds[0] if len(ds) == 1 else N.Tuple(ds))
    return KGenerate(outs, N.Tuple(()), tidy(f))


class _Shapes:
    """Rewrites ``shape x`` of a sized parameter to its dimension arrays and of an
    output whose step was dropped (``shaped``) to that step's shape term."""

    def __init__(self, dims: dict, shaped: dict):
        self.dims, self.shaped = dims, shaped

    def __call__(self, e):
        if isinstance(e, N.Shape):
            name = e.array.name
            if name in self.dims:
                return N.Tuple(tuple(N.Index(d, N.Tuple(())) for d in self.dims[name]))
            if name in self.shaped:
                return self(_shape_term(self.shaped[name]))
            return e
        return map_children(e, self)

    def step(self, s):
        if isinstance(s, LOOP_STEPS):
            return type(s)(**{f: self(v) if isinstance(v, (N.Exp, N.Lam)) else v
                              for f, v in vars(s).items()})
        return s  # (its reads are whole: no sized parameter or dropped step among them)
