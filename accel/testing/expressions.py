"""Generating the scalar parts of random programs: element types, expressions,
scalar functions (``ExpressionGen``), and the small records the generator keeps
(``E`` an expression, ``Arr`` an array in scope, ``Block`` lines at one indentation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .sources import Source

F64, F32, I64, I32, B = "f64", "f32", "i64", "i32", "b"
SCALARS = (F64, F32, I64, I32, B)
NP_DTYPE = {F64: np.float64, F32: np.float32, I64: np.int64, I32: np.int32, B: np.bool_}
A_DTYPE = {F64: "A.float64", F32: "A.float32", I64: "A.int64", I32: "A.int32", B: "A.bool_"}
MAX_DIM = 9


def is_float(t) -> bool:
    return t in (F64, F32)


def is_int(t) -> bool:
    return t in (I64, I32)


def is_num(t) -> bool:
    return t in (F64, F32, I64, I32)


def is_pair(t) -> bool:
    return isinstance(t, tuple)



@dataclass
class E:
    """A generated expression: its code and whether it *may* be a Python value rather than
    an ``Exp`` (``const``; then it is lifted before a primitive needs its type)."""

    code: str
    const: bool = False

    def __str__(self):
        return self.code


@dataclass
class Arr:
    """An array variable in scope: element type, rank, lower/upper bounds of its sizes."""

    name: str
    elt: object
    rank: int
    lo: tuple
    hi: tuple

    def nonempty(self) -> bool:
        return all(n >= 1 for n in self.lo)


class Block:
    """Lines of code at one indentation, with the scalar variables visible there."""

    def __init__(self, indent: int, vars_: list, allow_index: bool = True):
        self.indent = indent
        self.lines: list[str] = []
        self.vars = list(vars_)  # (code, type)
        self.allow_index = allow_index  # may index arrays

    def emit(self, line: str):
        self.lines.append("    " * self.indent + line)


_FCONSTS = ["1.0", "0.5", "2.0", "-1.5", "0.0", "-0.25", "3.0"]
_ICONSTS = ["1", "0", "2", "-1", "3", "-3", "5"]


def const_of(t, k: int) -> E:
    if is_pair(t):
        return E(f"({const_of(t[0], k).code}, {const_of(t[1], k + 1).code})", True)
    if t == F64:
        return E(_FCONSTS[k % len(_FCONSTS)], True)
    if t == F32:
        return E(f"np.float32({_FCONSTS[k % len(_FCONSTS)]})", True)
    if t == I64:
        return E(_ICONSTS[k % len(_ICONSTS)], True)
    if t == I32:
        return E(f"np.int32({_ICONSTS[k % len(_ICONSTS)]})", True)
    return E("True" if k % 2 == 0 else "False", True)


NAME_RE = re.compile(r"^[A-Za-z_]\w*(\[\d+\])*$")


def is_name(code: str) -> bool:
    return bool(NAME_RE.match(code))


class ExpressionGen:
    """The scalar half of a program being generated: names, types, expressions, scalar
    functions (see ``programs`` for the invariants)."""

    def __init__(self, src: Source, differentiable: bool, max_stmts: int, allow_empty: bool,
                 depth: int, avoid_known_bugs: bool = True):
        self.src = src
        self.avoid_known_bugs = avoid_known_bugs
        self.diff = differentiable
        self.max_stmts = max_stmts
        self.allow_empty = allow_empty
        self.depth = depth
        self.count = 0
        self.features: set[str] = set()
        self.arrays: list[Arr] = []
        self.used: set[str] = set()  # arrays consumed by a later statement
        self.top = Block(1, [])

    # -- names, features

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def feat(self, *names):
        self.features.update(names)

    # -- types

    def scalar_type(self, float_weight=6) -> str:
        if self.diff:
            return self.src.weighted([(float_weight, F64), (2, I64), (1, B), (1, I32)])
        return self.src.weighted([(float_weight, F64), (2, I64), (1, F32), (1, I32), (1, B)])

    def elt_type(self):
        t = self.scalar_type()
        if self.src.flag(0.1):
            self.feat("tuple")
            return (t, self.scalar_type())
        return t

    # -- expressions

    def vars_of(self, blk: Block, t) -> list[str]:
        out = []
        for code, vt in blk.vars:
            if vt == t:
                out.append(code)
            elif is_pair(vt):
                out.extend(f"{code}[{i}]" for i, c in enumerate(vt) if c == t)
        return out

    def let(self, blk: Block, e: E, t) -> E:
        """``e`` bound to a variable of ``blk`` (shared; a name or constant stays as is)."""
        if e.const or is_name(e.code):
            return e
        v = self.fresh("v")
        blk.emit(f"{v} = {e.code}")
        blk.vars.append((v, t))
        self.feat("let")
        return E(v)

    def gen_exp(self, blk: Block, t, depth: int) -> E:
        """An expression of type ``t`` using the variables of ``blk`` and arrays in scope."""
        if is_pair(t):
            return self._gen_pair(blk, t, depth)
        vs = self.vars_of(blk, t)
        opts = []
        if vs:
            opts.append((6, lambda: E(self.src.recent(vs))))
        opts.append((2 if vs else 3, lambda: const_of(t, self.src.int(0, 6))))
        if depth > 0:
            opts += self._compound_options(blk, t, depth)
        return self.src.weighted(opts)()

    def _gen_pair(self, blk, t, depth) -> E:
        vs = [c for c, vt in blk.vars if vt == t]
        opts = []
        if vs:
            opts.append((4, lambda: E(self.src.recent(vs))))
        opts.append((4, lambda: self._tuple(blk, t, depth)))
        if depth > 0:
            opts.append((1, lambda: self._cond(blk, t, depth)))
            arrs = self._indexable(t, blk)
            if arrs:
                opts.append((1, lambda: self._index(blk, self.src.recent(arrs), depth)))
            opts.append((1, lambda: self._while(blk, t, depth)))
        return self.src.weighted(opts)()

    def _tuple(self, blk, t, depth) -> E:
        a = self.gen_exp(blk, t[0], depth - 1)
        b = self.gen_exp(blk, t[1], depth - 1)
        self.feat("tuple")
        return E(f"({a}, {b})", a.const and b.const)

    def _indexable(self, t, blk: Block) -> list[Arr]:
        if not blk.allow_index:
            return []
        return [a for a in self.arrays if a.elt == t and a.nonempty()]

    def _compound_options(self, blk, t, depth):
        d = depth
        opts = []
        if is_float(t):
            opts += [(5, lambda: self._unary_f(blk, t, d)), (5, lambda: self._binary_f(blk, t, d)),
                     (1, lambda: self._convert_to_float(blk, t, d))]
        elif is_int(t):
            opts += [(4, lambda: self._binary_i(blk, t, d)), (2, lambda: self._unary_i(blk, t, d)),
                     (1, lambda: self._convert_to_int(blk, t, d))]
            if self.arrays:
                opts.append((1, lambda: self._shape_value(t)))
        else:
            opts += [(4, lambda: self._compare(blk, d)), (2, lambda: self._logic(blk, d))]
        opts.append((2, lambda: self._cond(blk, t, d)))
        opts.append((1, lambda: self._share(blk, t, d)))
        arrs = self._indexable(t, blk)
        if arrs:
            opts.append((3, lambda: self._index(blk, self.src.recent(arrs), d)))
        parrs = [a for a in self.arrays if is_pair(a.elt) and t in a.elt and a.nonempty()
                 and blk.allow_index]
        if parrs:
            def proj():
                a = self.src.recent(parrs)
                e = self._index(blk, a, d)
                return E(f"{e}[{a.elt.index(t)}]")
            opts.append((1, proj))
        opts.append((1, lambda: self._while(blk, t, d)))
        return opts

    # float

    _UNARY_F = [  # (feature, template); {x} may appear twice (then it is shared first)
        ("sin", "A.sin({x})"), ("neg", "(-{x})"), ("cos", "A.cos({x})"),
        ("tanh", "A.tanh({x})"), ("atan", "A.atan({x})"), ("abs", "abs({x})"),
        ("exp", "A.exp(A.tanh({x}))"), ("expm1", "A.expm1(A.sin({x}))"),
        ("log", "A.log({x} * {x} + 1)"), ("log1p", "A.log1p({x} * {x})"),
        ("sqrt", "A.sqrt({x} * {x} + 1)"), ("asin", "A.asin(A.tanh({x}) * 0.9)"),
        ("acos", "A.acos(A.sin({x}) * 0.9)"), ("tan", "A.tan(A.tanh({x}))"),
        ("sinh", "A.sinh(A.sin({x}))"), ("cosh", "A.cosh(A.sin({x}))"),
        ("pow", "({x} ** 2)"), ("pow", "({x} ** 3)"),
        ("floor", "A.floor({x})"), ("ceil", "A.ceil({x})"), ("round", "A.round({x} * 2)"),
        ("truncate", "A.truncate({x})"),
    ]
    _BINARY_F = [
        ("add", "({x} + {y})"), ("mul", "({x} * {y})"), ("sub", "({x} - {y})"),
        ("div", "({x} / ({y} * {y} + 1))"), ("max", "A.max({x}, {y})"),
        ("min", "A.min({x}, {y})"), ("atan2", "A.atan2({x}, {y} * {y} + 0.5)"),
        ("pow", "(({x} * {x} + 1) ** A.tanh({y}))"), ("mod", "({x} % 1.5)"),
        ("floordiv", "({x} // 0.75)"),
    ]

    def _fill(self, blk, template, t, **operands) -> str:
        for k, e in operands.items():
            if e.const and t in (F32, I32):  # np.float32 constants would not stay float32
                operands[k] = e = self._lift(e, t)
            if template.count("{" + k + "}") > 1:
                operands[k] = self.let(blk, e, t)
        return template.format(**{k: v.code for k, v in operands.items()})

    @staticmethod
    def _lift(e: E, t) -> E:
        """A constant of type float32/int32 as an Exp of that type (``A.sin(np.float32(c))``
        and ``A.max(np.int32(c), 1)`` would not be float32/int32)."""
        if e.const and t == F32:
            return E(f"A.to_float({e.code}, A.float32)")
        if e.const and t == I32:
            return E(f"A.to_int({e.code}, A.int32)")
        return e


    def _unary_f(self, blk, t, depth) -> E:
        feat, tpl = self.src.choice(self._UNARY_F)
        x = self._lift(self.gen_exp(blk, t, depth - 1), t)
        self.feat(feat)
        return E(self._fill(blk, tpl, t, x=x))

    def _binary_f(self, blk, t, depth) -> E:
        feat, tpl = self.src.weighted([(4, f) for f in self._BINARY_F[:8]]
                                      + [(1, f) for f in self._BINARY_F[8:]])
        x = self.gen_exp(blk, t, depth - 1)
        y = self.gen_exp(blk, t, depth - 1)
        self.feat(feat)
        return E(self._fill(blk, tpl, t, x=x, y=y))

    def _convert_to_float(self, blk, t, depth) -> E:
        src_t = self.src.choice([I64, I32, F64 if t == F32 else F32] if not self.diff
                                else [I64, I32])
        x = self.gen_exp(blk, src_t, depth - 1)
        self.feat("to_float")
        return E(f"A.to_float({x}, {A_DTYPE[t]})")

    # int

    _BINARY_I = [
        ("add", "({x} + {y})"), ("mul", "({x} * {y})"), ("sub", "({x} - {y})"),
        ("floordiv", "({x} // A.max(abs({y}), 1))"), ("mod", "({x} % A.max(abs({y}), 1))"),
        ("floordiv", "({x} // -2)"), ("mod", "({x} % -3)"),
        ("max", "A.max({x}, {y})"), ("min", "A.min({x}, {y})"),
        ("and", "({x} & {y})"), ("or", "({x} | {y})"), ("xor", "({x} ^ {y})"),
    ]
    _UNARY_I = [("neg", "(-{x})"), ("abs", "abs({x})"), ("not", "(~{x})"),
                ("pow", "({x} ** 2)")]

    def _binary_i(self, blk, t, depth) -> E:
        feat, tpl = self.src.choice(self._BINARY_I)
        x = self.gen_exp(blk, t, depth - 1)
        y = self.gen_exp(blk, t, depth - 1)
        self.feat(feat)
        return E(self._fill(blk, tpl, t, x=x, y=y), x.const and y.const and "A." not in tpl)

    def _unary_i(self, blk, t, depth) -> E:
        feat, tpl = self.src.choice(self._UNARY_I)
        x = self.gen_exp(blk, t, depth - 1)
        self.feat(feat)
        return E(self._fill(blk, tpl, t, x=x), x.const)

    def _convert_to_int(self, blk, t, depth) -> E:
        ft = F64 if self.diff else self.src.choice([F64, F32])
        f = self.let(blk, self._lift(self.gen_exp(blk, ft, depth - 1), ft), ft)
        self.feat("to_int", "cond")
        dt = "" if t == I64 else ", A.int32"
        return E(f"A.to_int(A.cond(abs({f}) < 1000.0, {f} * 2, 0.0){dt})")

    def _shape_value(self, t) -> E:
        a = self.src.recent([a for a in self.arrays if a.rank > 0] or self.arrays)
        if a.rank == 0:
            return const_of(t, 0)
        d = self.src.int(0, a.rank - 1)
        self.feat("shape")
        code = self.src.weighted([(4, f"{a.name}.shape[{d}]"), (1, f"A.shape({a.name})[{d}]"),
                                  (1, f"A.size({a.name})")])
        if code.startswith("A.size"):
            self.feat("size")
        return E(code if t == I64 else f"A.to_int({code}, A.int32)")

    # bool

    def _compare(self, blk, depth) -> E:
        t = self.src.weighted([(4, F64), (3, I64), (0 if self.diff else 1, F32), (1, I32)])
        op = self.src.choice(["<", ">", "<=", ">=", "==", "!="])
        x = self.gen_exp(blk, t, depth - 1)
        y = self.gen_exp(blk, t, depth - 1)
        self.feat("compare")
        return E(f"({x} {op} {y})", x.const and y.const)

    def _logic(self, blk, depth) -> E:
        op = self.src.choice(["&", "|", "~", "^"])
        x = self.gen_exp(blk, B, depth - 1)
        self.feat("logic")
        if op == "~":
            if x.const:  # may be a Python bool (~True == -2)
                return E(f"A.cond({x}, False, True)", True)
            return E(f"(~{x})")
        y = self.gen_exp(blk, B, depth - 1)
        return E(f"({x} {op} {y})", x.const and y.const)

    # any type

    def _cond(self, blk, t, depth) -> E:
        c = self._compare(blk, depth - 1) if depth > 1 and self.src.flag(0.6) else \
            self.gen_exp(blk, B, depth - 1)
        x = self.gen_exp(blk, t, depth - 1)
        y = self.gen_exp(blk, t, depth - 1)
        self.feat("cond")
        # A.cond of a Python bool is the chosen branch itself: maybe a Python value
        return E(f"A.cond({c}, {x}, {y})", c.const and (x.const or y.const))

    def _share(self, blk, t, depth) -> E:
        v = self.gen_exp(blk, t, depth - 1)
        if v.const:
            return v
        v = self.let(blk, v, t)
        self.feat("share")
        if is_float(t):
            tpl = self.src.choice(["({v} * A.sin({v}))", "({v} + {v} * {v})",
                                   "A.max({v}, -{v})", "({v} - A.cos({v}))"])
        elif is_int(t):
            tpl = self.src.choice(["({v} * {v})", "({v} - {v} // 2)", "A.max({v}, -{v})"])
        else:
            tpl = self.src.choice(["({v} & ~{v})", "({v} | {v})", "({v} ^ ~{v})"])
        return E(tpl.format(v=v.code))

    def _int_index_exp(self, blk, depth) -> E:
        return self.gen_exp(blk, I64, max(depth - 1, 0))

    def _index(self, blk, a: Arr, depth) -> E:
        comps = []
        for d in range(a.rank):
            e = self._int_index_exp(blk, depth)
            if self.src.flag(0.25):
                comps.append(f"A.min(A.max({e}, 0), {a.name}.shape[{d}] - 1)")
                self.feat("index_clamp")
            else:
                comps.append(f"({e}) % {a.name}.shape[{d}]")
        self.feat("index")
        self.used.add(a.name)
        if a.rank == 0:
            return E(f"{a.name}[()]")
        return E(f"{a.name}[{', '.join(comps)}]")

    def _while(self, blk, t, depth) -> E:
        n = self.src.int(0, 3)
        init = self.gen_exp(blk, t, depth - 1)
        wc, wb = self.fresh("wc"), self.fresh("wb")
        k, x = self.fresh("k"), self.fresh("x")
        # (every generated scalar function is a map, zip_with or generate function, where
        # reverse mode lifts a loop whose body reads differentiated arrays to an awhile)
        body = Block(blk.indent + 1, blk.vars + [(k, I64), (x, t)], blk.allow_index)
        nxt = self.gen_exp(body, t, depth - 1)
        blk.emit(f"def {wc}(s):")
        blk.emit(f"    return s[0] < {n}")
        blk.emit(f"def {wb}(s):")
        blk.emit(f"    {k}, {x} = s")
        blk.lines.extend(body.lines)
        blk.emit(f"    return ({k} + 1, {nxt})")
        self.feat("while_")
        return self.let(blk, E(f"A.while_({wc}, {wb}, (0, {init}))[1]"), t)

    # -- scalar functions

    def gen_fun(self, outer: Block, params: list, result_t, index_rank: int | None = None,
                depth: int | None = None) -> str:
        """A scalar function (inline lambda, or a ``def`` emitted into ``outer``)."""
        depth = self.depth if depth is None else depth
        blk = Block(outer.indent + 1, outer.vars, outer.allow_index)
        if index_rank is not None:
            if index_rank == 1:
                names = [self.fresh("i")]
                blk.vars.append((names[0], I64))
            else:
                names = [self.fresh("ix")]
                blk.vars += [(f"{names[0]}[{d}]", I64) for d in range(index_rank)]
        else:
            names = [self.fresh("x") for _ in params]
            blk.vars += list(zip(names, params))
        body = self.gen_exp(blk, result_t, depth)
        if not blk.lines:
            return f"lambda {', '.join(names)}: {body}"
        name = self.fresh("f")
        outer.emit(f"def {name}({', '.join(names)}):")
        outer.lines.extend(blk.lines)
        outer.emit(f"    return {body}")
        return name

    # -- array statements

    def bind(self, code: str, elt, rank, lo, hi, prefix="a") -> Arr:
        name = self.fresh(prefix)
        self.top.emit(f"{name} = {code}")
        lo = tuple(max(0, x) for x in lo)
        hi = tuple(min(MAX_DIM + 2, x) for x in hi)
        arr = Arr(name, elt, rank, lo, hi)
        self.arrays.append(arr)
        return arr

    def pick(self, pred=lambda a: True) -> Arr | None:
        cands = [a for a in self.arrays if pred(a)]
        if not cands:
            return None
        unused = [a for a in cands if a.name not in self.used]
        if unused and unused[-1] is not cands[-1] and self.src.flag(0.4):
            cands = unused  # let the inputs and earlier results flow into the result
        a = self.src.recent(cands)
        self.used.add(a.name)
        return a

    def top_exp(self, t, depth=1) -> E:
        return self.gen_exp(self.top, t, depth)
