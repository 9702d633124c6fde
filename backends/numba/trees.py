"""Scalarised tuples: a value of a (nested) tuple type as its atoms, left to right.

Both numba backends keep every array of tuples as one buffer per scalar leaf and every
tuple value as a flat list of atoms (generated-code names on the kernel side, NumPy
scalars on the host side); these two functions go between the two views.
"""

from __future__ import annotations

from accel.ast.types import TupleT


def flat(v) -> list:
    """The atoms of a value, left to right."""
    if isinstance(v, tuple):
        return [a for x in v for a in flat(x)]
    return [v]


def rebuild(t, atoms):
    """A value of element type ``t`` from an iterator of atoms."""
    if isinstance(t, TupleT):
        return tuple(rebuild(x, atoms) for x in t.items)
    return next(atoms)
