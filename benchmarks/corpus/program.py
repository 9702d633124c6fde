"""What a corpus program is: one computation, its accel formulations, JAX's, its inputs.

A program is a scalar loss (a rank-0 float64 result) so that its gradient exists; the
corpus measures the loss ("primal") and its gradient with respect to ``wrt``.  Several
accel *formulations* of the same loss (replicate + zip_with, generate + indexing,
backpermute) must agree: the corpus measures whether equivalent programs run equally
fast.  JAX formulations are listed so that the runner can time each and compare accel
with the fastest one measured (the baseline a JAX user would pick), not with a slow
spelling.  Nothing here imports JAX or PyTorch: their functions import them when
called, so the registry loads (and the tests run) without them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

SIZES = ("tiny", "small", "default")


@dataclass(frozen=True)
class Program:
    """One corpus entry.

    ``inputs(size, rng)`` returns the argument tuple (NumPy arrays) for a size in
    :data:`SIZES` ("tiny" is for the tests on the interpreter); ``reference`` is the
    loss in plain NumPy over the same arguments; ``accel`` and ``jax`` map formulation
    names to functions of those arguments (the first accel formulation is the natural
    one); ``torch`` likewise, optional.
    """

    name: str
    accel: dict
    jax: dict
    inputs: Callable
    wrt: tuple
    reference: Callable
    torch: dict = field(default_factory=dict)
    note: str = ""
    jax_skip: dict = field(default_factory=dict)  # size -> JAX formulations not run there

    def args(self, size: str, seed: int = 0) -> tuple:
        if size not in SIZES:
            raise ValueError(f"size {size!r} is not one of {SIZES}")
        return self.inputs(size, np.random.default_rng(seed))


def dims(size: str, tiny: dict, small: dict, default: dict) -> dict:
    """The dimensions of an input generator for ``size``."""
    return {"tiny": tiny, "small": small, "default": default}[size]


def mul(a, b):
    return a * b


def add(a, b):
    return a + b


def square(v):
    return v * v
