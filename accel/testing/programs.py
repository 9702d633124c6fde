"""Random well-typed accel programs, as readable Python source over the public API.

A program is drawn from a *choice source* (``Source``): every decision is one bounded
integer, and the smallest integer is always the simplest choice (a leaf, the most
recent variable, the first option).  So the same generator serves

- hypothesis (``HypothesisSource``): hypothesis shrinks the integers, hence the program;
- a seeded ``random.Random`` (``RandomSource``), which records the choices so that
  ``ReplaySource`` can replay a shrunk choice sequence (the soak's shrinker).

The result is a ``ProgramDesc``: the source text of ``def prog(a0, ...)`` (plus ``def
loss`` for differentiable programs, summing the float results to a scalar), the input
arrays, and the set of language features used.  Its ``repr`` is a self-contained
reproducer; ``build()`` executes the source, so the program is traced exactly like user
code.

Invariants (by construction, so that a failure is accel's fault, not the generator's):

- well-typed: every expression is generated for a known type; Python constants are
  rendered with their type (``np.float32(0.5)``), never mixed without conversion;
- in bounds: every index component is ``e % a.shape[d]`` or ``A.min(A.max(e, 0),
  a.shape[d] - 1)`` of an array known to be non-empty in that dimension (sizes are
  tracked as lower bounds); permute targets are reduced modulo the defaults' shape or
  ``A.ignore``;
- no domain errors: ``log``/``sqrt`` of ``x * x + 1``, division by ``y * y + 1``,
  ``asin``/``acos`` of ``0.9 * tanh``/``sin``, integer ``//``/``%`` by ``max(|y|, 1)``;
- bounded: loops are counted (``s[0] < n`` with ``n <= 3``), arrays have at most ~10
  elements per dimension and rank <= 2;
- fold and scan operators are associative (``+ * max min``, first/last, ``p + q + pq``,
  log-add-exp, affine composition, argmax on pairs), several of them non-commutative.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

import numpy as np

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


# --------------------------------------------------------------------------- sources


class Source:
    """Where the generator's decisions come from: bounded integers, smallest = simplest."""

    def int(self, lo: int, hi: int) -> int:  # noqa: A003
        raise NotImplementedError

    def flag(self, p: float) -> bool:
        """True with probability ``p``; shrinks to False."""
        return self.int(0, 99) >= 100 - round(100 * p)

    def choice(self, xs):
        return xs[self.int(0, len(xs) - 1)]

    def recent(self, xs):
        """An element of ``xs``: the last one (the simplest) with probability ~1/2."""
        if len(xs) == 1 or not self.flag(0.5):
            return xs[-1]
        return xs[len(xs) - 1 - self.int(0, len(xs) - 1)]

    def weighted(self, options):
        """One value of ``[(weight, value), ...]`` (zero weights are skipped); the first
        option is the simplest."""
        options = [(w, v) for w, v in options if w > 0]
        total = sum(w for w, _ in options)
        k = self.int(0, total - 1)
        for w, v in options:
            if k < w:
                return v
            k -= w
        raise AssertionError("unreachable")


class HypothesisSource(Source):
    """Choices drawn through hypothesis (``draw`` of ``st.composite`` or ``st.data()``)."""

    def __init__(self, draw):
        from hypothesis import strategies as st
        self._draw = draw
        self._st = st

    def int(self, lo, hi):  # noqa: A003
        if hi <= lo:
            return lo
        return self._draw(self._st.integers(lo, hi))


class RandomSource(Source):
    """Choices from a ``random.Random``; ``choices`` records them (as offsets from lo)."""

    def __init__(self, rng: random.Random | int):
        self.rng = rng if isinstance(rng, random.Random) else random.Random(rng)
        self.choices: list[int] = []

    def int(self, lo, hi):  # noqa: A003
        if hi <= lo:
            return lo
        v = self.rng.randint(lo, hi)
        self.choices.append(v - lo)
        return v


class ReplaySource(Source):
    """Replays recorded offsets (clamped to each range; 0 once exhausted)."""

    def __init__(self, choices):
        self.given = list(choices)
        self.choices: list[int] = []

    def int(self, lo, hi):  # noqa: A003
        if hi <= lo:
            return lo
        i = len(self.choices)
        off = min(max(self.given[i], 0), hi - lo) if i < len(self.given) else 0
        self.choices.append(off)
        return lo + off


# --------------------------------------------------------------------------- descriptions


