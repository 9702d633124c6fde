"""Testing tools for accel: random well-typed programs and the properties they must satisfy.

- ``programs``: a generator of random well-typed accel programs (Python source over the
  public API, with matching inputs), driven by a *choice source* (``sources``) so that the
  same code serves hypothesis strategies (``tests/strategies.py``, which shrink) and a
  seeded ``random.Random`` (the soak, which shrinks with its own choice-sequence
  shrinker); its scalar expressions are generated in ``expressions``, its array
  statements in ``statements``.
- ``properties``: differential properties (backends agree; reverse mode == forward mode
  == finite differences; gradient programs type-check).
- ``soak``: ``python -m accel.testing.soak --n 2000`` runs thousands of programs.

May import accel's public API (``accel``), ``accel.ad.api`` and the frontend's tracing;
nothing imports ``accel.testing`` but tests and the soak.
"""

from .programs import ProgramDesc, generate_program
from .sources import HypothesisSource, RandomSource, ReplaySource, Source

__all__ = ["HypothesisSource", "ProgramDesc", "RandomSource", "ReplaySource", "Source",
           "generate_program"]
