"""Constant and index leaves of materialised tuple arrays are not stored.

(The same for a generate's separate outputs that are constants or index components:
the stencil's gradient written with ``generate`` materialised an all-``True`` mask beside
its adjoint and read it at each of the five neighbours.  And a leaf or output that is
the negation of another is read back as that negation: reverse mode pairs an adjoint
with its negation for each subtraction, ``(x, -x)``, and stored both.)

Reverse mode writes the adjoint contributions of a body's reads as ``(value, target,
keep)`` triples; when the targets are the generate's own index and ``keep`` is
``True``, fusion still materialises every leaf when the array is read twice: the
reverse body of the RNN of ``benchmarks/loops.py`` wrote 7 buffers per element of a
step of which 2 hold data, Newton's 31 of which 11.  A ``KGenerate`` whose element is
a tuple with leaves that are constants, or components of its index, gets an element of
the other leaves only, and each read ``a ! ix`` becomes ``let j = ix; t = a' ! j in
(the tuple with those leaves put back: constants, components of j)``; ``tidy`` then
folds the projections.  Arrays used other than by ``Index``/``Shape`` (results, loop
states) keep their type.  The element ``a ! j`` of a generate over index ``j`` has
exactly those leaves, so reads are unchanged (an out-of-bounds read is still checked,
as ``a' ! j``).
"""

from __future__ import annotations

from dataclasses import replace

from ..ast import nodes as N
from ..ast.traverse import free_vars, map_children
from ..ast.types import ArrayT, TupleT
from ..simplify.rounds import tidy
from .kernels import KAcond, KAwhile, KBlock, KernelProgram, KGenerate, KUse

__all__ = ["prune_leaves"]


def prune_leaves(kp: KernelProgram) -> KernelProgram:
    """``kp`` with the constant and index leaves of its generates dropped."""
    return KernelProgram(kp.params, _block(kp.body), kp.result_type)


def _block(b: KBlock) -> KBlock:
    steps = [map_blocks_(s) for s in b.steps]
    result = b.result
    i = 0
    while i < len(steps):
        s = steps[i]
        plan = None
        if isinstance(s, KGenerate):
            plan = _plan(s) if len(s.outs) == 1 else _plan_outs(s)
        if plan is not None:
            new_s, dropped, rw = plan
            rest = [_step(t, rw) for t in steps[i + 1:]]
            if not dropped & {r.name for r in result} and not any(
                    dropped & _names(t) for t in rest):
                steps[i + 1:] = rest
                steps[i] = new_s
        i += 1
    return KBlock(tuple(steps), result)


def map_blocks_(s):
    """``s`` with its nested blocks pruned."""
    if isinstance(s, KAcond):
        return replace(s, t=_block(s.t), e=_block(s.e))
    if isinstance(s, KAwhile):
        return replace(s, cond=_block(s.cond), body=_block(s.body))
    return s


def _names(s) -> set:
    """Every array name a (rewritten) step mentions, loop inits and results included."""
    if isinstance(s, KUse):
        return set()
    if isinstance(s, KAcond):
        return set(free_vars(s.c)) | _block_names(s.t) | _block_names(s.e)
    if isinstance(s, KAwhile):
        return ({v.name for v in s.init} | _block_names(s.cond) | _block_names(s.body))
    out: set = set()
    for v in vars(s).values():
        if isinstance(v, (N.Exp, N.Lam)):
            out |= free_vars(v)
        elif isinstance(v, N.Avar):
            out.add(v.name)
    return out


def _block_names(b: KBlock) -> set:
    out = {v.name for v in b.result}
    for s in b.steps:
        out |= _names(s)
    return out


def _step(s, rw):
    """``s`` with ``rw`` applied to its expressions and functions (nested blocks too)."""
    if isinstance(s, KUse):
        return s
    if isinstance(s, KAcond):
        return replace(s, c=_rewritten(s.c, rw), t=_rw_block(s.t, rw), e=_rw_block(s.e, rw))
    if isinstance(s, KAwhile):
        return replace(s, cond=_rw_block(s.cond, rw), body=_rw_block(s.body, rw))
    return type(s)(**{f: _rewritten(v, rw) if isinstance(v, (N.Exp, N.Lam)) else v
                      for f, v in vars(s).items()})


def _rewritten(e, rw):
    """``rw(e)``, through ``tidy`` if it changed (to fold the rebuilt tuples' leaves)."""
    new = rw(e)
    return e if new is e else tidy(new)


def _rw_block(b: KBlock, rw) -> KBlock:
    return KBlock(tuple(_step(s, rw) for s in b.steps), b.result)


