"""Delayed-array fusion: AST program -> kernel program.

As in Accelerate, every *producer* (``Generate``, ``Map``, ``ZipWith``,
``Backpermute``, ``Replicate``, ``Slice``, ``Reshape``, ``Unit``) becomes a
*delayed array*: a shape expression and an index function.  Consumers inline
the index functions of their inputs: ``Fold``/``Scan`` sources, ``Permute``
sources and defaults, and ``Index`` reads inside scalar functions.  An array is
materialised (a ``KGenerate`` step) only when it must be: it is a result, it is
read more than once and is not cheap to recompute, or it is read inside a
loop (a fold's combination function, ``while_``, ``awhile``).  Adjacent
materialisations of the same shape that do not depend on each other share one
loop (horizontal fusion), so e.g. all gradient arrays of equal shape are
written by a single kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ad.anf import ABind, ABlock, ACondB, aflatten
from ..ast import nodes as N
from ..ast.cost import cost
from ..ast.trees import leaves, tree_like, type_leaves
from ..ast.traverse import (children, free_vars, freshen, map_children, recursion_headroom,
                            substitute)
from ..ast.types import int64, shape_type
from ..simplify.rounds import tidy
from .kernels import (KAcond, KAwhile, KBlock, KernelProgram, KFold, KGenerate, KPermute, KScan,
                      KUse, map_blocks)
from .materialised import read_materialised
from .broadcasts import narrow_broadcasts
from .contraction import materialise_operands
from .reductions import rewrite_reductions
from .scatter_sums import sum_before_scatter
from .horizontal import merge_generates
from .shared import shared_generates
from .deadstate import drop_dead_state
from .inplace import mark_inplace
from .leafprune import prune_leaves
from .reinline import reinline_generates

#: Index functions whose cost (see ``accel.ast.cost``) is at most this are recomputed at every use.
CHEAP = 6

@dataclass
class Delayed:
    shape: N.Exp  # reads manifest arrays only
    fn: N.Lam  # index -> element, reads manifest arrays only
    type: object  # ArrayT


def _plain_read(fn: N.Lam) -> bool:
    """``fn`` only reads one element of a manifest array (no arithmetic, no branch)."""
    body = fn.body
    while isinstance(body, N.Let):
        body = body.body
    return isinstance(body, N.Index)


def apply(fn: N.Lam, args) -> N.Exp:
    """``fn`` applied to argument expressions (its binders freshened)."""
    fn = freshen(fn)
    body = fn.body
    for p, a in reversed(list(zip(fn.params, args))):
        body = N.Let(p, a, body) if not isinstance(a, (N.Var, N.Const)) else \
            substitute(body, {p.name: a})
    return body


def _ix(rank: int) -> N.Var:
    return N.Var(N.fresh("i"), shape_type(rank))


# --------------------------------------------------------------------------- use counting


class Uses:
    """How each array variable is read: element reads, and reads inside loops."""

    def __init__(self):
        self.count: dict = {}
        self.repeated: set = set()

    def add(self, name: str, repeated: bool = False):
        self.count[name] = self.count.get(name, 0) + 1
        if repeated:
            self.repeated.add(name)

    def exp(self, e, repeated: bool = False):
        if e is None:
            return
        stack = [(e, repeated)]
        while stack:
            x, rep = stack.pop()
            if isinstance(x, N.Index):
                self.add(x.array.name, rep)
            if isinstance(x, N.While):
                rep = True
            stack.extend((c, rep) for c in children(x) if not isinstance(c, N.Arr))

    def block(self, blk: ABlock, repeated: bool = False):
        for b in blk.binds:
            op = b.op
            if isinstance(op, ACondB):
                self.exp(op.c, repeated)
                self.block(op.t, repeated)
                self.block(op.e, repeated)
                for leaf in leaves(op.t.result) + leaves(op.e.result):
                    self.add(leaf.name, repeated)
                continue
            if isinstance(op, N.Awhile):
                for leaf in leaves_of_term(op.init):
                    self.add(leaf.name, repeated)
                for lam in (op.cond, op.body):
                    for name in free_vars(lam):
                        self.add(name, True)
                continue
            for name in ("a", "b", "defaults", "src"):
                v = getattr(op, name, None)
                if isinstance(v, N.Avar):
                    self.add(v.name, repeated)
            for name in ("shape", "z"):
                self.exp(getattr(op, name, None), repeated)
            for s in getattr(op, "spec", ()) or ():
                self.exp(s, repeated)
            loopy = isinstance(op, (N.Fold, N.Scan))
            if hasattr(op, "f"):
                self.exp(op.f, repeated or loopy)
            if hasattr(op, "comb"):
                self.exp(op.comb, True)
        for leaf in leaves(blk.result):
            self.add(leaf.name, True)  # results are always materialised


def leaves_of_term(a: N.Arr) -> list:
    if isinstance(a, N.ATuple):
        return [x for i in a.items for x in leaves_of_term(i)]
    return [a]


# --------------------------------------------------------------------------- fusion


class Fuser:
    def __init__(self, uses: Uses):
        self.uses = uses
        self.env: dict = {}  # name -> Delayed (manifest arrays are absent)
        self.steps: list = []
        self.shared: frozenset = frozenset()  # generates materialised side by side

    # -- reading arrays

    def shape(self, a: N.Avar) -> N.Exp:
        d = self.env.get(a.name)
        return d.shape if d is not None else N.Shape(a)

    def elem(self, a: N.Avar, ix: N.Exp) -> N.Exp:
        d = self.env.get(a.name)
        return apply(d.fn, (ix,)) if d is not None else N.Index(a, ix)

    def resolve(self, n):
        """Replace reads of delayed arrays in an expression by their definitions."""
        if n is None or not (free_vars(n) & self.env.keys()):
            return n
        if isinstance(n, N.Index) and n.array.name in self.env:
            return self.elem(n.array, self.resolve(n.index))
        if isinstance(n, N.Shape) and n.array.name in self.env:
            return self.env[n.array.name].shape
        return map_children(n, self.resolve)

    def manifest(self, a: N.Avar):
        """Materialise ``a`` now if it is delayed."""
        d = self.env.pop(a.name, None)
        if d is not None:
            self.steps.append(KGenerate((a,), d.shape, d.fn))

    # -- bindings

    def block(self, blk: ABlock) -> KBlock:
        self.shared = shared_generates(blk.binds)
        for b in blk.binds:
            self.bind(b)
        res = leaves(blk.result)
        pending = [v for v in res if v.name in self.env]
        for v in dict.fromkeys(pending):
            self.manifest(v)
        return KBlock(tuple(merge_generates(self.steps, self.shared)), tuple(res))

    def sub(self) -> "Fuser":
        f = Fuser(self.uses)
        f.env = dict(self.env)
        return f

    def bind(self, b: ABind):
        op = b.op
        if isinstance(op, ACondB):
            t = self.sub().block(op.t)
            e = self.sub().block(op.e)
            self.steps.append(KAcond(tuple(b.outs), self.resolve(op.c), t, e))
            return
        if isinstance(op, N.Awhile):
            return self.awhile(b, op)
        y = b.outs[0]
        if isinstance(op, N.Use):
            self.steps.append(KUse(y, op.array))
            return
        d = self.delayed(op, y)
        if d is not None:
            self.env[y.name] = d
            n = self.uses.count.get(y.name, 0)
            if y.name in self.shared:
                self.manifest(y)
            elif n > 1 or y.name in self.uses.repeated:
                if cost(d.fn) > CHEAP or n > 4:
                    self.manifest(y)
            return
        if self.uses.count.get(y.name, 0) == 0 and not any(
                y.name in free_vars(s.shape) for s in self.steps if hasattr(s, "shape")):
            pass  # computed but never read: still computed (the simplifier removes dead code)
        self.consumer(op, y)

    def delayed(self, op, y) -> Delayed | None:
        t = y.type
        r = t.rank
        ix = _ix(r)
        if isinstance(op, N.Generate):
            return Delayed(self.resolve(op.shape), self.resolve(op.f), t)
        if isinstance(op, N.Map):
            f = self.resolve(op.f)
            return Delayed(self.shape(op.a), N.Lam((ix,), apply(f, (self.elem(op.a, ix),))), t)
        if isinstance(op, N.ZipWith):
            f = self.resolve(op.f)
            sa, sb = self.shape(op.a), self.shape(op.b)
            s1, s2 = N.Var(N.fresh("s"), sa.type), N.Var(N.fresh("s"), sb.type)
            sh = N.Let(s1, sa, N.Let(s2, sb, N.Tuple(tuple(
                N.PrimApp("min", (N.Prj(k, s1), N.Prj(k, s2))) for k in range(r)))))
            body = apply(f, (self.elem(op.a, ix), self.elem(op.b, ix)))
            return Delayed(sh, N.Lam((ix,), body), t)
        if isinstance(op, N.Backpermute):
            f = self.resolve(op.f)
            return Delayed(self.resolve(op.shape),
                           N.Lam((ix,), self.elem(op.a, apply(f, (ix,)))), t)
        if isinstance(op, N.Reshape):
            sh = self.resolve(op.shape)
            src = self.shape(op.a)
            return Delayed(sh, N.Lam((ix,), self.elem(op.a, reindex(ix, sh, src))), t)
        if isinstance(op, N.Replicate):
            d = self.env.get(op.a.name)
            if d is not None and not _plain_read(d.fn):
                self.manifest(op.a)  # each element is read many times: compute it once
            sa = self.shape(op.a)
            dims, kept, k = [], [], 0
            for d, s in enumerate(op.spec):
                if s is None:
                    dims.append(N.Prj(k, sa))
                    kept.append(N.Prj(d, ix))
                    k += 1
                else:
                    dims.append(self.resolve(s))
            return Delayed(N.Tuple(tuple(dims)),
                           N.Lam((ix,), self.elem(op.a, N.Tuple(tuple(kept)))), t)
        if isinstance(op, N.Slice):
            sa = self.shape(op.a)
            dims, full, k = [], [], 0
            for d, s in enumerate(op.spec):
                if s is None:
                    dims.append(N.Prj(d, sa))
                    full.append(N.Prj(k, ix))
                    k += 1
                else:
                    full.append(self.resolve(s))
            return Delayed(N.Tuple(tuple(dims)),
                           N.Lam((ix,), self.elem(op.a, N.Tuple(tuple(full)))), t)
        return None

    def consumer(self, op, y):
        if isinstance(op, (N.Fold, N.Scan)):
            a = op.a
            r = a.type.rank
            sa = self.shape(a)
            sv = N.Var(N.fresh("s"), sa.type)
            outer = N.Let(sv, sa, N.Tuple(tuple(N.Prj(k, sv) for k in range(r - 1))))
            n = N.Let(sv, sa, N.Prj(r - 1, sv)) if not isinstance(sa, N.Shape) else \
                N.Prj(r - 1, sa)
            if isinstance(sa, N.Shape):
                outer = N.Tuple(tuple(N.Prj(k, sa) for k in range(r - 1)))
            ix = _ix(r)
            src = N.Lam((ix,), self.elem(a, ix))
            f, z = self.resolve(op.f), self.resolve(op.z)
            if isinstance(op, N.Fold):
                self.steps.append(KFold(y, outer, n, f, z, src))
            else:
                self.steps.append(KScan(y, outer, n, f, z, src, op.left))
            return
        if isinstance(op, N.Permute):
            rd, rs = op.defaults.type.rank, op.src.type.rank
            i, j = _ix(rd), _ix(rs)
            self.steps.append(KPermute(
                y, self.shape(op.defaults), N.Lam((i,), self.elem(op.defaults, i)),
                self.shape(op.src), self.resolve(op.f),
                N.Lam((j,), self.elem(op.src, j)), self.resolve(op.comb)))
            return
        raise TypeError(f"fuse: unexpected node {type(op).__name__}")

    def awhile(self, b: ABind, op: N.Awhile):
        init = leaves_of_term(op.init)
        for v in init:
            self.manifest(v)
        for name in sorted((free_vars(op.cond) | free_vars(op.body)) & self.env.keys()):
            self.manifest(N.Avar(name, self.env[name].type))  # read in every iteration
        params = tuple(N.Avar(N.fresh("a"), s) for s in type_leaves(op.init.type))
        blocks = []
        for lam in (op.cond, op.body):
            inner = aflatten(lam.body, {lam.param.name: tree_like(lam.param.type, iter(params))})
            uses = Uses()
            uses.block(inner)
            blocks.append(Fuser(uses).block(inner))
        self.steps.append(KAwhile(tuple(b.outs), params, blocks[0], blocks[1], tuple(init)))


def reindex(ix: N.Var, new_shape: N.Exp, old_shape: N.Exp) -> N.Exp:
    """The index into ``old_shape`` of the element at ``ix`` of a reshape to ``new_shape``."""
    rn = len(new_shape.type.items)
    ro = len(old_shape.type.items)
    ns, os_ = N.Var(N.fresh("s"), new_shape.type), N.Var(N.fresh("s"), old_shape.type)
    lin = N.Const(0, int64)
    for k in range(rn):
        lin = N.PrimApp("add", (N.PrimApp("mul", (lin, N.Prj(k, ns))), N.Prj(k, ix)))
    lv = N.Var(N.fresh("l"), int64)
    comps = []
    rest = lv
    for k in reversed(range(ro)):
        dim = N.Prj(k, os_)
        if k == 0:
            comps.append(rest)
        else:
            comps.append(N.PrimApp("mod", (rest, dim)))
            rest = N.PrimApp("floordiv", (rest, dim))
    body = N.Let(lv, lin, N.Tuple(tuple(reversed(comps))))
    return N.Let(ns, new_shape, N.Let(os_, old_shape, body))


def fuse(prog: N.Program) -> KernelProgram:
    """The kernel program of an (optimised) AST program."""
    with recursion_headroom():  # long chains of fused producers nest deeply
        blk = aflatten(prog.body, {})
        uses = Uses()
        uses.block(blk)
        body = sum_before_scatter(tidy_block(Fuser(uses).block(blk)))
        body = read_materialised(reinline_generates(rewrite_reductions(body)))
        body = materialise_operands(narrow_broadcasts(body))
        kp = prune_leaves(KernelProgram(tuple(prog.params), body, prog.type))
        return mark_inplace(drop_dead_state(kp))


def tidy_block(blk: KBlock) -> KBlock:
    """Every step's shapes and functions through ``simplify.tidy``."""
    steps = []
    for s in blk.steps:
        if isinstance(s, (KAcond, KAwhile)):
            s = map_blocks(s, tidy_block, tidy)
        elif not isinstance(s, KUse):
            s = type(s)(**{f: tidy(v) if isinstance(v, (N.Exp, N.Lam)) else v
                           for f, v in vars(s).items()})
        steps.append(s)
    return KBlock(tuple(steps), blk.result)
