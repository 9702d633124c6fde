"""Reverse mode of a scalar ``while_`` whose body reads arrays carrying a derivative.

A scalar function's dual reports a fixed number of index adjoints per element (one per
``Index`` it executes), but a loop body that reads an active array executes its reads a
data-dependent number of times.  So such a loop is taken out of the element function
before differentiation and run over all elements at once, as an array-level ``awhile``
(what JAX's ``vmap`` of a ``while_loop`` does): an elementwise binding

    y = Generate sh (\\i -> let pre in let s = while_ c f s0 in post)

(``Map``/``ZipWith`` alike, their elements read at ``i``) becomes

    p   = Generate sh (\\i -> let pre in (the pre values the loop and post need))
    x0  = Generate sh (\\i -> s0)                            -- reading p ! i
    x   = awhile (\\x -> any (Generate sh (\\i -> c (x ! i))))
                 (\\x -> Generate sh (\\i -> if c (x ! i) then f (x ! i) else x ! i)) x0
    y   = Generate sh (\\i -> let s = x ! i in post)

which is the same function of the inputs, made of constructs with reverse rules: the
``awhile`` keeps its states in a tape (``loop``) and each iteration's reads of active
arrays scatter their adjoints like any other read.  Cost: the loop runs max-trip-count
iterations over all elements (O(max trips) per element, O(elements) a step; elements
whose loop has finished copy their state), against O(n^2) body steps per element for the
recomputing rule of ``exp.while_`` (which has no place to put the reads' adjoints).
A loop under a ``cond`` is first moved to the top level of the function, guarded by the
condition (``_split``); a loop inside another loop's body is lifted when the lifted
outer loop's body is differentiated, and a ``post`` holding a second such loop when the
new binding is.  Loops in fold, scan and permute functions keep ``exp.while_``'s rule
and its error.
"""

from __future__ import annotations

from ...ast import nodes as N
from ...ast.traverse import apply_lam, free_vars, freshen, substitute, walk
from ...ast.types import ArrayT, bool_, int64, shape_type
from ..anf import ABind, AFlattener
from ..blocks import (Bind, Block, CondB, flatten, fresh_leaves, leaves_of, to_exp, tree_like,
                      tree_term, type_leaves, zero)
from ..flat import EXP

__all__ = ["liftable", "lift"]


def _reads_active(op: N.While, active) -> bool:
    return any(isinstance(x, N.Index) and x.array.name in active for x in walk(op.body))


def _first_loop(blk: Block, active) -> int | None:
    for k, b in enumerate(blk.binds):
        if isinstance(b.op, N.While) and _reads_active(b.op, active):
            return k
    return None


def _hoist(blk: Block, active) -> Block:
    """``blk`` with every such loop under a ``cond`` moved to the top level (innermost
    first), guarded by the condition (see ``_split``)."""
    out = []
    for b in blk.binds:
        if isinstance(b.op, CondB):
            b = Bind(b.outs, CondB(b.op.c, _hoist(b.op.t, active), _hoist(b.op.e, active)))
            while True:
                found = [(side, k) for side, br in enumerate((b.op.t, b.op.e))
                         if (k := _first_loop(br, active)) is not None]
                if not found:
                    break
                before, b = _split(b, *found[0])
                out.extend(before)
        out.append(b)
    return Block(out, blk.result)


def _split(b: Bind, side: int, k: int):
    """``outs = if c then (pre; s = while_ cd f s0; post) else e`` (the loop in branch
    ``side``) as three bindings: ``(s0', kept') = if c then (pre; (s0, kept)) else
    zeros``; ``s = while_ (\\x -> c && cd x) f s0'``; ``outs = if c then post else e``,
    where ``kept`` are the values of ``pre`` the loop or ``post`` read.  The loop runs
    no step when the branch is not taken, and nothing the branch guards runs then."""
    c, branches = b.op.c, (b.op.t, b.op.e)
    br = branches[side]
    pre, w, post = br.binds[:k], br.binds[k], Block(br.binds[k + 1:], br.result)
    loop: N.While = w.op
    need = free_vars(loop) | free_vars(to_exp(post))
    kept = [v for bb in pre for v in bb.outs if v.name in need]
    S = loop.init.type
    s0 = fresh_leaves(S, "s")
    kept2 = tuple(N.Var(N.fresh("k"), v.type) for v in kept)
    ren = {v.name: v2 for v, v2 in zip(kept, kept2)}
    taken = Block(pre, tuple(leaves_of(_atoms(loop.init))) + tuple(kept))
    idle = Block([], tuple(zero(t) for t in type_leaves(S)) + tuple(zero(v.type) for v in kept))
    first = Bind(s0 + kept2, CondB(c, *((taken, idle) if side == 0 else (idle, taken))))
    x = N.Var(N.fresh("s"), S)
    runs = apply_lam(substitute(loop.cond, ren), (x,))
    no = N.Const(False, bool_)
    guarded = N.Lam((x,), N.Cond(c, runs, no) if side == 0 else N.Cond(c, no, runs))
    second = Bind(w.outs, N.While(guarded, substitute(loop.body, ren),
                                  tree_term(tree_like(S, iter(s0)))))
    rest = flatten(substitute(to_exp(post), ren), {})
    third = Bind(b.outs, CondB(c, *((rest, branches[1]) if side == 0 else
                                    (branches[0], rest))))
    return [first, second], third


