"""The two-level AST of accel programs.

Expression nodes (scalar, sequential) and array nodes (parallel) are frozen
dataclasses, compared and hashed by structure (the hash is cached, so nodes are
cheap cache keys and CSE keys).  Every node computes its type when it is built,
checking its local typing rule: a pass that builds an ill-typed node fails at
that pass with ``ProgramTypeError``.  Variables carry their type and a globally
fresh name, so passes never need to rename to avoid capture unless they copy a
binder into its own scope.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field, fields

import numpy as np

from ..errors import ProgramTypeError
from . import prims
from .types import (ArrayT, ATupleT, Scalar, TupleT, bool_, int64, scalar_of_dtype,
                    shape_type)

_counter = itertools.count(1)


def fresh(prefix: str) -> str:
    """A globally unique variable name."""
    return f"{prefix}{next(_counter)}"


def names_used() -> int:
    """A bound on the numbers of the names ``fresh`` has made so far (every one is below
    it).  It uses up one number."""
    return next(_counter)


def reserve_names(n: int) -> None:
    """Make ``fresh`` number its names from ``n`` on at least: a program made in another
    process (``accel.progcache``), whose names are all numbered below ``n``, then never
    shares a name with one made later here."""
    global _counter
    if int(n) > next(_counter):  # (a margin for a ``fresh`` racing on another thread)
        _counter = itertools.count(int(n) + 1000)


class Node:
    """Structural equality and cached hashing for AST nodes."""

    def key(self) -> tuple:
        k = self.__dict__.get("_key")
        if k is None:
            k = (type(self).__name__,) + tuple(
                _keyof(getattr(self, name)) for name in _compare_fields(self))
            object.__setattr__(self, "_key", k)
        return k

    def __hash__(self) -> int:
        h = self.__dict__.get("_hash")
        if h is None:
            _hash_descendants(self)  # bottom-up, so that deep trees do not recurse
            h = hash(self.key())
            object.__setattr__(self, "_hash", h)
        return h

    def __eq__(self, other) -> bool:
        if self is other:
            return True
        if type(self) is not type(other) or hash(self) != hash(other):
            return False
        # Compare the keys with an explicit stack (the same result as ``key() == key()``).
        stack, seen = [(self.key(), other.key())], set()
        while stack:
            x, y = stack.pop()
            if x is y:
                continue
            if isinstance(x, Node):
                if type(x) is not type(y) or hash(x) != hash(y):
                    return False
                if (id(x), id(y)) not in seen:  # shared subtrees are compared once
                    seen.add((id(x), id(y)))
                    stack.append((x.key(), y.key()))
            elif isinstance(x, tuple):
                if not isinstance(y, tuple) or len(x) != len(y):
                    return False
                stack.extend(zip(x, y))
            elif isinstance(y, (Node, tuple)) or x != y:
                return False
        return True

    def _set_type(self, t) -> None:
        object.__setattr__(self, "type", t)

    def __getstate__(self):
        # The cached hash is of this process (string hashes are salted per process) and the
        # cached key holds it: a pickled node recomputes both where it is loaded.
        d = self.__dict__
        if "_hash" in d or "_key" in d:
            d = {k: v for k, v in d.items() if k not in ("_hash", "_key")}
        return d


def _compare_fields(n) -> tuple:
    t = type(n)
    names = _COMPARE.get(t)
    if names is None:  # once per class: ``dataclasses.fields`` is slow
        names = _COMPARE[t] = tuple(f.name for f in fields(n) if f.compare)
    return names


_COMPARE: dict = {}


def _key_nodes(k):
    """The nodes inside a key (keys nest tuples only shallowly)."""
    for v in k:
        if isinstance(v, Node):
            yield v
        elif isinstance(v, tuple):
            yield from _key_nodes(v)


def _hash_descendants(root) -> None:
    """Cache the hashes of ``root``'s descendants, deepest first, without recursion."""
    stack = [(root, False)]
    while stack:
        n, expanded = stack.pop()
        if "_hash" in n.__dict__:
            continue
        if expanded:
            if n is not root:
                hash(n)  # its children are cached: shallow
            continue
        stack.append((n, True))
        stack.extend((c, False) for c in _key_nodes(n.key()) if "_hash" not in c.__dict__)


