"""The shape shared by every eval function the tool serves.

An eval function is three steps, and only the middle one is timed:

1. ``decode(input)``: the JSON input as NumPy arrays (and Python scalars that fix the
   program's structure, such as det's matrix size), checking the shapes.
2. ``run(*arrays)``: one call of a compiled accel program (``A.compile``), once per
   timed run.  ``key(*arrays)`` says which compiled program and signature a call uses,
   so the protocol can report the first call of each as a ``compile`` timing.
3. ``encode(result)``: the program's NumPy result as JSON values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import accel as A


class InputError(A.AccelError, ValueError):
    """An eval input of the wrong shape or type (reported as ``"success": false``)."""


def backend() -> str:
    """The accel backend the tool compiles for (``ACCEL_GRADBENCH_BACKEND``, default cpu)."""
    return os.environ.get("ACCEL_GRADBENCH_BACKEND", "cpu")


@dataclass
class EvalFunction:
    """One function of an eval module: ``decode`` -> timed ``run`` -> ``encode``.

    ``run`` receives the tuple ``decode`` returned; ``key`` (default: each array's dtype
    and rank, plus any non-array entries) identifies the compiled signature it uses.
    """

    decode: Callable[[Any], tuple]
    run: Callable[..., Any]
    encode: Callable[[Any], Any]
    key: Callable[..., tuple] | None = None

    def signature(self, args: tuple) -> tuple:
        if self.key is not None:
            return self.key(*args)
        return tuple((a.dtype.str, a.ndim) if isinstance(a, np.ndarray) else a for a in args)


class Programs:
    """Compiled accel programs, one ``A.compile`` per (name, structural parameters) and
    backend, kept for the life of the tool (each compiles once per dtype/rank signature)."""

    def __init__(self):
        self._compiled: dict = {}

    def get(self, key, make: Callable[[], Callable]):
        key = (key, backend())
        c = self._compiled.get(key)
        if c is None:
            # compiled-only: GradBench times every call after the first
            c = self._compiled[key] = A.compile(make(), backend=key[1], tiered=False)
        return c


PROGRAMS = Programs()


def floats(value, what: str, ndim: int) -> np.ndarray:
    """``value`` as a float64 array of rank ``ndim``, or :class:`InputError`."""
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise InputError(f"input field {what!r}: not an array of numbers ({e})") from None
    if a.ndim != ndim:
        raise InputError(f"input field {what!r}: expected rank {ndim}, got shape {a.shape}")
    return np.asarray(a, order="C")  # ascontiguousarray would make a 0-d array 1-d


def integer(value, what: str, lo: int = 0) -> int:
    """``value`` as a Python int ``>= lo``, or :class:`InputError`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise InputError(f"input field {what!r}: expected an integer, got {value!r}")
    if value < lo:
        raise InputError(f"input field {what!r}: expected an integer >= {lo}, got {value}")
    return int(value)


def field(inp, name: str):
    """``inp[name]`` of a JSON object input, or :class:`InputError`."""
    if not isinstance(inp, dict):
        raise InputError(f"input: expected an object, got {type(inp).__name__}")
    if name not in inp:
        raise InputError(f"input: missing field {name!r}")
    return inp[name]


def scalar(a) -> float:
    """A rank-0 result as a Python float."""
    return float(np.asarray(a))


def tolist(a):
    return np.asarray(a).tolist()
