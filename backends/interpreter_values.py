"""Values of the reference interpreter: arrays, lane values, and the API boundary.

An array during interpretation is an ``ArrayValue``: its shape and its data, an ndarray
of that shape or a nested tuple of such for tuple elements (struct of arrays); a scalar
expression's value is a *lane value*, a 1-D array with one entry per element being
computed (nested tuples for tuple types).  The helpers here build, restrict, store and
gather lane values with bounds checks, and convert the caller's arrays to values and
back (always copying, so results never alias inputs).  The interpreter and the ``fused``
backend (which evaluates kernel programs through the interpreter) share them.
"""

from __future__ import annotations

import math

import numpy as np

from accel.ast.trees import leaf_map, leaf_map2, leaves
from accel.ast.types import ArrayT, ATupleT, TupleT, scalar_of_dtype
from accel.errors import OutOfBoundsError, ProgramTypeError, ShapeError
from accel.memory import MAX_BYTES


class ArrayValue:
    """An array during interpretation: its shape and its data (struct of arrays)."""

    __slots__ = ("data", "shape")

    def __init__(self, shape: tuple, data):
        self.shape = tuple(int(s) for s in shape)
        self.data = data

    def __repr__(self) -> str:
        return f"ArrayValue({self.shape}, {self.data!r})"


def fix_lanes(v, t, n: int):
    """Coerce a lane value to the element type ``t``: every leaf an array of length ``n``."""
    if isinstance(t, TupleT):
        return tuple(fix_lanes(x, ti, n) for x, ti in zip(v, t.items))
    a = np.asarray(v)
    if a.dtype != t.dtype:
        a = a.astype(t.dtype)
    if a.shape != (n,):
        a = np.broadcast_to(a.reshape(-1) if a.size == 1 else a, (n,)).copy()
    return a


def empty_data(t, shape: tuple):
    """Uninitialised data of element type ``t`` and the given shape."""
    if isinstance(t, TupleT):
        return tuple(empty_data(ti, shape) for ti in t.items)
    return np.empty(shape, dtype=t.dtype)


def flat_data(av: ArrayValue):
    """The data of ``av`` with every leaf flattened to 1-D (row-major)."""
    return leaf_map(lambda x: x.reshape(-1), av.data)


def take_lanes(v, idx):
    """Restrict a lane value to the lanes ``idx`` (any NumPy index applied to every leaf)."""
    return leaf_map(lambda x: x[idx], v)


def store_lanes(out, key, v) -> None:
    """``out[key] = v`` on every leaf."""
    leaf_map2(lambda o, x: o.__setitem__(key, x), out, v)


def prod(shape) -> int:
    return math.prod(int(s) for s in shape)


def check_shape(op: str, sh: tuple) -> tuple:
    if any(s < 0 for s in sh):
        raise ShapeError(f"{op}: negative size in shape {sh}")
    return sh


def check_bounds(op: str, ix: tuple, shape: tuple) -> None:
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


def linear_positions(ix: tuple, shape: tuple, n: int) -> np.ndarray:
    """Row-major linear positions of the (in-bounds) index lanes ``ix``."""
    lin = np.zeros(n, dtype=np.int64)
    for i, s in zip(ix, shape):
        lin = lin * s + i
    return lin


def addressable(shape: tuple) -> tuple:
    """``shape``, if int64 lanes over all its elements can be addressed (else a
    ``MemoryError``, which ``eval_array`` reports for its step, before NumPy's
    ``ValueError``)."""
    if prod(shape) * 8 > MAX_BYTES:
        raise MemoryError(f"{prod(shape):,} elements cannot be addressed")
    return shape


def all_indices(shape: tuple) -> tuple:
    """All indices of ``shape`` in row-major order, as a tuple of int64 lane arrays."""
    n = prod(addressable(shape))
    if not shape:
        return ()
    if n == 0:
        return tuple(np.zeros(0, dtype=np.int64) for _ in shape)
    return tuple(np.asarray(i, dtype=np.int64) for i in np.unravel_index(np.arange(n), shape))


def gather(av: ArrayValue, ix: tuple, n: int, op: str):
    """``av[ix]`` for index lanes ``ix`` (bounds-checked), as a lane value."""
    check_bounds(op, ix, av.shape)
    lin = linear_positions(ix, av.shape, n)
    return leaf_map(lambda x: x.reshape(-1)[lin], av.data)


# --------------------------------------------------------------------------- boundary


def from_input(v, t, what: str):
    """Convert a caller's argument to an internal value of type ``t`` (always copying)."""
    if isinstance(t, ATupleT):
        if not isinstance(v, (tuple, list)) or len(v) != len(t.items):
            raise ShapeError(f"{what}: expected a tuple of {len(t.items)} arrays ({t!r})")
        return tuple(from_input(x, ti, f"{what}[{i}]") for i, (x, ti) in enumerate(zip(v, t.items)))
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
    ls = leaves(data)
    if ls:
        shape = ls[0].shape
        if any(x.shape != shape for x in ls):
            raise ShapeError(f"{what}: component arrays of different shapes "
                             f"{[x.shape for x in ls]}")
    else:
        shape = (0,) * t.rank  # an array of unit elements carries no data
    return ArrayValue(shape, data)


def to_output(v):
    """Convert an internal value to the API's plain arrays / nested tuples (copying)."""
    if isinstance(v, ArrayValue):
        return leaf_map(lambda d: np.array(d, copy=True, order="C"), v.data)
    return tuple(to_output(x) for x in v)
