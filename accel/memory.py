"""Allocation failures of every backend as one accel error.

A program that is small to write can ask for arrays that are huge (an (n, n) intermediate
of a gradient).  NumPy then raises a bare ``MemoryError`` (or, when the byte count does
not even fit in a C ``ssize_t``, ``ValueError: array is too big``) from deep inside a
backend, naming neither the program step nor the array.  Each backend's allocation site
calls ``check_allocatable`` before allocating and turns a ``MemoryError`` into
``out_of_memory(...)``: an ``OutOfMemoryError`` (an ``AccelError`` and a ``MemoryError``)
whose message names the backend, the step, the array's shape, element type and size.
The backends keep no state from a call that failed this way, so the same compiled
program runs on smaller inputs afterwards.
"""

from __future__ import annotations

import math

import numpy as np

from .ast.types import leaves
from .errors import OutOfMemoryError

#: The largest byte count NumPy (and a C ``ssize_t``) can describe.
MAX_BYTES = int(np.iinfo(np.intp).max)


def nbytes(shape, elt) -> int:
    """The bytes of an array of ``shape`` with elements of type ``elt`` (struct of
    arrays: the leaves of a tuple element are stored side by side)."""
    return math.prod(shape) * sum(s.dtype.itemsize for s in leaves(elt))


def _human(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def out_of_memory(backend: str, step: str, shape, elt, detail: str = "") -> OutOfMemoryError:
    """The error for ``step`` of ``backend`` failing to materialise its array of ``shape``
    (None if unknown) and element type ``elt``; ``detail`` says what failed (NumPy's or
    the driver's message)."""
    if shape is None:
        what, n = f"an array of {elt!r}", None
    else:
        shape = tuple(int(x) for x in shape)
        n = nbytes(shape, elt)
        what = f"an array of shape {shape} of {elt!r}: {n:,} bytes ({_human(n)})"
    msg = f"{backend}: out of memory materialising {step}, {what}"
    if detail:
        msg += f"; {detail}"
    return OutOfMemoryError(msg, backend=backend, step=step, shape=shape, elt=elt, nbytes=n,
                            detail=detail)


def check_allocatable(backend: str, step: str, shape, elt) -> None:
    """Raise ``OutOfMemoryError`` if the array's byte count exceeds what can be addressed
    (NumPy would raise ``ValueError`` and the kernels' int64 sizes would overflow)."""
    if max(nbytes(shape, elt), math.prod(shape)) > MAX_BYTES:
        raise out_of_memory(backend, step, shape, elt,
                            f"more than the {MAX_BYTES:,} bytes that can be addressed")
