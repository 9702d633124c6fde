"""Print accel programs in the thesis's Idealised Accelerate notation.

``show_program`` prints a whole program; ``show`` prints any node (program, array,
expression or function).  Array combinators are capitalised as in Accelerate
(``Map``, ``ZipWith``, ``Fold``, ...), functions print as ``(\\x1 x2 -> body)``,
primitives with an infix symbol print infix with minimal parentheses (Python's
precedences), the others in function style (``exp x``).  Chains of ``let`` bindings
are printed iteratively, one binding per line, so let-chains of any length print
without deep recursion; other deep nesting runs with a raised recursion limit (the
printer recurses only through Python-level calls, which use no C stack).
"""

from __future__ import annotations


import numpy as np

from . import prims
from .nodes import (Acond, ALam, Alet, APrj, Arr, ATuple, Avar, Awhile, Backpermute, Cond,
                    Const, Exp, Fold, Generate, Index, Lam, Let, Map, Permute, PrimApp, Prj,
                    Program, Replicate, Reshape, Scan, Shape, Slice, Tuple, Unit, Use, Var,
                    While, ZipWith)
from .traverse import recursion_headroom
from .types import bool_, float32, int64

WIDTH = 100  # lines longer than this are broken

# Precedence levels: higher binds tighter.
LOW, CMP, OR, XOR, AND, ADD, MUL, UNARY, POW, APP, ATOM = range(11)
_BINARY = {"==": CMP, "!=": CMP, "<": CMP, "<=": CMP, ">": CMP, ">=": CMP, "|": OR,
           "^": XOR, "&": AND, "+": ADD, "-": ADD, "*": MUL, "/": MUL, "//": MUL, "%": MUL,
           "**": POW}


def show_program(p: Program) -> str:
    """The program as text, e.g. ``\\a1 :: Array1 float64 ->\\n  Map (\\x2 -> x2 + 1.0) a1``."""
    with recursion_headroom():
        params = ", ".join([f"{v.name} :: {v.type!r}" for v in p.params])
        body = _arr(p.body)[0]
        return f"\\{params or '()'} ->\n  " + _indent(body, 2)


def show(node) -> str:
    """Any node as text: a program, an array, an expression or a function."""
    if isinstance(node, Program):
        return show_program(node)
    with recursion_headroom():
        if isinstance(node, Lam):
            return _lam(node)
        if isinstance(node, ALam):
            return _alam(node)
        if isinstance(node, Exp):
            return _exp(node)[0]
        if isinstance(node, Arr):
            return _arr(node)[0]
    return repr(node)


# --------------------------------------------------------------------------- layout helpers


def _indent(text: str, n: int) -> str:
    """Indent every line of ``text`` but the first by ``n`` spaces."""
    return text.replace("\n", "\n" + " " * n)


def _paren(text: str) -> str:
    return "(" + _indent(text, 1) + ")"


def _wrap(doc: tuple, prec: int) -> str:
    text, p = doc
    return text if p >= prec else _paren(text)


def _fits(*parts: str) -> bool:
    return all("\n" not in s for s in parts) and sum(len(s) + 1 for s in parts) <= WIDTH


def _app(head: str, args: list) -> tuple:
    """``head arg1 arg2 ...``, one argument per line (aligned) when too long."""
    if _fits(head, *args):
        return " ".join([head, *args]), APP
    col = len(head) + 1
    lines = [head + " " + _indent(args[0], col)] if args else [head]
    lines += [" " * col + _indent(a, col) for a in args[1:]]
    return "\n".join(lines), APP


def _tuple(items: list) -> tuple:
    if len(items) == 1 and _fits(items[0]):
        return f"({items[0]},)", ATOM
    if _fits(*items):
        return "(" + ", ".join(items) + ")", ATOM
    lines = ["( " + _indent(items[0], 2)] + [", " + _indent(s, 2) for s in items[1:]]
    return "\n".join(lines) + "\n)", ATOM


def _let_block(bindings: list, body: str) -> tuple:
    lines = []
    for i, (name, bound) in enumerate(bindings):
        prefix = ("let " if i == 0 else "    ") + name + " = "
        lines.append(prefix + _indent(bound, len(prefix)))
    lines.append("in " + _indent(body, 3))
    return "\n".join(lines), LOW


def _fun(params: str, body: str) -> str:
    head = f"(\\{params or '()'} ->"
    if _fits(head, body + ")"):
        return f"{head} {body})"
    return head + "\n  " + _indent(body, 2) + ")"


# --------------------------------------------------------------------------- expressions


def _const(c: Const) -> tuple:
    v, t = c.value, c.ty
    if t == bool_:
        text = "True" if v else "False"
    elif t.is_float:
        text = str(np.float32(v)) + "f" if t == float32 else repr(float(v))
    else:
        text = str(v) + ("" if t == int64 else "i32")
    return text, UNARY if text.startswith("-") else ATOM


def _lam(lam: Lam) -> str:
    return _fun(" ".join([p.name for p in lam.params]), _exp(lam.body)[0])