def _array_source(x: np.ndarray) -> str:
    dt = f"np.{x.dtype.name}" if x.dtype != np.bool_ else "np.bool_"
    if x.ndim == 0:
        return f"np.array({x.item()!r}, dtype={dt})"
    if x.size == 0:
        return f"np.zeros({x.shape!r}, dtype={dt})"
    return f"np.array({x.tolist()!r}, dtype={dt})"


@dataclass
class ProgramDesc:
    """A generated program: source text, inputs, and what it exercises.

    ``repr`` prints a runnable reproducer; ``build()`` returns ``(prog, loss)`` (``loss``
    is None unless ``differentiable``).
    """

    source: str
    inputs: tuple
    param_types: tuple  # ((elt, rank), ...) with elt one of SCALARS
    differentiable: bool
    features: frozenset = field(default_factory=frozenset)
    choices: tuple = ()  # the recorded choice sequence (RandomSource/ReplaySource only)

    def args_source(self) -> str:
        inner = ", ".join(_array_source(x) for x in self.inputs)
        return f"args = ({inner}{',' if len(self.inputs) == 1 else ''})"

    def reproducer(self) -> str:
        return ("import numpy as np\nimport accel as A\n\n" + self.source + "\n"
                + self.args_source() + "\n")

    def __repr__(self) -> str:
        return "ProgramDesc(\n" + self.reproducer() + ")"

    def _repr_pretty_(self, p, cycle):  # hypothesis prints falsifying examples this way
        p.text(repr(self))

    def build(self):
        import accel
        ns = {"A": accel, "np": np}
        exec(compile(self.source, "<generated program>", "exec"), ns)  # noqa: S102
        return ns["prog"], ns.get("loss")

    def args(self) -> list:
        """Fresh copies of the inputs."""
        return [np.array(x, copy=True) for x in self.inputs]


# --------------------------------------------------------------------------- generator


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
        self.allow_index = allow_index  # may index arrays (not in a differentiable while_)

    def emit(self, line: str):
        self.lines.append("    " * self.indent + line)


_FCONSTS = ["1.0", "0.5", "2.0", "-1.5", "0.0", "-0.25", "3.0"]
_ICONSTS = ["1", "0", "2", "-1", "3", "-3", "5"]


def _const(t, k: int) -> E:
    if is_pair(t):
        return E(f"({_const(t[0], k).code}, {_const(t[1], k + 1).code})", True)
    if t == F64:
        return E(_FCONSTS[k % len(_FCONSTS)], True)
    if t == F32:
        return E(f"np.float32({_FCONSTS[k % len(_FCONSTS)]})", True)
    if t == I64:
        return E(_ICONSTS[k % len(_ICONSTS)], True)
    if t == I32:
        return E(f"np.int32({_ICONSTS[k % len(_ICONSTS)]})", True)
    return E("True" if k % 2 == 0 else "False", True)


_NAME = re.compile(r"^[A-Za-z_]\w*(\[\d+\])*$")


def _is_name(code: str) -> bool:
    return bool(_NAME.match(code))


