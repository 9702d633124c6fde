"""The user-facing combinators and scalar functions (API.md, "Array combinators"
and "Expressions").  Each traces into AST nodes through ``frontend``."""

from __future__ import annotations

import builtins

import numpy as np

from .ast import nodes as N
from .ast.types import (ArrayT, ATupleT, Scalar, TupleT, bool_, float64, int64,
                         scalar_of_dtype, shape_type)
from .errors import ProgramTypeError
from .frontend import (Acc, All, AllMarker, Exp, IgnoreMarker, MaybeIndex, PermuteTarget,
                       array_term, as_acc, bind_array, bind_exp, from_term, ignore_target,
                       lift_like, located, prim, require_array_level, shape_term, to_term,
                       trace_alam, trace_lam, user_location)

# --------------------------------------------------------------------------- arrays


@located
def use(array) -> Acc:
    """Embed a constant NumPy array: ``A.use(np.arange(3.0))``."""
    require_array_level("use")
    arr = np.asarray(array)
    try:
        scalar_of_dtype(arr.dtype)
    except KeyError:
        raise ProgramTypeError(f"use: arrays of dtype {arr.dtype} are not supported (use "
                               "float32, float64, int32, int64 or bool)") from None
    return bind_array(N.Use(arr))


@located
def unit(e) -> Acc:
    """A rank-0 array holding the scalar ``e``."""
    require_array_level("unit")
    return bind_array(N.Unit(to_term(e)))


@located
def the(a):
    """The scalar in a rank-0 array."""
    a = as_acc(a, "the")
    if a.rank != 0:
        raise ProgramTypeError(f"the: expected a rank-0 array, got {a.type!r}")
    return a[()]


@located
def generate(shape, f) -> Acc:
    """``out[i] = f(i)`` for every index ``i`` of ``shape``."""
    require_array_level("generate")
    sh = shape_term(shape, "generate")
    r = len(sh.items)
    return bind_array(N.Generate(sh, trace_lam("generate", f, (shape_type(r),), index_rank=r)))


@located
def fill(shape, e) -> Acc:
    """A constant array: ``A.fill((3, 4), 0.0)``."""
    require_array_level("fill")
    return generate(shape, lambda _: e)


@located
def map(f, a) -> Acc:  # noqa: A001 - the API's name
    """Apply ``f`` to every element: ``A.map(lambda x: x * 2, a)``."""
    require_array_level("map")
    a = as_acc(a, "map")
    return bind_array(N.Map(trace_lam("map", f, (a.dtype,)), a.var))


@located
def zip_with(f, a, b) -> Acc:
    """Elementwise ``f(a[i], b[i])`` on the intersection of the two shapes."""
    require_array_level("zip_with")
    a, b = as_acc(a, "zip_with"), as_acc(b, "zip_with")
    if a.rank != b.rank:
        raise ProgramTypeError(f"zip_with: arrays of different ranks {a.type!r} and {b.type!r}")
    return bind_array(N.ZipWith(trace_lam("zip_with", f, (a.dtype, b.dtype)), a.var, b.var))


def _fold(op, f, z, a, rank_min=1):
    require_array_level(op)
    a = as_acc(a, op)
    if a.rank < rank_min:
        raise ProgramTypeError(f"{op}: expected an array of rank >= 1, got {a.type!r}")
    lam = trace_lam(op, f, (a.dtype, a.dtype), result_type=a.dtype)
    zt = None if z is None else to_term(z, a.dtype)
    return a, lam, zt


@located
def fold(f, z, a) -> Acc:
    """Reduce the innermost dimension with associative ``f`` starting from ``z``."""
    a, lam, zt = _fold("fold", f, z, a)
    return bind_array(N.Fold(lam, zt, a.var))


@located
def fold1(f, a) -> Acc:
    """Reduce the (non-empty) innermost dimension with associative ``f``."""
    a, lam, _ = _fold("fold1", f, None, a)
    return bind_array(N.Fold(lam, None, a.var))


def _add(x, y):
    return x + y


def _mul(x, y):
    return x * y


@located
def sum(a) -> Acc:  # noqa: A001
    """Sum over the innermost dimension."""
    require_array_level("sum")
    return fold(_add, 0, a)


@located
def product(a) -> Acc:
    """Product over the innermost dimension."""
    require_array_level("product")
    return fold(_mul, 1, a)