def _atoms(e: N.Exp):
    return tuple(_atoms(i) for i in e.items) if isinstance(e, N.Tuple) else e


def _function_block(op, active) -> Block:
    return _hoist(flatten(op.f.body, {}), active)


def liftable(op, active) -> int | None:
    """The position, among the flattened bindings of the element function of ``op``
    (a ``Map``, ``ZipWith`` or ``Generate``), of the first top-level ``while_`` whose
    body reads an array of ``active`` (names), once those under a ``cond`` are moved
    to the top level, or None."""
    return _first_loop(_function_block(op, active), active)


def _domain(op):
    """The shape of an elementwise op's result and ``params(i)``: its function's
    parameters bound to their values at index ``i``."""
    lam = op.f
    if isinstance(op, N.Generate):
        return op.shape, lambda i: [(lam.params[0], i)]
    if isinstance(op, N.Map):
        return N.Shape(op.a), lambda i: [(lam.params[0], N.Index(op.a, i))]
    r = op.type.rank
    sh = N.Tuple(tuple(N.PrimApp("min", (N.Prj(d, N.Shape(op.a)), N.Prj(d, N.Shape(op.b))))
                       for d in range(r)))
    return sh, lambda i: [(lam.params[0], N.Index(op.a, i)), (lam.params[1], N.Index(op.b, i))]


def _lets(binds, body: N.Exp) -> N.Exp:
    for v, e in reversed(binds):
        body = N.Let(v, e, body)
    return body


def lift(op, y: N.Avar, active) -> list:
    """Bindings computing ``y = op`` with its first liftable loop (``liftable``) run as
    an array-level ``awhile`` over all elements (see the module)."""
    blk = _function_block(op, active)
    k = _first_loop(blk, active)
    pre, w, post = blk.binds[:k], blk.binds[k], Block(blk.binds[k + 1:], blk.result)
    loop: N.While = w.op
    sh, params = _domain(op)
    r = y.type.rank
    S = loop.init.type
    need = free_vars(loop) | free_vars(to_exp(post))
    kept = [v for b in pre for v in b.outs if v.name in need]

    def index():
        return N.Var(N.fresh("i"), shape_type(r))

    def gen(body_fn, shape=sh):
        i = index()
        return freshen(N.Generate(shape, N.Lam((i,), body_fn(i))))

    pv = None  # the array of kept pre values (bound below when there are any)

    def ctx(i, body):
        """``body`` with the function's parameters and the kept pre values bound."""
        binds = list(params(i))
        if kept:
            e = N.Index(pv, i)
            binds += [(kept[0], e)] if len(kept) == 1 else \
                [(v, N.Prj(q, e)) for q, v in enumerate(kept)]
        return _lets(binds, body)

    terms = []  # (Avar, array term)
    if kept:
        res = kept[0] if len(kept) == 1 else N.Tuple(tuple(kept))
        pre_gen = gen(lambda i: _lets(params(i), to_exp(Block(pre, None), res)))
        pv = N.Avar(N.fresh("a"), pre_gen.type)
        terms.append((pv, pre_gen))
    x0 = gen(lambda i: ctx(i, loop.init))
    xv = N.Avar(N.fresh("a"), ArrayT(S, r))
    terms.append((xv, x0))

    # condition: does any element still run?
    cs = N.Avar(N.fresh("s"), xv.type)
    run = gen(lambda i: ctx(i, apply_lam(loop.cond, (N.Index(cs, i),))))
    rv = N.Avar(N.fresh("a"), run.type)
    if r == 0:
        anyt = N.Alet(rv, run, rv)
    else:
        size = N.Const(1, int64)
        for d in range(r):
            size = N.PrimApp("mul", (size, N.Prj(d, N.Shape(rv))))
        flat = N.Avar(N.fresh("a"), ArrayT(bool_, 1))
        a, b = N.Var(N.fresh("x"), bool_), N.Var(N.fresh("y"), bool_)
        anyt = N.Alet(rv, run, N.Alet(flat, N.Reshape(N.Tuple((size,)), rv), N.Fold(
            N.Lam((a, b), N.PrimApp("or", (a, b))), N.Const(False, bool_), flat)))
    cond = N.ALam(cs, anyt)

    bs = N.Avar(N.fresh("s"), xv.type)

    def step(i):
        s = N.Var(N.fresh("s"), S)
        return ctx(i, N.Let(s, N.Index(bs, i), N.Cond(
            apply_lam(loop.cond, (s,)), apply_lam(loop.body, (s,)), s)))
    body = N.ALam(bs, gen(step, N.Shape(bs)))  # (the state keeps its shape: a tape of rows)
    yv = N.Avar(N.fresh("a"), xv.type)
    terms.append((yv, N.Awhile(cond, body, xv)))

    def finish(i):
        s = N.Var(N.fresh("s"), S)
        outs = []
        for v, path in zip(w.outs, EXP.paths(S)):
            e = s
            for q in path:
                e = N.Prj(q, e)
            outs.append((v, e))
        return ctx(i, N.Let(s, N.Index(yv, i), _lets(outs, to_exp(post))))
    term = gen(finish)
    for v, t in reversed(terms):
        term = N.Alet(v, t, term)
    f = AFlattener()
    res = f.go(term, {})
    binds = f.binds
    last = binds[-1]
    assert last.outs == (res,), "the result is the last binding's"
    binds[-1] = ABind((y,), last.op)
    assert len(type_leaves(y.type)) == 1
    return binds
