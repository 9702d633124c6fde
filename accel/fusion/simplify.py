"""The simplifier: semantics-preserving clean-up of programs, run before and after AD.

``simplify(p)`` iterates the passes below to a fixpoint (at most ``max_rounds``
rounds); each pass is also a public function from ``Program`` to ``Program``:

- ``cse``: common subexpression elimination on both levels.  The program is put
  in A-normal form (every strict non-trivial subterm bound to a variable, nested
  lets flattened; expression regions only when they repeat a subterm), and a let
  whose bound term equals, up to renaming of its binders, a term bound by an
  enclosing let is replaced by that let's variable.  Terms are only reused from
  bindings in scope, so nothing moves out of a conditional branch or a loop body.
- ``inline_lets``: inline lets bound to trivial terms (variables, constants,
  ``Shape`` of an array variable and projections of these) everywhere, and lets
  used once when that does not move work into a place that runs more often (a
  ``While`` function, a combinator's function, an ``Awhile`` function or an
  ``Acond`` branch).  An array variable used once is inlined only when that use is
  a direct array argument (``Index``/``Shape`` take array variables only).
- ``eliminate_dead_code``: drop unused ``Let``/``Alet`` bindings (backward liveness,
  so whole dead chains go in one pass).  Everything is pure; dropping an unused
  ``Index`` can drop an out-of-bounds error, as in every compiler.
- ``fold_constants``: primitives on constants (evaluated with the registry's NumPy
  implementation, exactly as the interpreter would), algebraic identities that are
  exact in IEEE arithmetic (``x * 1``, ``x - 0.0``, ``x + (-0.0)``, integer ``x + 0``
  and ``x * 0``, ``--x``, casts to the same type, ...), conditionals with constant
  conditions or equal branches, loops whose condition is constantly false,
  ``Shape`` of arrays whose shape is known (``shape (Map f a) = shape a``, ...) and
  bounds facts of index parameters (in ``Generate sh (\\i -> ..)``, ``i.k < sh.k`` and
  ``0 <= i.k`` are True: the guards AD puts around indexing mostly vanish).
- ``project_tuples``: ``Prj i (Tuple ..)`` and ``APrj``, projections pushed through
  lets and conditionals, tuple eta (``(t.0, t.1) = t``), let-bound tuples used only
  through projections split into one let per component, and let-bound
  conditionals whose components are only partly used narrowed to those components.
- ``eliminate_zeros``: identity and zero arrays: ``Map (\\x -> x) a = a``, maps and
  zips of constant arrays become ``Generate``, ``ZipWith f a z = a`` when ``z`` is a
  constant array of the same shape with ``f x z = x`` (otherwise a zip with a
  constant array is a ``Map``), ``Fold f z`` over a constant array with
  ``f z k = z`` becomes a ``Generate``, reshapes/backpermutes to the same shape
  vanish.  A ``Map``/``ZipWith`` of a producer used only there (``Map``,
  ``ZipWith``, ``Generate``) takes the producer's function in (``Map f (Map g a) =
  Map (f . g) a``): no work is repeated, and tuples built by ``g`` and projected by
  ``f`` then cancel.  A ``Permute`` whose index function is ``A.ignore`` on every path
  writes nothing and is its defaults.  With ``adjoint_zeros=True`` (after AD)
  ``x + 0.0 = x`` is used too (it only loses the sign of a zero, which does not matter
  for sums of adjoints), as are ``Permute`` of a zero source and indexing a constant
  array.

Invariants: every pass maps a well-typed program to a well-typed program with the
same results (up to the errors dead code would have raised); binder names stay
globally unique (``uniquify`` establishes it first if an input violates it); no
pass duplicates work or moves it into a more frequently executed place.  Let
chains are walked iteratively and the passes run with a raised recursion limit,
so programs with thousands of bindings are fine; each pass is linear in the size
of the program apart from alpha-equivalence keys of nested terms.
"""

from __future__ import annotations

import contextlib
from collections import ChainMap
from dataclasses import fields

import numpy as np

from ..ast.nodes import (ARR_NODES, EXP_NODES, Acond, ALam, Alet, APrj, Arr, ATuple, Avar,
                         Awhile, Backpermute, Cond, Const, Exp, Fold, Generate, Index, Lam, Let,
                         Map, Permute, PrimApp, Prj, Program, Replicate, Reshape, Scan, Shape,
                         Slice, Tuple, Unit, Use, Var, While, ZipWith, fresh)
from ..ast.prims import PRIMS
from ..ast.traverse import freshen, recursion_headroom
from ..ast.types import ArrayT, bool_, int64, shape_type

__all__ = ["simplify", "cse", "anf", "inline_lets", "eliminate_dead_code", "fold_constants",
           "project_tuples", "split_element_tuples", "eliminate_zeros", "uniquify", "tidy"]

MAX_ROUNDS = 10
_RECURSION_LIMIT = 100_000

# --------------------------------------------------------------------------- node layout

# Field kinds: P plain value, N child node (or None), T tuple of optional nodes,
# B one binder, BS a tuple of binders.
P, N, T, B, BS = range(5)

_BINDER_FIELDS = {(Let, "var"): B, (Alet, "var"): B, (ALam, "param"): B,
                  (Lam, "params"): BS, (Program, "params"): BS}
_TUPLE_FIELDS = ("items", "args", "spec")
_PLAIN_TYPES = ("int", "bool", "str", "float", "object", "Scalar", "np.ndarray")


def _layout(cls) -> tuple:
    """(field name, kind) for the constructor arguments of node class ``cls``, in order.
    Fields other than child nodes (names, types, indices, flags, options) are plain."""
    out = []
    for f in fields(cls):
        if not f.init:
            continue
        kind = _BINDER_FIELDS.get((cls, f.name))
        if kind is None:
            ann = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
            if f.name in _TUPLE_FIELDS:
                kind = T
            elif ann in _PLAIN_TYPES or f.name in ("ty", "name", "op", "value") or (
                    f.name == "index" and cls in (Prj, APrj)) or cls is Use:
                kind = P
            else:
                kind = N
        out.append((f.name, kind))
    return tuple(out)


_SPEC = {cls: _layout(cls) for cls in EXP_NODES + ARR_NODES + (Lam, ALam, Program)}


def _with(n, **changes):
    """``n`` rebuilt with some fields replaced (the others, options included, kept)."""
    return type(n)(*[changes[name] if name in changes else getattr(n, name)
                     for name, _ in _SPEC[type(n)]])


_LEAVES = (Const, Var, Avar, Use)


def _rebuild(n, f):
    """``n`` with ``f`` applied to each child node (not binders); ``n`` if none changed."""
    vals = []
    changed = False
    for name, kind in _SPEC[type(n)]:
        v = getattr(n, name)
        if kind == N:
            if v is not None:
                nv = f(v)
                if nv is not v:
                    changed = True
                    v = nv
        elif kind == T:
            items = []
            ch = False
            for x in v:
                if x is not None:
                    nx = f(x)
                    if nx is not x:
                        ch = True
                        x = nx
                items.append(x)
            if ch:
                changed = True
                v = tuple(items)
        vals.append(v)
    return type(n)(*vals) if changed else n


def _kids(n) -> list:
    """The child nodes of ``n`` (binders excluded)."""
    out = []
    for name, kind in _SPEC[type(n)]:
        if kind == N:
            v = getattr(n, name)
            if v is not None:
                out.append(v)
        elif kind == T:
            for x in getattr(n, name):
                if x is not None:
                    out.append(x)
    return out


def _binders(n) -> tuple:
    t = type(n)
    if t is Let or t is Alet:
        return (n.var,)
    if t is Lam or t is Program:
        return n.params
    if t is ALam:
        return (n.param,)
    return ()


@contextlib.contextmanager
def _deep():
    with recursion_headroom(_RECURSION_LIMIT), np.errstate(all="ignore"):
        yield