def _prim(e: PrimApp) -> tuple:
    sym = prims.PRIMS[e.op].symbol if e.op in prims.PRIMS else ""
    if sym and len(e.args) == 2 and sym in _BINARY:
        p = _BINARY[sym]
        lp = p + 1 if p in (CMP, POW) else p
        rp = p if p == POW else p + 1
        left, right = _wrap(_exp(e.args[0]), lp), _wrap(_exp(e.args[1]), rp)
        if _fits(left, sym, right):
            return f"{left} {sym} {right}", p
        return f"{left}\n{sym} " + _indent(right, len(sym) + 1), p
    if sym and len(e.args) == 1:
        return sym + _wrap(_exp(e.args[0]), APP), UNARY
    return _app(e.op, [_wrap(_exp(a), ATOM) for a in e.args])


def _exp(e) -> tuple:
    """``(text, precedence)`` of an expression."""
    if isinstance(e, Var):
        return e.name, ATOM
    if isinstance(e, Const):
        return _const(e)
    if isinstance(e, Let):
        bindings = []
        while isinstance(e, Let):
            bindings.append((e.var.name, _exp(e.bound)[0]))
            e = e.body
        body = _exp(e)[0]
        flat = " ".join([f"let {n} = {b} in" for n, b in bindings] + [body])
        if _fits(flat):
            return flat, LOW
        return _let_block(bindings, body)
    if isinstance(e, Tuple):
        return _tuple([_wrap(_exp(i), CMP) for i in e.items])
    if isinstance(e, Prj):
        return f"{_wrap(_exp(e.tup), ATOM)}.{e.index}", ATOM
    if isinstance(e, PrimApp):
        return _prim(e)
    if isinstance(e, Index):
        ix = _wrap(_exp(e.index), ATOM)
        return f"{e.array.name} ! " + _indent(ix, len(e.array.name) + 3), APP
    if isinstance(e, Shape):
        return f"shape {e.array.name}", APP
    if isinstance(e, Cond):
        c, t, f = _exp(e.c)[0], _exp(e.t)[0], _exp(e.e)[0]
        if _fits(f"if {c} then {t} else {f}"):
            return f"if {c} then {t} else {f}", LOW
        return (f"if {_indent(c, 3)}\n  then {_indent(t, 7)}\n  else {_indent(f, 7)}", LOW)
    if isinstance(e, While):
        return _app("while", [_lam(e.cond), _lam(e.body), _wrap(_exp(e.init), ATOM)])
    return repr(e), ATOM


# --------------------------------------------------------------------------- arrays


def _alam(lam: ALam) -> str:
    return _fun(lam.param.name, _arr(lam.body)[0])


def _a(a) -> str:
    """An array as a combinator argument."""
    return _wrap(_arr(a), ATOM)


def _e(e) -> str:
    """An expression as a combinator argument."""
    return _wrap(_exp(e), ATOM)


def _spec(spec: tuple) -> str:
    return _tuple(["All" if s is None else _wrap(_exp(s), CMP) for s in spec])[0]


def _arr(a) -> tuple:
    """``(text, precedence)`` of an array term."""
    if isinstance(a, Avar):
        return a.name, ATOM
    if isinstance(a, Alet):
        bindings = []
        while isinstance(a, Alet):
            bindings.append((a.var.name, _arr(a.bound)[0]))
            a = a.body
        return _let_block(bindings, _arr(a)[0])
    if isinstance(a, Use):
        return f"Use <{a.type!r} shape {a.array.shape}>", APP
    if isinstance(a, ATuple):
        return _tuple([_wrap(_arr(i), CMP) for i in a.items])
    if isinstance(a, APrj):
        return f"{_a(a.tup)}.{a.index}", ATOM
    if isinstance(a, Unit):
        return _app("Unit", [_e(a.exp)])
    if isinstance(a, Generate):
        return _app("Generate", [_e(a.shape), _lam(a.f)])
    if isinstance(a, Map):
        return _app("Map", [_lam(a.f), _a(a.a)])
    if isinstance(a, ZipWith):
        return _app("ZipWith", [_lam(a.f), _a(a.a), _a(a.b)])
    if isinstance(a, Fold):
        if a.z is None:
            return _app("Fold1", [_lam(a.f), _a(a.a)])
        return _app("Fold", [_lam(a.f), _e(a.z), _a(a.a)])
    if isinstance(a, Scan):
        name = ("Scanl" if a.left else "Scanr") + ("" if a.z is not None else "1")
        z = [] if a.z is None else [_e(a.z)]
        return _app(name, [_lam(a.f), *z, _a(a.a)])
    if isinstance(a, Permute):
        return _app("Permute", [_lam(a.comb), _a(a.defaults), _lam(a.f), _a(a.src)])
    if isinstance(a, Backpermute):
        return _app("Backpermute", [_e(a.shape), _lam(a.f), _a(a.a)])
    if isinstance(a, Reshape):
        return _app("Reshape", [_e(a.shape), _a(a.a)])
    if isinstance(a, Replicate):
        return _app("Replicate", [_spec(a.spec), _a(a.a)])
    if isinstance(a, Slice):
        return _app("Slice", [_a(a.a), _spec(a.spec)])
    if isinstance(a, Acond):
        return _app("Acond", [_e(a.c), _a(a.t), _a(a.e)])
    if isinstance(a, Awhile):
        return _app("Awhile", [_alam(a.cond), _alam(a.body), _a(a.init)])
    return repr(a), ATOM
