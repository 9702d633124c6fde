"""Sums that another sum already computes, or that can be summed in a cheaper order.

After fusion every fold's source is a scalar function of its index that reads manifest
arrays, so two folds can be compared and rearranged by looking at their sources.  Reverse
AD produces sums over the same data in several index patterns.  In the GMM gradient:

* the adjoint of the lower-triangular factors sums ``xc[n,k,c] * adj[n,k,r]`` over the
  points into a (K, D, D) array, and the adjoint of their diagonal sums
  ``xc[n,k,d] * adj[n,k,d]`` into a (K, D) array: the diagonal of the first
  (:func:`reuse_folds` reads it from there);
* the means' adjoint sums, over the points, the adjoint of ``xc``, itself a sum over
  rows of ``L[k,r,d] * adj[n,k,r]``: N*K*D*D multiply-adds for a (K, D) result.  Summing
  ``adj`` over the points first and multiplying by ``L`` after
  (``sum_n sum_r L adj = sum_r L sum_n adj``) takes N*K*D (:func:`interchange_sums`).

A sum over the last dimension of an array that is itself a sum over its last dimension
(``sum (sum xs)`` of a (.., m, n) source, a 2-D convolution's window) is one sum over
the last m*n elements of the source (:func:`merge_nested_sums`): no (.., m) array is
written and read back, and the one inner loop is long enough to vectorize across rows.

All three change only the order in which floating-point sums are added (the API promises
results "up to floating-point reassociation"); none repeats work.  All work on one
block's steps at a time: a fold is only rewritten in terms of folds of the same block
that come before it.
"""

from __future__ import annotations

import functools
from dataclasses import fields

import numpy as np

from ..ast import nodes as N
from ..ast.alpha import alpha_eq
from ..ast.traverse import children, free_vars, freshen, map_children, substitute, walk
from ..ast.types import int64, shape_type
from ..simplify.rounds import tidy
from .kernels import KAcond, KAwhile, KBlock, KFold, KGenerate, KUse, map_blocks, sub_blocks

__all__ = ["rewrite_reductions", "reuse_folds", "interchange_sums", "merge_nested_sums",
           "retarget", "element", "known_shapes",
           "expand", "index_uses", "is_sum"]

#: Sources bigger than this (after inlining their lets) are left alone.
MAX_NODES = 4000


def rewrite_reductions(blk: KBlock) -> KBlock:
    """:func:`interchange_sums`, :func:`reuse_folds`, then :func:`merge_nested_sums`, in
    every block."""
    steps = []
    for s in blk.steps:
        steps.append(map_blocks(s, rewrite_reductions))
    return merge_nested_sums(reuse_folds(interchange_sums(KBlock(tuple(steps), blk.result))))


# --------------------------------------------------------------------------- expressions


@functools.lru_cache(maxsize=512)
def expand(e: N.Exp):
    """``e`` with every let inlined and projections of tuples taken, or None when that
    makes it bigger than :data:`MAX_NODES` (only ever compared or re-tidied, so the
    duplicated subterms cost nothing at run time)."""
    return _expand1(e) if _small(e) else None


def _small(e) -> bool:
    """Whether ``e`` has at most :data:`MAX_NODES` nodes, counted as a tree (a let-free
    DAG can be exponentially bigger as a tree: the walk stops early)."""
    for k, _ in enumerate(walk(e)):
        if k >= MAX_NODES:
            return False
    return True


def _expand1(e):
    if isinstance(e, N.Let):
        b = _expand1(e.bound)
        body = None if b is None else substitute(e.body, {e.var.name: b})
        return None if body is None or not _small(body) else _expand1(body)
    if isinstance(e, N.Lam):
        return None
    kids_ok = [True]

    def go(c):
        if not isinstance(c, N.Exp):
            return c
        r = _expand1(c)
        if r is None:
            kids_ok[0] = False
            return c
        return r

    e = map_children(e, go)
    if not kids_ok[0]:
        return None
    if isinstance(e, N.Prj) and isinstance(e.tup, N.Tuple):
        return e.tup.items[e.index]
    return e


def dim(sh: N.Exp, k: int) -> N.Exp:
    """Dimension ``k`` of the shape expression ``sh``, tidied (comparable with ``==``)."""
    return tidy(N.Prj(k, sh))


