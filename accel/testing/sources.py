"""Choice sources for the program generator: every decision is one bounded integer.

``HypothesisSource`` draws through hypothesis (which then shrinks the program),
``RandomSource`` from a seeded ``random.Random`` recording its choices, and
``ReplaySource`` replays a recorded (possibly shrunk) choice sequence.
"""

from __future__ import annotations

import random


class Source:
    """Where the generator's decisions come from: bounded integers, smallest = simplest."""

    def int(self, lo: int, hi: int) -> int:  # noqa: A003
        raise NotImplementedError

    def flag(self, p: float) -> bool:
        """True with probability ``p``; shrinks to False."""
        return self.int(0, 99) >= 100 - round(100 * p)

    def choice(self, xs):
        return xs[self.int(0, len(xs) - 1)]

    def recent(self, xs):
        """An element of ``xs``: the last one (the simplest) with probability ~1/2."""
        if len(xs) == 1 or not self.flag(0.5):
            return xs[-1]
        return xs[len(xs) - 1 - self.int(0, len(xs) - 1)]

    def weighted(self, options):
        """One value of ``[(weight, value), ...]`` (zero weights are skipped); the first
        option is the simplest."""
        options = [(w, v) for w, v in options if w > 0]
        total = sum(w for w, _ in options)
        k = self.int(0, total - 1)
        for w, v in options:
            if k < w:
                return v
            k -= w
        raise AssertionError("unreachable")


class HypothesisSource(Source):
    """Choices drawn through hypothesis (``draw`` of ``st.composite`` or ``st.data()``)."""

    def __init__(self, draw):
        from hypothesis import strategies as st
        self._draw = draw
        self._st = st

    def int(self, lo, hi):  # noqa: A003
        if hi <= lo:
            return lo
        return self._draw(self._st.integers(lo, hi))


class RandomSource(Source):
    """Choices from a ``random.Random``; ``choices`` records them (as offsets from lo)."""

    def __init__(self, rng: random.Random | int):
        self.rng = rng if isinstance(rng, random.Random) else random.Random(rng)
        self.choices: list[int] = []

    def int(self, lo, hi):  # noqa: A003
        if hi <= lo:
            return lo
        v = self.rng.randint(lo, hi)
        self.choices.append(v - lo)
        return v


class ReplaySource(Source):
    """Replays recorded offsets (clamped to each range; 0 once exhausted)."""

    def __init__(self, choices):
        self.given = list(choices)
        self.choices: list[int] = []

    def int(self, lo, hi):  # noqa: A003
        if hi <= lo:
            return lo
        i = len(self.choices)
        off = min(max(self.given[i], 0), hi - lo) if i < len(self.given) else 0
        self.choices.append(off)
        return lo + off
