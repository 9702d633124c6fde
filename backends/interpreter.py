"""The reference interpreter: accel's semantics on NumPy, bounds-checked, simple, slow.

It runs an (unfused) ``Program`` and is the oracle that every other backend is
tested against.

Design: scalar expressions are evaluated *vectorised over lanes*.  An expression
environment maps ``Var`` names to lane values: a 1-D NumPy array of length ``n``
(one entry per element being computed) for a scalar, a Python tuple of lane values
for a tuple.  ``Map`` evaluates its function once with the flattened elements as
lanes, ``Generate`` with all indices as lanes, ``Fold``/``Scan`` loop over the
inner dimension in Python with the outer positions as lanes.  ``Cond`` evaluates
each branch only on the lanes that take it, and ``While`` iterates only the lanes
that are still active, so an out-of-bounds index in an untaken branch is never
evaluated.  Array-level expressions (shapes, slice specifiers, conditions, fold
seeds) are evaluated with one lane.

Invariants:

- Internally an array value is an ``ArrayValue`` (shape plus data: an ndarray of
  that shape, or a nested tuple of such for tuple elements, struct-of-arrays);
  array-level tuples are plain Python tuples of values.  At the API boundary the
  wrapper is dropped: arrays become ndarrays / tuples of ndarrays.
- Inputs are copied on entry and every result leaf is copied on exit, so results
  never alias the caller's arrays, ``Use`` constants or each other, and the caller's
  arrays are never mutated.  Internally, arrays are never mutated after they are
  built (``Permute`` writes into its own copy of the defaults).
- ``Let``/``Alet`` chains are evaluated iteratively, so long chains do not hit the
  recursion limit.
- NumPy floating-point warnings are suppressed: IEEE inf/nan propagate.

Example::

    >>> evaluate(program, [np.arange(3.0)])
    array([...])
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np

from accel.ast import prims
from accel.ast.nodes import (
    Acond,
    ALam,
    Alet,
    APrj,
    Arr,
    ATuple,
    Avar,
    Awhile,
    Backpermute,
    Cond,
    Const,
    Exp,
    Fold,
    Generate,
    Index,
    Lam,
    Let,
    Map,
    Permute,
    PrimApp,
    Prj,
    Program,
    Replicate,
    Reshape,
    Scan,
    Shape,
    Slice,
    Tuple,
    Unit,
    Use,
    Var,
    While,
    ZipWith,
)
from accel.ast.traverse import recursion_headroom
from accel.ast.types import ArrayT, ATupleT, Scalar, TupleT, scalar_of_dtype
from accel.errors import (AccelError, OutOfBoundsError, OutOfMemoryError, ProgramTypeError,
                          ShapeError)
from accel.memory import MAX_BYTES, out_of_memory

__all__ = ["ArrayValue", "InterpreterBackend", "Runner", "evaluate", "make_runner", "prepare"]

_RECURSION_LIMIT = 20000


# --------------------------------------------------------------------------- values


class ArrayValue:
    """An array during interpretation: its shape and its data (struct of arrays)."""

    __slots__ = ("data", "shape")

    def __init__(self, shape: tuple, data):
        self.shape = tuple(int(s) for s in shape)
        self.data = data

    def __repr__(self) -> str:
        return f"ArrayValue({self.shape}, {self.data!r})"


def _lmap(f, v):
    """Apply ``f`` to every leaf of a nested tuple of arrays."""
    if isinstance(v, tuple):
        return tuple(_lmap(f, x) for x in v)
    return f(v)


def _lmap2(f, v, w):
    if isinstance(v, tuple):
        return tuple(_lmap2(f, x, y) for x, y in zip(v, w))
    return f(v, w)


def _leaves(v) -> list:
    if isinstance(v, tuple):
        return [x for item in v for x in _leaves(item)]
    return [v]


def _fix(v, t, n: int):
    """Coerce a lane value to the element type ``t``: every leaf an array of length ``n``."""
    if isinstance(t, TupleT):
        return tuple(_fix(x, ti, n) for x, ti in zip(v, t.items))
    a = np.asarray(v)
    if a.dtype != t.dtype:
        a = a.astype(t.dtype)
    if a.shape != (n,):
        a = np.broadcast_to(a.reshape(-1) if a.size == 1 else a, (n,)).copy()
    return a


def _empty(t, shape: tuple):
    """Uninitialised data of element type ``t`` and the given shape."""
    if isinstance(t, TupleT):
        return tuple(_empty(ti, shape) for ti in t.items)
    return np.empty(shape, dtype=t.dtype)


def _flat(av: ArrayValue):
    """The data of ``av`` with every leaf flattened to 1-D (row-major)."""
    return _lmap(lambda x: x.reshape(-1), av.data)


def _take(v, idx):
    """Restrict a lane value to the lanes ``idx`` (any NumPy index applied to every leaf)."""
    return _lmap(lambda x: x[idx], v)


def _store(out, key, v) -> None:
    """``out[key] = v`` on every leaf."""
    _lmap2(lambda o, x: o.__setitem__(key, x), out, v)


def _prod(shape) -> int:
    return math.prod(int(s) for s in shape)


# --------------------------------------------------------------------------- environments


class _Env:
    """A scalar environment over ``n`` lanes.

    ``vals`` holds bindings made in this scope; a missing name is looked up in
    ``parent`` and, if ``sel`` is set, restricted to the lanes ``sel`` of the parent
    (lazily, and cached).  ``aenv`` is the array environment (name -> value).
    """

    __slots__ = ("aenv", "n", "parent", "sel", "vals")

    def __init__(self, n, aenv, vals=None, parent=None, sel=None):
        self.n = n
        self.aenv = aenv
        self.vals = {} if vals is None else vals
        self.parent = parent
        self.sel = sel

    def lookup(self, name: str):
        e = self
        path = []
        while name not in e.vals:
            path.append(e)
            e = e.parent
            if e is None:
                raise ProgramTypeError(f"interpreter: unbound variable {name}")
        v = e.vals[name]
        for child in reversed(path):
            if child.sel is not None:
                v = _take(v, child.sel)
            child.vals[name] = v
        return v

    def restrict(self, sel) -> _Env:
        return _Env(len(sel), self.aenv, None, self, sel)

    def child(self) -> _Env:
        return _Env(self.n, self.aenv, None, self, None)


# --------------------------------------------------------------------------- helpers


def _lam_fast_op(lam: Lam):
    """``'add'``/``'mul'``/``'max'``/``'min'`` if ``lam`` is ``\\x y -> op x y`` (either
    order) on a scalar type, else None."""
    if len(lam.params) != 2 or not isinstance(lam.type, Scalar):
        return None
    b = lam.body
    if not (isinstance(b, PrimApp) and b.op in ("add", "mul", "max", "min")):
        return None
    if not all(isinstance(a, Var) for a in b.args):
        return None
    p, q = (x.name for x in lam.params)
    if p == q:
        return None
    if {a.name for a in b.args} == {p, q}:
        return b.op
    return None


_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _check_shape(op: str, sh: tuple) -> tuple:
    if any(s < 0 for s in sh):
        raise ShapeError(f"{op}: negative size in shape {sh}")
    return sh


def _check_bounds(op: str, ix: tuple, shape: tuple) -> None:
    """Raise OutOfBoundsError if any lane of the index tuple ``ix`` is outside ``shape``."""
    bad = None
    for i, s in zip(ix, shape):
        b = (i < 0) | (i >= s)
        bad = b if bad is None else bad | b
    if bad is not None and bad.any():
        k = int(np.argmax(bad))
        shown = tuple(int(i[k]) for i in ix)
        if len(shown) == 1:
            shown = f"({shown[0]},)"
        raise OutOfBoundsError(f"{op}: index {shown} is out of bounds for shape {shape}")


def _linear(ix: tuple, shape: tuple, n: int) -> np.ndarray:
    """Row-major linear positions of the (in-bounds) index lanes ``ix``."""
    lin = np.zeros(n, dtype=np.int64)
    for i, s in zip(ix, shape):
        lin = lin * s + i
    return lin


def _addressable(shape: tuple) -> tuple:
    """``shape``, if int64 lanes over all its elements can be addressed (else a
    ``MemoryError``, which ``_arr`` reports for its step, before NumPy's ``ValueError``)."""
    if _prod(shape) * 8 > MAX_BYTES:
        raise MemoryError(f"{_prod(shape):,} elements cannot be addressed")
    return shape


def _all_indices(shape: tuple) -> tuple:
    """All indices of ``shape`` in row-major order, as a tuple of int64 lane arrays."""
    n = _prod(_addressable(shape))
    if not shape:
        return ()
    if n == 0:
        return tuple(np.zeros(0, dtype=np.int64) for _ in shape)
    return tuple(np.asarray(i, dtype=np.int64) for i in np.unravel_index(np.arange(n), shape))


def _gather(av: ArrayValue, ix: tuple, n: int, op: str):
    """``av[ix]`` for index lanes ``ix`` (bounds-checked), as a lane value."""
    _check_bounds(op, ix, av.shape)
    lin = _linear(ix, av.shape, n)
    return _lmap(lambda x: x.reshape(-1)[lin], av.data)


@contextmanager
def _deep_recursion():
    with recursion_headroom(_RECURSION_LIMIT), np.errstate(all="ignore"):
        yield


# --------------------------------------------------------------------------- expressions


def _exp(e: Exp, env: _Env):
    """Evaluate expression ``e`` over the lanes of ``env``."""
    return _EXP[type(e)](e, env)


def _e_const(e: Const, env):
    return np.full(env.n, e.value, dtype=e.ty.dtype)


def _e_var(e: Var, env):
    return env.lookup(e.name)


def _e_let(e: Let, env):
    scope = env.child()
    while isinstance(e, Let):
        scope.vals[e.var.name] = _exp(e.bound, scope)
        e = e.body
    return _exp(e, scope)


def _e_tuple(e: Tuple, env):
    return tuple([_exp(i, env) for i in e.items])


def _e_prj(e: Prj, env):
    return _exp(e.tup, env)[e.index]


def _e_primapp(e: PrimApp, env):
    args = [_exp(a, env) for a in e.args]
    r = prims.PRIMS[e.op].impl(*args)
    return _fix(r, e.type, env.n)


def _e_index(e: Index, env):
    av = env.aenv[e.array.name]
    ix = _exp(e.index, env)
    return _gather(av, ix, env.n, f"index into array {e.array.name}")


def _e_shape(e: Shape, env):
    av = env.aenv[e.array.name]
    return tuple(np.full(env.n, s, dtype=np.int64) for s in av.shape)


def _merge(n, ti, tv, ei, ev):
    def m(a, b):
        out = np.empty(n, dtype=a.dtype)
        out[ti] = a
        out[ei] = b
        return out
    return _lmap2(m, tv, ev)


def _e_cond(e: Cond, env):
    c = _exp(e.c, env)
    if c.all():
        return _exp(e.t, env)
    if not c.any():
        return _exp(e.e, env)
    ti = np.flatnonzero(c)
    ei = np.flatnonzero(~c)
    tv = _fix(_exp(e.t, env.restrict(ti)), e.type, len(ti))
    ev = _fix(_exp(e.e, env.restrict(ei)), e.type, len(ei))
    return _merge(env.n, ti, tv, ei, ev)


def _apply(lam: Lam, args, env: _Env):
    """Apply ``lam`` to lane values ``args`` (free variables looked up in ``env``)."""
    vals = {p.name: a for p, a in zip(lam.params, args)}
    scope = _Env(env.n, env.aenv, vals, env, None)
    return _fix(_exp(lam.body, scope), lam.type, env.n)


def _e_while(e: While, env):
    state = _fix(_exp(e.init, env), e.type, env.n)
    result = _lmap(np.copy, state)
    active = np.arange(env.n)  # lanes of env still looping
    cur = state  # the state of the active lanes
    while active.size:
        sub = env.restrict(active)
        c = _apply(e.cond, (cur,), sub)
        if not c.all():
            done = ~c
            _store(result, active[done], _take(cur, done))
            active = active[c]
            cur = _take(cur, c)
            if not active.size:
                break
            sub = env.restrict(active)
        cur = _apply(e.body, (cur,), sub)
    return result


_EXP = {
    Const: _e_const, Var: _e_var, Let: _e_let, Tuple: _e_tuple, Prj: _e_prj,
    PrimApp: _e_primapp, Index: _e_index, Shape: _e_shape, Cond: _e_cond, While: _e_while,
}


def _scalar_exp(e: Exp, aenv: dict):
    """Evaluate an array-level expression (one lane); returns a lane value of length 1."""
    env = _Env(1, aenv)
    return _fix(_exp(e, env), e.type, 1)


def _int_exp(e: Exp, aenv: dict) -> int:
    return int(_scalar_exp(e, aenv)[0])


def _shape_exp(e: Exp, aenv: dict, op: str) -> tuple:
    return _check_shape(op, tuple(int(x[0]) for x in _scalar_exp(e, aenv)))


# --------------------------------------------------------------------------- arrays


def _arr(a: Arr, aenv: dict, name: str | None = None):
    """Evaluate array node ``a`` (bound to ``name``, if it is) in the array environment
    ``aenv``.  The innermost node whose evaluation runs out of memory reports itself."""
    try:
        return _ARR[type(a)](a, aenv)
    except MemoryError as e:
        if isinstance(e, OutOfMemoryError):
            raise
        kind = type(a).__name__
        step = f"{name} = {kind}" if name else kind
        raise out_of_memory("interpreter", step, _node_shape(a, aenv), a.type.elt
                            if isinstance(a.type, ArrayT) else a.type,
                            f"the allocation failed: {e}") from None


def _node_shape(a: Arr, aenv: dict):
    """The shape of array node ``a``, computed without its elements (for error messages;
    None when ``a`` is not an array whose shape follows from its operands)."""
    t = type(a)
    try:
        if t is Avar:
            v = aenv.get(a.name)
            return v.shape if isinstance(v, ArrayValue) else None
        if t is Use:
            return a.array.shape
        if t is Unit:
            return ()
        if t in (Generate, Backpermute, Reshape):
            return _shape_exp(a.shape, aenv, t.__name__.lower())
        if t is Permute:
            return _node_shape(a.defaults, aenv)
        if t is ZipWith:
            x, y = _node_shape(a.a, aenv), _node_shape(a.b, aenv)
            return None if x is None or y is None else tuple(map(min, x, y))
        if t not in (Map, Fold, Scan, Replicate, Slice):
            return None
        src = _node_shape(a.a, aenv)
        if src is None or t is Map:
            return src
        if t is Fold:
            return src[:-1]
        if t is Scan:
            return src[:-1] + (src[-1] + (a.z is not None),)
        if t is Replicate:
            dims = iter(src)
            return tuple(next(dims) if s is None else _int_exp(s, aenv) for s in a.spec)
        return tuple(d for s, d in zip(a.spec, src) if s is None)
    except AccelError:
        return None


def _a_use(a: Use, aenv):
    return ArrayValue(a.array.shape, a.array)


def _a_avar(a: Avar, aenv):
    try:
        return aenv[a.name]
    except KeyError:
        raise ProgramTypeError(f"interpreter: unbound array variable {a.name}") from None


def _a_alet(a: Alet, aenv):
    scope = dict(aenv)
    while isinstance(a, Alet):
        scope[a.var.name] = _arr(a.bound, scope, a.var.name)
        a = a.body
    return _arr(a, scope)


def _a_atuple(a: ATuple, aenv):
    return tuple([_arr(i, aenv) for i in a.items])


def _a_aprj(a: APrj, aenv):
    return _arr(a.tup, aenv)[a.index]


def _a_unit(a: Unit, aenv):
    v = _scalar_exp(a.exp, aenv)
    return ArrayValue((), _lmap(lambda x: x.reshape(()), v))


def _run_lam(lam: Lam, args, n: int, aenv: dict):
    """Apply an array-level function to ``n`` lanes."""
    return _apply(lam, args, _Env(n, aenv))


def _a_generate(a: Generate, aenv):
    sh = _shape_exp(a.shape, aenv, "generate")
    n = _prod(sh)
    v = _run_lam(a.f, (_all_indices(sh),), n, aenv)
    return ArrayValue(sh, _lmap(lambda x: x.reshape(sh), v))


def _a_map(a: Map, aenv):
    src = _arr(a.a, aenv)
    n = _prod(src.shape)
    v = _run_lam(a.f, (_flat(src),), n, aenv)
    return ArrayValue(src.shape, _lmap(lambda x: x.reshape(src.shape), v))


def _a_zipwith(a: ZipWith, aenv):
    x, y = _arr(a.a, aenv), _arr(a.b, aenv)
    sh = tuple(min(p, q) for p, q in zip(x.shape, y.shape))
    cut = tuple(slice(0, s) for s in sh)
    xs = _lmap(lambda d: d[cut].reshape(-1), x.data)
    ys = _lmap(lambda d: d[cut].reshape(-1), y.data)
    v = _run_lam(a.f, (xs, ys), _prod(sh), aenv)
    return ArrayValue(sh, _lmap(lambda d: d.reshape(sh), v))


def _rows(av: ArrayValue):
    """(outer shape, rows m, inner length k, data with leaves reshaped to (m, k))."""
    outer, k = av.shape[:-1], av.shape[-1]
    m = _prod(outer)
    return outer, m, k, _lmap(lambda d: d.reshape(m, k), av.data)


def _seed(z: Exp, m: int, aenv: dict):
    """The seed ``z`` (evaluated once) broadcast to ``m`` lanes."""
    v = _scalar_exp(z, aenv)
    return _lmap(lambda x: np.repeat(x, m), v)


def _a_fold(a: Fold, aenv):
    op = "fold" if a.z is not None else "fold1"
    src = _arr(a.a, aenv)
    outer, m, k, rows = _rows(src)
    elt = a.type.elt
    if a.z is None and k == 0:
        raise ShapeError(f"{op}: the innermost dimension is empty (shape {src.shape})")
    if m == 0:
        return ArrayValue(outer, _empty(elt, outer))
    fast = _lam_fast_op(a.f)
    if fast is not None and k > 0:
        uf = _UFUNCS[fast]
        d = rows
        if a.z is not None:
            d = np.concatenate([_seed(a.z, m, aenv).reshape(m, 1), rows], axis=1)
        acc = uf.accumulate(d, axis=1, dtype=d.dtype)[:, -1]
        return ArrayValue(outer, acc.reshape(outer))
    if a.z is not None:
        acc = _seed(a.z, m, aenv)
        start = 0
    else:
        acc = _lmap(lambda d: d[:, 0], rows)
        start = 1
    for j in range(start, k):
        acc = _run_lam(a.f, (acc, _take(rows, (slice(None), j))), m, aenv)
    acc = _fix(acc, elt, m)
    return ArrayValue(outer, _lmap(lambda x: x.reshape(outer), acc))


def _a_scan(a: Scan, aenv):
    src = _arr(a.a, aenv)
    outer, m, k, rows = _rows(src)
    elt = a.type.elt
    kout = k + 1 if a.z is not None else k
    shape = outer + (kout,)
    if m == 0 or kout == 0:
        return ArrayValue(shape, _empty(elt, shape))
    fast = _lam_fast_op(a.f)
    if fast is not None:
        uf = _UFUNCS[fast]
        d = rows
        if not a.left:
            d = d[:, ::-1]
        if a.z is not None:
            d = np.concatenate([_seed(a.z, m, aenv).reshape(m, 1), d], axis=1)
        out = uf.accumulate(d, axis=1, dtype=d.dtype)
        if not a.left:
            out = out[:, ::-1]
        return ArrayValue(shape, np.ascontiguousarray(out).reshape(shape))
    out = _empty(elt, (m, kout))

    def put(j, v):
        _store(out, (slice(None), j), v)

    def col(j):
        return _take(rows, (slice(None), j))

    if a.left:
        if a.z is not None:
            acc, first, js = _seed(a.z, m, aenv), 0, range(k)
        else:
            acc, first, js = col(0), 0, range(1, k)
        put(first, acc)
        for j in js:
            acc = _run_lam(a.f, (acc, col(j)), m, aenv)
            put(j + 1 if a.z is not None else j, acc)
    else:
        if a.z is not None:
            acc = _seed(a.z, m, aenv)
            put(k, acc)
            js = range(k - 1, -1, -1)
        else:
            acc = col(k - 1)
            put(k - 1, acc)
            js = range(k - 2, -1, -1)
        for j in js:
            acc = _run_lam(a.f, (col(j), acc), m, aenv)
            put(j, acc)
    return ArrayValue(shape, _lmap(lambda x: x.reshape(shape), out))


def _a_permute(a: Permute, aenv):
    dflt = _arr(a.defaults, aenv)
    src = _arr(a.src, aenv)
    tshape = dflt.shape
    out = _lmap(lambda d: d.reshape(-1).copy(), dflt.data)
    n = _prod(src.shape)
    keep, target = _run_lam(a.f, (_all_indices(src.shape),), n, aenv)
    kidx = np.flatnonzero(keep)
    if kidx.size:
        tix = tuple(t[kidx] for t in target)
        _check_bounds("permute (target index)", tix, tshape)
        lin = _linear(tix, tshape, kidx.size)
        vals = _lmap(lambda d: d.reshape(-1)[kidx], src.data)
        fast = _lam_fast_op(a.comb)
        if fast is not None:
            _UFUNCS[fast].at(out, lin, vals)
        else:
            _permute_rounds(a.comb, out, lin, vals, aenv)
    return ArrayValue(tshape, _lmap(lambda d: d.reshape(tshape), out))


def _permute_rounds(comb: Lam, out, lin, vals, aenv):
    """Apply ``out[t] = comb(v, out[t])`` in source order, one collision round at a time.

    Round r combines, for every target, its r-th source (in source order), so the
    targets within a round are distinct and the round is one vectorised call.
    """
    k = lin.size
    order = np.argsort(lin, kind="stable")
    ts = lin[order]
    starts = np.ones(k, dtype=bool)
    starts[1:] = ts[1:] != ts[:-1]
    pos = np.arange(k)
    first = np.maximum.accumulate(np.where(starts, pos, 0))
    rank = np.empty(k, dtype=np.int64)
    rank[order] = pos - first
    by_round = np.argsort(rank, kind="stable")
    counts = np.bincount(rank)
    lo = 0
    for c in counts:
        sel = by_round[lo:lo + c]
        lo += c
        t = lin[sel]
        new = _run_lam(comb, (_take(vals, sel), _take(out, t)), len(sel), aenv)
        _store(out, t, new)


def _a_backpermute(a: Backpermute, aenv):
    sh = _shape_exp(a.shape, aenv, "backpermute")
    src = _arr(a.a, aenv)
    n = _prod(sh)
    ix = _run_lam(a.f, (_all_indices(sh),), n, aenv)
    v = _gather(src, ix, n, "backpermute (source index)")
    return ArrayValue(sh, _lmap(lambda x: x.reshape(sh), v))


def _a_reshape(a: Reshape, aenv):
    sh = _shape_exp(a.shape, aenv, "reshape")
    src = _arr(a.a, aenv)
    if _prod(sh) != _prod(src.shape):
        raise ShapeError(f"reshape: cannot reshape an array of shape {src.shape} "
                         f"({_prod(src.shape)} elements) to shape {sh} ({_prod(sh)} elements)")
    return ArrayValue(sh, _lmap(lambda d: d.reshape(sh), src.data))


def _a_replicate(a: Replicate, aenv):
    src = _arr(a.a, aenv)
    sizes = [None if s is None else _int_exp(s, aenv) for s in a.spec]
    if any(s is not None and s < 0 for s in sizes):
        raise ShapeError(f"replicate: negative size in specifier {tuple(sizes)}")
    dims = iter(src.shape)
    shape = _addressable(tuple(next(dims) if s is None else s for s in sizes))
    expanded = tuple(d if s is None else 1 for d, s in zip(shape, sizes))

    def rep(d):
        return np.broadcast_to(d.reshape(expanded), shape).copy()
    return ArrayValue(shape, _lmap(rep, src.data))


def _a_slice(a: Slice, aenv):
    src = _arr(a.a, aenv)
    key = []
    for s, d in zip(a.spec, src.shape):
        if s is None:
            key.append(slice(None))
        else:
            i = _int_exp(s, aenv)
            if not 0 <= i < d:
                spec = tuple("All" if x is None else "_" for x in a.spec)
                raise OutOfBoundsError(f"slice: index {i} is out of bounds for dimension "
                                       f"of size {d} (shape {src.shape}, specifier {spec})")
            key.append(i)
    key = tuple(key)
    shape = tuple(d for s, d in zip(a.spec, src.shape) if s is None)
    return ArrayValue(shape, _lmap(lambda d: np.asarray(d[key]).reshape(shape), src.data))


def _a_acond(a: Acond, aenv):
    c = bool(_scalar_exp(a.c, aenv)[0])
    return _arr(a.t if c else a.e, aenv)


def _apply_alam(lam: ALam, x, aenv):
    scope = dict(aenv)
    scope[lam.param.name] = x
    return _arr(lam.body, scope)


def _a_awhile(a: Awhile, aenv):
    x = _arr(a.init, aenv)
    while bool(_apply_alam(a.cond, x, aenv).data.reshape(())):
        x = _apply_alam(a.body, x, aenv)
    return x


_ARR = {
    Use: _a_use, Avar: _a_avar, Alet: _a_alet, ATuple: _a_atuple, APrj: _a_aprj,
    Unit: _a_unit, Generate: _a_generate, Map: _a_map, ZipWith: _a_zipwith, Fold: _a_fold,
    Scan: _a_scan, Permute: _a_permute, Backpermute: _a_backpermute, Reshape: _a_reshape,
    Replicate: _a_replicate, Slice: _a_slice, Acond: _a_acond, Awhile: _a_awhile,
}


# --------------------------------------------------------------------------- boundary


def _input(v, t, what: str):
    """Convert a caller's argument to an internal value of type ``t`` (always copying)."""
    if isinstance(t, ATupleT):
        if not isinstance(v, (tuple, list)) or len(v) != len(t.items):
            raise ShapeError(f"{what}: expected a tuple of {len(t.items)} arrays ({t!r})")
        return tuple(_input(x, ti, f"{what}[{i}]") for i, (x, ti) in enumerate(zip(v, t.items)))
    if not isinstance(t, ArrayT):
        raise ProgramTypeError(f"{what}: parameter of non-array type {t!r}")

    def leaf(x, s):
        if isinstance(s, TupleT):
            if not isinstance(x, (tuple, list)) or len(x) != len(s.items):
                raise ShapeError(f"{what}: expected a tuple of {len(s.items)} component arrays "
                                 f"for elements of type {s!r}")
            return tuple(leaf(xi, si) for xi, si in zip(x, s.items))
        arr = np.asarray(x)
        if arr.dtype != s.dtype:
            try:
                scalar_of_dtype(arr.dtype)
                ok = np.can_cast(arr.dtype, s.dtype, "same_kind")
            except KeyError:
                ok = False
            if not ok:
                raise ProgramTypeError(f"{what}: expected an array of {s!r}, got {arr.dtype}")
        if arr.ndim != t.rank:
            raise ShapeError(f"{what}: expected an array of rank {t.rank}, got shape {arr.shape}")
        return np.array(arr, dtype=s.dtype, copy=True, order="C")

    data = leaf(v, t.elt)
    ls = _leaves(data)
    if ls:
        shape = ls[0].shape
        if any(x.shape != shape for x in ls):
            raise ShapeError(f"{what}: component arrays of different shapes "
                             f"{[x.shape for x in ls]}")
    else:
        shape = (0,) * t.rank  # an array of unit elements carries no data
    return ArrayValue(shape, data)


def _output(v):
    """Convert an internal value to the API's plain arrays / nested tuples (copying)."""
    if isinstance(v, ArrayValue):
        return _lmap(lambda d: np.array(d, copy=True, order="C"), v.data)
    return tuple(_output(x) for x in v)


def evaluate(program: Program, args) -> object:
    """Run ``program`` on the NumPy arrays ``args`` with the reference semantics.

    Returns an ndarray, a (nested) tuple of ndarrays for an array of tuple elements,
    and a Python tuple of such values for an array-level tuple result.

    >>> evaluate(Program((x,), Map(Lam((v,), PrimApp("mul", (v, v))), x)), [np.arange(3)])
    array([0, 1, 4])
    """
    args = list(args)
    if len(args) != len(program.params):
        raise ShapeError(f"program takes {len(program.params)} arguments, got {len(args)}")
    with _deep_recursion():
        aenv = {p.name: _input(x, p.type, f"argument {i} ({p.name})")
                for i, (p, x) in enumerate(zip(program.params, args))}
        return _output(_arr(program.body, aenv))


_COMPUTING = (Use, Unit, Generate, Map, ZipWith, Fold, Scan, Permute, Backpermute, Reshape,
              Replicate, Slice)


class Runner:
    """``program`` prepared for the interpreter: ``Runner(program)(args)`` evaluates it."""

    def __init__(self, program: Program, check_bounds: bool = True):
        self.program = program  # the interpreter always checks bounds

    def __call__(self, args):
        return evaluate(self.program, args)

    def stats(self) -> dict:
        """``{"kernels": n}``: the array nodes that materialise an array (static count)."""
        from accel.ast.traverse import walk
        n = sum(isinstance(x, _COMPUTING) for x in walk(self.program))
        return {"kernels": n}


def make_runner(program: Program) -> Runner:
    """A callable ``run(args)`` evaluating ``program`` on a list of arrays."""
    return Runner(program)


def prepare(program: Program, check_bounds: bool = False) -> Runner:
    """The backend entry point used by ``accel.pipeline`` (bounds are always checked)."""
    return Runner(program, check_bounds)


class InterpreterBackend:
    """The reference backend: ``InterpreterBackend().compile(program)(args)``."""

    name = "interpreter"

    def compile(self, program: Program) -> Runner:
        return make_runner(program)

    def run(self, program: Program, args):
        return evaluate(program, args)
