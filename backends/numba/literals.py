"""Constants and casts in generated numba code: the spelling of a value of an accel
scalar type (a plain literal where numba types it right anyway, or a typed NumPy scalar
where a dialect needs every value typed)."""

from __future__ import annotations

import math

from accel.ast.types import Scalar

CAST = {"float64": "np.float64", "float32": "np.float32", "int64": "np.int64",
        "int32": "np.int32", "bool": "np.bool_"}


def cast(t: Scalar, atom: str) -> str:
    return f"{CAST[t.name]}({atom})"


def _float_literal(v: float) -> str:
    if math.isnan(v):
        return "np.nan"
    if math.isinf(v):
        return "np.inf" if v > 0 else "-np.inf"
    return repr(v)


def const_atom(value, t: Scalar) -> str:
    """A Python expression for the constant ``value`` of type ``t`` (a plain literal
    where numba types it as ``t`` anyway)."""
    if t.is_bool:
        return "True" if value else "False"
    if t.is_int:
        v = int(value)
        if v == -(1 << 63):
            return "np.int64(-9223372036854775807 - 1)"
        return cast(t, repr(v)) if t.name == "int32" else repr(v)
    s = _float_literal(float(value))
    return cast(t, s) if t.name == "float32" or s.startswith(("np", "-np")) else s


def typed_const(value, t: Scalar) -> str:
    """A typed constant: ``np.float64(...)``, ``np.int64(...)``, ``True``/``False``."""
    if t.is_bool:
        return "True" if value else "False"
    if t.is_int:
        v = int(value)
        if v == -(1 << 63):
            return "np.int64(-9223372036854775807 - 1)"
        return cast(t, repr(v))
    return cast(t, _float_literal(float(value)))
