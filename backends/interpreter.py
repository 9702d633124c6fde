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

from contextlib import contextmanager

import numpy as np

from accel.ast import prims
from accel.ast.nodes import (Acond, ALam, Alet, APrj, Arr, ATuple, Avar, Awhile, Backpermute, Cond,
                             Const, Exp, Fold, Generate, Index, Lam, Let, Map, Permute, PrimApp,
                             Prj, Program, Replicate, Reshape, Scan, Shape, Slice, Tuple, Unit, Use,
                             Var, While, ZipWith)
from accel.ast.patterns import projection_side, scalar_binop
from accel.ast.traverse import recursion_headroom
from accel.ast.trees import leaf_map, leaf_map2
from accel.ast.types import ArrayT
from accel.backends.interpreter_values import (ArrayValue, addressable, all_indices, check_bounds,
                                               check_shape, empty_data, fix_lanes, flat_data,
                                               from_input, gather, linear_positions, prod,
                                               store_lanes, take_lanes, to_output)
from accel.errors import (AccelError, OutOfBoundsError, OutOfMemoryError, ProgramTypeError,
                          ShapeError)
from accel.memory import out_of_memory

__all__ = ["InterpreterBackend", "Runner", "evaluate", "make_runner", "prepare"]

_RECURSION_LIMIT = 20000


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
                v = take_lanes(v, child.sel)
            child.vals[name] = v
        return v

    def restrict(self, sel) -> _Env:
        return _Env(len(sel), self.aenv, None, self, sel)

    def child(self) -> _Env:
        return _Env(self.n, self.aenv, None, self, None)


# --------------------------------------------------------------------------- helpers


_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@contextmanager
def deep_recursion():
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
    return fix_lanes(r, e.type, env.n)


def _e_index(e: Index, env):
    av = env.aenv[e.array.name]
    ix = _exp(e.index, env)
    return gather(av, ix, env.n, f"index into array {e.array.name}")


def _e_shape(e: Shape, env):
    av = env.aenv[e.array.name]
    return tuple(np.full(env.n, s, dtype=np.int64) for s in av.shape)


def _merge(n, ti, tv, ei, ev):
    def m(a, b):
        out = np.empty(n, dtype=a.dtype)
        out[ti] = a
        out[ei] = b
        return out
    return leaf_map2(m, tv, ev)


def _e_cond(e: Cond, env):
    c = _exp(e.c, env)
    if c.all():
        return _exp(e.t, env)
    if not c.any():
        return _exp(e.e, env)
    ti = np.flatnonzero(c)
    ei = np.flatnonzero(~c)
    tv = fix_lanes(_exp(e.t, env.restrict(ti)), e.type, len(ti))
    ev = fix_lanes(_exp(e.e, env.restrict(ei)), e.type, len(ei))
    return _merge(env.n, ti, tv, ei, ev)


def _apply(lam: Lam, args, env: _Env):
    """Apply ``lam`` to lane values ``args`` (free variables looked up in ``env``)."""
    vals = {p.name: a for p, a in zip(lam.params, args)}
    scope = _Env(env.n, env.aenv, vals, env, None)
    return fix_lanes(_exp(lam.body, scope), lam.type, env.n)


def _e_while(e: While, env):
    state = fix_lanes(_exp(e.init, env), e.type, env.n)
    result = leaf_map(np.copy, state)
    active = np.arange(env.n)  # lanes of env still looping
    cur = state  # the state of the active lanes
    while active.size:
        sub = env.restrict(active)
        c = _apply(e.cond, (cur,), sub)
        if not c.all():
            done = ~c
            store_lanes(result, active[done], take_lanes(cur, done))
            active = active[c]
            cur = take_lanes(cur, c)
            if not active.size:
                break
            sub = env.restrict(active)
        cur = _apply(e.body, (cur,), sub)
    return result


_EXP = {
    Const: _e_const, Var: _e_var, Let: _e_let, Tuple: _e_tuple, Prj: _e_prj,
    PrimApp: _e_primapp, Index: _e_index, Shape: _e_shape, Cond: _e_cond, While: _e_while,
}


def eval_scalar(e: Exp, aenv: dict):
    """Evaluate an array-level expression (one lane); returns a lane value of length 1."""
    env = _Env(1, aenv)
    return fix_lanes(_exp(e, env), e.type, 1)


def _int_exp(e: Exp, aenv: dict) -> int:
    return int(eval_scalar(e, aenv)[0])