def is_sum(s) -> bool:
    """A fold with ``+`` and a zero initial value."""
    if not isinstance(s, KFold) or s.z is None or not isinstance(s.z, N.Const):
        return False
    f = s.f
    if s.z.value != 0 or not isinstance(f.body, N.PrimApp) or f.body.op != "add":
        return False
    return set(f.body.args) == set(f.params)


def index_uses(ix: N.Var, e) -> set:
    """The components ``k`` of index ``ix`` that ``e`` reads as ``ix.k``; ``-1`` stands
    for a use of the whole tuple."""
    out: set = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if ix.name not in free_vars(x):
            continue
        if isinstance(x, N.Prj) and x.tup == ix:
            out.add(x.index)
        elif x == ix:
            out.add(-1)
        else:
            stack.extend(children(x))
    return out


def _varies(ix: N.Var, k: int, e) -> bool:
    """Whether ``e`` may depend on component ``k`` of index ``ix``."""
    return bool(index_uses(ix, e) & {k, -1})


def _reads(name: str, e) -> int:
    """How often ``e`` mentions array ``name``."""
    n = 0
    stack = [e]
    while stack:
        x = stack.pop()
        if name not in free_vars(x):
            continue
        if isinstance(x, N.Avar):
            n += 1
        stack.extend(children(x))
    return n


def _step_nodes(s) -> list:
    if isinstance(s, (KAcond, KAwhile)):
        out = [s.c] if isinstance(s, KAcond) else []
        for b in sub_blocks(s):
            out += [x for t in b.steps for x in _step_nodes(t)] + list(b.result)
        return out + list(getattr(s, "init", ()))
    if isinstance(s, KUse):
        return []
    return [v for f, v in vars(s).items() if isinstance(v, N.Node) and f != "out"]


def _step_reads(name: str, steps, result) -> int:
    return (sum(_reads(name, x) for s in steps for x in _step_nodes(s))
            + sum(r.name == name for r in result))


def retarget(s, name: str, make):
    """Step ``s`` with every ``name ! e`` replaced by ``make(e)`` and every ``shape name``
    by ``make(None)``."""
    def go(x):
        if isinstance(x, N.Node) and name in free_vars(x):
            if isinstance(x, N.Index) and x.array.name == name:
                return make(go(x.index))
            if isinstance(x, N.Shape) and x.array.name == name:
                return make(None)
            return map_children(x, go)
        return x
    if isinstance(s, (KAcond, KAwhile)):
        return map_blocks(s, lambda b: retarget_block(b, name, make), lambda c: tidy(go(c)))
    if isinstance(s, KUse):
        return s
    return type(s)(**{f: tidy(go(v)) if isinstance(v, (N.Exp, N.Lam)) else v
                      for f, v in vars(s).items()})


def retarget_block(b: KBlock, name, make) -> KBlock:
    return KBlock(tuple(retarget(s, name, make) for s in b.steps), b.result)


# --------------------------------------------------------------------------- reuse


def match_under(p, t, var: N.Var, leaf) -> bool:
    """Whether ``t`` equals the pattern ``p`` node by node, where ``leaf(p, t)`` decides
    the pattern's reads of the index ``var`` (True or False; None elsewhere): the
    structural walk shared by :func:`_match` and ``materialised``'s reads."""
    r = leaf(p, t)
    if r is not None:
        return r
    if type(p) is not type(t) or isinstance(p, N.Lam):
        return False
    if var.name not in free_vars(p):
        return p == t
    for f in fields(p):
        if not f.compare or f.name == "ty":
            continue
        x, y = getattr(p, f.name), getattr(t, f.name)
        if isinstance(x, N.Node):
            if not match_under(x, y, var, leaf):
                return False
        elif isinstance(x, tuple) and any(isinstance(v, N.Node) for v in x):
            if len(x) != len(y) or not all(match_under(u, v, var, leaf)
                                           for u, v in zip(x, y)):
                return False
        elif x != y:
            return False
    return True