def _pass(fn):
    """A public pass: recursion headroom, and unique binder names on entry (the passes
    rely on them; see ``uniquify``)."""
    def run(prog: Program, *args, **kw) -> Program:
        with _deep():
            if fn is not _uniquify:
                prog = _uniquify(prog)
            return fn(prog, *args, **kw)
    run.__name__ = fn.__name__
    run.__qualname__ = fn.__qualname__
    run.__doc__ = fn.__doc__
    return run


def _trivial(e) -> bool:
    """Free to duplicate: variables, constants, ``Shape`` of an array variable, projections."""
    t = type(e)
    while t is Prj:
        e = e.tup
        t = type(e)
    return t is Var or t is Const or t is Shape or t is Avar


def _wrap(binds: list, body, make):
    for v, b in reversed(binds):
        body = make(v, b, body)
    return body


def _fresh_like(v, ty=None):
    base = v.name.rstrip("0123456789") or "v"
    return type(v)(fresh(base), v.ty if ty is None else ty)


def _canon(n) -> tuple:
    """A key equal for terms equal up to the names of the binders inside them.

    Free variables keep their names (they are globally unique); bound ones become
    their binder's position in a pre-order walk.  The key is a flat tuple.
    """
    out = []
    bmap = {}
    stack = [n]
    while stack:
        x = stack.pop()
        if x is None:
            out.append(None)
            continue
        t = type(x)
        if t is Var or t is Avar:
            i = bmap.get(x.name)
            out += (t, x.name if i is None else i, x.ty)
            continue
        if t is Const:
            out += (t, repr(x.value), x.ty)
            continue
        if t is Use:
            out.append(x)
            continue
        out.append(t)
        kids = []
        for name, kind in _SPEC[t]:
            v = getattr(x, name)
            if kind == N:
                kids.append(v)
            elif kind == T:
                out.append(len(v))
                kids += v
            elif kind == B:
                bmap[v.name] = len(bmap)
                out.append(v.ty)
            elif kind == BS:
                out.append(len(v))
                for p in v:
                    bmap[p.name] = len(bmap)
                    out.append(p.ty)
            else:
                out.append(v)
        kids.reverse()
        stack += kids
    return tuple(out)


def _alpha_eq(a, b) -> bool:
    """``a`` and ``b`` are equal up to the names of the binders inside them (a lockstep
    walk that stops at the first difference)."""
    ma, mb = {}, {}
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        t = type(x)
        if t is not type(y) or x is None:
            return False
        if t is Var or t is Avar:
            i = ma.get(x.name)
            if x.ty != y.ty or i != mb.get(y.name) or (i is None and x.name != y.name):
                return False
            continue
        if t is Const:
            if x.ty != y.ty or repr(x.value) != repr(y.value):
                return False
            continue
        if t is Use:
            if x != y:
                return False
            continue
        for name, kind in _SPEC[t]:
            u, v = getattr(x, name), getattr(y, name)
            if kind == N:
                stack.append((u, v))
            elif kind == T:
                if len(u) != len(v):
                    return False
                stack += zip(u, v)
            elif kind == B or kind == BS:
                us, vs = (u, v) if kind == BS else ((u,), (v,))
                if len(us) != len(vs):
                    return False
                for p, q in zip(us, vs):
                    if p.ty != q.ty:
                        return False
                    ma[p.name] = mb[q.name] = len(ma)
            elif u != v:
                return False
    return True


# --------------------------------------------------------------------------- uniquify


def _duplicate_binders(prog) -> bool:
    seen = set()
    stack = [prog]
    while stack:
        n = stack.pop()
        if type(n) in _LEAVES:
            continue
        for b in _binders(n):
            if b.name in seen:
                return True
            seen.add(b.name)
        stack += _kids(n)
    return False


class _Renamer:
    """Give every binder whose name was already bound elsewhere a fresh name."""

    def __init__(self):
        self.seen = set()
        self.env = {}

    def bind(self, v, undo):
        if v.name in self.seen:
            nv = _fresh_like(v)
        else:
            nv = v
        self.seen.add(v.name)
        undo.append((v.name, self.env.get(v.name)))
        if nv is v:
            self.env.pop(v.name, None)
        else:
            self.env[v.name] = nv
        return nv

    def restore(self, undo):
        for name, old in reversed(undo):
            if old is None:
                self.env.pop(name, None)
            else:
                self.env[name] = old

    def go(self, n):
        t = type(n)
        if t is Var or t is Avar:
            return self.env.get(n.name, n)
        if t is Const or t is Use:
            return n
        undo = []
        if t is Let or t is Alet:
            items = []
            while type(n) is t:
                b = self.go(n.bound)
                items.append((self.bind(n.var, undo), b))
                n = n.body
            body = self.go(n)
            self.restore(undo)
            return _wrap(items, body, t)
        if t is Lam or t is Program:
            ps = tuple(self.bind(p, undo) for p in n.params)
            body = self.go(n.body)
            self.restore(undo)
            return _with(n, params=ps, body=body)
        if t is ALam:
            p = self.bind(n.param, undo)
            body = self.go(n.body)
            self.restore(undo)
            return _with(n, param=p, body=body)
        return _rebuild(n, self.go)


def _uniquify(prog: Program) -> Program:
    """``prog`` with globally unique binder names (``prog`` itself if they already are).

    Every pass assumes unique names: then a name identifies one binder, counts of
    uses are per binder, and moving a term never captures a variable.
    """
    if not _duplicate_binders(prog):
        return prog
    return _Renamer().go(prog)


uniquify = _pass(_uniquify)


# --------------------------------------------------------------------------- use counts


class _Uses:
    """Occurrences of every variable, with the nesting depth of functions, loop bodies
    and ``Acond`` branches at binders and uses, ``Index``/``Shape`` (indirect) uses
    and the components of projection-only uses."""

    def __init__(self, root):
        cnt, udepth, bdepth, indirect, nonprj, prj = {}, {}, {}, set(), {}, {}
        eltprj, shapes = {}, {}  # array name -> element paths projected by maps; shape uses
        stack = [(root, 0)]
        while stack:
            n, d = stack.pop()
            t = type(n)
            if t is Var or t is Avar:
                name = n.name
                cnt[name] = cnt.get(name, 0) + 1
                udepth[name] = d
                nonprj[name] = nonprj.get(name, 0) + 1
            elif t is Const or t is Use:
                pass
            elif t is Prj or t is APrj:
                tup = n.tup
                if type(tup) is Var or type(tup) is Avar:
                    name = tup.name
                    cnt[name] = cnt.get(name, 0) + 1
                    udepth[name] = d
                    s = prj.get(name)
                    if s is None:
                        prj[name] = s = set()
                    s.add(n.index)
                else:
                    stack.append((tup, d))
            elif t is Index or t is Shape:
                name = n.array.name
                if t is Shape:
                    shapes[name] = shapes.get(name, 0) + 1
                cnt[name] = cnt.get(name, 0) + 1
                udepth[name] = d
                nonprj[name] = nonprj.get(name, 0) + 1
                indirect.add(name)
                if t is Index:
                    stack.append((n.index, d))
            elif t is Let or t is Alet:
                bdepth[n.var.name] = d
                stack.append((n.bound, d))
                stack.append((n.body, d))
            elif t is Lam or t is ALam:
                stack.append((n.body, d + 1))
            elif t is Acond:
                stack.append((n.c, d))
                stack.append((n.t, d + 1))
                stack.append((n.e, d + 1))
            else:
                if t is Map and type(n.a) is Avar:
                    path = _elt_path(n.f)
                    if path is not None:
                        eltprj.setdefault(n.a.name, []).append(path)
                for c in _kids(n):
                    stack.append((c, d))
        self.cnt, self.udepth, self.bdepth = cnt, udepth, bdepth
        self.indirect, self.nonprj, self.prj = indirect, nonprj, prj
        self.eltprj, self.shapes = eltprj, shapes


