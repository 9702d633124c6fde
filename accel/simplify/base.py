"""What every simplifier pass shares: recursion headroom, trivial terms, let chains.

Invariant the passes rely on: a *trivial* term (a variable, a constant, ``Shape`` of an
array variable, projections of these) costs nothing to duplicate, so a pass may copy it
to every use without adding work; everything else is bound once and referred to by name.
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..ast.nodes import Avar, Const, Lam, Prj, Shape, Tuple, Var
from ..ast.traverse import recursion_headroom

#: Let chains of thousands of bindings recurse this deep in the passes that are not iterative.
RECURSION_LIMIT = 100_000


@contextlib.contextmanager
def deep():
    """Recursion headroom and quiet NumPy (constant folding may overflow, as IEEE says)."""
    with recursion_headroom(RECURSION_LIMIT), np.errstate(all="ignore"):
        yield


def trivial(e) -> bool:
    """Free to duplicate: variables, constants, ``Shape`` of an array variable, projections."""
    t = type(e)
    while t is Prj:
        e = e.tup
        t = type(e)
    return t is Var or t is Const or t is Shape or t is Avar


def wrap_lets(binds: list, body, make):
    """``body`` under the bindings ``[(var, term), ...]``, outermost first (``make`` is
    ``Let`` or ``Alet``)."""
    for v, b in reversed(binds):
        body = make(v, b, body)
    return body


def is_param(e, lam: Lam, k: int) -> bool:
    """``e`` is parameter ``k`` of ``lam``."""
    return type(e) is Var and e.name == lam.params[k].name


def const_exp(e) -> bool:
    """A closed constant: a ``Const`` or a tuple of them."""
    t = type(e)
    if t is Const:
        return True
    if t is Tuple:
        return all(const_exp(i) for i in e.items)
    return False