class Gen:
    """One program being generated (see the module docstring for the invariants)."""

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
        if e.const or _is_name(e.code):
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
        opts.append((2 if vs else 3, lambda: _const(t, self.src.int(0, 6))))
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
            return _const(t, 0)
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
        # reverse mode differentiates while_ by recomputation, which does not support a
        # body indexing arrays that carry a derivative (NotDifferentiableError)
        body = Block(blk.indent + 1, blk.vars + [(k, I64), (x, t)],
                     blk.allow_index and not self.diff)
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

    def gen_shape(self, rank: int, nonempty: bool = False):
        """(code, lo, hi) of a shape of ``rank``: constants or sizes of arrays in scope."""
        codes, lo, hi = [], [], []
        for _ in range(rank):
            cands = [(a, d) for a in self.arrays for d in range(a.rank)
                     if a.hi[d] <= MAX_DIM and (a.lo[d] >= 1 or not nonempty)]
            kind = self.src.weighted([(3, "const"), (3 if cands else 0, "size"),
                                      (1 if cands else 0, "size+1")])
            if kind == "const":
                n = self.src.int(1, 4)
                codes.append(str(n))
                lo.append(n)
                hi.append(n)
            else:
                a, d = self.src.recent(cands)
                plus = 1 if kind == "size+1" else 0
                codes.append(f"{a.name}.shape[{d}]" + (" + 1" if plus else ""))
                lo.append(a.lo[d] + plus)
                hi.append(a.hi[d] + plus)
                self.feat("shape")
        code = "(" + ", ".join(codes) + ("," if rank == 1 else "") + ")"
        return code, tuple(lo), tuple(hi)

    def result_type_for(self, a_elt=None):
        """An element type for a new array: mostly float64 (or the source's type)."""
        opts = [(5, F64)]
        if a_elt is not None:
            opts.append((3, a_elt))
        opts.append((2, None))
        t = self.src.weighted(opts)
        return self.elt_type() if t is None else t

    def s_map(self):
        a = self.pick()
        out = self.result_type_for(a.elt)
        f = self.gen_fun(self.top, [a.elt], out)
        self.feat("map")
        return self.bind(f"A.map({f}, {a.name})", out, a.rank, a.lo, a.hi)

    def s_zip_with(self):
        a = self.pick()
        b = self.pick(lambda x: x.rank == a.rank)
        out = self.result_type_for(a.elt)
        if not (is_pair(a.elt) or is_pair(b.elt)) and self.src.flag(0.15):
            self.feat("zip")
            code, out = f"A.zip({a.name}, {b.name})", (a.elt, b.elt)
        else:
            f = self.gen_fun(self.top, [a.elt, b.elt], out)
            code = f"A.zip_with({f}, {a.name}, {b.name})"
            self.feat("zip_with")
        return self.bind(code, out, a.rank, tuple(map(min, a.lo, b.lo)),
                         tuple(map(min, a.hi, b.hi)))

    def s_generate(self):
        rank = self.src.weighted([(3, 1), (2, 2), (1, 0)])
        shape, lo, hi = self.gen_shape(rank)
        out = self.result_type_for()
        f = self.gen_fun(self.top, [], out, index_rank=rank)
        self.feat("generate")
        return self.bind(f"A.generate({shape}, {f})", out, rank, lo, hi)

    def s_fill(self):
        rank = self.src.weighted([(3, 1), (2, 2), (1, 0)])
        shape, lo, hi = self.gen_shape(rank)
        t = self.scalar_type()
        e = self.top_exp(t)
        self.feat("fill")
        return self.bind(f"A.fill({shape}, {e})", t, rank, lo, hi)

    def s_unit(self):
        t = self.scalar_type()
        e = self.top_exp(t, depth=2)
        self.feat("unit")
        return self.bind(f"A.unit({e})", t, 0, (), ())

    def s_use(self):
        rng = np.random.default_rng(self.src.int(0, 1000))
        n = self.src.int(1, 4)
        vals = [float(round(v, 3)) for v in rng.uniform(-2, 2, n)]
        self.feat("use")
        return self.bind(f"A.use(np.array({vals!r}))", F64, 1, (n,), (n,))

    def s_iota(self):
        shape, lo, hi = self.gen_shape(1)
        n = shape[1:-2]
        self.feat("iota")
        if self.src.flag(0.5):
            return self.bind(f"A.iota({n}, A.float64)", F64, 1, lo, hi)
        return self.bind(f"A.iota({n})", I64, 1, lo, hi)

    # folds and scans

    def fold_ops(self, t):
        """Associative operators on ``t``: [(feature, code, non-commutative)]."""
        if is_pair(t):
            a, b = t
            ops = []
            if is_num(a) and is_num(b):
                ops.append(("fold_pair_add", "lambda p, q: (p[0] + q[0], p[1] + q[1])"))
            if is_num(a) and a != B:
                ops.append(("fold_argmax", "lambda p, q: A.cond(q[0] > p[0], q, p)"))
            if a == b and is_float(a):
                ops.append(("fold_affine", "lambda p, q: (p[0] * q[0], p[1] * q[0] + q[1])"))
            ops.append(("fold_first", "lambda p, q: p"))
            return ops
        if t == B:
            return [("fold_and", "lambda p, q: p & q"), ("fold_or", "lambda p, q: p | q"),
                    ("fold_xor", "lambda p, q: p != q"), ("fold_last", "lambda p, q: q")]
        ops = [("fold_add", "lambda p, q: p + q"), ("fold_max", "lambda p, q: A.max(p, q)"),
               ("fold_mul", "lambda p, q: p * q"), ("fold_min", "lambda p, q: A.min(p, q)"),
               ("fold_first", "lambda p, q: p"), ("fold_last", "lambda p, q: q")]
        if is_float(t):
            ops += [("fold_pq", "lambda p, q: p + q + p * q"),
                    ("fold_logaddexp", "lambda p, q: A.max(p, q) + A.log1p(A.exp(-abs(p - q)))")]
        else:
            ops += [("fold_and", "lambda p, q: p & q"), ("fold_xor", "lambda p, q: p ^ q")]
        return ops

    def fold_seed(self, t) -> E:
        if is_pair(t):
            return E(f"({self.top_exp(t[0], 0)}, {self.top_exp(t[1], 0)})")
        return self.top_exp(t, depth=1)

    def _maybe_zip(self, a: Arr) -> Arr:
        """Sometimes ``A.zip(a, b)`` instead of ``a``, to fold and scan pairs."""
        if is_pair(a.elt) or not is_num(a.elt) or not self.src.flag(0.2):
            return a
        b = self.pick(lambda x: x.rank == a.rank and is_num(x.elt))
        self.feat("zip")
        return self.bind(f"A.zip({a.name}, {b.name})", (a.elt, b.elt), a.rank,
                         tuple(map(min, a.lo, b.lo)), tuple(map(min, a.hi, b.hi)))

    def s_fold(self):
        a = self.pick(lambda x: x.rank >= 1)
        if a is None:
            return None
        a = self._maybe_zip(a)
        inner_ok = a.lo[-1] >= 1
        num = is_num(a.elt)
        kind = self.src.weighted([(3, "fold"), (2 if num else 0, "sum"),
                                  (2 if inner_ok else 0, "fold1"),
                                  (1 if num else 0, "product"),
                                  (1 if num and inner_ok else 0, "maximum"),
                                  (1 if num and inner_ok else 0, "minimum"),
                                  (1, "fold_all"), (1 if num else 0, "sum_all")])
        self.feat(kind)
        if kind in ("sum", "product", "maximum", "minimum"):
            return self.bind(f"A.{kind}({a.name})", a.elt, a.rank - 1, a.lo[:-1], a.hi[:-1])
        if kind == "sum_all":
            return self.bind(f"A.sum_all({a.name})", a.elt, 0, (), ())
        feat, op = self.src.choice(self.fold_ops(a.elt))
        self.feat(feat)
        if kind == "fold1":
            return self.bind(f"A.fold1({op}, {a.name})", a.elt, a.rank - 1, a.lo[:-1],
                             a.hi[:-1])
        z = self.fold_seed(a.elt)
        if kind == "fold_all":
            return self.bind(f"A.fold_all({op}, {z}, {a.name})", a.elt, 0, (), ())
        return self.bind(f"A.fold({op}, {z}, {a.name})", a.elt, a.rank - 1, a.lo[:-1],
                         a.hi[:-1])

    def s_scan(self):
        a = self.pick(lambda x: x.rank >= 1 and x.hi[-1] <= MAX_DIM)
        if a is None:
            return None
        a = self._maybe_zip(a)
        kind = self.src.choice(["scanl", "scanr", "scanl1", "scanr1"])
        feat, op = self.src.choice(self.fold_ops(a.elt))
        self.feat(kind, feat)
        if kind.endswith("1"):
            return self.bind(f"A.{kind}({op}, {a.name})", a.elt, a.rank, a.lo, a.hi)
        z = self.fold_seed(a.elt)
        lo = a.lo[:-1] + (a.lo[-1] + 1,)
        hi = a.hi[:-1] + (a.hi[-1] + 1,)
        return self.bind(f"A.{kind}({op}, {z}, {a.name})", a.elt, a.rank, lo, hi)

    # index-space transformations

    def _target(self, blk: Block, a: Arr, depth=1) -> str:
        """An in-bounds index of ``a`` (a tuple, or bare for rank 1)."""
        comps = []
        for d in range(a.rank):
            e = self.gen_exp(blk, I64, depth)
            comps.append(f"({e}) % {a.name}.shape[{d}]")
        if a.rank == 1 and self.src.flag(0.5):
            return comps[0]
        return "(" + ", ".join(comps) + ("," if a.rank == 1 else "") + ")"

    def _index_fun(self, rank: int, make_body) -> str:
        """An index function (``lambda i:`` or ``def``) whose body is ``make_body(blk)``."""
        blk = Block(self.top.indent + 1, self.top.vars)
        if rank == 1:
            name = self.fresh("i")
            blk.vars.append((name, I64))
        else:
            name = self.fresh("ix")
            blk.vars += [(f"{name}[{d}]", I64) for d in range(rank)]
        body = make_body(blk)
        if not blk.lines:
            return f"lambda {name}: {body}"
        fname = self.fresh("f")
        self.top.emit(f"def {fname}({name}):")
        self.top.lines.extend(blk.lines)
        self.top.emit(f"    return {body}")
        return fname

    def s_backpermute(self):
        a = self.pick(lambda x: x.nonempty())
        if a is None:
            return None
        rank = self.src.weighted([(3, 1), (2, 2), (1, 0)])
        shape, lo, hi = self.gen_shape(rank)
        f = self._index_fun(rank, lambda blk: self._target(blk, a))
        self.feat("backpermute")
        return self.bind(f"A.backpermute({shape}, {f}, {a.name})", a.elt, rank, lo, hi)

    def s_permute(self):
        src = self.pick(lambda x: is_num(x.elt))
        if src is None:
            return None
        t = src.elt
        d = self.pick(lambda x: x.elt == t and x.nonempty())
        if d is None or self.src.flag(0.4):
            rank = self.src.weighted([(3, 1), (1, 2), (1, 0)])
            shape, lo, hi = self.gen_shape(rank, nonempty=True)
            d = self.bind(f"A.fill({shape}, {self.top_exp(t, 0)})", t, rank, lo, hi)
            self.feat("fill")
        comb_feat, comb = self.src.weighted([
            (4, ("permute_add", "lambda p, q: p + q")),
            (3, ("permute_max", "lambda p, q: A.max(p, q)")),
            (1, ("permute_min", "lambda p, q: A.min(p, q)")),
            (1, ("permute_mul", "lambda p, q: p * q"))])

        def body(blk):
            tgt = self._target(blk, d)
            if self.src.flag(0.4):
                ivars = self.vars_of(blk, I64)
                if ivars and self.src.flag(0.7):
                    op = self.src.choice(["<", ">=", "!=", "=="])
                    c = E(f"({self.src.recent(ivars)} % 2 {op} {self.src.int(0, 1)})"
                          if self.src.flag(0.5) else
                          f"({self.src.recent(ivars)} {op} {self.src.int(0, 3)})")
                else:
                    c = self.gen_exp(blk, B, 1)
                if not c.const:  # A.cond(False, t, A.ignore) would always ignore
                    self.feat("ignore")
                    return f"A.cond({c}, {tgt}, A.ignore)"
            return tgt

        f = self._index_fun(src.rank, body)
        self.feat("permute", comb_feat)
        return self.bind(f"A.permute({comb}, {d.name}, {f}, {src.name})", t, d.rank, d.lo,
                         d.hi)

    def _size_code(self):
        cands = [(a, d) for a in self.arrays for d in range(a.rank) if a.hi[d] <= 4]
        if cands and self.src.flag(0.3):
            a, d = self.src.recent(cands)
            return f"{a.name}.shape[{d}]", a.lo[d], a.hi[d]
        n = self.src.int(1, 3)
        return str(n), n, n

    def s_replicate(self):
        a = self.pick(lambda x: x.rank <= 1)
        if a is None:
            return None
        if a.rank == 0:
            n1, l1, h1 = self._size_code()
            if self.src.flag(0.5):
                spec, lo, hi = f"({n1},)", (l1,), (h1,)
            else:
                n2, l2, h2 = self._size_code()
                spec, lo, hi = f"({n1}, {n2})", (l1, l2), (h1, h2)
        else:
            n1, l1, h1 = self._size_code()
            if self.src.flag(0.5):
                spec, lo, hi = f"({n1}, A.All)", (l1, a.lo[0]), (h1, a.hi[0])
            else:
                spec, lo, hi = f"(A.All, {n1})", (a.lo[0], l1), (a.hi[0], h1)
        self.feat("replicate")
        return self.bind(f"A.replicate({spec}, {a.name})", a.elt, len(lo), lo, hi)

    def s_slice(self):
        a = self.pick(lambda x: x.rank >= 1)
        if a is None:
            return None
        spec, lo, hi = [], [], []
        for d in range(a.rank):
            if a.lo[d] >= 1 and self.src.flag(0.5):
                k = self.src.weighted([(3, str(self.src.int(0, a.lo[d] - 1))),
                                       (1, f"{a.name}.shape[{d}] - 1"),
                                       (1, f"{a.name}.shape[{d}] // 2")])
                spec.append(k)
            else:
                spec.append("A.All")
                lo.append(a.lo[d])
                hi.append(a.hi[d])
        self.feat("slice")
        code = "(" + ", ".join(spec) + ("," if a.rank == 1 else "") + ")"
        return self.bind(f"A.slice({a.name}, {code})", a.elt, len(lo), tuple(lo), tuple(hi))

    def s_reshape(self):
        a = self.pick()
        n = a.name
        if a.rank == 0:
            shape, lo, hi = self.src.choice([("(1,)", (1,), (1,)), ("(1, 1)", (1, 1), (1, 1))])
        elif a.rank == 1:
            shape, lo, hi = self.src.choice([(f"(1, {n}.shape[0])", (1, a.lo[0]), (1, a.hi[0])),
                                             (f"({n}.shape[0], 1)", (a.lo[0], 1), (a.hi[0], 1)),
                                             (f"({n}.shape[0],)", a.lo, a.hi)])
        else:
            (l0, l1), (h0, h1) = a.lo, a.hi
            opts = [(f"({n}.shape[1], {n}.shape[0])", (l1, l0), (h1, h0)),
                    (f"({n}.shape[0] * {n}.shape[1],)", (l0 * l1,), (h0 * h1,))]
            if h0 * h1 <= MAX_DIM:
                opts.append((f"(1, {n}.shape[0] * {n}.shape[1])", (1, l0 * l1), (1, h0 * h1)))
            shape, lo, hi = self.src.choice(opts)
            if "*" in shape and hi[-1] > MAX_DIM:
                shape, lo, hi = opts[0]
        self.feat("reshape")
        return self.bind(f"A.reshape({shape}, {n})", a.elt, len(lo), lo, hi)

    def s_transpose(self):
        a = self.pick(lambda x: x.rank == 2)
        if a is None:
            return None
        if self.src.flag(0.4) and np.prod(a.hi) <= MAX_DIM:
            self.feat("flatten")
            return self.bind(f"A.flatten({a.name})", a.elt, 1, (int(np.prod(a.lo)),),
                             (int(np.prod(a.hi)),))
        self.feat("transpose")
        return self.bind(f"A.transpose({a.name})", a.elt, 2, a.lo[::-1], a.hi[::-1])

    def top_condition(self) -> str:
        fl = [a for a in self.arrays if a.elt == F64]
        kind = self.src.weighted([(2, "exp"), (2 if fl else 0, "sum"),
                                  (1 if any(a.rank for a in self.arrays) else 0, "size")])
        if kind == "sum":
            a = self.src.recent(fl)
            return f"A.the(A.sum_all({a.name})) > {self.src.choice(['0.0', '1.0', '-1.0'])}"
        if kind == "size":
            a = self.src.recent([a for a in self.arrays if a.rank])
            return f"{a.name}.shape[0] > {self.src.int(0, 3)}"
        return self.top_exp(B, 2).code

    def s_acond(self):
        a = self.pick()
        c = self.top_condition()
        others = [x for x in self.arrays if x.elt == a.elt and x.rank == a.rank]
        if self.src.flag(0.5):
            b = self.src.recent(others)
            self.used.add(b.name)
            b_code, blo, bhi = b.name, b.lo, b.hi
        else:
            f = self.gen_fun(self.top, [a.elt], a.elt)
            b_code, blo, bhi = f"A.map({f}, {a.name})", a.lo, a.hi
        if self.src.flag(0.5):
            a_code, b_code = b_code, a.name
        else:
            a_code = a.name
        self.feat("acond")
        return self.bind(f"A.acond({c}, {a_code}, {b_code})", a.elt, a.rank,
                         tuple(map(min, a.lo, blo)), tuple(map(max, a.hi, bhi)))

    def s_awhile(self):
        x = self.pick()
        n = self.src.int(0, 3)
        ac, ab, k, s = self.fresh("ac"), self.fresh("ab"), self.fresh("k"), self.fresh("x")
        body = Block(2, self.top.vars)
        others = [o for o in self.arrays if o.rank == x.rank and o is not x]
        if self.diff and self.avoid_known_bugs:
            # reverse mode through an awhile whose state shrinks fails (see
            # tests/regressions): keep the state's shape, zip only with same-sized arrays
            others = [o for o in others if o.lo == o.hi == x.lo == x.hi]
        lo = x.lo
        if others and self.src.flag(0.3):
            o = self.src.recent(others)
            self.used.add(o.name)
            f = self.gen_fun(body, [x.elt, o.elt], x.elt)
            step = f"A.zip_with({f}, {s}, {o.name})"
            lo = tuple(map(min, x.lo, o.lo))
        else:
            f = self.gen_fun(body, [x.elt], x.elt)
            step = f"A.map({f}, {s})"
        self.top.emit(f"def {ac}(s):")
        self.top.emit(f"    return A.the(s[0]) < {n}")
        self.top.emit(f"def {ab}(s):")
        self.top.emit(f"    {k}, {s} = s")
        self.top.lines.extend(body.lines)
        self.top.emit(f"    return (A.map(lambda c: c + 1, {k}), {step})")
        self.feat("awhile")
        return self.bind(f"A.awhile({ac}, {ab}, (A.unit(0), {x.name}))[1]", x.elt, x.rank,
                         lo, x.hi)

    def s_scalar(self):
        """A scalar computed at the top level (``A.the``, ``a.shape[d]``, ``a[...]``)."""
        r0 = [a for a in self.arrays if a.rank == 0 and not is_pair(a.elt)]
        if r0 and self.src.flag(0.6):
            a = self.src.recent(r0)
            self.used.add(a.name)
            code, t = f"A.the({a.name})", a.elt
            self.feat("the")
        else:
            t = self.scalar_type()
            e = self.top_exp(t, depth=2)
            if e.const:  # a Python number: it would not behave as an Exp (s > s is a bool)
                return None
            code = e.code
        name = self.fresh("s")
        self.top.emit(f"{name} = {code}")
        self.top.vars.append((name, t))
        self.feat("top_scalar")
        return True

    STATEMENTS = [  # (weight, method), simplest first
        (6, "s_map"), (4, "s_zip_with"), (3, "s_generate"), (4, "s_fold"), (3, "s_scan"),
        (2, "s_backpermute"), (2, "s_permute"), (1, "s_replicate"), (1, "s_slice"),
        (1, "s_reshape"), (1, "s_transpose"), (1, "s_acond"), (1, "s_awhile"), (1, "s_unit"),
        (1, "s_fill"), (1, "s_scalar"), (1, "s_use"), (1, "s_iota"),
    ]

    # -- programs

    def gen_inputs(self):
        n = self.src.int(1, 3)
        types, inputs = [], []
        seed = self.src.int(0, 2 ** 20)
        special = self.src.flag(0.15 if self.diff else 0.3)
        rng = np.random.default_rng(seed)
        for i in range(n):
            if self.diff:
                t = F64 if i == 0 else self.src.weighted([(4, F64), (1, I64), (1, I32)])
            else:
                t = self.src.weighted([(6, F64), (2, I64), (1, F32), (1, I32), (1, B)])
            rank = self.src.weighted([(3, 1), (2, 2), (1, 0)])
            shape = []
            for _ in range(rank):
                d = self.src.int(1, 6)
                if self.allow_empty and self.src.flag(0.07):
                    d = 0
                shape.append(d)
            shape = tuple(shape)
            if is_float(t):
                x = rng.uniform(-2.0, 2.0, shape)
                if special and x.size:
                    pool = [0.0, 1.0, -1.0, 0.5, 2.0, -0.5, -0.0]
                    if not self.diff and self.src.flag(0.25):
                        pool += [np.nan, np.inf, -np.inf]
                        self.feat("nan_inf_input")
                    mask = rng.random(shape) < 0.4
                    x = np.where(mask, rng.choice(pool, shape), x)
            elif is_int(t):
                x = rng.integers(-4, 6, shape)
            else:
                x = rng.random(shape) < 0.5
            x = np.asarray(x, dtype=NP_DTYPE[t])
            types.append((t, rank))
            inputs.append(x)
            self.arrays.append(Arr(f"a{i}", t, rank, shape, shape))
        self.count = n
        return tuple(types), tuple(inputs)

    def float_result(self, a: Arr) -> Arr:
        """``a`` converted to float64 elementwise (for a differentiable result)."""
        if a.elt == F64:
            return a
        x = self.fresh("x")
        if is_pair(a.elt):
            parts = [self._to_f64(f"{x}[{i}]", t) for i, t in enumerate(a.elt)]
            body = " + ".join(parts)
        else:
            body = self._to_f64(x, a.elt)
        return self.bind(f"A.map(lambda {x}: {body}, {a.name})", F64, a.rank, a.lo, a.hi)

    @staticmethod
    def _to_f64(code, t) -> str:
        if t == F64:
            return code
        if t == B:
            return f"A.cond({code}, 1.5, -0.5)"
        return f"A.to_float({code})"

    def program(self) -> ProgramDesc:
        types, inputs = self.gen_inputs()
        params = ", ".join(f"a{i}" for i in range(len(types)))
        n = self.src.int(1, self.max_stmts)
        made = 0
        for _ in range(4 * n):
            if made >= n:
                break
            method = self.src.weighted(self.STATEMENTS)
            before = (len(self.top.lines), len(self.top.vars), len(self.arrays))
            out = getattr(self, method)()
            if out is None:  # abandoned: forget its lines and what they bound
                del self.top.lines[before[0]:]
                del self.top.vars[before[1]:]
                del self.arrays[before[2]:]
                continue
            made += 1
        n_in = len(types)
        # the last array, and (so that no statement is dead code) the unused ones
        results = [self.arrays[-1]]
        for a in reversed(self.arrays[n_in:-1]):
            if a.name not in self.used and len(results) < 3:
                results.append(a)
        if len(results) == 1 and len(self.arrays) > 1 and self.src.flag(0.1):
            results.append(self.src.choice(self.arrays[:-1]))
        if self.diff:
            results = [self.float_result(a) for a in results]
        if len(results) > 1:
            self.feat("tuple_result")
        ret = results[0].name if len(results) == 1 else \
            "(" + ", ".join(r.name for r in results) + ")"
        lines = [f"def prog({params}):"] + self.top.lines + [f"    return {ret}"]
        if self.diff:
            if len(results) == 1:
                lines += ["", "", f"def loss({params}):", f"    return A.sum_all(prog({params}))"]
            else:
                terms = " + ".join(f"A.the(A.sum_all(r[{i}]))" for i in range(len(results)))
                lines += ["", "", f"def loss({params}):", f"    r = prog({params})",
                          f"    return A.unit({terms})"]
        source = "\n".join(lines) + "\n"
        choices = tuple(getattr(self.src, "choices", ()))
        return ProgramDesc(source, inputs, types, self.diff, frozenset(self.features), choices)