def _elt_path(f: Lam):
    """``(i, j, ...)`` if ``f`` is ``\\x -> x.i.j...`` (a projection of its argument)."""
    body, path = f.body, []
    while type(body) is Prj:
        path.append(body.index)
        body = body.tup
    if path and _is_param(body, f, 0):
        return tuple(reversed(path))
    return None


# --------------------------------------------------------------------------- inlining


class _Inliner:
    def __init__(self, uses: _Uses, scratch=frozenset()):
        self.u = uses
        self.env = {}
        self.scratch = scratch  # names of ANF temporaries: inlining them is no change
        self.changes = 0

    def go(self, n):
        t = type(n)
        if t is Var or t is Avar:
            r = self.env.get(n.name)
            return n if r is None else r
        if t is Const or t is Use:
            return n
        if t is Let or t is Alet:
            return self.chain(n, t)
        return _rebuild(n, self.go)

    def chain(self, n, t):
        u = self.u
        kept = []
        while type(n) is t:
            v = n.var
            name = v.name
            b = self.go(n.bound)
            c = u.cnt.get(name, 0)
            if c == 0:
                self.changes += 1
            elif _trivial(b) or (c == 1 and u.udepth[name] == u.bdepth[name]
                                 and (t is Let or name not in u.indirect)):
                self.env[name] = b
                if name not in self.scratch:
                    self.changes += 1
            else:
                kept.append((n, b))
            n = n.body
        cur = self.go(n)
        for orig, b in reversed(kept):
            if orig.bound is b and orig.body is cur:
                cur = orig
            else:
                cur = t(orig.var, b, cur)
        return cur


@_pass
def inline_lets(prog: Program) -> Program:
    """Inline trivial lets everywhere and single-use lets where that adds no work.

    ``let x = a * b in x + 1`` becomes ``a * b + 1``; an array bound once and used
    once as an argument (``let a2 = Map f a1 in Fold g z a2``) is inlined into that
    argument, but never into an ``Awhile`` function or an ``Acond`` branch.
    """
    return _Inliner(_Uses(prog)).go(prog)


# --------------------------------------------------------------------------- dead code


def _occurrences(n, cnt, delta):
    """Add ``delta`` to ``cnt`` for every variable occurrence in ``n``."""
    stack = [n]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is Var or t is Avar:
            cnt[x.name] = cnt.get(x.name, 0) + delta
        elif t is not Const and t is not Use:
            stack += _kids(x)


class _DCE:
    """Backward: a binding is dead when no occurrence of its variable is left once
    the bindings after it (and their dead code) are gone."""

    def __init__(self, root):
        self.cnt = {}
        _occurrences(root, self.cnt, 1)
        self.changes = 0

    def go(self, n):
        t = type(n)
        if t in _LEAVES:
            return n
        if t is Let or t is Alet:
            chain = []
            while type(n) is t:
                chain.append(n)
                n = n.body
            cur = body = self.go(n)
            same = body is n
            for orig in reversed(chain):
                if self.cnt.get(orig.var.name, 0) <= 0:
                    _occurrences(orig.bound, self.cnt, -1)
                    self.changes += 1
                    same = False
                    continue
                b = self.go(orig.bound)
                if same and b is orig.bound:
                    cur = orig
                else:
                    cur = t(orig.var, b, cur)
                    same = False
            return cur
        return _rebuild(n, self.go)


@_pass
def eliminate_dead_code(prog: Program) -> Program:
    """Drop unused ``Let``/``Alet`` bindings (whole dead chains in one pass)."""
    return _DCE(prog).go(prog)


# --------------------------------------------------------------------------- CSE / ANF


def _scan_exp(e, ren) -> tuple:
    """(``e`` has a repeated non-trivial subterm, ``e`` mentions a variable in ``ren``)."""
    seen = {}
    renamed = False
    stack = [e]
    while stack:
        n = stack.pop()
        t = type(n)
        if t is Var or t is Avar:
            renamed = renamed or n.name in ren
            continue
        if t is Const:
            continue
        if t is not Let and t is not Lam and not _trivial(n):
            h = hash(n)
            other = seen.get(h)
            if other is not None and (other is n or other == n):
                return True, True
            seen[h] = n
        stack += _kids(n)
    return False, renamed


def _rename(n, ren):
    """``n`` with variables renamed by ``ren`` (name -> variable or trivial term)."""
    def go(n):
        t = type(n)
        if t is Var or t is Avar:
            return ren.get(n.name, n)
        if t is Const or t is Use:
            return n
        if t is Let or t is Alet:
            chain = []
            while type(n) is t:
                chain.append((n, go(n.bound)))
                n = n.body
            cur = go(n)
            for orig, b in reversed(chain):
                cur = orig if orig.bound is b and orig.body is cur else t(orig.var, b, cur)
            return cur
        return _rebuild(n, go)
    return go(n)


class _CSE:
    """A-normalisation with (optionally) reuse of equal bound terms in scope."""

    def __init__(self, merge: bool = True):
        self.merge = merge
        self.avail = {}  # canonical key -> variable bound to that term (in scope)
        self.undo = []  # keys added, popped when their region ends
        self.ren = {}  # variable name -> replacement (merged or trivial)
        self.scratch = set()  # names of the temporaries introduced
        self.changes = 0

    # -- scopes

    def bind(self, v, term, binds):
        if _trivial(term):
            self.ren[v.name] = term
            self.changes += 1
            return
        if self.merge:
            k = _canon(term)
            u = self.avail.get(k)
            if u is not None:
                self.ren[v.name] = u
                self.changes += 1
                return
            self.avail[k] = v
            self.undo.append(k)
        binds.append((v, term))

    def bind_fresh(self, term, binds):
        v = (Var if isinstance(term, Exp) else Avar)(fresh("c" if isinstance(term, Exp)
                                                          else "ac"), term.type)
        self.scratch.add(v.name)
        self.bind(v, term, binds)
        return self.ren.get(v.name, v)

    def close(self, mark):
        avail, undo = self.avail, self.undo
        while len(undo) > mark:
            del avail[undo.pop()]

    def region_exp(self, e):
        mark = len(self.undo)
        binds = []
        r = self.exp(e, binds, False)
        self.close(mark)
        return _wrap(binds, r, Let)

    def region_arr(self, a):
        mark = len(self.undo)
        binds = []
        r = self.arr(a, binds, False)
        self.close(mark)
        return _wrap(binds, r, Alet)

    def lam(self, f):
        body = self.region_exp(f.body)
        return f if body is f.body else _with(f, body=body)

    def alam(self, f):
        body = self.region_arr(f.body)
        return f if body is f.body else _with(f, body=body)

    def avar(self, a):
        return self.ren.get(a.name, a)

    # -- expressions

    def exp(self, e, binds, atom):
        t = type(e)
        if t is Var:
            return self.ren.get(e.name, e)
        if t is Const:
            return e
        if t is Let:
            while type(e) is Let:
                if type(e.bound) is Let:
                    self.changes += 1  # flattened
                b = self.exp(e.bound, binds, False)
                self.bind(e.var, b, binds)
                e = e.body
            return self.exp(e, binds, atom)
        if t is Shape:
            a = self.avar(e.array)
            return e if a is e.array else Shape(a)
        if t is Prj:
            tup = self.exp(e.tup, binds, True)
            return e if tup is e.tup else Prj(e.index, tup)
        if t is Cond:
            term = _with(e, c=self.exp(e.c, binds, True), t=self.region_exp(e.t),
                         e=self.region_exp(e.e))
        elif t is While:
            init = self.exp(e.init, binds, True)
            term = _with(e, cond=self.lam(e.cond), body=self.lam(e.body), init=init)
        elif t is Index:
            term = _with(e, array=self.avar(e.array), index=self.exp(e.index, binds, True))
        elif t is PrimApp:
            args = []
            for x in e.args:
                args.append(self.exp(x, binds, True))
            term = _with(e, args=tuple(args))
        elif t is Tuple:
            items = []
            for x in e.items:
                items.append(self.exp(x, binds, True))
            term = _with(e, items=tuple(items))
        else:  # pragma: no cover - every expression node is handled above
            raise TypeError(f"cse: unexpected expression {t.__name__}")
        if atom:
            return self.bind_fresh(term, binds)
        return term

    # -- arrays

    def arr(self, a, binds, atom):
        t = type(a)
        if t is Avar:
            return self.avar(a)
        if t is Alet:
            while type(a) is Alet:
                if type(a.bound) is Alet:
                    self.changes += 1  # flattened
                b = self.arr(a.bound, binds, False)
                self.bind(a.var, b, binds)
                a = a.body
            return self.arr(a, binds, atom)
        if t is Acond:
            term = _with(a, c=self.top_exp(a.c), t=self.region_arr(a.t), e=self.region_arr(a.e))
        elif t is Awhile:
            init = self.arr(a.init, binds, True)
            term = _with(a, cond=self.alam(a.cond), body=self.alam(a.body), init=init)
        elif t is Use:
            term = a
        else:
            vals = []
            for name, kind in _SPEC[t]:
                v = getattr(a, name)
                if kind == N:
                    v = self.sub(v, binds)
                elif kind == T:
                    items = []
                    for x in v:
                        items.append(self.sub(x, binds))
                    v = tuple(items)
                vals.append(v)
            term = t(*vals)
        if atom:
            return self.bind_fresh(term, binds)
        return term

    def sub(self, v, binds):
        """A child of an array node: arrays become atoms, functions and expressions
        are normalised on their own."""
        if v is None:
            return None
        if isinstance(v, Arr):
            return self.arr(v, binds, True)
        if type(v) is Lam:
            body = self.top_exp(v.body)
            return v if body is v.body else _with(v, body=body)
        return self.top_exp(v)

    def top_exp(self, e):
        """An expression region directly under the array level.  Most have no repeated
        subterm: those are only renamed, not A-normalised (which would rebuild them)."""
        if not self.merge:
            return self.region_exp(e)
        dup, ren = _scan_exp(e, self.ren)
        if dup:
            return self.region_exp(e)
        return _rename(e, self.ren) if ren else e


