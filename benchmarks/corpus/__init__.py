"""The performance corpus: programs written the natural way, each beside JAX.

``python -m benchmarks.corpus [--only NAME...] [--size small|default] [--repeat N]
[--backend cpu] [--cold] [--out DIR]`` measures every program's accel gradient and
primal (each formulation) against JAX's fastest formulation measured in the same run,
and prints one table; see :mod:`benchmarks.corpus.measure`.  One module per program
family; :data:`PROGRAMS` is the registry.
"""

from __future__ import annotations

from . import ba, convolution, distances, gmm, linalg, nn, reductions
from .program import SIZES, Program

PROGRAMS = [p for family in (linalg, nn, convolution, distances, reductions, gmm, ba)
            for p in family.PROGRAMS]

__all__ = ["PROGRAMS", "Program", "SIZES", "by_name"]


def by_name(names=None) -> list:
    """The programs named, in the order given (all, in registry order, when ``names`` is
    empty)."""
    if not names:
        return list(PROGRAMS)
    known = {p.name: p for p in PROGRAMS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown corpus program(s) {unknown}; known: {sorted(known)}")
    return [known[n] for n in names]