def _keyof(v):
    if isinstance(v, Node):
        return v  # nodes hash themselves (cached)
    if isinstance(v, tuple):
        return tuple(_keyof(x) for x in v)
    return v


def _err(op: str, msg: str):
    raise ProgramTypeError(f"{op}: {msg}")


node = dataclass(frozen=True, eq=False)

# --------------------------------------------------------------------------- expressions


class Exp(Node):
    """Base class of expression (scalar-level) nodes."""


@node
class Const(Exp):
    value: object
    ty: Scalar
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        v = self.ty.dtype.type(self.value).item()
        object.__setattr__(self, "value", v)
        self._set_type(self.ty)

    def key(self):
        return ("Const", repr(self.value), self.ty)


@node
class Var(Exp):
    name: str
    ty: object
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        self._set_type(self.ty)


@node
class Let(Exp):
    var: Var
    bound: Exp
    body: Exp
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        if self.var.type != self.bound.type:
            _err("let", f"variable {self.var.name} : {self.var.type!r} bound to "
                 f"{self.bound.type!r}")
        self._set_type(self.body.type)


@node
class Tuple(Exp):
    items: tuple
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        self._set_type(TupleT(tuple(i.type for i in self.items)))


@node
class Prj(Exp):
    index: int
    tup: Exp
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        t = self.tup.type
        if not isinstance(t, TupleT) or not 0 <= self.index < len(t.items):
            _err("projection", f"component {self.index} of a value of type {t!r}")
        self._set_type(t.items[self.index])


@node
class PrimApp(Exp):
    op: str
    args: tuple
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        self._set_type(prims.result_type(self.op, [a.type for a in self.args]))


@node
class Index(Exp):
    array: "Avar"
    index: Exp
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        at = self.array.type
        if not isinstance(self.array, Avar) or not isinstance(at, ArrayT):
            _err("index", f"only array variables can be indexed, got {at!r}")
        if self.index.type != shape_type(at.rank):
            _err("index", f"an array of rank {at.rank} needs an index of type "
                 f"{shape_type(at.rank)!r}, got {self.index.type!r}")
        self._set_type(at.elt)


@node
class Shape(Exp):
    array: "Avar"
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        at = self.array.type
        if not isinstance(self.array, Avar) or not isinstance(at, ArrayT):
            _err("shape", f"only array variables have a shape here, got {at!r}")
        self._set_type(shape_type(at.rank))


@node
class Cond(Exp):
    c: Exp
    t: Exp
    e: Exp
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        if self.c.type != bool_:
            _err("cond", f"the condition must be bool, got {self.c.type!r}")
        if self.t.type != self.e.type:
            _err("cond", f"branches have different types {self.t.type!r} and {self.e.type!r}")
        self._set_type(self.t.type)


@node
class Lam(Node):
    """A scalar function ``\\params -> body`` (an argument of a combinator)."""

    params: tuple
    body: Exp
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        self._set_type(self.body.type)

    @property
    def param_types(self) -> tuple:
        return tuple(p.type for p in self.params)


@node
class While(Exp):
    cond: Lam
    body: Lam
    init: Exp
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        t = self.init.type
        _check_lam("while_ condition", self.cond, (t,), bool_)
        _check_lam("while_ body", self.body, (t,), t)
        self._set_type(t)


def _check_lam(op: str, lam: Lam, arg_types: tuple, result=None):
    if lam.param_types != tuple(arg_types):
        _err(op, f"function takes {lam.param_types!r}, expected {tuple(arg_types)!r}")
    if result is not None and lam.type != result:
        _err(op, f"function returns {lam.type!r}, expected {result!r}")
    return lam.type


# --------------------------------------------------------------------------- arrays


class Arr(Node):
    """Base class of array-level nodes."""


def _array_type(op: str, a: Arr, min_rank: int = 0) -> ArrayT:
    if not isinstance(a.type, ArrayT):
        _err(op, f"expected an array, got {a.type!r}")
    if a.type.rank < min_rank:
        _err(op, f"expected an array of rank >= {min_rank}, got {a.type!r}")
    return a.type