@_pass
def cse(prog: Program) -> Program:
    """Common subexpression elimination (both levels), leaving the program in ANF.

    ``let a2 = Map (\\x -> x * 2.0) a1; a3 = Map (\\y -> y * 2.0) a1 in ZipWith f a2 a3``
    becomes ``let a2 = Map (\\x -> x * 2.0) a1 in ZipWith f a2 a2``.  Run
    ``inline_lets`` afterwards to undo the A-normalisation where nothing was shared.
    """
    c = _CSE(True)
    return Program(prog.params, c.region_arr(prog.body))


@_pass
def anf(prog: Program) -> Program:
    """A-normal form: every strict non-trivial subterm bound by a ``Let``/``Alet``."""
    c = _CSE(False)
    return Program(prog.params, c.region_arr(prog.body))


# --------------------------------------------------------------------------- local rewrites


def _is_zero(e, sign: int = 0) -> bool:
    """``e`` is a constant 0 (``sign`` -1/+1 restricts a float zero to -0.0/+0.0)."""
    if type(e) is not Const or e.ty == bool_ or e.value != 0:
        return False
    if sign and e.ty.is_float:
        neg = np.signbit(e.value)
        return neg if sign < 0 else not neg
    return True


def _cheap_closed(e, budget: int = 8) -> bool:
    """``e`` is a small term of primitives, constants, shapes and element reads of array
    variables, with no scalar variable: valid (and worth comparing) wherever its arrays
    are in scope."""
    stack = [e]
    while stack:
        x = stack.pop()
        budget -= 1
        t = type(x)
        if budget < 0 or not (t is PrimApp or t is Index or t is Const or t is Tuple
                              or t is Prj or t is Shape):
            return False
        if t is PrimApp:
            stack.extend(x.args)
        elif t is Index:
            if type(x.array) is not Avar:
                return False
            stack.append(x.index)
        elif t is Tuple:
            stack.extend(x.items)
        elif t is Prj:
            stack.append(x.tup)
        elif t is Shape and type(x.array) is not Avar:
            return False
    return True


def _is_one(e) -> bool:
    return type(e) is Const and e.ty != bool_ and e.value == 1


def _const_exp(e) -> bool:
    """A closed constant: a ``Const`` or a tuple of them."""
    t = type(e)
    if t is Const:
        return True
    if t is Tuple:
        return all(_const_exp(i) for i in e.items)
    return False


def _fold_prim(e: PrimApp):
    """``e`` (all arguments constant) evaluated as the interpreter would, or None."""
    try:
        args = [np.array([a.value], dtype=a.ty.dtype) for a in e.args]
        r = np.asarray(PRIMS[e.op].impl(*args)).astype(e.type.dtype).reshape(-1)
        if r.shape != (1,):
            return None
        return Const(r[0], e.type)
    except Exception:  # an implementation that cannot fold: leave the term alone
        return None


def _default_dims(a: Avar) -> tuple:
    sh = Shape(a)
    return tuple([Prj(k, sh) for k in range(a.type.rank)])


def _dims_exp(dims: tuple):
    """A shape expression for ``dims``: ``shape a`` when they are ``a``'s, else a tuple."""
    if dims and type(dims[0]) is Prj and type(dims[0].tup) is Shape:
        a = dims[0].tup.array
        if a.type.rank == len(dims) and all(
                type(x) is Prj and x.index == k and type(x.tup) is Shape and x.tup.array == a
                for k, x in enumerate(dims)):
            return dims[0].tup
    return Tuple(tuple(dims))