@located
def maximum(a) -> Acc:
    """Maximum over the (non-empty) innermost dimension."""
    require_array_level("maximum")
    return fold1(max, a)


@located
def minimum(a) -> Acc:
    """Minimum over the (non-empty) innermost dimension."""
    require_array_level("minimum")
    return fold1(min, a)


@located
def flatten(a) -> Acc:
    """The elements of ``a`` as a rank-1 array (row-major)."""
    require_array_level("flatten")
    a = as_acc(a, "flatten")
    if a.rank == 1:
        return a
    size = 1
    for s in a.shape:
        size = size * s
    return reshape((size,), a)


@located
def fold_all(f, z, a) -> Acc:
    """Reduce every element to a rank-0 array."""
    require_array_level("fold_all")
    return fold(f, z, flatten(a))


@located
def sum_all(a) -> Acc:
    """The sum of all elements, as a rank-0 array."""
    require_array_level("sum_all")
    return fold_all(_add, 0, a)


def _scan(op, left, f, z, a):
    a, lam, zt = _fold(op, f, z, a)
    return bind_array(N.Scan(lam, zt, a.var, left))


@located
def scanl(f, z, a) -> Acc:
    """Left-to-right inclusive-of-``z`` scan of the innermost dimension (length n+1)."""
    return _scan("scanl", True, f, z, a)


@located
def scanr(f, z, a) -> Acc:
    """Right-to-left scan (``f(x, acc)``), length n+1."""
    return _scan("scanr", False, f, z, a)


@located
def scanl1(f, a) -> Acc:
    """Left-to-right scan without initial value, length n."""
    return _scan("scanl1", True, f, None, a)


@located
def scanr1(f, a) -> Acc:
    """Right-to-left scan without initial value, length n."""
    return _scan("scanr1", False, f, None, a)


@located
def permute(comb, defaults, f, src) -> Acc:
    """Scatter: ``src[i]`` goes to ``f(i)`` of ``defaults`` (or nowhere for ``A.ignore``)."""
    require_array_level("permute")
    d, s = as_acc(defaults, "permute"), as_acc(src, "permute")
    if d.dtype != s.dtype:
        raise ProgramTypeError(f"permute: defaults {d.type!r} and source {s.type!r} have "
                               "different element types")
    lc = trace_lam("permute", comb, (d.dtype, d.dtype), result_type=d.dtype)
    lf = trace_lam("permute", f, (shape_type(s.rank),), index_rank=s.rank,
                   result_type=PermuteTarget(d.rank))
    want = TupleT((bool_, shape_type(d.rank)))
    if lf.type != want:
        got = lf.type.items[1] if isinstance(lf.type, TupleT) and len(lf.type.items) == 2 \
            else lf.type
        raise ProgramTypeError(f"permute: the index function must return an index of rank "
                               f"{d.rank} (the defaults array's) or A.ignore, got {got!r}")
    return bind_array(N.Permute(lc, d.var, lf, s.var, loc=user_location()))


@located
def backpermute(shape, f, a) -> Acc:
    """Gather: ``out[i] = a[f(i)]`` for every index ``i`` of ``shape``."""
    require_array_level("backpermute")
    a = as_acc(a, "backpermute")
    sh = shape_term(shape, "backpermute")
    r = len(sh.items)
    lam = trace_lam("backpermute", lambda ix: _index_value(f(ix)), (shape_type(r),),
                    index_rank=r, result_type=shape_type(a.rank))
    if lam.type != shape_type(a.rank):
        raise ProgramTypeError(f"backpermute: the index function must return an index of the "
                               f"source's rank {a.rank}, got {lam.type!r}")
    return bind_array(N.Backpermute(sh, lam, a.var))


def _index_value(ix):
    return Exp(shape_term(ix, "index"))


@located
def reshape(shape, a) -> Acc:
    """The same elements (row-major) in a new shape of the same size."""
    require_array_level("reshape")
    a = as_acc(a, "reshape")
    return bind_array(N.Reshape(shape_term(shape, "reshape"), a.var))


def _spec(op, spec) -> tuple:
    if not isinstance(spec, (tuple, list)):
        spec = (spec,)
    out = []
    for s in spec:
        if isinstance(s, AllMarker) or s is builtins.Ellipsis:
            out.append(None)
        else:
            try:
                out.append(shape_term((s,), op).items[0])
            except ProgramTypeError:
                raise ProgramTypeError(f"{op}: specifier entries must be A.All or ints, got "
                                       f"{s!r}") from None
    return tuple(out)


