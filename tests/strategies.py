"""Hypothesis strategies for accel: random well-typed programs (with inputs) and shapes.

``programs()`` draws a ``ProgramDesc`` (see ``accel.testing.programs``): the generator's
decisions are hypothesis integers, smallest = simplest, so hypothesis shrinks a failing
program to a minimal one, and prints it (``repr``) as a runnable reproducer.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from accel.testing.programs import ProgramDesc, generate_program
from accel.testing.sources import HypothesisSource

#: Settings for tests that run generated programs (JIT compiles and AD are slow).
SLOW = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                  HealthCheck.data_too_large,
                                                  HealthCheck.filter_too_much,
                                                  HealthCheck.large_base_example])


def slow_settings(max_examples: int):
    return settings(max_examples=max_examples, **SLOW)


@st.composite
def programs(draw, differentiable: bool = False, max_stmts: int = 6, allow_empty: bool = True,
             depth: int = 3) -> ProgramDesc:
    """A random well-typed program over the whole language, with matching inputs.

    ``differentiable=True``: float64/int inputs, float64 results and a ``loss``.
    """
    return generate_program(HypothesisSource(draw), differentiable=differentiable,
                            max_stmts=max_stmts, allow_empty=allow_empty, depth=depth)


def shapes(rank: int | None = None, max_side: int = 6, allow_empty: bool = True):
    """Array shapes of rank 0-2 (or ``rank``), sides up to ``max_side``, maybe empty."""
    ranks = st.just(rank) if rank is not None else st.integers(0, 2)
    lo = 0 if allow_empty else 1
    return ranks.flatmap(lambda r: st.tuples(*[st.integers(lo, max_side)] * r))


def arrays(dtype=np.float64, shape=None, lo=-2.0, hi=2.0):
    """NumPy arrays of ``dtype`` (float: in [lo, hi]; int: in [-4, 5]; bool)."""
    sh = shapes() if shape is None else st.just(shape)

    def fill(s):
        n = int(np.prod(s))
        if np.dtype(dtype).kind == "f":
            el = st.floats(lo, hi, allow_nan=False, width=32)
        elif np.dtype(dtype).kind == "b":
            el = st.booleans()
        else:
            el = st.integers(-4, 5)
        return st.lists(el, min_size=n, max_size=n).map(
            lambda xs: np.array(xs, dtype=dtype).reshape(s))

    return sh.flatmap(fill)