class _Local:
    """Bottom-up local rewriting; ``flags`` selects the families of rules."""

    def __init__(self, fold=True, project=True, zeros=True, adjoint_zeros=False, subst=None):
        self.fold, self.project, self.zeros = fold, project, zeros
        self.adjoint_zeros = adjoint_zeros
        self.subst = {} if subst is None else subst  # variable name -> trivial term
        self.bound = {}  # let-bound variable name -> its (rewritten) bound term
        # array variable name -> its dimensions, when they are known better than
        # ``(shape v).k`` (each a cheap expression in scope, e.g. ``(shape a).0`` or 3)
        self.dims = {}
        self.memo = {}  # id(array term) -> (term, its dimensions)
        self.ibounds = {}  # index parameter name -> the dimensions it ranges over
        self.changes = 0

    def run(self, prog: Program) -> Program:
        return _rebuild(prog, self.go)

    def derived(self, subst) -> _Local:
        """A rewriter with every rule on, substituting ``subst``, that sees this one's
        bindings but records its own separately."""
        new = _Local(True, True, True, self.adjoint_zeros, subst)
        new.bound, new.dims = ChainMap({}, self.bound), ChainMap({}, self.dims)
        new.memo, new.ibounds = self.memo, self.ibounds
        return new

    # -- traversal

    def go(self, n):
        t = type(n)
        if t is Var or t is Avar:
            r = self.subst.get(n.name)
            return n if r is None else r
        if t is Const or t is Use:
            return n
        if t is Let or t is Alet:
            return self.chain(n, t)
        if t is Generate or t is Backpermute:
            d = self.exp_dims(n.shape)
            if d is not None:
                self.ibounds[n.f.params[0].name] = d
        elif t is Permute:
            d = self.dims_of(n.src)
            if d is not None:
                self.ibounds[n.f.params[0].name] = d
        return self.post(_rebuild(n, self.go))

    def chain(self, n, t):
        kept = []
        while type(n) is t:
            b = self.go(n.bound)
            name = n.var.name
            if _trivial(b):
                self.subst[name] = b
                self.changes += 1
            else:
                self.bound[name] = b
                if t is Alet and isinstance(b.type, ArrayT):
                    d = self.dims_of(b)
                    if d is not None and any(x is not None for x in d):
                        dflt = _default_dims(n.var)
                        d = tuple(dflt[k] if x is None else x for k, x in enumerate(d))
                        if d != dflt:
                            self.dims[name] = d
                kept.append((n, b))
            n = n.body
        cur = self.go(n)
        for orig, b in reversed(kept):
            if orig.bound is b and orig.body is cur:
                cur = orig
            else:
                cur = t(orig.var, b, cur)
        return cur

    def post(self, n):
        for _ in range(32):
            rule = _RULES.get(type(n))
            r = None if rule is None else rule(self, n)
            if r is None or r is n:
                return n
            self.changes += 1
            n = r
        return n

    # -- shapes (tuples of per-dimension cheap expressions, None where unknown)

    def dim_of_exp(self, e):
        """The canonical form of a dimension expression, or None."""
        t = type(e)
        if t is Const:
            return e
        if t is Prj:
            tup = e.tup
            if type(tup) is Shape:
                return self.dims_of(tup.array)[e.index]
            if type(tup) is Tuple:
                return self.dim_of_exp(tup.items[e.index])
        if (t is PrimApp or t is Index) and _cheap_closed(e):
            return e  # e.g. ``to_int64 (a5 ! (0,))``: pure, so equal terms are equal sizes
        return None

    def exp_dims(self, sh):
        """The dimensions given by the shape expression ``sh``."""
        t = type(sh)
        if t is Shape:
            return self.dims_of(sh.array)
        if t is Tuple:
            return tuple([self.dim_of_exp(x) for x in sh.items])
        return None

    def dims_of(self, a):
        """The dimensions of array term ``a`` (entries None where unknown), or None.
        An array variable's are always complete (``(shape v).k`` by default)."""
        t = type(a)
        if t is Avar:
            if not isinstance(a.type, ArrayT):
                return None
            d = self.dims.get(a.name)
            return _default_dims(a) if d is None else d
        hit = self.memo.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
        r = self._dims_of(a, t)
        self.memo[id(a)] = (a, r)
        return r

    def _dims_of(self, a, t):
        if t is Generate or t is Backpermute or t is Reshape:
            return self.exp_dims(a.shape)
        if t is Map or t is Permute:
            return self.dims_of(a.a if t is Map else a.defaults)
        if t is ZipWith:
            da, db = self.dims_of(a.a), self.dims_of(a.b)
            if da is None or db is None:
                return None
            return tuple([x if x is not None and x == y else None for x, y in zip(da, db)])
        if t is Fold or t is Scan:
            d = self.dims_of(a.a)
            if d is None:
                return None
            if t is Fold:
                return d[:-1]
            return d if a.z is None else d[:-1] + (None,)
        if t is Replicate or t is Slice:
            d = self.dims_of(a.a)
            if d is None:
                return None
            out, k = [], 0
            for x in a.spec:
                if x is None:
                    out.append(d[k])
                    k += 1
                elif t is Replicate:
                    out.append(self.dim_of_exp(x))
                else:
                    k += 1
            return tuple(out)
        if t is Use:
            return tuple([Const(x, int64) for x in a.array.shape])
        if t is Unit:
            return ()
        return None

    def full_dims(self, a):
        d = self.dims_of(a)
        return None if d is None or None in d else d

    def shape_of(self, a):
        """The shape of array term ``a`` as a cheap expression in scope, or None."""
        d = self.full_dims(a)
        return None if d is None else _dims_exp(d)

    def same_shape(self, a, b) -> bool:
        da = self.full_dims(a)
        return da is not None and da == self.full_dims(b)

    def shape_is(self, a, sh) -> bool:
        """Array ``a`` has the shape given by the expression ``sh``."""
        da = self.full_dims(a)
        return da is not None and da == self.exp_dims(sh)

    def index_bound(self, e):
        """The dimension that ``e`` (``i.k`` of an index parameter) is known to be below."""
        if type(e) is Prj and type(e.tup) is Var:
            b = self.ibounds.get(e.tup.name)
            if b is not None:
                return b[e.index]
        return None

    def is_index(self, e) -> bool:
        return type(e) is Prj and type(e.tup) is Var and e.tup.name in self.ibounds

    def const_array(self, a):
        """``(value, shape)`` if every element of ``a`` is the constant ``value``."""
        t = type(a)
        if t is Avar:
            b = self.bound.get(a.name)
            if b is None:
                return None
            r = self.const_array(b)
            if r is None:
                return None
            return r[0], self.shape_of(a)
        if t is Generate and _const_exp(a.f.body):
            return a.f.body, a.shape
        if t is Unit and _const_exp(a.exp):
            return a.exp, Tuple(())
        return None

    def applied(self, lam: Lam, args: tuple):
        """The body of ``lam`` with its parameters replaced by ``args`` (trivial terms),
        rewritten."""
        sub = self.derived({p.name: a for p, a in zip(lam.params, args)})
        return sub.go(lam.body)

    def generate(self, sh, value):
        """``Generate sh (\\_ -> value)`` for a constant ``value``."""
        i = Var(fresh("i"), sh.type)
        return Generate(sh, Lam((i,), value))


def _push_prj(self: _Local, n, make_prj, let_t, cond_t):
    """Push a projection through a let chain or a conditional (or None)."""
    tup = n.tup
    if type(tup) is let_t:
        chain = []
        while type(tup) is let_t:
            chain.append(tup)
            tup = tup.body
        body = self.post(make_prj(n.index, tup))
        for orig in reversed(chain):
            body = let_t(orig.var, orig.bound, body)
        return body
    if type(tup) is cond_t:
        return _with(tup, t=self.post(make_prj(n.index, tup.t)),
                     e=self.post(make_prj(n.index, tup.e)))
    return None


def _r_prj(self: _Local, n: Prj):
    if not self.project:
        return None
    tup = n.tup
    if type(tup) is Tuple:
        return tup.items[n.index]
    if type(tup) is Var:
        b = self.bound.get(tup.name)
        if type(b) is Tuple and _trivial(b.items[n.index]):
            return b.items[n.index]
    elif type(tup) is not Prj and type(tup) is not Index:
        return _push_prj(self, n, Prj, Let, Cond)
    return _generated_component(self, n)


def _generated_component(self: _Local, n: Prj):
    """``(a ! ix).path`` where ``a = generate sh f`` and that component of ``f`` is a
    constant or (a projection of) the index: the constant, or that part of ``ix``.

    AD packs a scatter's target index and its ``executed`` flag into the tuples of the
    array it scatters from; read back through the materialised array, the scatter looks
    data-dependent, while forwarded it is ``i -> (True, i)`` (see ``_r_permute``)."""
    path = []
    e = n
    while type(e) is Prj:
        path.append(e.index)
        e = e.tup
    if type(e) is Var:
        e = self.bound.get(e.name)
    if type(e) is not Index or type(e.array) is not Avar:
        return None
    g = self.bound.get(e.array.name)
    if type(g) is not Generate:
        return None
    if e.array.type.rank:  # only reads known to be in bounds (others must still fail)
        dims = self.dims_of(e.array)
        if (type(e.index) is not Var or dims is None or None in dims
                or self.ibounds.get(e.index.name) != dims):
            return None
    body, lets = g.f.body, {}
    for k in reversed(path):
        while True:
            if type(body) is Let:
                lets[body.var.name] = body.bound
                body = body.body
            elif type(body) is Var and body.name in lets:
                body = lets[body.name]
            else:
                break
        if type(body) is not Tuple:
            return None
        body = body.items[k]
    while type(body) is Var and body.name in lets:
        body = lets[body.name]
    if type(body) is Const or (type(body) is Tuple and not body.items):  # () of rank 0
        return body
    inner, steps = body, []
    while type(inner) is Prj:
        steps.append(inner.index)
        inner = inner.tup
    if not _is_param(inner, g.f, 0):
        return None
    out = e.index
    for k in reversed(steps):
        out = Prj(k, out)
    return out


