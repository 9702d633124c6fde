"""The error classes of accel's public API (see API.md, "Errors").

Each is an ``AccelError`` and also the built-in exception users would expect,
so ``except TypeError`` keeps working for code that does not know accel.
"""


class AccelError(Exception):
    """Base class of every error a user of accel can cause."""


class ProgramTypeError(AccelError, TypeError):
    """An ill-typed program: mixed dtypes, wrong arity, non-bool condition, ..."""


class ShapeError(AccelError, ValueError):
    """Size mismatches, a bad reshape, a rank mismatch with the traced signature."""


class OutOfBoundsError(AccelError, IndexError):
    """An out-of-bounds index or permute target."""


class NotDifferentiableError(AccelError, TypeError):
    """A gradient was asked for that does not exist."""


class BackendError(AccelError, RuntimeError):
    """A backend that is unavailable here or failed."""


class OutOfMemoryError(AccelError, MemoryError):
    """An array a program step materialises does not fit in memory (or its size in bytes
    exceeds the address space).  The attributes say where and what: ``backend``,
    ``step``, the array's ``shape``, element type ``elt`` and ``nbytes``, and ``detail``
    (what failed).  The compiled program stays usable for smaller inputs."""

    def __init__(self, message: str, backend: str = "", step: str = "", shape=None,
                 elt=None, nbytes=None, detail: str = ""):
        super().__init__(message)
        self.backend, self.step, self.shape, self.elt = backend, step, shape, elt
        self.nbytes, self.detail = nbytes, detail