def _flat(e: N.Exp, t, out: list, tuples: dict) -> bool:
    """Append ``e``'s leaf expressions (type ``t``) to ``out``; False if a tuple
    expression other than a variable's projection would have to be projected (copied)
    to get them.  ``tuples``: the variables let-bound to tuple expressions (their
    leaves are looked at too)."""
    if not isinstance(t, TupleT):
        out.append(e)
        return True
    if isinstance(e, N.Var) and e.name in tuples:
        e = tuples[e.name]
    if isinstance(e, N.Tuple):
        return all(_flat(x, tx, out, tuples) for x, tx in zip(e.items, t.items))
    if not _var_path(e):
        return False
    return all(_flat(N.Prj(k, e), tx, out, tuples) for k, tx in enumerate(t.items))


def _var_path(e) -> bool:
    """``e`` is a variable or a projection of one (``t.4``: a component of a let-bound
    conditional's tuple, as reverse mode writes a branch's contributions), so its
    leaves are projections, not copies."""
    while isinstance(e, N.Prj):
        e = e.tup
    return isinstance(e, N.Var)


def _branch_leaves(e, outer: dict, names: set):
    """``(test, [leaf if true, leaf if false])`` when leaf ``e`` is a projection of a
    variable let-bound to a conditional whose branches build tuples: reverse mode's
    contributions under a branch, ``(value, target, True)`` on one side and ``(0.0,
    (0, 0), False)`` on the other (BA's rotation).  The target and keep leaves are then
    the test and values in the element function's scope (``names``: its let-bound
    variables and index), stored once for all contributions, not once each.  None
    when a branch's leaf reads a variable of the branch's own."""
    path = []
    while isinstance(e, N.Prj):
        path.append(e.index)
        e = e.tup
    if not isinstance(e, N.Var) or not isinstance(outer.get(e.name), N.Cond):
        return None
    cond = outer[e.name]
    sides = []
    for branch in (cond.t, cond.e):
        inner, tail = _let_chain(branch)
        tuples = {v.name: b for v, b in inner if isinstance(b, N.Tuple)}
        x = tail
        for k in reversed(path):
            if isinstance(x, N.Var) and x.name in tuples:
                x = tuples[x.name]
            if not isinstance(x, N.Tuple):
                return None
            x = x.items[k]
        own = {v.name for v, _ in inner}
        if free_vars(x) & own or own & names:
            return None  # (a branch's own variable, or one shadowing the scope's)
        sides.append(x)
    return cond.c, sides


def _bind_conditionals(tail, lets: list):
    """``tail`` with its tuple-typed conditionals (items of its tuples) let-bound at the
    end of ``lets``, so that their leaves are projections (``_branch_leaves``)."""
    if isinstance(tail, N.Tuple):
        return N.Tuple(tuple(_bind_conditionals(x, lets) for x in tail.items))
    if isinstance(tail, N.Cond) and isinstance(tail.type, TupleT):
        v = N.Var(N.fresh("t"), tail.type)
        lets.append((v, tail))
        return v
    return tail


def _let_chain(e):
    """``([(var, bound)...], body)`` of the lets around ``e``."""
    lets = []
    while isinstance(e, N.Let):
        lets.append((e.var, e.bound))
        e = e.body
    return lets, e


def _recomputed(e, ix: N.Var):
    """``("const", Const)`` or ``("index", k)`` for a leaf its readers recompute (a
    constant or component ``k`` of the element's index ``ix``), else None."""
    if isinstance(e, N.Const):
        return ("const", e)
    if isinstance(e, N.Prj) and isinstance(e.tup, N.Var) and e.tup.name == ix.name:
        return ("index", e.index)
    return None


def _negated(e):
    """``x`` if ``e`` is ``-x``, else None."""
    if isinstance(e, N.PrimApp) and e.op == "neg":
        return e.args[0]
    return None