def _r_aprj(self: _Local, n: APrj):
    if not self.project:
        return None
    tup = n.tup
    if type(tup) is ATuple:
        return tup.items[n.index]
    if type(tup) is Avar:
        b = self.bound.get(tup.name)
        if type(b) is ATuple and type(b.items[n.index]) is Avar:
            return b.items[n.index]
        return None
    return _push_prj(self, n, APrj, Alet, Acond)


def _eta(n, prj_t):
    items = n.items
    if not items or type(items[0]) is not prj_t:
        return None
    t = items[0].tup
    if len(t.type.items) != len(items):
        return None
    for k, x in enumerate(items):
        if type(x) is not prj_t or x.index != k or not (x.tup is t or x.tup == t):
            return None
    return t


def _r_tuple(self: _Local, n: Tuple):
    return _eta(n, Prj) if self.project else None


def _r_atuple(self: _Local, n: ATuple):
    return _eta(n, APrj) if self.project else None


def _r_primapp(self: _Local, n: PrimApp):
    if not self.fold:
        return None
    args = n.args
    if all(type(a) is Const for a in args):
        return _fold_prim(n)
    op = n.op
    ty = n.type
    if len(args) == 1:
        x = args[0]
        if op in ("neg", "not") and type(x) is PrimApp and x.op == op:
            return x.args[0]
        if op.startswith("to_") and x.type == ty:
            return x
        return None
    x, y = args
    fl = ty.is_float if ty != bool_ else False
    if op == "add":
        if fl:
            if _is_zero(y, -1) or (self.adjoint_zeros and _is_zero(y)):
                return x
            if _is_zero(x, -1) or (self.adjoint_zeros and _is_zero(x)):
                return y
        elif _is_zero(y):
            return x
        elif _is_zero(x):
            return y
    elif op == "sub":
        if _is_zero(y, 1) or ((not fl or self.adjoint_zeros) and _is_zero(y)):
            return x
        if _is_zero(x, -1) or ((not fl or self.adjoint_zeros) and _is_zero(x)):
            return PrimApp("neg", (y,))
    elif op == "mul":
        if _is_one(y):
            return x
        if _is_one(x):
            return y
        if not fl and (_is_zero(x) or _is_zero(y)):
            return Const(0, ty)
    elif op == "div" or op == "floordiv":
        if _is_one(y) and (fl or op == "floordiv"):
            return x
    elif op in ("and", "or") and ty == bool_:
        absorbing = op == "or"  # True absorbs or, False absorbs and
        for a, b in ((x, y), (y, x)):
            if type(a) is Const:
                return a if a.value == absorbing else b
    elif op in ("max", "min"):
        if x == y:
            return x
    elif op in ("lt", "le", "gt", "ge"):
        if op in ("gt", "ge"):
            op, x, y = ("lt" if op == "gt" else "le"), y, x
        r = _index_compare(self, op == "le", x, y)
        if r is not None:
            return Const(r, bool_)
    return None


def _index_compare(self: _Local, le: bool, x, y):
    """``x < y`` (or ``x <= y``) when known from ``0 <= i.k < dim`` for an index
    parameter ``i`` of a ``Generate``/``Backpermute``/``Permute`` function, else None."""
    def canon(e):
        c = self.dim_of_exp(e)
        return e if c is None else c
    if self.is_index(x):
        hi = self.index_bound(x)
        if hi is not None and canon(y) == hi:
            return True  # i.k < dim
        if not le and _is_zero(y):
            return False  # i.k < 0
    if self.is_index(y):
        hi = self.index_bound(y)
        if hi is not None and canon(x) == hi:
            return False  # dim < i.k, dim <= i.k
        if le and _is_zero(x):
            return True  # 0 <= i.k
    return None


def _r_cond(self: _Local, n: Cond):
    if not self.fold:
        return None
    c = n.c
    if type(c) is Const:
        return n.t if c.value else n.e
    if _alpha_eq(n.t, n.e):
        return n.t
    if type(n.t) is Const and type(n.e) is Const and n.t.ty == bool_:
        if n.t.value and not n.e.value:
            return c
        if not n.t.value and n.e.value:
            return PrimApp("not", (c,))
    if type(c) is PrimApp and c.op == "not":
        return _with(n, c=c.args[0], t=n.e, e=n.t)
    return None


def _r_while(self: _Local, n: While):
    if self.fold and type(n.cond.body) is Const and not n.cond.body.value:
        return n.init
    return None


def _r_shape(self: _Local, n: Shape):
    if not self.fold:
        return None
    d = self.dims.get(n.array.name)
    if d is not None:
        s = _dims_exp(d)
        if s != n:
            return s
    return None


def _r_index(self: _Local, n: Index):
    if self.zeros and self.adjoint_zeros:
        r = self.const_array(n.array)
        if r is not None:
            return r[0]
    return None


def _r_acond(self: _Local, n: Acond):
    if not self.fold:
        return None
    if type(n.c) is Const:
        return n.t if n.c.value else n.e
    if _alpha_eq(n.t, n.e):
        return n.t
    return None


def _r_awhile(self: _Local, n: Awhile):
    if not self.fold:
        return None
    body = n.cond.body
    while type(body) is Alet:
        body = body.body
    if type(body) is Unit and type(body.exp) is Const and not body.exp.value:
        return n.init
    return None


def _is_param(e, lam: Lam, k: int) -> bool:
    return type(e) is Var and e.name == lam.params[k].name


def _compose(f: Lam, k: int, g: Lam, params: tuple):
    """``f`` with its parameter ``k`` bound to ``g``'s body, as a function of ``params``."""
    return Lam(params, Let(f.params[k], g.body, f.body))


def _r_map(self: _Local, n: Map):
    if not self.zeros:
        return None
    f, a = n.f, n.a
    if _is_param(f.body, f, 0):
        return a
    # producer composition (the producer is used once here: inlined)
    if type(a) is Map or type(a) is ZipWith:
        return _with(a, f=_compose(f, 0, a.f, a.f.params))
    if type(a) is Generate:
        return _with(a, f=_compose(f, 0, a.f, a.f.params))
    if _const_exp(n.f.body):
        sh = self.shape_of(n.a)
        if sh is not None:
            return self.generate(sh, n.f.body)
    ca = self.const_array(n.a)
    if ca is not None and ca[1] is not None:
        r = self.applied(n.f, (ca[0],))
        if _const_exp(r):
            return self.generate(ca[1], r)
    return None


def _r_zipwith(self: _Local, n: ZipWith):
    if not self.zeros:
        return None
    f = n.f
    same = self.same_shape(n.a, n.b)
    sa = self.shape_of(n.a) if same else None
    body = f.body
    if same and _is_param(body, f, 0):
        return n.a
    if same and _is_param(body, f, 1):
        return n.b
    if same and _const_exp(body):
        return self.generate(sa, body)
    if type(n.a) is Map:  # maps compose into the zip (Map keeps the shape)
        g = n.a.f
        return ZipWith(_compose(f, 0, g, (g.params[0], f.params[1])), n.a.a, n.b)
    if type(n.b) is Map:
        g = n.b.f
        return ZipWith(_compose(f, 1, g, (f.params[0], g.params[0])), n.a, n.b.a)
    if not same:
        return None
    ca, cb = self.const_array(n.a), self.const_array(n.b)
    if ca is not None and cb is not None:
        r = self.applied(f, (ca[0], cb[0]))
        if _const_exp(r):
            return self.generate(sa, r)
    if cb is not None:  # a zip with a constant array is a map
        x = f.params[0]
        r = self.applied(f, (x, cb[0]))
        return n.a if r == x else Map(Lam((x,), r), n.a)
    if ca is not None:
        y = f.params[1]
        r = self.applied(f, (ca[0], y))
        return n.b if r == y else Map(Lam((y,), r), n.b)
    return None