def _match(p, t, ia: N.Var, ra: int, ib: N.Var, rb: int, env: dict) -> bool:
    """Whether pattern ``p`` (a source of fold A, index ``ia`` of rank ``ra + 1``) equals
    ``t`` (a source of fold B, index ``ib``) once each outer component ``ia.k`` is read
    as an outer component ``ib.env[k]`` (bound here) and A's inner component as B's."""
    def leaf(p, t):
        if isinstance(p, N.Prj) and p.tup == ia:
            if not (isinstance(t, N.Prj) and t.tup == ib):
                return False
            if p.index == ra or t.index == rb:
                return p.index == ra and t.index == rb
            return env.setdefault(p.index, t.index) == t.index
        if p == ia and t == ib:  # the whole index: each component as itself
            return ra == rb and all(env.setdefault(k, k) == k for k in range(ra))
        return False if p == ia or t == ib else None
    return match_under(p, t, ia, leaf)


def _reindex(a: KFold, b: KFold, within: bool = False):
    """The outer index of fold ``a`` that fold ``b``'s element ``o`` is (a tuple of
    components of ``o``), or None: ``b``'s source must be ``a``'s with ``a``'s outer
    components renamed to ``b``'s, over equal dimensions (``within``: ``b``'s may be a
    ``min`` of ``a``'s and others) and an equal inner length."""
    if a.out.type.elt != b.out.type.elt or a.z != b.z or not alpha_eq(a.f, b.f):
        return None
    if tidy(a.n) != tidy(b.n):
        return None
    pa, pb = expand(a.src.body), expand(b.src.body)
    if pa is None or pb is None:
        return None
    ia, ib = a.src.params[0], b.src.params[0]
    ra, rb = len(ia.type.items) - 1, len(ib.type.items) - 1
    env: dict = {}
    if not _match(pa, pb, ia, ra, ib, rb, env) or set(env) != set(range(ra)):
        return None
    if any(dim(a.shape, k) not in (_min_args(dim(b.shape, m)) if within
                                   else [dim(b.shape, m)]) for k, m in env.items()):
        return None
    return tuple(env[k] for k in range(ra))


def _min_args(e) -> list:
    """The terms whose minimum ``e`` is (``e`` itself included): an index below ``e`` is
    below each of them."""
    if isinstance(e, N.PrimApp) and e.op == "min":
        return [e] + [x for a in e.args for x in _min_args(a)]
    return [e]


def reuse_folds(blk: KBlock) -> KBlock:
    """A fold whose source is an earlier fold's read at a re-indexed outer index (see
    :func:`_reindex`: a diagonal, a transpose, an equal fold) is dropped and its reads
    read the earlier fold; a fold that is a block result, or is used by a conditional or
    a loop, becomes a generate instead.  A sum whose source is a combination of earlier
    sums' sources, each times factors that do not depend on the summation index
    (:func:`_scaled`), becomes a generate of that combination of their results."""
    steps = list(blk.steps)
    i = 0
    while i < len(steps):
        b = steps[i]
        a, perm = None, None
        if isinstance(b, KFold):
            for s in steps[:i]:
                if isinstance(s, KFold):
                    perm = _reindex(s, b)
                    if perm is not None:
                        a = s
                        break
        if a is None:
            scaled = _scaled(b, steps[:i]) if is_sum(b) else None
            if scaled is not None:
                steps[i] = scaled
            i += 1
            continue

        def make(e, a=a, b=b, perm=perm):
            if e is None:
                return b.shape
            o = N.Var(N.fresh("o"), e.type)
            return N.Let(o, e, N.Index(a.out, N.Tuple(tuple(N.Prj(m, o) for m in perm))))
        if any(r.name == b.out.name for r in blk.result) or any(
                isinstance(s, (KAcond, KAwhile)) and _step_reads(b.out.name, [s], ())
                for s in steps[i + 1:]):  # read as a whole: keep the array
            o = N.Var(N.fresh("o"), b.shape.type)
            steps[i] = KGenerate((b.out,), b.shape, N.Lam((o,), tidy(make(o))))
            i += 1
        else:
            del steps[i]
            steps[i:] = [retarget(s, b.out.name, make) for s in steps[i:]]
    return KBlock(tuple(steps), blk.result)