def _shape_exp(e: Exp, aenv: dict, op: str) -> tuple:
    return check_shape(op, tuple(int(x[0]) for x in eval_scalar(e, aenv)))


# --------------------------------------------------------------------------- arrays


def eval_array(a: Arr, aenv: dict, name: str | None = None):
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
        scope[a.var.name] = eval_array(a.bound, scope, a.var.name)
        a = a.body
    return eval_array(a, scope)


def _a_atuple(a: ATuple, aenv):
    return tuple([eval_array(i, aenv) for i in a.items])


def _a_aprj(a: APrj, aenv):
    return eval_array(a.tup, aenv)[a.index]


def _a_unit(a: Unit, aenv):
    v = eval_scalar(a.exp, aenv)
    return ArrayValue((), leaf_map(lambda x: x.reshape(()), v))


def _run_lam(lam: Lam, args, n: int, aenv: dict):
    """Apply an array-level function to ``n`` lanes."""
    return _apply(lam, args, _Env(n, aenv))


def _a_generate(a: Generate, aenv):
    sh = _shape_exp(a.shape, aenv, "generate")
    n = prod(sh)
    v = _run_lam(a.f, (all_indices(sh),), n, aenv)
    return ArrayValue(sh, leaf_map(lambda x: x.reshape(sh), v))


def _a_map(a: Map, aenv):
    src = eval_array(a.a, aenv)
    n = prod(src.shape)
    v = _run_lam(a.f, (flat_data(src),), n, aenv)
    return ArrayValue(src.shape, leaf_map(lambda x: x.reshape(src.shape), v))


def _a_zipwith(a: ZipWith, aenv):
    x, y = eval_array(a.a, aenv), eval_array(a.b, aenv)
    sh = tuple(min(p, q) for p, q in zip(x.shape, y.shape))
    cut = tuple(slice(0, s) for s in sh)
    xs = leaf_map(lambda d: d[cut].reshape(-1), x.data)
    ys = leaf_map(lambda d: d[cut].reshape(-1), y.data)
    v = _run_lam(a.f, (xs, ys), prod(sh), aenv)
    return ArrayValue(sh, leaf_map(lambda d: d.reshape(sh), v))


def _rows(av: ArrayValue):
    """(outer shape, rows m, inner length k, data with leaves reshaped to (m, k))."""
    outer, k = av.shape[:-1], av.shape[-1]
    m = prod(outer)
    return outer, m, k, leaf_map(lambda d: d.reshape(m, k), av.data)


def _seed(z: Exp, m: int, aenv: dict):
    """The seed ``z`` (evaluated once) broadcast to ``m`` lanes."""
    v = eval_scalar(z, aenv)
    return leaf_map(lambda x: np.repeat(x, m), v)


def _a_fold(a: Fold, aenv):
    op = "fold" if a.z is not None else "fold1"
    src = eval_array(a.a, aenv)
    outer, m, k, rows = _rows(src)
    elt = a.type.elt
    if a.z is None and k == 0:
        raise ShapeError(f"{op}: the innermost dimension is empty (shape {src.shape})")
    if m == 0:
        return ArrayValue(outer, empty_data(elt, outer))
    fast = scalar_binop(a.f, _UFUNCS)
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
        acc = leaf_map(lambda d: d[:, 0], rows)
        start = 1
    for j in range(start, k):
        acc = _run_lam(a.f, (acc, take_lanes(rows, (slice(None), j))), m, aenv)
    acc = fix_lanes(acc, elt, m)
    return ArrayValue(outer, leaf_map(lambda x: x.reshape(outer), acc))


def _a_scan(a: Scan, aenv):
    src = eval_array(a.a, aenv)
    outer, m, k, rows = _rows(src)
    elt = a.type.elt
    kout = k + 1 if a.z is not None else k
    shape = outer + (kout,)
    if m == 0 or kout == 0:
        return ArrayValue(shape, empty_data(elt, shape))
    fast = scalar_binop(a.f, _UFUNCS)
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
    out = empty_data(elt, (m, kout))

    def put(j, v):
        store_lanes(out, (slice(None), j), v)

    def col(j):
        return take_lanes(rows, (slice(None), j))

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
    return ArrayValue(shape, leaf_map(lambda x: x.reshape(shape), out))