def _r_generate(self: _Local, n: Generate):
    if not self.zeros:
        return None
    body, i = n.f.body, n.f.params[0]
    if (type(body) is Index and type(body.index) is Var and body.index.name == i.name
            and self.shape_is(body.array, n.shape)):
        return body.array
    return None


def _r_backpermute_const(self: _Local, n: Backpermute):
    ca = self.const_array(n.a)
    if ca is not None and (n.a.type.rank == 0 or self.adjoint_zeros):
        return self.generate(n.shape, ca[0])
    return None


def _r_replicate(self: _Local, n: Replicate):
    if not self.zeros:
        return None
    ca = self.const_array(n.a)
    d = None if ca is None else self.full_dims(n.a)
    if d is None:
        return None
    items, k = [], 0
    for s in n.spec:
        if s is None:
            items.append(d[k])
            k += 1
        else:
            items.append(s)
    return self.generate(Tuple(tuple(items)), ca[0])


def _init_shape(sh):
    """The shape without its innermost dimension."""
    r = len(sh.type.items)
    if type(sh) is Tuple:
        return Tuple(sh.items[:-1])
    if _trivial(sh):
        return Tuple(tuple(Prj(k, sh) for k in range(r - 1)))
    s = Var(fresh("sh"), sh.type)
    return Let(s, sh, Tuple(tuple(Prj(k, s) for k in range(r - 1))))


def _r_fold(self: _Local, n: Fold):
    if not self.zeros or n.z is None or not _const_exp(n.z):
        return None
    ca = self.const_array(n.a)
    if ca is None:
        return None
    r = self.applied(n.f, (n.z, ca[0]))
    if r != n.z:
        return None
    d = self.full_dims(n.a)
    return self.generate(_init_shape(ca[1]) if d is None else _dims_exp(d[:-1]), n.z)


def _element(a, i: Var):
    """Element ``i`` of array term ``a`` (a variable, or a generate or map of one), or
    None."""
    if type(a) is Avar:
        return Index(a, i)
    if type(a) is Generate:
        f = freshen(a.f)
        return Let(f.params[0], i, f.body)
    if type(a) is Map:
        x = _element(a.a, i)
        f = freshen(a.f)
        return None if x is None else Let(f.params[0], x, f.body)
    return None


def _never_targets(e) -> bool:
    """Whether a permute's target expression is ``A.ignore`` on every path (through lets
    and both branches of conditionals): such a permute writes nothing."""
    while type(e) is Let:
        e = e.body
    if type(e) is Cond:
        return _never_targets(e.t) and _never_targets(e.e)
    return type(e) is Tuple and e.items[0] == Const(False, bool_)


def _r_permute(self: _Local, n: Permute):
    f = n.f
    if self.zeros and _never_targets(f.body):
        return n.defaults
    if (type(f.body) is Tuple and f.body.items[0] == Const(True, bool_)
            and f.body.items[1] in (f.params[0], Tuple(()))
            and f.params[0].type == shape_type(n.defaults.type.rank)):
        # every source element goes to its own index: elementwise, when the shapes agree
        ds, dd = self.dims_of(n.src), self.dims_of(n.defaults)
        if ds is not None and ds == dd and None not in ds:
            i = Var(fresh("i"), f.params[0].type)
            a, b = _element(n.src, i), _element(n.defaults, i)
            if a is not None and b is not None:
                new, old = (Var(fresh("x"), p.type) for p in n.comb.params)
                body = Let(new, a, Let(old, b, self.applied(n.comb, (new, old))))
                return Generate(_dims_exp(dd), Lam((i,), body))
    if not (self.zeros and self.adjoint_zeros):
        return None
    cs = self.const_array(n.src)
    if cs is None:
        return None
    d = n.comb.params[1]
    if self.applied(n.comb, (cs[0], d)) == d:
        return n.defaults
    return None


def _r_reshape(self: _Local, n: Reshape):
    if not self.zeros:
        return None
    if self.shape_is(n.a, n.shape):
        return n.a
    if self.adjoint_zeros:
        ca = self.const_array(n.a)
        if ca is not None:
            return self.generate(n.shape, ca[0])
    return None


def _r_backpermute(self: _Local, n: Backpermute):
    if not self.zeros:
        return None
    if _is_param(n.f.body, n.f, 0) and self.shape_is(n.a, n.shape):
        return n.a
    return _r_backpermute_const(self, n)


_RULES = {
    Prj: _r_prj, APrj: _r_aprj, Tuple: _r_tuple, ATuple: _r_atuple, PrimApp: _r_primapp,
    Cond: _r_cond, While: _r_while, Shape: _r_shape, Index: _r_index, Acond: _r_acond,
    Awhile: _r_awhile, Map: _r_map, ZipWith: _r_zipwith, Fold: _r_fold, Permute: _r_permute,
    Reshape: _r_reshape, Backpermute: _r_backpermute, Generate: _r_generate,
    Replicate: _r_replicate,
}


@_pass
def fold_constants(prog: Program) -> Program:
    """Constant folding and exact algebraic identities (see the module docstring).

    ``2.0 * 3.0`` becomes ``6.0``, ``x * 1.0`` becomes ``x``, ``if True then a else b``
    becomes ``a``; ``x + 0.0`` stays (it is not ``x`` when ``x`` is ``-0.0``).
    """
    return _Local(fold=True, project=False, zeros=False).run(prog)


# --------------------------------------------------------------------------- tuples


def _select(branch, idxs: list, let_t, tup_t, prj_t):
    """``branch`` (a term of tuple type) restricted to components ``idxs``; a single
    index gives that component itself."""
    chain = []
    while type(branch) is let_t:
        chain.append(branch)
        branch = branch.body
    tail = branch
    if type(tail) is tup_t:
        parts = [tail.items[i] for i in idxs]
        new = parts[0] if len(parts) == 1 else tup_t(tuple(parts))
    else:
        var = tail
        binds = []
        if not (type(tail) is Var or type(tail) is Avar):
            var = (Var if tup_t is Tuple else Avar)(fresh("s"), tail.type)
            binds = [(var, tail)]
        parts = [prj_t(i, var) for i in idxs]
        new = _wrap(binds, parts[0] if len(parts) == 1 else tup_t(tuple(parts)), let_t)
    for orig in reversed(chain):
        new = let_t(orig.var, orig.bound, new)
    return new


