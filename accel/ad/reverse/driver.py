"""Reverse-mode AD of array programs (the thesis's sections 3.3-3.4).

The program is flattened into labelled bindings (``anf``).  The *primal* is
the program itself, with ``Map``/``ZipWith``/``Generate`` rewritten to also
return their expression temporaries (store mode) and ``Acond`` branches
exporting what the dual needs (with empty stand-ins).  The *dual* walks the
bindings backwards, threading a contribution map (label -> adjoint
contributions); fan-out is summed by ``elsum``, which skips empty and
smaller contributions by a bounds check.  Indexing inside scalar functions
becomes a ``Permute (+)`` into zeros.  The output is an ordinary program.

Each dual rule below starts with a comment: primal / reverse sweep.
"""

from __future__ import annotations

from ...ast import nodes as N
from ...ast.traverse import free_vars, freshen
from ...ast.types import bool_, has_float, int64, shape_type
from ...errors import NotDifferentiableError
from ..anf import ABind, ABlock, ACondB, AFlattener, ablock_term, aflatten, bind_term, leaves
from ..blocks import zero
from . import exp
from . import loop, map as map_rules, reduce, scan, scatter, shape
from .terms import add_exp, add_lam, empty_of, lam1, prj, zeros_like

#: array node type -> ``rule(rev, bind, y, dy)``: the dual of a single-output binding
#: ``y = op ...`` given ``dy``, the adjoint of ``y``; ``rev`` is this driver.
RULES = {
    N.Use: shape.use,
    N.Map: map_rules.elementwise,
    N.ZipWith: map_rules.elementwise,
    N.Generate: map_rules.elementwise,
    N.Backpermute: shape.backpermute,
    N.Reshape: shape.reshape,
    N.Replicate: shape.replicate,
    N.Slice: shape.slice_,
    N.Fold: reduce.fold,
    N.Scan: scan.scan,
    N.Permute: scatter.permute,
}

#: node types with several outputs -> ``rule(rev, bind, dys)`` (one adjoint or None per output)
MULTI_OUTPUT_RULES = {
    N.Awhile: loop.awhile,
}

MODES = ("store", "recompute")

#: Measured with benchmarks/ad_modes.py on the cpu backend: recomputing expression
#: temporaries in the dual fuses into fewer kernels and ran the GMM gradient ~15% faster
#: (and the map/fold/gather loss within noise) than storing them.
DEFAULT_MODE = "recompute"


# --------------------------------------------------------------------------- the sweep