def generate_program(src: Source, *, differentiable: bool = False, max_stmts: int = 6,
                     allow_empty: bool = True, depth: int = 3,
                     avoid_known_bugs: bool = True) -> ProgramDesc:
    """Draw one random well-typed program (with inputs) from ``src``.

    ``differentiable=True`` makes a program over float64 (and integer) arrays whose
    results are float64 arrays, plus ``def loss`` summing them to a rank-0 float64 array.
    ``avoid_known_bugs`` leaves out the constructs of the open (xfail) regressions in
    ``tests/regressions`` so that the properties test everything else.

    >>> desc = generate_program(RandomSource(0))
    >>> prog, _ = desc.build(); A.run(prog, *desc.args(), backend="interpreter")
    """
    return Gen(src, differentiable, max_stmts, allow_empty, depth, avoid_known_bugs).program()


#: Every feature the generator can produce (checked by the coverage test).
ALL_FEATURES = frozenset(
    ["map", "zip_with", "zip", "generate", "fill", "unit", "use", "iota", "fold", "fold1",
     "sum", "product", "maximum", "minimum", "fold_all", "sum_all", "scanl", "scanr",
     "scanl1", "scanr1", "backpermute", "permute", "permute_add", "permute_max", "ignore",
     "replicate", "slice", "reshape", "transpose", "flatten", "acond", "awhile", "the",
     "top_scalar", "shape", "size", "index", "index_clamp", "cond", "while_", "let", "share",
     "tuple", "tuple_result", "to_float", "to_int", "compare", "logic", "nan_inf_input",
     "add", "sub", "mul", "div", "floordiv", "mod", "pow", "neg", "abs", "max", "min",
     "and", "or", "xor", "not", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
     "tanh", "exp", "expm1", "log", "log1p", "sqrt", "atan2", "floor", "ceil", "round",
     "truncate", "fold_add", "fold_mul", "fold_max", "fold_min", "fold_first", "fold_last",
     "fold_pq", "fold_logaddexp", "fold_affine", "fold_argmax", "fold_pair_add"])