class _Tuples:
    """Split let-bound tuples used only through projections; narrow let-bound
    conditionals of tuples to the components that are used."""

    def __init__(self, uses: _Uses):
        self.u = uses
        self.env = {}  # variable name -> {component index: replacement term}
        self.changes = 0

    def go(self, n):
        t = type(n)
        if t in _LEAVES:
            return n
        if (t is Prj or t is APrj) and type(n.tup) in (Var, Avar):
            m = self.env.get(n.tup.name)
            if m is not None:
                return m[n.index]
            return n
        if t is Let or t is Alet:
            return self.chain(n, t)
        return _rebuild(n, self.go)

    def chain(self, n, t):
        u = self.u
        tup_t, prj_t, cond_t = (Tuple, Prj, Cond) if t is Let else (ATuple, APrj, Acond)
        binds = []
        changed = False
        origs = []
        while type(n) is t:
            v, b = n.var, self.go(n.bound)
            name = v.name
            used = u.prj.get(name)
            if used and not u.nonprj.get(name) and type(b) is tup_t:
                m = {}
                for i in sorted(used):
                    item = b.items[i]
                    if _trivial(item):
                        m[i] = item
                    else:
                        nv = _fresh_like(v, item.type)
                        binds.append((nv, item))
                        m[i] = nv
                self.env[name] = m
                changed = True
                self.changes += 1
            elif (used and not u.nonprj.get(name) and type(b) is cond_t
                  and len(used) < len(b.type.items)):
                idxs = sorted(used)
                nb = _with(b, t=_select(b.t, idxs, t, tup_t, prj_t),
                           e=_select(b.e, idxs, t, tup_t, prj_t))
                nv = _fresh_like(v, nb.type)
                binds.append((nv, nb))
                if len(idxs) == 1:
                    self.env[name] = {idxs[0]: nv}
                else:
                    self.env[name] = {i: prj_t(k, nv) for k, i in enumerate(idxs)}
                changed = True
                self.changes += 1
            else:
                binds.append((v, b))
                origs.append(n)
                changed |= b is not n.bound
            n = n.body
        body = self.go(n)
        if not changed and body is n:
            return origs[0]
        return _wrap(binds, body, t)


#: An array of tuples is split (see ``_EltSplit``) when its components' functions together
#: cost at most this much more than the whole function (work they would both redo).
SPLIT_COST = 4


def _cost(n) -> int:
    """A rough count of float operations and memory reads (transcendentals count 8)."""
    c = 0
    stack = [n]
    while stack:
        x = stack.pop()
        t = type(x)
        if t is PrimApp:
            if x.type.is_float or x.op in _EXPENSIVE:
                c += 8 if x.op in _EXPENSIVE else 1
        elif t is Index:
            c += 1
        elif t is While:
            c += 100
        stack.extend(_kids(x))
    return c


_EXPENSIVE = {"exp", "log", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
              "expm1", "log1p", "sqrt", "pow", "atan2", "div"}


class _EltSplit:
    """Split a let-bound array of tuples that is read only through projecting maps
    (``Map (\\x -> x.0.1) a``, and ``shape a``) into one array per projected component.

    AD produces such arrays (an adjoint and its contributions, paired per element); fusion
    would have to materialise the whole tuple array because several consumers read it,
    while each component alone is read once and fuses into its consumer.  Not done when
    the components share expensive work (each would recompute it).
    """

    def __init__(self, uses: _Uses):
        self.u = uses
        self.env = {}  # array name -> {element path: the component's array variable}
        self.changes = 0

    def go(self, n):
        t = type(n)
        if t in _LEAVES:
            return n
        if t is Map and type(n.a) is Avar and n.a.name in self.env:
            return self.env[n.a.name][_elt_path(n.f)]
        if t is Shape and n.array.name in self.env:
            return Shape(next(iter(self.env[n.array.name].values())))
        if t is Alet:
            return self.chain(n)
        return _rebuild(n, self.go)

    def parts(self, v, b, paths):
        """``{path: the producer of that component}``, or None when ``v`` stays whole."""
        u = self.u
        name = v.name
        if type(b) not in (Generate, Map, ZipWith):
            return None
        if len(paths) + u.shapes.get(name, 0) != u.cnt.get(name, 0):
            return None  # read some other way too
        out = {}
        for path in dict.fromkeys(paths):
            body = b.f.body  # the projection goes into the producer's function
            for i in path:  # (not a Map over a copy of it, which CSE would merge)
                body = Prj(i, body)
            out[path] = tidy(freshen(_with(b.f, body=body)))  # unique binders
        if len(out) > 1 and sum(map(_cost, out.values())) - _cost(b.f) > SPLIT_COST:
            return None  # the components share too much work
        return {path: _with(b, f=f) for path, f in out.items()}

    def chain(self, n):
        head = n
        binds = []
        changed = False
        while type(n) is Alet:
            v, b = n.var, self.go(n.bound)
            paths = self.u.eltprj.get(v.name)
            parts = self.parts(v, b, paths) if paths else None
            if parts is not None:
                m = {}
                for path, part in parts.items():
                    nv = Avar(fresh("a"), part.type)
                    binds.append((nv, part))
                    m[path] = nv
                self.env[v.name] = m
                changed = True
                self.changes += 1
            else:
                binds.append((v, b))
                changed |= b is not n.bound
            n = n.body
        body = self.go(n)
        if not changed and body is n:
            return head
        return _wrap(binds, body, Alet)


@_pass
def split_element_tuples(prog: Program) -> Program:
    """Arrays of tuples read only through projections become one array per component
    (see ``_EltSplit``)."""
    return _EltSplit(_Uses(prog)).go(prog)


@_pass
def project_tuples(prog: Program) -> Program:
    """Projections of tuples (both levels), pushed through lets and conditionals;
    let-bound tuples used only through projections are split into one let per
    component, and let-bound conditionals of tuples narrowed to the used components.
    """
    prog = _Tuples(_Uses(prog)).go(prog)
    return _Local(fold=False, project=True, zeros=False).run(prog)


@_pass
def eliminate_zeros(prog: Program, adjoint_zeros: bool = False) -> Program:
    """Remove identity maps and zero contributions (see the module docstring).

    ``ZipWith (+) a (Generate (shape a) (\\_ -> 0))`` becomes ``a`` for integers, and
    for floats when ``adjoint_zeros`` (after AD: ``x + 0.0`` only loses the sign of a
    zero adjoint).
    """
    return _Local(fold=False, project=False, zeros=True, adjoint_zeros=adjoint_zeros).run(prog)


def tidy(e, rounds: int = 4):
    """The simplifier's expression passes (constant folding, projections of tuples and
    lets, ``min x x``, CSE, inlining, dead lets) on one expression or function built
    after simplification: fusion
    composes index functions and shapes by substitution, and without this its shapes
    repeat whole let-chains per dimension (the host evaluates them before every loop).
    Common subterms are shared by lets, single-use lets inlined, dead ones dropped."""
    with _deep():
        if type(e) is Lam:
            return _with(e, body=tidy(e.body, rounds))
        e = _Renamer().go(e)  # fusion shares subterms, binders included
        for _ in range(rounds):
            e, changed = _round(e, lambda c, x: c.top_exp(x), _Local(zeros=False), False)
            if not changed:
                break
        return e


def _round(term, cse, local: _Local, split: bool):
    """One round of the passes over ``term`` (a program, or an expression with ``cse``
    its entry into ``_CSE``): ``(new term, whether anything changed)``."""
    c = _CSE(True)
    term = cse(c, term)
    inl = _Inliner(_Uses(term), c.scratch)
    term = inl.go(term)
    term = local.go(term)
    tup = _Tuples(_Uses(term))
    term = tup.go(term)
    done = [c, inl, local, tup]
    if split:
        spl = _EltSplit(_Uses(term))
        term = spl.go(term)
        done.append(spl)
    dce = _DCE(term)
    term = dce.go(term)
    done.append(dce)
    return term, any(x.changes for x in done)


# --------------------------------------------------------------------------- driver


def simplify(program: Program, adjoint_zeros: bool = False,
             max_rounds: int = MAX_ROUNDS) -> Program:
    """Run all passes to a fixpoint (at most ``max_rounds`` rounds).

    ``adjoint_zeros=True`` (for differentiated programs) also treats ``x + 0.0`` as
    ``x``.  Example: ``simplify(trace_program(f, types))``.
    """
    with _deep():
        p = _uniquify(program)
        for _ in range(max_rounds):
            p, changed = _round(p, lambda c, q: Program(q.params, c.region_arr(q.body)),
                                _Local(adjoint_zeros=adjoint_zeros), True)
            if not changed:
                return p
        return inline_lets(p)