class ArrayReverse:
    """The dual pass over an array block."""

    def __init__(self, active: set, mode: str, replace: dict):
        self.active = active
        self.mode = mode
        self.replace = replace  # id(ABind) -> replacement primal binds
        self.accumulating: set = set()  # names whose adjoints start from an accumulator
        self.given: set = set()  # outputs whose values the caller gives (``reverse_program``)
        self.binds: list = []
        self.contribs: dict = {}
        self.vars: dict = {}

    # -- emission and contributions

    def emit(self, term: N.Arr):
        f = AFlattener()
        res = f.go(term, {})
        self.binds.extend(f.binds)
        return res

    def contribute(self, v, term: N.Arr, exact: bool = True):
        if isinstance(v, N.Avar) and v.name in self.active:
            self.contribs.setdefault(v.name, []).append((term, exact))
            self.vars[v.name] = v

    def adjoint(self, v: N.Avar):
        """EltwiseElsum of the contributions to ``v`` (None if there are none)."""
        items = self.contribs.pop(v.name, None)
        if not items:
            return None
        t = v.type
        # an index read's adjoint scatters into zeros; with another exact contribution
        # it scatters into that instead (O(reads), not O(size) for a zero array and a sum)
        scatters = [term for term, ex in items if ex and _scatter_of_zeros(term, v)]
        rest = [(term, ex) for term, ex in items if not (ex and _scatter_of_zeros(term, v))]
        vs = [(self.emit(term), ex) for term, ex in rest]
        acc = None
        for a, ex in vs:
            if ex:
                acc = a if acc is None else self.emit(N.ZipWith(add_lam(t.elt), acc, a))
        for term in scatters:
            acc = self.emit(term if acc is None else
                            N.Permute(term.comb, acc, term.f, term.src))
        small = [a for a, ex in vs if not ex]
        if small:
            ix = N.Var(N.fresh("i"), shape_type(t.rank))
            body = N.Index(acc, ix) if acc is not None else None
            for a in small:
                inb = N.Const(True, bool_)
                for d in range(t.rank):
                    lt = N.PrimApp("lt", (N.Prj(d, ix), N.Prj(d, N.Shape(a))))
                    inb = lt if d == 0 else N.PrimApp("and", (inb, lt))
                term = N.Cond(inb, N.Index(a, ix), zero(t.elt))
                body = term if body is None else add_exp(body, term, t.elt)
            acc = self.emit(N.Generate(N.Shape(v), N.Lam((ix,), body)))
        return acc

    # -- traversal

    def block(self, blk: ABlock):
        for b in reversed(blk.binds):
            self.bind(b)

    def bind(self, b: ABind):
        if isinstance(b.op, ACondB):
            return self.acond(b)
        if not any(o.name in self.contribs for o in b.outs):
            return
        op = b.op
        if type(op) in MULTI_OUTPUT_RULES:
            dys = [self.adjoint(o) if o.name in self.contribs else None for o in b.outs]
            return MULTI_OUTPUT_RULES[type(op)](self, b, dys)
        y = b.outs[0]
        dy = self.adjoint(y)
        rule = RULES.get(type(op))
        if rule is None:
            name = op.opname if isinstance(op, N.Scan) else type(op).__name__.lower()
            raise NotDifferentiableError(
                f"{name}: reverse-mode differentiation of {name} is not supported yet "
                "(its result carries a derivative here)")
        rule(self, b, y, dy)

    def differentiate_instead(self, b: ABind, binds: list, y: N.Avar, dy):
        """Replace the primal binding ``b`` (of ``y``, adjoint ``dy``) by ``binds``, which
        compute the same ``y``, and differentiate those."""
        self.replace[id(b)] = binds
        _activity(ABlock(binds, None), self.active)
        self.contribute(y, dy)
        for nb in reversed(binds):
            self.bind(nb)

    def vjp_program(self, prog: N.Program, accumulate: tuple = (),
                    given_outputs: tuple = ()) -> N.Program:
        """The vjp of ``prog`` w.r.t. all its parameters (for rules that nest programs;
        ``accumulate``, ``given_outputs``: see ``reverse_program``)."""
        return reverse_program(prog, tuple(range(len(prog.params))), "params",
                               accumulate=accumulate, given_outputs=given_outputs)

    # -- services the rules use

    def scatter_index_adjoints(self, iai: list, dres: N.Avar, rank: int, skip=frozenset()):
        # each Index into an active array (but those in ``skip``, gathered by the caller):
        # Permute (+) zeros (\i -> (exec, idx)) (map adj dres)
        rt = dres.type.elt
        for k, e in enumerate(iai):
            if k in skip:
                continue
            arr = e.array
            i = N.Var(N.fresh("i"), shape_type(rank))
            entry = prj(N.Index(dres, i), 1, k)
            f = N.Lam((i,), N.Tuple((N.Prj(2, entry), N.Prj(1, entry))))
            vals = N.Map(lam1(rt, lambda r: prj(r, 1, k, 0)), dres)
            self.contribute(arr, N.Permute(add_lam(arr.type.elt), zeros_like(arr), f, vals))

    def sum_all(self, arr: N.Avar) -> N.Avar:
        t = arr.type
        size = N.Const(1, int64)
        for q in range(t.rank):
            size = N.PrimApp("mul", (size, N.Prj(q, N.Shape(arr))))
        flat = self.emit(N.Reshape(N.Tuple((size,)), arr))
        return self.emit(N.Fold(add_lam(t.elt), zero(t.elt), flat))

    def closed_exp(self, e: N.Exp, de: N.Avar):
        """Index adjoints of a closed expression ``e`` (used once) with adjoint ``de``."""
        lam = N.Lam((N.Var(N.fresh("i"), shape_type(0)),), freshen(e))
        ad = exp.differentiate_lam(lam, active=lambda arr: arr.name in self.active)
        Dr = exp.recompute_lambda(ad)
        ix = N.Var(N.fresh("i"), shape_type(0))
        body = N.Let(Dr.params[0], ix, N.Let(Dr.params[1], N.Index(de, ix), Dr.body))
        dres = self.emit(N.Generate(N.Tuple(()), N.Lam((ix,), body)))
        self.scatter_index_adjoints(ad.index_adjoints, dres, 0)

    def acond(self, b: ABind):
        # primal:  y = Acond c t e   (both branches export what the dual needs)
        # reverse: (adjoints of outer variables) = Acond c (dual of t) (dual of e),
        #          each branch giving empty arrays for variables it does not touch
        op = b.op
        adjs = [self.adjoint(o) if o.name in self.contribs else None for o in b.outs]
        if all(a is None for a in adjs):
            return
        subs = []
        for br in (op.t, op.e):
            sub = ArrayReverse(self.active, self.mode, self.replace)
            for leaf, a in zip(leaves(br.result), adjs):
                if a is not None:
                    sub.contribute(leaf, a)
            sub.block(br)
            subs.append(sub)
        outer = sorted(set(subs[0].contribs) | set(subs[1].contribs))
        ovars = [subs[0].vars.get(n) or subs[1].vars[n] for n in outer]
        blocks = []
        for sub in subs:
            vals = []
            for v in ovars:
                a = sub.adjoint(v) if v.name in sub.contribs else None
                vals.append(a if a is not None else sub.emit(empty_of(v.type)))
            blocks.append(ABlock(sub.binds, tuple(vals)))
        if not ovars:
            return
        outs = tuple(N.Avar(N.fresh("d"), v.type) for v in ovars)
        self.binds.append(ABind(outs, ACondB(op.c, blocks[0], blocks[1])))
        for v, o in zip(ovars, outs):
            self.contribute(v, o, exact=False)


