"""The scalar functions generated CUDA kernels call, bound for the GPU or the simulator.

Generated kernels never call ``math.*`` or NumPy ufuncs directly: numba-cuda lowers
few NumPy ufuncs (``np.exp`` raises ``KeyError`` in its ufunc table), and under the
CUDA simulator the kernel body runs as Python, where ``math.sqrt(-1.0)`` raises
``ValueError`` and ``math.floor`` returns a Python ``int``.  Each name here is a
function with IEEE semantics on one float type:

* on a GPU: the libdevice function of that type (``libdevice.sin`` / ``sinf``, ...),
  which numba-cuda compiles to PTX;
* under the simulator (``NUMBA_ENABLE_CUDASIM=1``): the NumPy ufunc, which gives the
  same ``inf``/``nan``/signed zeros on NumPy scalars (never a Python exception).

``f64_bits``/``bits_f64`` (and the 32-bit pair) reinterpret a float's bit pattern as
an integer and back, for compare-and-swap loops on float arrays.
"""

from __future__ import annotations

from numba import cuda  # noqa: F401  (numba-cuda: the redirector resolves numba.cuda)

try:
    from numba.cuda.core import config as _config
    SIMULATOR = bool(_config.ENABLE_CUDASIM)
except ImportError:  # pragma: no cover - older layouts
    from numba import config as _config
    SIMULATOR = bool(getattr(_config, "ENABLE_CUDASIM", 0))

#: accel primitive -> libdevice base name (float32: the same name with an ``f`` suffix).
UNARY = {"sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin", "acos": "acos",
         "atan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "exp": "exp",
         "expm1": "expm1", "log": "log", "log1p": "log1p", "sqrt": "sqrt", "floor": "floor",
         "ceil": "ceil", "round": "rint", "truncate": "trunc"}
BINARY = {"atan2": "atan2", "fmod": "fmod", "copysign": "copysign", "pow": "pow"}

_NUMPY = {"sin": "sin", "cos": "cos", "tan": "tan", "asin": "arcsin", "acos": "arccos",
          "atan": "arctan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "exp": "exp",
          "expm1": "expm1", "log": "log", "log1p": "log1p", "sqrt": "sqrt",
          "floor": "floor", "ceil": "ceil", "rint": "rint", "trunc": "trunc",
          "atan2": "arctan2", "fmod": "fmod", "copysign": "copysign", "pow": "power"}


def name(fn: str, bits: int) -> str:
    """The name generated code calls for libdevice function ``fn`` on ``bits``-bit floats."""
    return f"f{bits}_{fn}"


#: Every name generated code may import from this module.
NAMES = sorted([name(f, b) for f in list(UNARY.values()) + list(BINARY.values())
                for b in (32, 64)] + ["f32_isfinite", "f64_isfinite", "f64_bits", "bits_f64",
                                      "f32_bits", "bits_f32"])


def _bind_simulator(g: dict) -> None:
    import numpy as np

    for fn, npname in _NUMPY.items():
        for b in (32, 64):
            g[name(fn, b)] = getattr(np, npname)
    g["f32_isfinite"] = g["f64_isfinite"] = np.isfinite

    def f64_bits(x):
        return np.array(x, dtype=np.float64).view(np.int64)[()]

    def bits_f64(b):
        return np.array(b, dtype=np.int64).view(np.float64)[()]

    def f32_bits(x):
        return np.array(x, dtype=np.float32).view(np.int32)[()]

    def bits_f32(b):
        return np.array(b, dtype=np.int32).view(np.float32)[()]

    g.update(f64_bits=f64_bits, bits_f64=bits_f64, f32_bits=f32_bits, bits_f32=bits_f32)


def _bind_gpu(g: dict) -> None:
    import math

    from numba.cuda import libdevice

    for fn in list(UNARY.values()) + list(BINARY.values()):
        g[name(fn, 64)] = getattr(libdevice, fn)
        g[name(fn, 32)] = getattr(libdevice, fn + "f")
    g["f32_isfinite"] = g["f64_isfinite"] = math.isfinite
    g["f64_bits"] = libdevice.double_as_longlong
    g["bits_f64"] = libdevice.longlong_as_double
    g["f32_bits"] = libdevice.float_as_int
    g["bits_f32"] = libdevice.int_as_float


if SIMULATOR:
    _bind_simulator(globals())
else:
    _bind_gpu(globals())