def _shape_exp(op: str, sh: Exp) -> int:
    t = sh.type
    if not isinstance(t, TupleT) or any(i != int64 for i in t.items):
        _err(op, f"a shape must be a tuple of int64, got {t!r}")
    return len(t.items)


@node
class Use(Arr):
    """A constant array embedded in the program (held read-only)."""

    array: np.ndarray
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        a = np.array(self.array, copy=True, order="C")
        a.setflags(write=False)
        object.__setattr__(self, "array", a)
        self._set_type(ArrayT(scalar_of_dtype(a.dtype), a.ndim))

    def key(self):
        a = self.array
        return ("Use", str(a.dtype), a.shape, hashlib.sha256(a.tobytes()).hexdigest())

    def __setstate__(self, state):
        self.__dict__.update(state)
        try:  # read-only again after unpickling (a copy made here)
            self.array.setflags(write=False)
        except ValueError:
            pass


@node
class Avar(Arr):
    name: str
    ty: object
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        self._set_type(self.ty)


@node
class Alet(Arr):
    var: Avar
    bound: Arr
    body: Arr
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        if self.var.type != self.bound.type:
            _err("let", f"array variable {self.var.name} : {self.var.type!r} bound to "
                 f"{self.bound.type!r}")
        self._set_type(self.body.type)


@node
class ATuple(Arr):
    items: tuple
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        self._set_type(ATupleT(tuple(i.type for i in self.items)))


@node
class APrj(Arr):
    index: int
    tup: Arr
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        t = self.tup.type
        if not isinstance(t, ATupleT) or not 0 <= self.index < len(t.items):
            _err("projection", f"component {self.index} of an array tuple of type {t!r}")
        self._set_type(t.items[self.index])


@node
class Unit(Arr):
    exp: Exp
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        self._set_type(ArrayT(self.exp.type, 0))


@node
class Generate(Arr):
    shape: Exp
    f: Lam
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        r = _shape_exp("generate", self.shape)
        self._set_type(ArrayT(_check_lam("generate", self.f, (shape_type(r),)), r))


@node
class Map(Arr):
    f: Lam
    a: Arr
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        at = _array_type("map", self.a)
        self._set_type(ArrayT(_check_lam("map", self.f, (at.elt,)), at.rank))


@node
class ZipWith(Arr):
    f: Lam
    a: Arr
    b: Arr
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        at, bt = _array_type("zip_with", self.a), _array_type("zip_with", self.b)
        if at.rank != bt.rank:
            _err("zip_with", f"arrays of different ranks: {at!r} and {bt!r}")
        self._set_type(ArrayT(_check_lam("zip_with", self.f, (at.elt, bt.elt)), at.rank))


@node
class Fold(Arr):
    """Reduce the innermost dimension; ``z is None`` is ``fold1``."""

    f: Lam
    z: Exp | None
    a: Arr
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        op = "fold" if self.z is not None else "fold1"
        at = _array_type(op, self.a, 1)
        _check_lam(op, self.f, (at.elt, at.elt), at.elt)
        if self.z is not None and self.z.type != at.elt:
            _err(op, f"initial value has type {self.z.type!r}, elements are {at.elt!r}")
        self._set_type(ArrayT(at.elt, at.rank - 1))


@node
class Scan(Arr):
    """Scan the innermost dimension; ``left`` picks scanl/scanr, ``z is None`` the 1-forms."""

    f: Lam
    z: Exp | None
    a: Arr
    left: bool
    type: object = field(init=False, compare=False, repr=False)

    @property
    def opname(self) -> str:
        return ("scanl" if self.left else "scanr") + ("" if self.z is not None else "1")

    def __post_init__(self):
        at = _array_type(self.opname, self.a, 1)
        _check_lam(self.opname, self.f, (at.elt, at.elt), at.elt)
        if self.z is not None and self.z.type != at.elt:
            _err(self.opname, f"initial value has type {self.z.type!r}, elements are {at.elt!r}")
        self._set_type(at)