@located
def replicate(spec, a) -> Acc:
    """Insert new dimensions (ints in ``spec``) around the kept ones (``A.All``)."""
    require_array_level("replicate")
    a = as_acc(a, "replicate")
    sp = _spec("replicate", spec)
    kept = builtins.sum(s is None for s in sp)
    if kept != a.rank:
        raise ProgramTypeError(f"replicate: specifier {tuple(spec)!r} keeps {kept} dimensions "
                               f"but the array has rank {a.rank}")
    return bind_array(N.Replicate(sp, a.var))


@located
def slice(a, spec) -> Acc:  # noqa: A001
    """Fix dimensions (ints in ``spec``) and keep the others (``A.All``)."""
    require_array_level("slice")
    a = as_acc(a, "slice")
    sp = _spec("slice", spec)
    if len(sp) != a.rank:
        raise ProgramTypeError(f"slice: specifier {tuple(spec)!r} has {len(sp)} entries but "
                               f"the array has rank {a.rank}")
    return bind_array(N.Slice(a.var, sp))


def _same_structure(op, a, b):
    ta, tb = array_term(a, op), array_term(b, op)
    if ta.type != tb.type:
        raise ProgramTypeError(f"{op}: branches have different types {ta.type!r} and "
                               f"{tb.type!r}")
    return ta, tb


@located
def acond(c, a, b):
    """``a`` if ``c`` else ``b`` (arrays or tuples of arrays); only the taken one runs."""
    require_array_level("acond")
    if isinstance(c, (bool, np.bool_)):
        return a if c else b
    ct = to_term(c, bool_)
    if ct.type != bool_:
        raise ProgramTypeError(f"acond: the condition must be bool, got {ct.type!r}")
    ta, tb = _same_structure("acond", a, b)
    return bind_array(N.Acond(ct, ta, tb))


@located
def awhile(cond, body, init, checkpoint: int | None = None):
    """Array loop: ``x = init; while the(cond(x)): x = body(x)``.

    Reverse mode keeps the loop's states on a tape; ``checkpoint=k`` keeps only
    every k-th state and recomputes the others, bounding the tape's memory.
    """
    if checkpoint is not None and (not isinstance(checkpoint, int) or checkpoint < 1):
        raise ProgramTypeError(f"awhile: checkpoint must be a positive int, got {checkpoint!r}")
    require_array_level("awhile")
    ti = array_term(init, "awhile")
    t = ti.type

    def cond_arr(x):
        r = cond(x)
        return unit(r) if isinstance(r, (Exp, bool)) else r

    lc = trace_alam("awhile condition", cond_arr, t)
    lb = trace_alam("awhile body", body, t)
    if lc.type != ArrayT(bool_, 0):
        raise ProgramTypeError(f"awhile: the condition must return a rank-0 bool array, got "
                               f"{lc.type!r}")
    if lb.type != t:
        raise ProgramTypeError(f"awhile: the body returns {lb.type!r}, the state is {t!r}")
    return bind_array(N.Awhile(lc, lb, ti, checkpoint or 1))


# --------------------------------------------------------------------------- expressions


@located
def cond(c, t, e):
    """``t`` if ``c`` else ``e``, evaluating only the chosen branch."""
    if isinstance(c, (bool, np.bool_)):
        return t if c else e
    if isinstance(t, (IgnoreMarker, MaybeIndex)) or isinstance(e, (IgnoreMarker, MaybeIndex)):
        return _cond_target(c, t, e)
    ct = to_term(c, bool_)
    if ct.type != bool_:
        raise ProgramTypeError(f"cond: the condition must be bool, got {ct.type!r}")
    tt, et = lift_like((t, e))
    if tt.type != et.type:
        raise ProgramTypeError(f"cond: branches have different types {tt.type!r} and "
                               f"{et.type!r}")
    return from_term(N.Cond(ct, tt, et))


