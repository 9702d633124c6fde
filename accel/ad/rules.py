"""The scalar derivative table: one entry per primitive of ``ast/prims.py``.

Each differentiable entry maps the argument terms and the result term to the
partial derivatives, written as ordinary accel expressions (so they run on
every backend and can be differentiated again).  ``DISCRETE`` primitives carry
no derivative; ``CASTS`` between floating types pass the adjoint through,
converted.  A primitive missing from every table is an error at import time.

Kink conventions (API.md): ``max``/``min`` split the adjoint equally between
tied arguments; ``abs`` has derivative 0 at 0; ``sqrt``/``log`` at 0 give
IEEE inf, never a finite number.
"""

from __future__ import annotations

from ..ast import nodes as N
from ..ast.prims import PRIMS


def _c(x, like: N.Exp) -> N.Exp:
    return N.Const(x, like.type)


def _p(op, *args) -> N.Exp:
    return N.PrimApp(op, args)


def _add(x, y):
    return _p("add", x, y)


def _mul(x, y):
    return _p("mul", x, y)


def _div(x, y):
    return _p("div", x, y)


def _neg(x):
    return _p("neg", x)


def _select(c, t, e):
    return N.Cond(c, t, e)


def _tie_split(x, y, greater: str):
    # d/dx of max(x, y) (greater="gt") or min(x, y) (greater="lt"): 1, 1/2 at ties, else 0
    one, half, zero = _c(1, x), _c(0.5, x), _c(0, x)
    return _select(_p(greater, x, y), one, _select(_p("eq", x, y), half, zero))


def _sq(x):
    return _mul(x, x)


def _pow_partials(x, y, r):
    # d/dx x^y = y * x^(y-1);  d/dy x^y = log(x) * x^y, taken as 0 where x == 0
    dx = _mul(y, _p("pow", x, _p("sub", y, _c(1, y))))
    dy = _select(_p("eq", x, _c(0, x)), _c(0, x), _mul(_p("log", x), r))
    return dx, dy


#: op -> (args, result) -> partial derivative terms, one per argument.
DERIVATIVES = {
    "add": lambda a, r: (_c(1, r), _c(1, r)),
    "sub": lambda a, r: (_c(1, r), _c(-1, r)),
    "mul": lambda a, r: (a[1], a[0]),
    "div": lambda a, r: (_div(_c(1, r), a[1]), _neg(_div(r, a[1]))),
    "neg": lambda a, r: (_c(-1, r),),
    "abs": lambda a, r: (_select(_p("gt", a[0], _c(0, r)), _c(1, r),
                                 _select(_p("lt", a[0], _c(0, r)), _c(-1, r), _c(0, r))),),
    "max": lambda a, r: (_tie_split(a[0], a[1], "gt"), _tie_split(a[1], a[0], "gt")),
    "min": lambda a, r: (_tie_split(a[0], a[1], "lt"), _tie_split(a[1], a[0], "lt")),
    "pow": lambda a, r: _pow_partials(a[0], a[1], r),
    "mod": lambda a, r: (_c(1, r), _neg(_p("floor", _div(a[0], a[1])))),
    "atan2": lambda a, r: (_div(a[1], _add(_sq(a[0]), _sq(a[1]))),
                           _neg(_div(a[0], _add(_sq(a[0]), _sq(a[1]))))),
    "sin": lambda a, r: (_p("cos", a[0]),),
    "cos": lambda a, r: (_neg(_p("sin", a[0])),),
    "tan": lambda a, r: (_add(_c(1, r), _sq(r)),),
    "asin": lambda a, r: (_div(_c(1, r), _p("sqrt", _p("sub", _c(1, r), _sq(a[0])))),),
    "acos": lambda a, r: (_neg(_div(_c(1, r), _p("sqrt", _p("sub", _c(1, r), _sq(a[0]))))),),
    "atan": lambda a, r: (_div(_c(1, r), _add(_c(1, r), _sq(a[0]))),),
    "sinh": lambda a, r: (_p("cosh", a[0]),),
    "cosh": lambda a, r: (_p("sinh", a[0]),),
    "tanh": lambda a, r: (_p("sub", _c(1, r), _sq(r)),),
    "exp": lambda a, r: (r,),
    "expm1": lambda a, r: (_add(r, _c(1, r)),),
    "log": lambda a, r: (_div(_c(1, r), a[0]),),
    "log1p": lambda a, r: (_div(_c(1, r), _add(_c(1, r), a[0])),),
    "sqrt": lambda a, r: (_div(_c(0.5, r), r),),
}

#: Primitives with no derivative: comparisons, rounding, integer and bool operations.
DISCRETE = frozenset(["floor", "ceil", "round", "truncate", "floordiv", "lt", "le", "gt", "ge",
                      "eq", "ne", "and", "or", "xor", "not", "to_int32", "to_int64", "to_bool"])

#: Conversions whose adjoint/tangent is the converted adjoint/tangent (float to float).
CASTS = frozenset(["to_float32", "to_float64"])

_missing = set(PRIMS) - set(DERIVATIVES) - DISCRETE - CASTS
if _missing:  # pragma: no cover - a registry change without a rule
    raise ImportError(f"accel.ad.rules: no derivative rule for primitives {sorted(_missing)}")


def partials(op: str, args: tuple, result: N.Exp) -> tuple:
    """Partial derivatives of ``op`` at ``args`` (atoms) with value ``result`` (an atom).

    Integer-typed arguments get ``None`` (no derivative); callers skip them.
    """
    ps = DERIVATIVES[op](args, result)
    return tuple(p if a.type.is_float else None for p, a in zip(ps, args))
