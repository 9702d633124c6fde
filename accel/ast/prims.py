"""The registry of scalar primitives: one entry per primitive.

Each entry gives the name, the arity, the type rule and a vectorised NumPy
implementation (used by the interpreter and by the kernel-program evaluator).
Backends and the derivative table key their own entries by the same names, and
tests check that every table covers every primitive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import ProgramTypeError
from .types import SCALARS, Scalar, bool_


@dataclass(frozen=True)
class Prim:
    name: str
    arity: int
    rule: Callable  # (op name, arg types) -> result type, raises ProgramTypeError
    impl: Callable  # NumPy implementation on arrays of equal length
    symbol: str = ""  # infix symbol for printing, if any


def _fail(op, types, want):
    shown = ", ".join(map(repr, types))
    raise ProgramTypeError(f"{op}: expected {want}, got ({shown})")


def _same(op, ts, pred, want):
    if not all(isinstance(t, Scalar) and pred(t) for t in ts) or len(set(ts)) != 1:
        _fail(op, ts, want)
    return ts[0]


def _num(op, ts):
    return _same(op, ts, lambda t: t.is_num, "numbers of one type")


def _float(op, ts):
    return _same(op, ts, lambda t: t.is_float, "floats of one type")


def _intbool(op, ts):
    return _same(op, ts, lambda t: t.is_int or t.is_bool, "ints or bools of one type")


def _cmp(op, ts):
    _same(op, ts, lambda t: True, "scalars of one type")
    return bool_


def _ignore_errors(f):
    def g(*xs):
        with np.errstate(all="ignore"):
            return f(*xs)

    return g


def _floordiv(x, y):
    if x.dtype.kind in "iu":
        safe = np.where(y == 0, 1, y)
        return np.where(y == 0, 0, np.floor_divide(x, safe)).astype(x.dtype)
    return np.floor_divide(x, y)  # exact, like Python's // (not floor(x / y)): 5 // 0.001 == 4999


def _mod(x, y):
    if x.dtype.kind in "iu":
        safe = np.where(y == 0, 1, y)
        return np.where(y == 0, 0, np.mod(x, safe)).astype(x.dtype)
    return np.mod(x, y)


def _pow(x, y):
    if x.dtype.kind in "iu":
        neg = y < 0
        r = np.power(x, np.where(neg, 0, y))
        # Integer powers with negative exponents truncate 1/x^n toward zero.
        inv = np.where(x == 1, 1, np.where(x == -1, np.where(y % 2 == 0, 1, -1), 0))
        return np.where(neg, inv, r).astype(x.dtype)
    return np.power(x, y)


def _cast(to: Scalar):
    def f(x):
        if to.is_int and x.dtype.kind == "f":
            return np.trunc(np.nan_to_num(x, nan=0.0, posinf=0.0, neginf=0.0)).astype(to.dtype)
        if to.is_bool:
            return x != 0
        return x.astype(to.dtype)

    return f


def _bitnot(x):
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


PRIMS: dict[str, Prim] = {}


def _reg(name, arity, rule, impl, symbol=""):
    PRIMS[name] = Prim(name, arity, rule, _ignore_errors(impl), symbol)


_reg("add", 2, _num, np.add, "+")
_reg("sub", 2, _num, np.subtract, "-")
_reg("mul", 2, _num, np.multiply, "*")
_reg("div", 2, _float, np.divide, "/")
_reg("floordiv", 2, _num, _floordiv, "//")
_reg("mod", 2, _num, _mod, "%")
_reg("pow", 2, _num, _pow, "**")
_reg("neg", 1, _num, np.negative, "-")
_reg("abs", 1, _num, np.abs)
_reg("max", 2, _num, np.maximum)
_reg("min", 2, _num, np.minimum)
_reg("atan2", 2, _float, np.arctan2)
for _n, _f, _s in [("lt", np.less, "<"), ("le", np.less_equal, "<="),
                   ("gt", np.greater, ">"), ("ge", np.greater_equal, ">="),
                   ("eq", np.equal, "=="), ("ne", np.not_equal, "!=")]:
    _reg(_n, 2, _cmp, _f, _s)
_reg("and", 2, _intbool, np.bitwise_and, "&")
_reg("or", 2, _intbool, np.bitwise_or, "|")
_reg("xor", 2, _intbool, np.bitwise_xor, "^")
_reg("not", 1, _intbool, _bitnot, "~")
for _n, _f in [("sin", np.sin), ("cos", np.cos), ("tan", np.tan), ("asin", np.arcsin),
               ("acos", np.arccos), ("atan", np.arctan), ("sinh", np.sinh),
               ("cosh", np.cosh), ("tanh", np.tanh), ("exp", np.exp), ("expm1", np.expm1),
               ("log", np.log), ("log1p", np.log1p), ("sqrt", np.sqrt), ("floor", np.floor),
               ("ceil", np.ceil), ("round", np.round), ("truncate", np.trunc)]:
    _reg(_n, 1, _float, _f)
for _t in SCALARS:
    _reg("to_" + _t.name, 1, (lambda t: lambda op, ts: _same(op, ts, lambda s: True, "a scalar")
                              and t)(_t), _cast(_t))

def result_type(op: str, arg_types) -> Scalar:
    """The result type of primitive ``op`` on ``arg_types`` (raises ProgramTypeError)."""
    prim = PRIMS.get(op)
    if prim is None:
        raise ProgramTypeError(f"unknown primitive {op!r}")
    if len(arg_types) != prim.arity:
        raise ProgramTypeError(f"{op}: expected {prim.arity} arguments, got {len(arg_types)}")
    return prim.rule(op, tuple(arg_types))
