"""accel: an Accelerate-style array language with reverse-mode AD (``import accel as A``).

This module is the public API (``../shared/API.md``) and nothing else: it re-exports the
user-facing names of ``language`` (the combinators), ``frontend`` (tracing), ``ad.api``
(derivatives), ``pipeline`` (run/compile/show) and ``errors``.  The layers below import
downwards only: ``ast`` imports no pass; ``ad``, ``simplify`` and ``fusion`` import the
AST; ``pipeline`` strings the passes together and loads a backend (``accel.backends``)
by name; the backends import the kernel program and the AST, not the passes that made
them (except the ``cuda.ptxcheck`` command, which compiles a corpus through the pipeline).
"""

from .ast.types import bool_, float32, float64, int32, int64
from .errors import (AccelError, BackendError, NotDifferentiableError, OutOfBoundsError,
                     OutOfMemoryError, ProgramTypeError, ShapeError)
from .frontend import Acc, All, Exp, ignore
from .language import (acond, acos, asin, atan, atan2, awhile, backpermute, ceil, cond, cos,
                       cosh, exp, expm1, fill, flatten, floor, fold, fold1, fold_all, generate,
                       iota, log, log1p, map, max, maximum, min, minimum, permute, product,
                       replicate, reshape, round, scanl, scanl1, scanr, scanr1, shape, sin, sinh,
                       size, slice, sqrt, sum, sum_all, tan, tanh, the, to_float, to_int,
                       transpose, truncate, unit, use, while_, zip, zip_with)
from .pipeline import compile, run, show

__version__ = "0.1.0"

__all__ = [
    "AccelError", "BackendError", "NotDifferentiableError", "OutOfBoundsError",
    "OutOfMemoryError", "ProgramTypeError", "ShapeError", "Acc", "All", "Exp", "ignore",
    "bool_", "float32", "float64", "int32", "int64",
    "acond", "acos", "asin", "atan", "atan2", "awhile", "backpermute", "ceil", "cond", "cos",
    "cosh", "exp", "expm1", "fill", "flatten", "floor", "fold", "fold1", "fold_all",
    "generate", "iota", "log", "log1p", "map", "max", "maximum", "min", "minimum", "permute",
    "product", "replicate", "reshape", "round", "scanl", "scanl1", "scanr", "scanr1", "shape",
    "sin", "sinh", "size", "slice", "sqrt", "sum", "sum_all", "tan", "tanh", "the",
    "to_float", "to_int", "transpose", "truncate", "unit", "use", "while_", "zip", "zip_with",
    "compile", "run", "show",
]

from .ad.api import gradientA, gradientE, value_and_gradientA, vjp  # noqa: E402

__all__ += ["gradientA", "gradientE", "value_and_gradientA", "vjp"]
from .ad.check import GradCheckReport, check_grad  # noqa: E402

__all__ += ["GradCheckReport", "check_grad"]
from .ad.forward.driver import jvp  # noqa: E402

__all__ += ["jvp"]
