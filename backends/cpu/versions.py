"""Kernels specialised on tests of sizes alone, the host picking the one that holds.

Reverse mode writes conditionals on sizes only: the adjoint of a windowed read picks
``u - a`` or ``a`` by ``oh >= kh`` (which of a convolution's output and kernel is the
longer), a zip_with's adjoint covers ``min`` of its arguments' shapes.  Such a test has
one value for the whole launch, but in the kernel it is a branch or a select per element,
and it hides the index arithmetic from LLVM: a block of a convolution's image adjoint
whose column is ``select(ow >= kw, u + k - r, r)`` loads its 16 columns one at a time
instead of as one vector.  So a loop step whose functions test sizes alone gets one set
of kernels per outcome of (up to ``MAX_TESTS`` of) those tests, each with the tests
decided, and the host, which knows the sizes when it launches the step, evaluates the
tests and launches that set.  numba compiles a function on its first call, so only the
outcome the arguments take is ever compiled; the module text grows, not compile time.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from accel.ast import nodes as N
from accel.ast.traverse import children, map_children
from accel.ast.types import bool_
from accel.simplify.rounds import tidy

from .branches import sizes_only

__all__ = ["MAX_TESTS", "size_tests", "outcomes", "decided"]

#: Tests specialised per step: 2^MAX_TESTS kernel sets in the module text.
MAX_TESTS = 2


def size_tests(step) -> list:
    """The distinct tests (closed boolean terms on sizes and constants, let-bound names
    substituted) that the step's functions branch on, at most ``MAX_TESTS``, in the
    order first met."""
    found: list = []
    for e in _functions(step):
        _collect(e, {}, found)
    return found[:MAX_TESTS]


def outcomes(tests: list) -> list:
    """Every assignment of truth values to ``tests``, all-true first."""
    return list(itertools.product((True, False), repeat=len(tests)))


def decided(step, tests: list, values: tuple):
    """``step`` with each of ``tests`` replaced by its value in ``values`` (through the
    let-bound names that hold it), simplified."""
    table = dict(zip(tests, values))
    fields = {}
    for name, v in vars(step).items():
        if isinstance(v, N.Lam):
            fields[name] = tidy(N.Lam(v.params, _decide(v.body, {}, table)))
        elif isinstance(v, N.Exp):
            fields[name] = tidy(_decide(v, {}, table))
    return replace(step, **fields)


def _functions(step) -> list:
    return [v for v in vars(step).values() if isinstance(v, (N.Lam, N.Exp))
            and not isinstance(v, N.Avar)]


def _resolved(e, sizes: dict):
    """``e`` with let-bound size terms (``sizes``: name -> term) substituted, or None if
    it reads anything else than sizes, constants and such names."""
    bad = []

    def go(x):
        if isinstance(x, N.Var):
            if x.name in sizes:
                return sizes[x.name]
            bad.append(x)
            return x
        return map_children(x, go)
    y = go(e)
    if bad or not sizes_only(y):
        return None
    return y


def _is_test(t) -> bool:
    """A boolean term worth specialising on: it reads at least one size."""
    if t is None or getattr(t, "type", None) != bool_ or isinstance(t, N.Const):
        return False
    stack = [t]
    while stack:
        x = stack.pop()
        if isinstance(x, N.Shape):
            return True
        stack.extend(children(x))
    return False


def _let_scope(e: N.Let, sizes: dict) -> tuple:
    """``(term, sizes in the let's body)``: the bound term resolved to sizes (or None),
    and ``sizes`` with the bound name added (or, shadowing an outer one, removed)."""
    r = _resolved(e.bound, sizes)
    inner = dict(sizes)
    if r is not None:
        inner[e.var.name] = r
    else:
        inner.pop(e.var.name, None)
    return r, inner


def _lam_scope(e: N.Lam, sizes: dict) -> dict:
    """``sizes`` without the names the lambda's parameters shadow."""
    params = {p.name for p in e.params}
    return {k: v for k, v in sizes.items() if k not in params}


def _collect(e, sizes: dict, found: list) -> None:
    """Walk ``e`` recording the size tests of its conditionals into ``found``."""
    if isinstance(e, N.Let):
        _collect(e.bound, sizes, found)
        _collect(e.body, _let_scope(e, sizes)[1], found)
        return
    if isinstance(e, N.Cond):
        t = _resolved(e.c, sizes)
        if _is_test(t) and t not in found:
            found.append(t)
    if isinstance(e, N.Lam):
        _collect(e.body, _lam_scope(e, sizes), found)
        return
    for c in children(e):
        _collect(c, sizes, found)


def _decide(e, sizes: dict, table: dict):
    """``e`` with conditionals (and let-bound names) whose test resolves to a key of
    ``table`` replaced by their decided arm (value)."""
    if isinstance(e, N.Let):
        bound = _decide(e.bound, sizes, table)
        r, inner = _let_scope(e, sizes)
        if r is not None and r in table:
            bound = N.Const(table[r], bool_)
        return N.Let(e.var, bound, _decide(e.body, inner, table))
    if isinstance(e, N.Cond):
        t = _resolved(e.c, sizes)
        if t is not None and t in table:
            return _decide(e.t if table[t] else e.e, sizes, table)
    if isinstance(e, N.Lam):
        return N.Lam(e.params, _decide(e.body, _lam_scope(e, sizes), table))
    return map_children(e, lambda c: _decide(c, sizes, table))