def _scaled(b: KFold, earlier: list):
    """Sum ``b`` as a generate over its outer index ``o`` of ``sum_t sign_t * inv_t(o) *
    a_t ! perm_t(o)``, or None: ``b``'s source, with the elements of earlier generates it
    reads at its own index written out, is a sum of terms ``sign * inv * dep`` where
    ``inv`` does not depend on the summation index and ``dep`` is the source of an earlier
    sum ``a`` (re-indexed as :func:`_reindex` allows).  Linearity: ``sum_j c x_j = c sum_j
    x_j``.  Reverse mode writes such sums when an adjoint is a scaled copy of a primal
    term: in ``log (sum (exp (x - m))) + m`` the adjoint of the maximum ``m`` sums
    ``-exp (x_j - m) / s``, whose sum the primal has already made.  With the sum gone,
    the generate of ``exp (x - m) / s`` it read may have a single reader left, which
    ``reinline`` then computes it in."""
    ib = b.src.params[0]
    rb = len(ib.type.items) - 1
    b = KFold(b.out, known_shapes(b.shape, earlier), known_shapes(b.n, earlier), b.f, b.z,
              b.src)
    body = _through_generates(b, earlier)
    if body is None:
        return None
    ty = b.z.type
    o = N.Var(N.fresh("o"), b.shape.type)
    as_outer = {ib.name: _index_tuple([N.Prj(k, o) for k in range(rb)] + [None])}
    parts = []
    for sign, factors in _terms(body):
        split = [_quotient(f, ty) for f in factors]
        sign *= int(np.prod([q for q, _ in split]))
        factors = [g for _, fs in split for g in fs]
        dep = [f for f in factors if _varies(ib, rb, f)]
        inv = [f for f in factors if not _varies(ib, rb, f)]
        if not dep:
            return None
        probe = KFold(b.out, b.shape, b.n, b.f, b.z, N.Lam((ib,), _build(1, dep, ty)))
        for pos, a in enumerate(earlier):
            perm = None
            if is_sum(a):
                known = KFold(a.out, known_shapes(a.shape, earlier[:pos]),
                              known_shapes(a.n, earlier[:pos]), a.f, a.z, a.src)
                perm = _reindex(known, probe, within=True)
            if perm is not None:
                break
        else:
            return None
        read = N.Index(a.out, N.Tuple(tuple(N.Prj(m, o) for m in perm)))
        parts.append(_build(sign, [substitute(f, as_outer) for f in inv] + [read], ty))
    return KGenerate((b.out,), b.shape, N.Lam((o,), tidy(_sum(parts, ty))))


def known_shapes(e: N.Exp, earlier: list) -> N.Exp:
    """``e`` with ``shape a`` of arrays that ``earlier`` generates or folds written as
    their shape expressions (to be compared with other steps' dimensions)."""
    shapes = {}
    for s in earlier:
        if isinstance(s, KGenerate):
            shapes.update((o.name, s.shape) for o in s.outs)
        elif isinstance(s, KFold):
            shapes[s.out.name] = s.shape

    def go(x):
        if isinstance(x, N.Shape) and x.array.name in shapes:
            return go(shapes[x.array.name])
        return map_children(x, go) if isinstance(x, N.Node) else x
    return tidy(go(e))


def _quotient(f, ty) -> tuple:
    """Factor ``f`` as ``(sign, factors)``: ``a / b`` is ``a * (1 / b)`` (so that
    ``sum_j x_j / c`` is seen as ``(1 / c) sum_j x_j``)."""
    if isinstance(f, N.PrimApp) and f.op == "div" and ty.is_float:
        sign, num = _product(f.args[0], 1)
        split = [_quotient(x, ty) for x in num]
        sign *= int(np.prod([q for q, _ in split]))
        return sign, [g for _, fs in split for g in fs] + [
            N.PrimApp("div", (N.Const(1.0, ty), f.args[1]))]
    return 1, [f]