def _cond_target(c, t, e):
    def target(x, rank):
        if isinstance(x, MaybeIndex):
            return x.term
        if isinstance(x, IgnoreMarker):
            return ignore_target(rank)
        return N.Tuple((N.Const(True, bool_), shape_term(x, "permute target")))

    known = [x for x in (t, e) if not isinstance(x, IgnoreMarker)]
    if not known:
        return t
    k = known[0]
    rank = len(k.term.type.items[1].items) if isinstance(k, MaybeIndex) else \
        len(shape_term(k, "permute target").items)
    tt, et = target(t, rank), target(e, rank)
    if tt.type != et.type:
        raise ProgramTypeError(f"cond: permute targets of different ranks {tt.type!r} and "
                               f"{et.type!r}")
    return MaybeIndex(bind_exp(N.Cond(to_term(c, bool_), tt, et)))


@located
def while_(cond, body, init):
    """Scalar loop: ``x = init; while cond(x): x = body(x)``."""
    ti = to_term(init)
    lc = trace_lam("while_ condition", cond, (ti.type,), result_type=bool_)
    lb = trace_lam("while_ body", body, (ti.type,), result_type=ti.type)
    return from_term(N.While(lc, lb, ti))


def _unary(name):
    def f(x):
        return prim(name, x if isinstance(x, Exp) else Exp(to_term(x, float64)))
    f.__name__ = name
    f.__doc__ = f"Elementwise ``{name}`` of a floating scalar."
    return located(f)


sin, cos, tan = _unary("sin"), _unary("cos"), _unary("tan")
asin, acos, atan = _unary("asin"), _unary("acos"), _unary("atan")
sinh, cosh, tanh = _unary("sinh"), _unary("cosh"), _unary("tanh")
exp, expm1, log, log1p, sqrt = (_unary("exp"), _unary("expm1"), _unary("log"),
                                _unary("log1p"), _unary("sqrt"))
floor, ceil, round, truncate = (_unary("floor"), _unary("ceil"), _unary("round"),  # noqa: A001
                                _unary("truncate"))


@located
def atan2(y, x):
    """Four-quadrant arctangent of ``y / x``."""
    return prim("atan2", y, x)


@located
def max(x, y):  # noqa: A001
    """The larger of two scalars (ties split the adjoint equally)."""
    return prim("max", x, y)


@located
def min(x, y):  # noqa: A001
    """The smaller of two scalars."""
    return prim("min", x, y)


@located
def to_float(x, dtype: Scalar = float64):
    """Convert a scalar to a floating type."""
    if not (isinstance(dtype, Scalar) and dtype.is_float):
        raise ProgramTypeError(f"to_float: dtype must be A.float32 or A.float64, got {dtype!r}")
    return prim("to_" + dtype.name, x if isinstance(x, Exp) else Exp(to_term(x)))


@located
def to_int(x, dtype: Scalar = int64):
    """Convert a scalar to an integer type, truncating toward zero."""
    if not (isinstance(dtype, Scalar) and dtype.is_int):
        raise ProgramTypeError(f"to_int: dtype must be A.int32 or A.int64, got {dtype!r}")
    return prim("to_" + dtype.name, x if isinstance(x, Exp) else Exp(to_term(x)))


def shape(a) -> tuple:
    """The shape of an array, a tuple of int64 scalars (outermost first)."""
    return as_acc(a, "shape").shape


# --------------------------------------------------------------------------- helpers


@located
def iota(n, dtype: Scalar = int64) -> Acc:
    """``[0, 1, ..., n-1]``."""
    require_array_level("iota")
    if dtype == int64:
        return generate((n,), lambda i: i)
    return generate((n,), lambda i: prim("to_" + dtype.name, i))


@located
def zip(a, b) -> Acc:  # noqa: A001
    """Pair up two arrays elementwise (an array of tuples)."""
    require_array_level("zip")
    return zip_with(lambda x, y: (x, y), a, b)


@located
def transpose(a) -> Acc:
    """Swap the two dimensions of a rank-2 array."""
    require_array_level("transpose")
    a = as_acc(a, "transpose")
    if a.rank != 2:
        raise ProgramTypeError(f"transpose: expected a rank-2 array, got {a.type!r}")
    n, m = a.shape
    return backpermute((m, n), lambda ix: (ix[1], ix[0]), a)


@located
def size(a):
    """The number of elements of an array (an int64 scalar)."""
    out = 1
    for s in as_acc(a, "size").shape:
        out = out * s
    return out


__all__ = ["Acc", "All", "Exp", "ATupleT", "ArrayT"]