# --------------------------------------------------------------------------- assembly


def _activity(blk: ABlock, active: set):
    for b in blk.binds:
        if isinstance(b.op, ACondB):
            _activity(b.op.t, active)
            _activity(b.op.e, active)
        if free_vars(bind_term(b)) & active:
            # integer and bool arrays carry no derivative, whatever they are computed from
            active.update(o.name for o in b.outs if has_float(o.type))


def _rebuild_primal(blk: ABlock, replace: dict, needed: set) -> ABlock:
    out = []
    for b in blk.binds:
        if id(b) in replace:  # (whose bindings may have been replaced in turn)
            out.extend(_rebuild_primal(ABlock(replace[id(b)], None), replace, needed).binds)
            continue
        if isinstance(b.op, ACondB):
            t = _rebuild_primal(b.op.t, replace, needed)
            e = _rebuild_primal(b.op.e, replace, needed)
            tx = [v for bb in t.binds for v in bb.outs if v.name in needed]
            ex = [v for bb in e.binds for v in bb.outs if v.name in needed]
            if tx or ex:
                t = _export(t, tx, ex, True)
                e = _export(e, tx, ex, False)
                b = ABind(tuple(b.outs) + tuple(tx) + tuple(ex), ACondB(b.op.c, t, e))
            else:
                b = ABind(b.outs, ACondB(b.op.c, t, e))
        out.append(b)
    return ABlock(out, blk.result)


def _export(blk: ABlock, tx: list, ex: list, is_t: bool) -> ABlock:
    f = AFlattener()
    mine, other = (tx, ex) if is_t else (ex, tx)
    stand = tuple(f.go(empty_of(v.type), {}) for v in other)
    vals = tuple(mine)
    res = (blk.result, vals, stand) if is_t else (blk.result, stand, vals)
    return ABlock(blk.binds + f.binds, res)