def _through_generates(b: KFold, earlier: list):
    """``b``'s source expanded, with every read ``g ! ix`` at ``b``'s own index ``ix`` of
    an earlier generate ``g`` of ``b``'s dimensions replaced by ``g``'s element function
    at ``ix`` (the same value), or None."""
    ix = b.src.params[0]
    rank = len(ix.type.items)
    full = [dim(b.shape, k) for k in range(rank - 1)] + [tidy(b.n)]
    gens = {s.outs[0].name: s for s in earlier if isinstance(s, KGenerate)
            and len(s.outs) == 1 and len(s.f.params[0].type.items) == rank
            and [dim(s.shape, k) for k in range(rank)] == full}
    changed = [False]

    def go(x):
        if isinstance(x, N.Index) and x.array.name in gens and x.index == ix:
            changed[0] = True
            return element(gens[x.array.name].f, ix)
        return map_children(x, go) if isinstance(x, N.Node) else x
    body = expand(go(b.src.body))
    if changed[0] and body is not None:
        body = expand(tidy(body))  # (conditionals on constant flags of AD's triples)
    return body


def element(f: N.Lam, ix: N.Var) -> N.Exp:
    """The element function ``f`` applied to the index variable ``ix``."""
    f = freshen(f)
    return substitute(f.body, {f.params[0].name: ix})


# --------------------------------------------------------------------------- interchange


def _terms(e, sign: int = 1) -> list:
    """``e`` as a sum of signed products: ``[(sign, [factor, ...]), ...]``."""
    if isinstance(e, N.PrimApp) and e.op == "add":
        return _terms(e.args[0], sign) + _terms(e.args[1], sign)
    if isinstance(e, N.PrimApp) and e.op == "sub":
        return _terms(e.args[0], sign) + _terms(e.args[1], -sign)
    if isinstance(e, N.PrimApp) and e.op == "neg":
        return _terms(e.args[0], -sign)
    return [_product(e, sign)]


def _product(e, sign: int) -> tuple:
    if isinstance(e, N.PrimApp) and e.op == "mul":
        s1, f1 = _product(e.args[0], sign)
        s2, f2 = _product(e.args[1], 1)
        return s1 * s2, f1 + f2
    if isinstance(e, N.PrimApp) and e.op == "neg":
        return _product(e.args[0], -sign)
    return sign, [e]


def _build(sign: int, factors: list, ty) -> N.Exp:
    e = factors[0] if factors else N.Const(1, ty)
    for f in factors[1:]:
        e = N.PrimApp("mul", (e, f))
    return N.PrimApp("neg", (e,)) if sign < 0 else e


def _sum(terms: list, ty) -> N.Exp:
    e = None
    for t in terms:
        e = t if e is None else N.PrimApp("add", (e, t))
    return e if e is not None else N.Const(0, ty)


def _index_tuple(parts) -> N.Tuple:
    """A tuple standing for an index: component ``k`` is ``parts[k]`` (None: a 0 that is
    never read)."""
    return N.Tuple(tuple(N.Const(0, int64) if p is None else p for p in parts))