@node
class Permute(Arr):
    """Scatter ``src`` into ``defaults``; ``f`` maps a source index to (keep, target)."""

    comb: Lam
    defaults: Arr
    f: Lam
    src: Arr
    type: object = field(init=False, compare=False, repr=False)
    #: ``file:line`` of the user's ``permute`` (AD errors cite it); not part of the structure
    loc: str = field(default="", compare=False, repr=False)

    def __post_init__(self):
        dt, st = _array_type("permute", self.defaults), _array_type("permute", self.src)
        if dt.elt != st.elt:
            _err("permute", f"defaults {dt!r} and source {st!r} have different elements")
        _check_lam("permute combination", self.comb, (dt.elt, dt.elt), dt.elt)
        _check_lam("permute index function", self.f, (shape_type(st.rank),),
                   TupleT((bool_, shape_type(dt.rank))))
        self._set_type(dt)


@node
class Backpermute(Arr):
    shape: Exp
    f: Lam
    a: Arr
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        r = _shape_exp("backpermute", self.shape)
        at = _array_type("backpermute", self.a)
        _check_lam("backpermute", self.f, (shape_type(r),), shape_type(at.rank))
        self._set_type(ArrayT(at.elt, r))


@node
class Reshape(Arr):
    shape: Exp
    a: Arr
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        r = _shape_exp("reshape", self.shape)
        self._set_type(ArrayT(_array_type("reshape", self.a).elt, r))


def _check_spec(op: str, spec: tuple):
    for s in spec:
        if s is not None and s.type != int64:
            _err(op, f"a slice specifier must be All or an int64, got {s.type!r}")


@node
class Replicate(Arr):
    """``spec`` outermost first: ``None`` keeps a dimension of ``a``, an Exp adds one."""

    spec: tuple
    a: Arr
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        at = _array_type("replicate", self.a)
        _check_spec("replicate", self.spec)
        kept = sum(s is None for s in self.spec)
        if kept != at.rank:
            _err("replicate", f"specifier keeps {kept} dimensions of an array of rank {at.rank}")
        self._set_type(ArrayT(at.elt, len(self.spec)))


@node
class Slice(Arr):
    """``spec`` outermost first: ``None`` keeps a dimension, an Exp fixes (removes) it."""

    a: Arr
    spec: tuple
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        at = _array_type("slice", self.a)
        _check_spec("slice", self.spec)
        if len(self.spec) != at.rank:
            _err("slice", f"specifier of length {len(self.spec)} for an array of rank {at.rank}")
        self._set_type(ArrayT(at.elt, sum(s is None for s in self.spec)))


@node
class Acond(Arr):
    c: Exp
    t: Arr
    e: Arr
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        if self.c.type != bool_:
            _err("acond", f"the condition must be bool, got {self.c.type!r}")
        if self.t.type != self.e.type:
            _err("acond", f"branches have different types {self.t.type!r} and {self.e.type!r}")
        self._set_type(self.t.type)


@node
class ALam(Node):
    """An array function ``\\param -> body`` (the arguments of ``awhile``)."""

    param: Avar
    body: Arr
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        self._set_type(self.body.type)


@node
class Awhile(Arr):
    """``x = init; while cond(x): x = body(x)``.

    ``every``: reverse mode keeps every ``every``-th state on its loop tape and
    recomputes the others (1 keeps them all).
    """

    cond: ALam
    body: ALam
    init: Arr
    every: int = 1
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        t = self.init.type
        for op, lam, want in (("awhile condition", self.cond, ArrayT(bool_, 0)),
                              ("awhile body", self.body, t)):
            if lam.param.type != t:
                _err(op, f"function takes {lam.param.type!r}, state is {t!r}")
            if lam.type != want:
                _err(op, f"function returns {lam.type!r}, expected {want!r}")
        self._set_type(t)


@node
class Program(Node):
    """A whole program: array parameters and a body (an array or array tuple)."""

    params: tuple
    body: Arr
    type: object = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        self._set_type(self.body.type)


EXP_NODES = (Const, Var, Let, Tuple, Prj, PrimApp, Index, Shape, Cond, While)
ARR_NODES = (Use, Avar, Alet, ATuple, APrj, Unit, Generate, Map, ZipWith, Fold, Scan,
             Permute, Backpermute, Reshape, Replicate, Slice, Acond, Awhile)