def _plan(s: KGenerate):
    """(pruned step, its output, rewriter of reads) for ``s``, or None."""
    (out,) = s.outs
    elt = out.type.elt
    if not isinstance(elt, TupleT) or len(s.f.params) != 1:
        return None
    (ix,) = s.f.params
    lets, tail = _let_chain(s.f.body)
    tail = _bind_conditionals(tail, lets)
    leaves: list = []
    names = {v.name for v, _ in lets} | {ix.name}
    if len(names) != len(lets) + 1:  # (a binder bound twice: scopes would need care)
        return None
    tuples = {v.name: b for v, b in lets if isinstance(b, N.Tuple)}
    if not _flat(tail, elt, leaves, tuples):
        return None
    # per leaf: ("const", Const) | ("index", k) | ("kept", position) | ("neg", position)
    # | ("cond", position of the test, kind if true, kind if false)
    kinds: list = [None] * len(leaves)
    kept: list = []

    def stored(e) -> int:
        if e not in kept:  # (the same leaf twice: stored once)
            kept.append(e)
        return kept.index(e)

    def keep(pos, e):
        kinds[pos] = ("kept", stored(e))

    scope = {v.name: b for v, b in lets}
    for pos, e in enumerate(leaves):
        kind = _recomputed(e, ix)
        if kind is not None:
            kinds[pos] = kind
            continue
        branches = _branch_leaves(e, scope, names)
        if branches is not None:
            test, sides = branches
            side_kinds = [_recomputed(x, ix) for x in sides]
            if all(k is not None or _var_path(x) for k, x in zip(side_kinds, sides)):
                kinds[pos] = ("cond", stored(test), *[
                    k if k is not None else ("kept", stored(x))
                    for k, x in zip(side_kinds, sides)])
                continue
        if _negated(e) is None:
            keep(pos, e)
    for pos, e in enumerate(leaves):  # a negated leaf: read back as the negation
        if kinds[pos] is None:
            if _negated(e) in kept:
                kinds[pos] = ("neg", kept.index(_negated(e)))
            else:
                keep(pos, e)
    if not kept or len(kept) >= len(leaves):  # (tests stored: not always fewer)
        return None
    body = N.Tuple(tuple(kept)) if len(kept) > 1 else kept[0]
    for v, bound in reversed(lets):
        body = N.Let(v, bound, body)
    new_out = N.Avar(N.fresh("a"), ArrayT(body.type, out.type.rank))
    new_s = replace(s, outs=(new_out,), f=tidy(N.Lam(s.f.params, body)))

    def leaf(kind, j: N.Var, x: N.Var):
        if kind[0] == "const":
            return kind[1]
        if kind[0] == "index":
            return N.Prj(kind[1], j)
        if kind[0] == "cond":
            return N.Cond(leaf(("kept", kind[1]), j, x), leaf(kind[2], j, x),
                          leaf(kind[3], j, x))
        got = N.Prj(kind[1], x) if len(kept) > 1 else x
        return N.PrimApp("neg", (got,)) if kind[0] == "neg" else got

    def rebuild(t, it, j: N.Var, x: N.Var):
        if isinstance(t, TupleT):
            return N.Tuple(tuple(rebuild(tx, it, j, x) for tx in t.items))
        return leaf(next(it), j, x)

    def rw(n):
        if isinstance(n, N.Index) and n.array.name == out.name:
            j = N.Var(N.fresh("j"), n.index.type)
            x = N.Var(N.fresh("x"), new_out.type.elt)
            tree = rebuild(elt, iter(kinds), j, x)
            return N.Let(j, rw(n.index), N.Let(x, N.Index(new_out, j), tree))
        if isinstance(n, N.Shape) and n.array.name == out.name:
            return N.Shape(new_out)
        if isinstance(n, N.Avar):
            return n
        return map_children(n, rw)
    return new_s, {out.name}, rw


def _plan_outs(s: KGenerate):
    """(pruned step, names of the outputs it no longer writes, rewriter of reads) for a
    generate of several outputs some of which are constants or index components, or
    None.  (A read of a dropped output is not bounds checked: it is a value, not a
    read; reverse mode, which writes these, reads them where its index is valid.)"""
    if len(s.f.params) != 1:
        return None
    (ix,) = s.f.params
    lets, tail = _let_chain(s.f.body)
    if not isinstance(tail, N.Tuple) or len(tail.items) != len(s.outs):
        return None
    kinds = {}  # dropped output's name -> ("const", Const) | ("index", k) | ("neg", out)
    kept_outs, kept_items = [], []
    for o, e in zip(s.outs, tail.items):
        if isinstance(o.type.elt, TupleT):
            kept_outs.append(o)
            kept_items.append(e)
        elif _recomputed(e, ix) is not None:
            kinds[o.name] = _recomputed(e, ix)
        elif _negated(e) is None:
            kept_outs.append(o)
            kept_items.append(e)
    for o, e in zip(s.outs, tail.items):  # a negated output: read as the negation
        if o.name in kinds or any(o is k for k in kept_outs):
            continue
        if _negated(e) in kept_items:
            kinds[o.name] = ("neg", kept_outs[kept_items.index(_negated(e))])
        else:
            kept_outs.append(o)
            kept_items.append(e)
    if not kinds or not kept_outs:
        return None
    body = N.Tuple(tuple(kept_items)) if len(kept_items) > 1 else kept_items[0]
    for v, bound in reversed(lets):
        body = N.Let(v, bound, body)
    new_s = replace(s, outs=tuple(kept_outs), f=tidy(N.Lam(s.f.params, body)))
    shape_of = kept_outs[0]

    def rw(n):
        if isinstance(n, N.Index) and n.array.name in kinds:
            kind, v = kinds[n.array.name]
            if kind == "const":
                return v
            if kind == "neg":
                return N.PrimApp("neg", (N.Index(v, rw(n.index)),))
            return N.Prj(v, rw(n.index))
        if isinstance(n, N.Shape) and n.array.name in kinds:
            return N.Shape(shape_of)
        if isinstance(n, N.Avar):
            return n
        return map_children(n, rw)
    return new_s, set(kinds), rw