def _plan(b: KFold, term: tuple, steps: list, i: int, result) -> tuple | None:
    """How one term ``sign * inv * A ! idx`` of sum ``b``'s source, with ``A`` an earlier
    sum read only there and ``idx`` putting ``b``'s summation index at one component
    ``q`` of ``A``, is summed in the other order:

        sum_j sum_m G(u, m) H(u[q := j], m) = sum_m G(u, m) T(u', m),
        T(u', m) = sum_j H(u[q := j], m)

    where ``A``'s source is ``G * H``, ``G`` does not read ``A``'s component ``q`` and
    ``u'`` are the components ``H`` reads.  Returns ``(A, T, S, contribution)`` with
    ``S(u without q) = sum_m G T`` and the contribution as a function of ``b``'s outer
    index, or None."""
    sign, factors = term
    ib = b.src.params[0]
    rb = len(ib.type.items) - 1
    dep = [f for f in factors if _varies(ib, rb, f)]
    inv = [f for f in factors if not _varies(ib, rb, f)]
    if len(dep) != 1 or not isinstance(dep[0], N.Index):
        return None
    read = dep[0]
    a = next((s for s in steps[:i] if isinstance(s, KFold)
              and s.out.name == read.array.name), None)
    if a is None or not is_sum(a) or _step_reads(a.out.name, steps, result) != 1:
        return None
    if not isinstance(read.index, N.Tuple):
        return None
    q = [k for k, c in enumerate(read.index.items) if _varies(ib, rb, c)]
    if len(q) != 1 or read.index.items[q[0]] != N.Prj(rb, ib):
        return None
    q = q[0]
    if dim(a.shape, q) != tidy(b.n):
        return None
    body = expand(a.src.body)
    if body is None:
        return None
    ia = a.src.params[0]
    ra = len(ia.type.items) - 1
    terms = _terms(body)
    if len(terms) != 1:
        return None
    asign, afactors = terms[0]
    h = [f for f in afactors if _varies(ia, q, f)]
    g = [f for f in afactors if not _varies(ia, q, f)]
    if not h or any(-1 in index_uses(ia, f) for f in afactors):
        return None
    used = sorted(set().union(*(index_uses(ia, f) for f in h)) - {q, ra})
    if len(used) >= ra - 1:
        return None  # T would be as big as A: nothing saved
    m_used = any(ra in index_uses(ia, f) for f in h)
    ty = b.z.type
    # T over (A's dims in ``used``) ++ (A's inner length, if H reads it), summing over j
    tdims = [dim(a.shape, k) for k in used] + ([tidy(a.n)] if m_used else [])
    rt = len(tdims)
    t_ix = N.Var(N.fresh("t"), shape_type(rt + 1))
    parts = [None] * (ra + 1)
    for pos, k in enumerate(used):
        parts[k] = N.Prj(pos, t_ix)
    parts[q] = N.Prj(rt, t_ix)
    if m_used:
        parts[ra] = N.Prj(rt - 1, t_ix)
    t_body = substitute(_build(1, h, ty), {ia.name: _index_tuple(parts)})
    t_out = N.Avar(N.fresh("a"), N.ArrayT(a.out.type.elt, rt))
    t_step = KFold(t_out, tidy(N.Tuple(tuple(tdims))), tidy(b.n), freshen(a.f), a.z,
                   N.Lam((t_ix,), tidy(t_body)))
    # S over A's outer dims without q, summing over A's inner index m
    sdims = [dim(a.shape, k) for k in range(ra) if k != q]
    s_ix = N.Var(N.fresh("s"), shape_type(ra))
    sparts = [None] * (ra + 1)
    for pos, k in enumerate(k for k in range(ra) if k != q):
        sparts[k] = N.Prj(pos, s_ix)
    sparts[ra] = N.Prj(ra - 1, s_ix)
    t_read = N.Index(t_out, N.Tuple(tuple([sparts[k] for k in used]
                                          + ([sparts[ra]] if m_used else []))))
    s_body = substitute(_build(asign, g + [t_read], ty), {ia.name: _index_tuple(sparts)})
    s_out = N.Avar(N.fresh("a"), N.ArrayT(a.out.type.elt, ra - 1))
    s_step = KFold(s_out, tidy(N.Tuple(tuple(sdims))), tidy(a.n), freshen(a.f), a.z,
                   N.Lam((s_ix,), tidy(s_body)))
    # the term, outside the sum over j: sign * inv * S ! (idx without q)
    s_read = N.Index(s_out, N.Tuple(tuple(c for k, c in enumerate(read.index.items)
                                          if k != q)))
    return a, t_step, s_step, _build(sign, inv + [s_read], ty)