def _a_permute(a: Permute, aenv):
    dflt = eval_array(a.defaults, aenv)
    src = eval_array(a.src, aenv)
    tshape = dflt.shape
    out = leaf_map(lambda d: d.reshape(-1).copy(), dflt.data)
    n = prod(src.shape)
    keep, target = _run_lam(a.f, (all_indices(src.shape),), n, aenv)
    kidx = np.flatnonzero(keep)
    if kidx.size:
        tix = tuple(t[kidx] for t in target)
        check_bounds("permute (target index)", tix, tshape)
        lin = linear_positions(tix, tshape, kidx.size)
        vals = leaf_map(lambda d: d.reshape(-1)[kidx], src.data)
        fast = scalar_binop(a.comb, _UFUNCS)
        side = projection_side(a.comb)
        if fast is not None:
            _UFUNCS[fast].at(out, lin, vals)
        elif side == 0:  # scatter: each target's last source (row-major) wins
            win = np.full(prod(tshape), -1, dtype=np.int64)
            np.maximum.at(win, lin, np.arange(kidx.size))
            hit = np.flatnonzero(win >= 0)
            store_lanes(out, hit, take_lanes(vals, win[hit]))
        elif side is None:
            _permute_rounds(a.comb, out, lin, vals, aenv)
    return ArrayValue(tshape, leaf_map(lambda d: d.reshape(tshape), out))


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
        new = _run_lam(comb, (take_lanes(vals, sel), take_lanes(out, t)), len(sel), aenv)
        store_lanes(out, t, new)


def _a_backpermute(a: Backpermute, aenv):
    sh = _shape_exp(a.shape, aenv, "backpermute")
    src = eval_array(a.a, aenv)
    n = prod(sh)
    ix = _run_lam(a.f, (all_indices(sh),), n, aenv)
    v = gather(src, ix, n, "backpermute (source index)")
    return ArrayValue(sh, leaf_map(lambda x: x.reshape(sh), v))


def _a_reshape(a: Reshape, aenv):
    sh = _shape_exp(a.shape, aenv, "reshape")
    src = eval_array(a.a, aenv)
    if prod(sh) != prod(src.shape):
        raise ShapeError(f"reshape: cannot reshape an array of shape {src.shape} "
                         f"({prod(src.shape)} elements) to shape {sh} ({prod(sh)} elements)")
    return ArrayValue(sh, leaf_map(lambda d: d.reshape(sh), src.data))


def _a_replicate(a: Replicate, aenv):
    src = eval_array(a.a, aenv)
    sizes = [None if s is None else _int_exp(s, aenv) for s in a.spec]
    if any(s is not None and s < 0 for s in sizes):
        raise ShapeError(f"replicate: negative size in specifier {tuple(sizes)}")
    dims = iter(src.shape)
    shape = addressable(tuple(next(dims) if s is None else s for s in sizes))
    expanded = tuple(d if s is None else 1 for d, s in zip(shape, sizes))

    def rep(d):
        return np.broadcast_to(d.reshape(expanded), shape).copy()
    return ArrayValue(shape, leaf_map(rep, src.data))


def _a_slice(a: Slice, aenv):
    src = eval_array(a.a, aenv)
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
    return ArrayValue(shape, leaf_map(lambda d: np.asarray(d[key]).reshape(shape), src.data))


def _a_acond(a: Acond, aenv):
    c = bool(eval_scalar(a.c, aenv)[0])
    return eval_array(a.t if c else a.e, aenv)


def _apply_alam(lam: ALam, x, aenv):
    scope = dict(aenv)
    scope[lam.param.name] = x
    return eval_array(lam.body, scope)


def _a_awhile(a: Awhile, aenv):
    x = eval_array(a.init, aenv)
    while bool(_apply_alam(a.cond, x, aenv).data.reshape(())):
        x = _apply_alam(a.body, x, aenv)
    return x


_ARR = {
    Use: _a_use, Avar: _a_avar, Alet: _a_alet, ATuple: _a_atuple, APrj: _a_aprj,
    Unit: _a_unit, Generate: _a_generate, Map: _a_map, ZipWith: _a_zipwith, Fold: _a_fold,
    Scan: _a_scan, Permute: _a_permute, Backpermute: _a_backpermute, Reshape: _a_reshape,
    Replicate: _a_replicate, Slice: _a_slice, Acond: _a_acond, Awhile: _a_awhile,
}


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
    with deep_recursion():
        aenv = {p.name: from_input(x, p.type, f"argument {i} ({p.name})")
                for i, (p, x) in enumerate(zip(program.params, args))}
        return to_output(eval_array(program.body, aenv))


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
