"""Testing tools for accel: random well-typed programs and the properties they must satisfy.

- ``programs``: a generator of random well-typed accel programs (Python source over the
  public API, with matching inputs), driven by a *choice source* so that the same code
  serves hypothesis strategies (``tests/strategies.py``, which shrink) and a seeded
  ``random.Random`` (the soak, which shrinks with its own choice-sequence shrinker).
- ``properties``: differential properties (backends agree; reverse mode == forward mode
  == finite differences; gradient programs type-check).
- ``soak``: ``python -m accel.testing.soak --n 2000`` runs thousands of programs.
"""

from .programs import (HypothesisSource, ProgramDesc, RandomSource, ReplaySource, Source,
                       generate_program)

__all__ = ["HypothesisSource", "ProgramDesc", "RandomSource", "ReplaySource", "Source",
           "generate_program"]