def interchange_sums(blk: KBlock) -> KBlock:
    """Every sum of a sum that :func:`_plan` can reorder (see the module docstring): the
    inner sum's step goes, the outer one becomes a generate of the reordered terms (and
    a sum of the terms that stay, when any do)."""
    steps = list(blk.steps)
    i = 0
    while i < len(steps):
        b = steps[i]
        body = expand(b.src.body) if is_sum(b) else None
        if body is None:
            i += 1
            continue
        terms = _terms(body)
        plans = [_plan(b, t, steps, i, blk.result) for t in terms]
        if not any(plans) or len({p[0].out.name for p in plans if p}) < sum(map(bool, plans)):
            i += 1
            continue
        ib = b.src.params[0]
        rb = len(ib.type.items) - 1
        ty = b.z.type
        o = N.Var(N.fresh("o"), b.shape.type)
        as_outer = {ib.name: _index_tuple([N.Prj(k, o) for k in range(rb)] + [None])}
        new, parts = [], []
        rest = [t for t, p in zip(terms, plans) if p is None]
        if rest:
            # the other terms are still summed over j; a single one keeps its j-invariant
            # factors outside (its sum then often repeats one made above: reuse_folds)
            sign, outside, src = 1, [], _sum([_build(s, fs, ty) for s, fs in rest], ty)
            if len(rest) == 1 and any(_varies(ib, rb, f) for f in rest[0][1]):
                sign, factors = rest[0]
                outside = [f for f in factors if not _varies(ib, rb, f)]
                src = _build(1, [f for f in factors if _varies(ib, rb, f)], ty)
            r_out = N.Avar(N.fresh("a"), b.out.type)
            new.append(KFold(r_out, b.shape, b.n, b.f, b.z, tidy(N.Lam((ib,), src))))
            parts.append(_build(sign, outside + [N.Index(r_out, o)], ty))
        dropped = set()
        for p in plans:
            if p is None:
                continue
            a, t_step, s_step, contribution = p
            dropped.add(a.out.name)
            new += [t_step, s_step]
            parts.append(contribution)
        body = substitute(_sum(parts, ty), as_outer)
        new.append(KGenerate((b.out,), b.shape, N.Lam((o,), tidy(body))))
        kept = [s for s in steps[:i] if not (isinstance(s, KFold) and s.out.name in dropped)]
        steps = kept + new + steps[i + 1:]
        i = len(kept) + len(new)
    return KBlock(tuple(steps), blk.result)


# --------------------------------------------------------------------------- nesting


def merge_nested_sums(blk: KBlock) -> KBlock:
    """A sum ``c`` whose source is the plain read ``p ! i`` of an earlier sum ``p`` of
    the same element type that nothing else reads becomes one sum over ``c.n * p.n``
    elements: element ``j`` of a row is ``p``'s source at ``(row.., j // p.n, j % p.n)``
    (the backends count the quotient and remainder instead of dividing)."""
    steps = list(blk.steps)
    i = 0
    while i < len(steps):
        c = steps[i]
        j = _nested_in(c, steps[:i]) if is_sum(c) else None
        merged = None
        if j is not None and not _step_reads(steps[j].out.name, steps[:j] + steps[j + 1:i]
                                             + steps[i + 1:], blk.result):
            merged = _merged(steps[j], c)
        if merged is None:
            i += 1
            continue
        steps[i] = merged
        del steps[j]
        i = j  # the merged sum may itself be read by a sum after it
    return KBlock(tuple(steps), blk.result)


def _nested_in(c: KFold, earlier: list):
    """The position in ``earlier`` of the sum that ``c``'s source reads as ``p ! i``."""
    body, ix = c.src.body, c.src.params[0]
    if not (isinstance(body, N.Index) and body.index == ix and isinstance(body.array, N.Avar)):
        return None
    for j, s in enumerate(earlier):
        if (isinstance(s, KFold) and s.out == body.array and is_sum(s)
                and s.out.type.elt == c.out.type.elt and s.z == c.z):
            return j
    return None


def _merged(p: KFold, c: KFold):
    """The one sum over ``c``'s rows of ``p``'s last two dimensions (see
    :func:`merge_nested_sums`), or None unless ``c``'s domain is exactly ``p``'s rows
    (a sum over more rows than ``p`` has must still fail on its out-of-bounds read)."""
    rank = len(c.src.params[0].type.items) - 1
    q = N.Var(N.fresh("i"), shape_type(rank + 1))
    j = N.Prj(rank, q)
    ix = N.Tuple(tuple(N.Prj(k, q) for k in range(rank))
                 + (N.PrimApp("floordiv", (j, p.n)), N.PrimApp("mod", (j, p.n))))
    src = N.Lam((q,), substitute(p.src.body, {p.src.params[0].name: ix}))

    def shapes(x):  # ``shape p`` in c's extents is p's rows' shape
        if isinstance(x, N.Shape) and x.array == p.out:
            return p.shape
        return map_children(x, shapes) if isinstance(x, N.Node) else x
    outer, inner = tidy(shapes(c.shape)), tidy(shapes(c.n))
    if [dim(outer, k) for k in range(rank)] + [inner] != [dim(p.shape, k)
                                                         for k in range(rank + 1)]:
        return None
    n = N.PrimApp("mul", (inner, p.n))
    return KFold(c.out, outer, tidy(n), c.f, c.z, tidy(src))