def reverse_program(prog: N.Program, wrt: tuple, seeds: str = "one",
                    mode: str | None = None, with_value: bool = False,
                    accumulate: tuple = (), given_outputs: tuple = ()) -> N.Program:
    """The reverse-mode derivative of ``prog``.

    ``seeds="one"``: ``prog`` returns a rank-0 float array; the result is the
    gradient w.r.t. the parameters at positions ``wrt`` (a tuple of arrays),
    preceded by the value if ``with_value``.  ``seeds="params"``: one
    cotangent parameter per result leaf is appended (vjp); the result is
    (outputs..., input cotangents...).  ``accumulate``: positions (in ``wrt``) of
    parameters whose adjoints start from one more parameter each (appended last), so
    a loop accumulating adjoints adds the body's reads into its accumulator directly.
    ``given_outputs`` (vjp only): a flag per result leaf; each flagged leaf gets one more
    parameter (appended last, in order) holding the value the program computes there, and
    the derivative reads it instead of computing it (a loop's reverse sweep has the
    body's result on its tape: the next state); elementwise rules read their output
    rather than recompute it (``exp.recompute_lambda``).
    """
    mode = mode or DEFAULT_MODE
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    blk = aflatten(prog.body, {})
    active = {prog.params[i].name for i in wrt}
    _activity(blk, active)
    rev = ArrayReverse(active, mode, {})
    outs = leaves(blk.result)
    extra = ()
    if seeds == "one":
        (res,) = outs
        seed = rev.emit(N.Generate(N.Tuple(()), lam1(shape_type(0),
                                                      lambda _: N.Const(1, res.type.elt))))
        rev.contribute(res, seed)
    else:
        extra = tuple(N.Avar(N.fresh("ct"), o.type) for o in outs)
        for o, c in zip(outs, extra):
            rev.contribute(o, c)
    accs = tuple(N.Avar(N.fresh("acc"), prog.params[i].type) for i in accumulate)
    for i, a in zip(accumulate, accs):
        rev.contribute(prog.params[i], a)
        rev.accumulating.add(prog.params[i].name)
    marked = [o for o, g in zip(outs, given_outputs) if g]
    given = tuple(N.Avar(N.fresh("out"), o.type) for o in marked)
    rev.given = {o.name for o in marked}
    rev.block(blk)
    grads = []
    for i in wrt:
        p = prog.params[i]
        g = rev.adjoint(p) if p.name in rev.contribs else None
        grads.append(g if g is not None else rev.emit(zeros_like(p)))
    dual = ABlock(rev.binds, tuple(grads))
    needed = set(free_vars(ablock_term(dual)))
    primal = _rebuild_primal(blk, rev.replace, needed)
    if given:  # each output bound to its given value (what computed it may then be dead)
        values = {o.name: g for o, g in zip(marked, given)}
        primal = ABlock([ABind(b.outs, values[b.outs[0].name])
                         if len(b.outs) == 1 and b.outs[0].name in values else b
                         for b in primal.binds], primal.result)
    if seeds == "one":
        result = ((outs[0],) if with_value else ()) + tuple(grads)
    else:
        result = tuple(outs) + tuple(grads)
    body = ablock_term(ABlock(primal.binds + rev.binds, result))
    return freshen(N.Program(prog.params + extra + accs + given, body))



def _scatter_of_zeros(term: N.Arr, v: N.Avar) -> bool:
    """Whether ``term`` is ``Permute (+) (zeros of v's shape) f vals`` (an index read's
    adjoint, as ``scatter_index_adjoints`` builds it)."""
    if not isinstance(term, N.Permute) or not isinstance(term.defaults, N.Generate):
        return False
    d, c = term.defaults, term.comb
    if not (isinstance(c.body, N.PrimApp) and c.body.op == "add"
            and [getattr(a, "name", None) for a in c.body.args] == [p.name for p in c.params]):
        return False
    return (isinstance(d.shape, N.Shape) and isinstance(d.shape.array, N.Avar)
            and d.shape.array.name == v.name and isinstance(d.f.body, N.Const)
            and d.f.body.value == 0)
