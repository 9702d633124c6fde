"""Types of accel programs.

Two stratified levels: *element* types (scalars and tuples of them) describe
expression values and array elements; *array* types (an element type and a
rank, or tuples of array types) describe array-level values.  All types are
immutable and hashable so that they can key caches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Scalar:
    """A scalar element type such as ``float64``."""

    name: str

    @property
    def dtype(self) -> np.dtype:
        return _DTYPES[self.name]

    @property
    def is_float(self) -> bool:
        return self.name in ("float32", "float64")

    @property
    def is_int(self) -> bool:
        return self.name in ("int32", "int64")

    @property
    def is_bool(self) -> bool:
        return self.name == "bool"

    @property
    def is_num(self) -> bool:
        return self.is_float or self.is_int

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class TupleT:
    """A tuple of element types (possibly empty: the unit type, rank-0 shapes)."""

    items: tuple

    def __repr__(self) -> str:
        return "(" + ", ".join(map(repr, self.items)) + ("," if len(self.items) == 1 else "") + ")"


@dataclass(frozen=True)
class ArrayT:
    """An array of ``rank`` dimensions with elements of type ``elt``."""

    elt: object
    rank: int

    def __repr__(self) -> str:
        return f"Array{self.rank} {self.elt!r}"


@dataclass(frozen=True)
class ATupleT:
    """A tuple of array types (array-level tuples)."""

    items: tuple

    def __repr__(self) -> str:
        return "(" + ", ".join(map(repr, self.items)) + ("," if len(self.items) == 1 else "") + ")"


float32 = Scalar("float32")
float64 = Scalar("float64")
int32 = Scalar("int32")
int64 = Scalar("int64")
bool_ = Scalar("bool")
SCALARS = (float32, float64, int32, int64, bool_)


def shape_type(rank: int) -> TupleT:
    """The type of a shape or index of the given rank: a tuple of int64."""
    return TupleT((int64,) * rank)


_SCALARS = {np.dtype(t.name): t for t in (float32, float64, int32, int64, bool_)}
_DTYPES = {t.name: d for d, t in _SCALARS.items()}


def scalar_of_dtype(dtype) -> Scalar:
    """The accel scalar type of a NumPy dtype (raises KeyError if unsupported)."""
    return _SCALARS[np.dtype(dtype)]


def leaves(t) -> list:
    """The scalar leaves of an element type, left to right."""
    if isinstance(t, TupleT):
        return [s for item in t.items for s in leaves(item)]
    return [t]


def has_float(t) -> bool:
    """Whether any leaf of an element or array type is floating."""
    if isinstance(t, ArrayT):
        return has_float(t.elt)
    if isinstance(t, ATupleT):
        return any(has_float(i) for i in t.items)
    return any(s.is_float for s in leaves(t))
