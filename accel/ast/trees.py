"""Nested tuples: leaves of values and types, and rebuilding a value from its leaves.

Both tuple kinds nest: tuples of arrays (``ATupleT``, values are Python tuples of
arrays or array variables) and tuples of elements (``TupleT``, struct-of-arrays data).
Passes flatten a value to its leaves, work per leaf, and rebuild the value in the shape
of its type from an iterator of leaves; these are the one copy of those helpers.
"""

from __future__ import annotations

from .types import ATupleT


def leaves(tree) -> list:
    """The leaves of a nested Python tuple, left to right."""
    if isinstance(tree, tuple):
        return [x for t in tree for x in leaves(t)]
    return [tree]


def leaf_map(f, tree):
    """``tree`` with ``f`` applied to every leaf."""
    if isinstance(tree, tuple):
        return tuple(leaf_map(f, x) for x in tree)
    return f(tree)


def leaf_map2(f, a, b):
    """``f`` applied to the leaves of two trees of one shape, pairwise."""
    if isinstance(a, tuple):
        return tuple(leaf_map2(f, x, y) for x, y in zip(a, b))
    return f(a, b)


def type_leaves(t, kind=ATupleT) -> list:
    """The leaf types of ``t`` (tuples of ``kind``: ``ATupleT`` or ``TupleT``)."""
    if isinstance(t, kind):
        return [x for i in t.items for x in type_leaves(i, kind)]
    return [t]


def tree_like(t, it, kind=ATupleT):
    """A value in the shape of type ``t`` (tuples of ``kind``), its leaves taken from the
    iterator ``it`` in order."""
    if isinstance(t, kind):
        return tuple(tree_like(i, it, kind) for i in t.items)
    return next(it)
