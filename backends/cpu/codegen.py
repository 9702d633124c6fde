"""Code generation: a ``KernelProgram``'s loop steps as the source of a numba module.

Every loop step (``KGenerate``, ``KFold``, ``KScan``, ``KPermute``) becomes a few
functions named ``k<i>_<phase>``:

* *range functions* ``k<i>_<phase>(lo, hi, c, *bufs, shp, err)``: serial
  ``@numba.njit(error_model="numpy", fastmath={"contract"}, cache=True)`` loops over the tasks
  ``[lo, hi)`` of one phase (elements, tiles, (row, chunk) pairs, source chunks ...);
* a *driver* ``k<i>_par_<phase>(ntask, nch, *bufs, shp, err)`` per parallel phase,
  ``@numba.njit(parallel=True, ...)``, whose ``prange`` over ``nch`` chunks of the
  tasks calls the phase's range function (``c`` is the chunk number); numba compiles
  a function when it is first called, so phases a run never uses cost nothing;
* serial helpers without a range (``k<i>_comb``: combining fold partials, ...).

Numba's parfor passes cost time superlinear in the size of a ``prange`` body, so the
bodies live in the serial range functions (compiled by the plain pipeline, and called
once per chunk, so nothing is lost at run time) and the drivers stay tiny (still about
0.5 s each: usually one per step).  The host calls a range function directly when a phase is
too small to be worth a parallel launch, so small programs never compile a driver.

``bufs`` are, in order: the step's work buffers (outputs, then partials/carries/private
buffers), the leaf buffers of every array the step reads (struct of arrays: one flat,
C-contiguous 1-D buffer per scalar leaf of the element type); ``shp`` is an int64 array
of every size the step needs (loop counts, dimensions, a mode switch: the step's
``layout``) and ``err`` an int64 array where bounds checks record a failure.

Scalar expressions are scalarised: a value is a nested tuple of *atoms* (Python
expressions that are a variable name or a constant) mirroring its element type.
``Let`` binds names to atoms, ``Cond`` becomes ``if``/``else`` assigning result
variables (only the taken branch runs), ``While`` a ``while True`` loop over state
variables.  Results of type int32 and float32 (and conversions) are cast to their
accel type (numba promotes int32 arithmetic to int64); other operations already have
the right numba type, and every cast is a call numba must type, so none is emitted.

The generated text depends only on the structure of the program (variable names of
the AST never appear in it), so the same program traced twice, in two processes,
gives the same module and the same cache entries.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from accel.ast import nodes as N
from accel.ast.patterns import projection_side
from accel.ast.traverse import children, recursion_headroom
from accel.ast.types import ArrayT, Scalar, TupleT, leaves
from accel.errors import BackendError
from accel.fusion.kernels import (KAcond, KAwhile, KBlock, KFold, KGenerate, KPermute, KScan,
                                  KUse)

from . import fpmode, mathlib
from .vectorize import MARK

# Runtime policy constants (read by the host at run time, so tests may lower them).  The
# chunkings of folds, scans and scatters are part of the semantics through floating-point
# reassociation, so they are fixed numbers (never the thread count): results are
# reproducible across machines.  The PAR_* constants only spread independent tasks over
# threads and never change a result.
FOLD_CHUNKS = 64  # chunks of a long fold (two-level reduction)
FOLD_CHUNK_MIN_N = 4096  # inner length from which a fold with few rows is chunked
FOLD_CHUNK_MAX_ROWS = 64  # ... "few rows"
FOLD_OUTER_CHUNK_MAX_ROWS = 8192  # ... for interchanged folds (tiles would each read the
#                                   whole source; chunks of elements read it once)
FOLD_TILE = 1024  # most rows per task of an interchanged fold (accumulators stay in cache)
FOLD_WIDTHS = (16, 8, 2, 1)  # rows folded together by phase ``b`` (independent accumulator chains)
FOLD_PLANES = 2  # rows of the second to last dimension in a block of sums of outer products
FOLD_PLANE_MAX_OPS = 6  # ... for element functions of at most this many operations
FOLD_BLOCK_MAX_OPS = 48  # ... for element functions of at most this many operations
FOLD_J_CHUNK = 64  # elements folded into a tile of an interchanged fold at a time
FOLD_SRC_BUF = 32  # source elements computed at a time by phase f when vectorizable math
SCAN_CHUNKS = 64  # chunks of a long single-row scan (three phases)
SCAN_CHUNK_MIN_N = 16384
PERMUTE_CHUNKS = 16  # most private buffers of the parallel scatter
PERMUTE_PAR_MIN_SRC = 16384  # smaller sources scatter serially
PERMUTE_PAR_MAX_PRIV = 1 << 24  # elements of private buffers at most
TILE_ROWS = 32  # tiles of rank >= 2 generates (last two dimensions)
TILE_COLS = 256
PAR_MIN_WORK = 4096  # phases with less work run serially (no parallel launch, no driver)
PAR_TASKS_PER_THREAD = 8  # chunks of tasks per thread in a parallel driver
FLAT_COND_DEPTH = 60  # deeper else-if chains are emitted flat
ERR_SIZE = 16  # err[0] = failing site (1-based), err[1:] = its index

#: ``contract`` lets LLVM fuse a multiply and an add into one FMA instruction (one rounding
#: instead of two): folds of products run 10-17% faster (GMM, D = 32); no other fast-math
#: licence (reassociation, no-NaN) is given.
FLAGS = 'error_model="numpy", fastmath={"contract"}, cache=True, nogil=True'
SERIAL = f"@nb.njit({FLAGS})"
PARALLEL = f"@nb.njit(parallel=True, {FLAGS})"

HEADER = '''"""accel CPU kernels (generated; do not edit: the file name is its content hash)."""
''' + MARK + '''
import math  # noqa: F401

import numba as nb
import numpy as np
from numba import prange  # noqa: F401
from numba import types as _nbt
from numba.core.extending import intrinsic as _intrinsic
''' + mathlib.SOURCE

_CAST = {"float64": "np.float64", "float32": "np.float32", "int64": "np.int64",
         "int32": "np.int32", "bool": "np.bool_"}
_NP_UNARY = {"sin": "np.sin", "cos": "np.cos", "tan": "np.tan", "asin": "np.arcsin",
             "acos": "np.arccos", "atan": "np.arctan", "sinh": "np.sinh", "cosh": "np.cosh",
             "tanh": "np.tanh", "expm1": "np.expm1",
             "log1p": "np.log1p", "sqrt": "np.sqrt", "floor": "np.floor", "ceil": "np.ceil",
             "round": "np.rint", "truncate": "np.trunc"}
_INFIX = {"add": "+", "sub": "-", "mul": "*", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
          "eq": "==", "ne": "!=", "and": "&", "or": "|", "xor": "^"}

#: Combination functions the parallel scatter handles, with their identity elements.
FAST_COMBS = ("add", "mul", "max", "min")


def cast(t: Scalar, atom: str) -> str:
    return f"{_CAST[t.name]}({atom})"


def const_atom(value, t: Scalar) -> str:
    """A Python expression for the constant ``value`` of type ``t``."""
    if t.is_bool:
        return "True" if value else "False"
    if t.is_int:
        v = int(value)
        if v == -(1 << 63):
            return "np.int64(-9223372036854775807 - 1)"
        return cast(t, repr(v)) if t.name == "int32" else repr(v)
    v = float(value)
    if math.isnan(v):
        s = "np.nan"
    elif math.isinf(v):
        s = "np.inf" if v > 0 else "-np.inf"
    else:
        s = repr(v)
    return cast(t, s) if t.name == "float32" or s.startswith(("np", "-np")) else s


def fast_comb(lam: N.Lam):
    """``'add'``/``'mul'``/``'max'``/``'min'`` if ``lam`` is ``\\x y -> op x y`` (either order)
    on a float or int scalar, else None."""
    if len(lam.params) != 2 or not isinstance(lam.type, Scalar) or not lam.type.is_num:
        return None
    b = lam.body
    if not (isinstance(b, N.PrimApp) and b.op in FAST_COMBS):
        return None
    if not all(isinstance(a, N.Var) for a in b.args):
        return None
    p, q = (x.name for x in lam.params)
    if p != q and {a.name for a in b.args} == {p, q}:
        return b.op
    return None


# --------------------------------------------------------------------------- values

#: Every array position is masked with this: a no-op on the (in-bounds, so non-negative)
#: positions the generated code computes, which tells LLVM that numba's negative-index
#: wrap-around never applies (its select costs up to 2x in memory-bound loops).
NONNEG = "0x7FFFFFFFFFFFFFFF"


#: An index atom ``(v + c)``: row c of a block of rows starting at index v.
_SHIFTED = re.compile(r"\((\w+) \+ (\d+)\)")
_ROW_PLUS = re.compile(r"(\w+) \+ (\d+)")


def at(buf: str, pos: str) -> str:
    """``buf[pos]`` for a position known to be non-negative."""
    if pos.isdigit():
        return f"{buf}[{pos}]"
    shifted = _ROW_PLUS.fullmatch(pos)
    if shifted:  # row t of a block: a shared offset plus t (consecutive, vector stores)
        return f"{buf}[({shifted.group(1)} & {NONNEG}) + {shifted.group(2)}]"
    return f"{buf}[({pos}) & {NONNEG}]"



def flat(v) -> list:
    """The atoms of a value, left to right."""
    if isinstance(v, tuple):
        return [a for x in v for a in flat(x)]
    return [v]


def rebuild(t, atoms):
    """A value of element type ``t`` from an iterator of atoms."""
    if isinstance(t, TupleT):
        return tuple(rebuild(x, atoms) for x in t.items)
    return next(atoms)


# --------------------------------------------------------------------------- kernels


@dataclass
class Site:
    """A bounds-checked access: what it is and where to find the shape for the message."""

    what: str  # "index into array x" / "permute (target index)"
    avar: N.Avar | None  # the array (None: the permute's output)
    rank: int


@dataclass
class KernelPlan:
    """What the host needs to call the functions of one loop step."""

    step: object
    fn: str  # base name of the step's functions in the module
    inputs: list  # the Avars whose leaf buffers follow the work buffers, in order
    layout: list  # what goes into shp, in order
    sites: list  # Site per 1-based id recorded in err[0]
    fast: str | None = None  # the permute's recognised combination
    chunked: bool = False  # the scan has the chunked three-phase path
    parallel: list = field(default_factory=list)  # phases with a parallel driver
    weight: int = 1  # rough cost of one element (scales the work of a phase)
    outer: bool = False  # the fold has the interchanged phase ``o`` (see ``gen_fold``)
    blocked: bool = False  # the fold has the phase ``b`` of blocks of rows


@dataclass
class ArgArray:
    avar: N.Avar
    leaves: list  # buffer argument names
    dims: list  # atoms of the dimensions


class KernelGen:
    """Builds the functions of one step: shared arguments (work buffers, the arrays read,
    ``shp``, ``err``), a prologue reading ``shp``, and one body per function."""

    def __init__(self, check_bounds: bool):
        self.check = check_bounds
        self.funcs: dict = {}  # phase -> [lines]
        self.kinds: dict = {}  # phase -> "range" | "plain"
        self.parallel: list = []  # phases with a parallel driver
        self.cur = None
        self.ind = 1
        self.count = 0
        self.env: dict = {}  # Var name -> value
        self.arrays: dict = {}  # Avar name -> ArgArray
        self.array_order: list = []
        self.slots: dict = {}  # layout key -> atom
        self.layout: list = []
        self.sites: list = []
        self.work: list = []  # work buffer argument names

    # ---- functions

    def begin(self, phase: str, ranged: bool = True, parallel: bool = True) -> None:
        """Start the body of function ``phase`` (a range function over ``lo, hi``)."""
        self.cur = phase
        self.funcs[phase] = []
        self.kinds[phase] = "range" if ranged else "plain"
        if ranged and parallel:
            self.parallel.append(phase)
        self.ind = 1

    def texts(self, base: str, flush: bool = False) -> list:
        """The source of every function of the step, named ``base_<phase>`` (``flush``:
        each sets and restores the floating-point mode, ``fpmode``)."""
        ins = [b for av in self.array_order for b in self.arrays[av.name].leaves]
        args = ", ".join(self.work + ins + ["shp", "err"])
        pro = [f"    s{i} = shp[{i}]" for i in range(len(self.layout))]
        fp = ([fpmode.PROLOGUE], [fpmode.EPILOGUE]) if flush else ([], [])
        out = []
        for phase, lines in self.funcs.items():
            head = "lo, hi, c, " if self.kinds[phase] == "range" else ""
            body = fp[0] + _fill_empty_blocks(pro + lines) + fp[1]
            out.append("\n".join([SERIAL, f"def {base}_{phase}({head}{args}):"] + body))
        for phase in self.parallel:  # a driver per phase: only phases run are compiled
            out.append("\n".join([
                PARALLEL, f"def {base}_par_{phase}(ntask, nch, {args}):",
                "    for c in prange(nch):",
                f"        {base}_{phase}(c * ntask // nch, (c + 1) * ntask // nch, c, {args})"]))
        return [t + "\n" for t in out]

    # ---- emission helpers

    def fresh(self, prefix: str = "t") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def emit(self, line: str) -> None:
        if self.ind > 90:
            raise BackendError("cpu backend: expression nesting too deep for generated code")
        self.funcs[self.cur].append("    " * self.ind + line)

    @staticmethod
    def tc(t: Scalar, expr: str) -> str:
        """``expr`` cast to ``t`` if numba might type it differently (int32, float32)."""
        return cast(t, expr) if t.name in ("int32", "float32") else expr

    def assign(self, t: Scalar, expr: str, name: str | None = None) -> str:
        """``name = expr`` (cast if needed); a fresh name unless given."""
        name = name or self.fresh()
        self.emit(f"{name} = {self.tc(t, expr)}")
        return name

    def slot(self, key) -> str:
        """The atom holding the host-provided size ``key`` (read from ``shp``)."""
        a = self.slots.get(key)
        if a is None:
            a = self.slots[key] = f"s{len(self.layout)}"
            self.layout.append(key)
        return a

    def array(self, avar: N.Avar) -> ArgArray:
        a = self.arrays.get(avar.name)
        if a is None:
            j = len(self.array_order)
            t = avar.type
            if not isinstance(t, ArrayT):
                raise BackendError(f"cpu backend: array {avar.name} of type {t!r} is read "
                                   "inside a kernel")
            lv = [f"a{j}_{k}" for k in range(len(leaves(t.elt)))]
            dims = [self.slot(("in", j, d)) for d in range(t.rank)]
            a = self.arrays[avar.name] = ArgArray(avar, lv, dims)
            self.array_order.append(avar)
        return a

    # ---- scopes

    def bind(self, var: N.Var, value) -> tuple:
        old = (var.name, self.env.get(var.name, _MISSING))
        self.env[var.name] = value
        return old

    def unbind(self, olds) -> None:
        for name, v in reversed(olds):
            if v is _MISSING:
                self.env.pop(name, None)
            else:
                self.env[name] = v

    def apply(self, lam: N.Lam, args) -> object:
        olds = [self.bind(p, a) for p, a in zip(lam.params, args)]
        try:
            return self.exp(lam.body)
        finally:
            self.unbind(olds)

    # ---- expressions

    def exp(self, e: N.Exp):
        m = getattr(self, "e_" + type(e).__name__, None)
        if m is None:
            raise BackendError(f"cpu backend: cannot compile expression node {type(e).__name__}")
        return m(e)

    def e_Const(self, e: N.Const):
        return const_atom(e.value, e.ty)

    def e_Var(self, e: N.Var):
        try:
            return self.env[e.name]
        except KeyError:
            raise BackendError(f"cpu backend: free scalar variable {e.name} in a kernel "
                               "(kernels may only read manifest arrays)") from None

    def e_Let(self, e: N.Let):
        olds = []
        try:
            while isinstance(e, N.Let):
                olds.append(self.bind(e.var, self.exp(e.bound)))
                e = e.body
            return self.exp(e)
        finally:
            self.unbind(olds)

    def e_Tuple(self, e: N.Tuple):
        return tuple(self.exp(i) for i in e.items)

    def e_Prj(self, e: N.Prj):
        return self.exp(e.tup)[e.index]

    def e_Shape(self, e: N.Shape):
        return tuple(self.array(e.array).dims)

    def e_Index(self, e: N.Index):
        arr = self.array(e.array)
        ix = flat(self.exp(e.index))
        elt = e.array.type.elt
        return rebuild(elt, iter(self.read(arr, ix, elt)))

    def offset(self, ix: list, dims: list) -> str:
        if not ix:
            return "0"
        expr = ix[0]
        for i, d in zip(ix[1:], dims[1:]):
            expr = f"({expr}) * {d} + {i}"
        if len(ix) == 1:
            return expr
        off = self.fresh("o")
        self.emit(f"{off} = {expr}")
        return off

    def in_bounds(self, ix: list, dims: list) -> str:
        return " & ".join(f"({i} >= 0) & ({i} < {d})" for i, d in zip(ix, dims))

    def record(self, site: Site, ix: list) -> None:
        self.sites.append(site)
        self.emit(f"err[0] = {len(self.sites)}")
        for k, i in enumerate(ix[:ERR_SIZE - 1]):
            self.emit(f"err[{k + 1}] = {i}")

    def read(self, arr: ArgArray, ix: list, elt) -> list:
        """Atoms of the element of ``arr`` at index ``ix`` (checked if asked)."""
        ts = leaves(elt)
        if self.check and ix:
            names = [self.fresh("v") for _ in ts]
            self.emit(f"if {self.in_bounds(ix, arr.dims)}:")
            self.ind += 1
            off = self.offset(ix, arr.dims)
            for n, b in zip(names, arr.leaves):
                self.emit(f"{n} = {at(b, off)}")
            if not ts:
                self.emit("pass")
            self.ind -= 1
            self.emit("else:")
            self.ind += 1
            self.record(Site(f"index into array {arr.avar.name}", arr.avar, len(ix)), ix)
            for n, t in zip(names, ts):
                self.emit(f"{n} = {const_atom(0, t)}")
            self.ind -= 1
            return names
        shifted = _SHIFTED.fullmatch(ix[-1]) if ix else None
        if shifted:  # a row of a block: the block's offset plus a constant
            off = self.offset(ix[:-1] + [shifted.group(1)], arr.dims)
            pos = f"(({off}) & {NONNEG}) + {shifted.group(2)}"
        else:
            off = self.offset(ix, arr.dims)
        out = []
        for b in arr.leaves:
            n = self.fresh("v")
            self.emit(f"{n} = {b}[{pos}]" if shifted else f"{n} = {at(b, off)}")
            out.append(n)
        return out

    def e_Cond(self, e: N.Cond):
        if self.ind >= FLAT_COND_DEPTH and isinstance(e.e, N.Cond):
            return self.cond_chain(e)
        c = self.exp(e.c)
        ts = leaves(e.type)
        names = [self.fresh("c") for _ in ts]
        self.emit(f"if {c}:")
        self.branch(e.t, ts, names)
        self.emit("else:")
        self.branch(e.e, ts, names)
        return rebuild(e.type, iter(names))

    def cond_chain(self, e: N.Cond):
        """An else-if chain without nesting (Python allows at most 100 indentation
        levels): a ``done`` flag guards every later condition and branch."""
        ty = e.type
        ts = leaves(ty)
        names = [self.fresh("c") for _ in ts]
        done = self.fresh("done")
        self.emit(f"{done} = False")
        first = True
        while True:
            if isinstance(e, N.Cond):
                if first:
                    c = self.exp(e.c)
                else:
                    c = self.fresh("g")
                    self.emit(f"if {done}:")
                    self.emit(f"    {c} = False")
                    self.emit("else:")
                    self.ind += 1
                    self.emit(f"{c} = {self.exp(e.c)}")
                    self.ind -= 1
                self.emit(f"if {c}:")
                self.branch(e.t, ts, names)
                self.emit(f"    {done} = True")
                e, first = e.e, False
            else:
                self.emit(f"if not {done}:")
                self.branch(e, ts, names)
                return rebuild(ty, iter(names))

    def branch(self, e, ts, names) -> None:
        self.ind += 1
        v = flat(self.exp(e))
        for n, t, a in zip(names, ts, v):
            self.assign(t, a, n)
        if not ts:
            self.emit("pass")
        self.ind -= 1

    def e_While(self, e: N.While):
        ts = leaves(e.type)
        init = flat(self.exp(e.init))
        names = [self.fresh("w") for _ in ts]
        for n, t, a in zip(names, ts, init):
            self.assign(t, a, n)
        state = rebuild(e.type, iter(names))
        self.emit("while True:")
        self.ind += 1
        c = self.apply(e.cond, (state,))
        self.emit(f"if not {c}:")
        self.emit("    break")
        nxt = flat(self.apply(e.body, (state,)))
        tmp = []
        for t, a in zip(ts, nxt):  # simultaneous update through temporaries
            tmp.append(self.assign(t, a))
        for n, a in zip(names, tmp):
            self.emit(f"{n} = {a}")
        self.ind -= 1
        return state

    def e_PrimApp(self, e: N.PrimApp):
        args = [self.exp(a) for a in e.args]
        ats = [a.type for a in e.args]
        return self.prim(e.op, args, ats, e.type)

    def prim(self, op: str, args: list, ats: list, rt: Scalar) -> str:
        t0 = ats[0]
        if op in _INFIX:
            return self.assign(rt, f"{args[0]} {_INFIX[op]} {args[1]}")
        if op == "div":
            return self.assign(rt, f"{args[0]} / {args[1]}")
        if op == "neg":
            return self.assign(rt, f"-{args[0]}")
        if op == "abs":
            return self.assign(rt, f"abs({args[0]})")
        if op in ("max", "min"):
            x, y = args
            cmp = ">=" if op == "max" else "<="
            nan = f" or {x} != {x}" if t0.is_float else ""
            return self.assign(rt, f"{x} if ({x} {cmp} {y}{nan}) else {y}")
        if op == "not":
            return self.assign(rt, f"not {args[0]}" if t0.is_bool else f"~{args[0]}")
        if op in ("exp", "log"):  # mathlib: vectorizable, unlike libm's
            if t0.name == "float64":
                return self.assign(rt, f"_{op}({args[0]})")
            return self.assign(rt, cast(rt, f"_{op}(np.float64({args[0]}))"))
        if op in _NP_UNARY:
            return self.assign(rt, f"{_NP_UNARY[op]}({args[0]})")
        if op == "atan2":
            return self.assign(rt, f"np.arctan2({args[0]}, {args[1]})")
        if op == "floordiv":
            return self.floordiv(args, rt) if t0.is_int else self.float_floordiv(args, rt)
        if op == "mod":
            return self.int_mod(args, rt) if t0.is_int else self.float_mod(args, rt)
        if op == "pow":
            return self.int_pow(args, rt) if t0.is_int else \
                self.assign(rt, f"np.power({args[0]}, {args[1]})")
        if op.startswith("to_"):
            return self.convert(args[0], t0, rt)
        raise BackendError(f"cpu backend: no code for primitive {op!r}")

    def floordiv(self, args, rt) -> str:
        x, y = args
        r = self.fresh()
        self.emit(f"if {y} == 0:")
        self.emit(f"    {r} = {const_atom(0, rt)}")
        self.emit(f"elif {y} == -1:")
        self.emit(f"    {r} = {self.tc(rt, '-' + x)}")
        self.emit("else:")
        self.emit(f"    {r} = {self.tc(rt, f'{x} // {y}')}")
        return r

    def float_floordiv(self, args, rt) -> str:
        # NumPy's npy_floor_divide (via npy_divmod): exact floor of the quotient, like
        # Python's //, e.g. 5 // 0.001 == 4999 and 3.7 // -inf == -1.
        x, y = args
        r, m, d = self.fresh(), self.fresh("m"), self.fresh("d")
        c = lambda e: self.tc(rt, e)  # noqa: E731
        self.emit(f"if {y} == 0:")
        self.emit(f"    {r} = {c(f'{x} / {y}')}")
        self.emit("else:")
        self.emit(f"    {m} = {c(f'np.fmod({x}, {y})')}")
        self.emit(f"    {d} = {c(f'({x} - {m}) / {y}')}")
        self.emit(f"    if {m} != 0 and (({y} < 0) != ({m} < 0)):")
        self.emit(f"        {d} = {c(f'{d} - 1')}")
        self.emit(f"    if {d} != 0:")
        self.emit(f"        {r} = {c(f'np.floor({d})')}")
        self.emit(f"        if {d} - {r} > 0.5:")
        self.emit(f"            {r} = {c(f'{r} + 1')}")
        self.emit("    else:")
        self.emit(f"        {r} = {c(f'np.copysign({const_atom(0.0, rt)}, {x} / {y})')}")
        return r

    def int_mod(self, args, rt) -> str:
        x, y = args
        r = self.fresh()
        self.emit(f"if {y} == 0 or {y} == -1:")
        self.emit(f"    {r} = {const_atom(0, rt)}")
        self.emit("else:")
        self.emit(f"    {r} = {self.tc(rt, f'{x} % {y}')}")
        return r

    def float_mod(self, args, rt) -> str:
        # NumPy's npy_divmod: fmod, then move the remainder to the divisor's sign.
        x, y = args
        m = self.fresh("m")
        self.emit(f"{m} = {self.tc(rt, f'np.fmod({x}, {y})')}")
        self.emit(f"if {y} != 0:")
        self.emit(f"    if {m} != 0:")
        self.emit(f"        if ({y} < 0) != ({m} < 0):")
        self.emit(f"            {m} = {self.tc(rt, f'{m} + {y}')}")
        self.emit("    else:")
        self.emit(f"        {m} = {self.tc(rt, f'np.copysign({const_atom(0.0, rt)}, {y})')}")
        return m

    def int_pow(self, args, rt) -> str:
        x, y = args
        r, acc, b, e = self.fresh(), self.fresh("p"), self.fresh("p"), self.fresh("p")
        self.emit(f"if {y} < 0:")
        self.emit(f"    if {x} == 1:")
        self.emit(f"        {r} = {const_atom(1, rt)}")
        self.emit(f"    elif {x} == -1:")
        self.emit(f"        {r} = {const_atom(1, rt)} if {y} % 2 == 0 else {const_atom(-1, rt)}")
        self.emit("    else:")
        self.emit(f"        {r} = {const_atom(0, rt)}")
        self.emit("else:")
        self.emit(f"    {acc} = np.int64(1)")
        self.emit(f"    {b} = np.int64({x})")
        self.emit(f"    {e} = np.int64({y})")
        self.emit(f"    while {e} > 0:")
        self.emit(f"        if {e} & 1:")
        self.emit(f"            {acc} = np.int64({acc} * {b})")
        self.emit(f"        {b} = np.int64({b} * {b})")
        self.emit(f"        {e} = np.int64({e} >> 1)")
        self.emit(f"    {r} = {self.tc(rt, acc)}")
        return r

    def convert(self, x: str, src: Scalar, rt: Scalar) -> str:
        if rt.is_bool:
            return self.assign(rt, x if src.is_bool else f"{x} != 0")
        if rt.is_int and src.is_float:  # truncation; nan and +-inf give 0 (as in prims)
            return self.assign(rt, f"{cast(rt, x)} if np.isfinite({x}) else "
                                   f"{const_atom(0, rt)}")
        if rt == src:
            return x
        return self.assign(rt, cast(rt, x))

    # ---- loops

    def unravel(self, k: str, dims: list) -> list:
        """Row-major multi-index (atoms) of the flat position ``k`` in ``dims``."""
        r = len(dims)
        if r == 0:
            return []
        if r == 1:
            return [k]
        ix = [None] * r
        q = k
        for d in range(r - 1, 0, -1):
            ix[d] = self.fresh("i")
            self.emit(f"{ix[d]} = {q} % {dims[d]}")
            nq = self.fresh("q")
            self.emit(f"{nq} = {q} // {dims[d]}")
            q = nq
        ix[0] = q
        return ix

    def store(self, bufs: list, pos: str, value) -> None:
        for b, a in zip(bufs, flat(value)):
            self.emit(f"{at(b, pos)} = {a}")

    def set_vars(self, names: list, ts: list, value) -> None:
        for n, t, a in zip(names, ts, flat(value)):
            self.assign(t, a, n)

    def update(self, names: list, ts: list, value) -> None:
        """Assign ``value`` to the variables ``names`` simultaneously (the atoms of
        ``value`` may be those variables)."""
        atoms = flat(value)
        if len(names) == 1:
            self.assign(ts[0], atoms[0], names[0])
            return
        tmp = [self.assign(t, a) for t, a in zip(ts, atoms)]
        for n, a in zip(names, tmp):
            self.emit(f"{n} = {a}")

    def loop(self, var: str, rng: str) -> None:
        self.emit(f"for {var} in {rng}:")
        self.ind += 1


_MISSING = object()


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _fill_empty_blocks(lines: list) -> list:
    """``lines`` with ``pass`` added to every block that would be empty."""
    out = []
    for i, line in enumerate(lines):
        out.append(line)
        if line.rstrip().endswith(":"):
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            if not nxt.strip() or _indent(nxt) <= _indent(line):
                out.append(" " * (_indent(line) + 4) + "pass")
    return out or ["    pass"]


def _out_names(k: int, t) -> list:
    return [f"r{k}_{j}" for j in range(len(leaves(t.elt)))]


def _bufs(prefix: str, t) -> list:
    return [f"{prefix}_{j}" for j in range(len(leaves(t.elt)))]


# --------------------------------------------------------------------------- step kernels


def gen_generate(s: KGenerate, check: bool):
    """Phase ``g``: rank 0 and 1 loop over elements; rank >= 2 over tiles of
    ``TILE_ROWS x TILE_COLS`` of the last two dimensions (times the outer indices), so
    that no division is needed per element and gathers along either of the last two
    dimensions stay cache-friendly.  Rank >= 3 also gets phase ``s`` (:func:`_slices`),
    which the runtime launches instead when a slice is one tile."""
    g = KernelGen(check)
    rank = len(s.shape.type.items)
    dims = [g.slot(("out", d)) for d in range(rank)]
    outs = [_out_names(k, o.type) for k, o in enumerate(s.outs)]
    g.work = [b for bs in outs for b in bs]
    g.begin("g")

    def body(ix, k):
        v = g.apply(s.f, (tuple(ix),))
        comps = (v,) if len(s.outs) == 1 else v
        for bufs, c in zip(outs, comps):
            g.store(bufs, k, c)

    if rank < 2:
        k = g.fresh("k")
        g.loop(k, "range(lo, hi)")
        body([k] if rank else [], k)
        return g, {}
    R, C = dims[-2], dims[-1]
    nrt, nct = g.slot(("nrt",)), g.slot(("nct",))
    t, ct, q, rt, o = (g.fresh(x) for x in ("t", "ct", "q", "rt", "o"))
    i0, i1, j0, j1, i, j, rb, k = (g.fresh(x) for x in ("i", "i", "j", "j", "i", "j", "rb",
                                                        "k"))
    g.loop(t, "range(lo, hi)")
    g.emit(f"{ct} = {t} % {nct}")
    g.emit(f"{q} = {t} // {nct}")
    g.emit(f"{rt} = {q} % {nrt}")
    g.emit(f"{o} = {q} // {nrt}")
    oix = g.unravel(o, dims[:-2])
    g.emit(f"{i0} = {rt} * {TILE_ROWS}")
    g.emit(f"{i1} = min({i0} + {TILE_ROWS}, {R})")
    g.emit(f"{j0} = {ct} * {TILE_COLS}")
    g.emit(f"{j1} = min({j0} + {TILE_COLS}, {C})")
    g.loop(i, f"range({i0}, {i1})")
    g.emit(f"{rb} = ({o} * {R} + {i}) * {C}")
    g.loop(j, f"range({j0}, {j1})")
    g.emit(f"{k} = {rb} + {j}")
    body(oix + [i, j], k)
    if rank >= 3:
        _slices(g, dims, body)
    return g, {}


def _slices(g: KernelGen, dims: list, body) -> None:
    """Phase ``s``: tasks are whole slices of the last two dimensions, for when a slice is
    one tile (the same tasks as phase ``g``).  The outer index advances by a counter, so
    there is no division per task, and the loop bounds are invariant: small slices, the
    GMM's (points, K, D) arrays with D = 2, are 25-30% faster (phase ``g`` spends two
    divisions and its loops' set-up on every 10-element tile)."""
    g.begin("s")
    R, C, outer = dims[-2], dims[-1], dims[:-2]
    o, i, j, rb, k = (g.fresh(x) for x in ("o", "i", "j", "rb", "k"))
    if len(outer) == 1:
        g.loop(o, "range(lo, hi)")
        oix = [o]
    else:
        pr, oix = _row_counter(g, outer)
        g.loop(o, "range(lo, hi)")
        _advance_row(g, o, pr, oix, outer)
    g.loop(i, f"range({R})")
    g.emit(f"{rb} = ({o} * {R} + {i}) * {C}")
    g.loop(j, f"range({C})")
    g.emit(f"{k} = {rb} + {j}")
    body(oix + [i, j], k)


def _row_counter(g: KernelGen, dims: list):
    """Before a loop over tasks: the variables of an incrementally maintained multi-index
    of rows (see ``_advance_row``); returns (previous row, index atoms)."""
    pr = g.fresh("pr")
    g.emit(f"{pr} = -2")
    ix = [g.fresh("i") for _ in dims]
    for v in ix:
        g.emit(f"{v} = 0")
    return pr, ix


def _advance_row(g: KernelGen, r: str, pr: str, ix: list, dims: list) -> None:
    """Bring the multi-index ``ix`` of row ``pr`` to row ``r``: by one increment with
    carries when ``r`` is the next row (the common case: no division per row), else by
    unravelling ``r``."""
    if not dims:
        return
    g.emit(f"if {r} == {pr} + 1:")
    g.ind += 1
    _increment(g, ix, dims)
    g.ind -= 1
    g.emit(f"elif {r} != {pr}:")
    g.ind += 1
    for v, a in zip(ix, g.unravel(r, dims)):
        g.emit(f"{v} = {a}")
    g.ind -= 1
    g.emit(f"{pr} = {r}")


def _increment(g: KernelGen, ix: list, dims: list) -> None:
    """Emit ``ix += 1`` in row-major order (carries into outer dimensions)."""
    if not dims:
        return
    last = len(dims) - 1
    g.emit(f"{ix[last]} += 1")
    for d in range(last, 0, -1):
        g.emit(f"if {ix[d]} == {dims[d]}:")
        g.ind += 1
        g.emit(f"{ix[d]} = 0")
        g.emit(f"{ix[d - 1]} += 1")
    g.ind -= last


def _chunk_task(g: KernelGen, tk: str, n: str, nch: str, dims: list, counter):
    """Emit the decoding of task ``tk`` (of rows x ``nch``): row r, chunk c, and the
    chunk's range [lo, hi) of the inner dimension (``n`` split as evenly as possible).
    With one chunk per row (the usual case) this needs no division."""
    r, c, lo, hi = (g.fresh(x) for x in ("r", "c", "lo", "hi"))
    g.emit(f"if {nch} == 1:")
    g.ind += 1
    g.emit(f"{r} = {tk}")
    g.emit(f"{c} = 0")
    g.emit(f"{lo} = 0")
    g.emit(f"{hi} = {n}")
    g.ind -= 1
    g.emit("else:")
    g.ind += 1
    g.emit(f"{r} = {tk} // {nch}")
    g.emit(f"{c} = {tk} % {nch}")
    g.emit(f"{lo} = ({c} * {n}) // {nch}")
    g.emit(f"{hi} = (({c} + 1) * {n}) // {nch}")
    g.ind -= 1
    pr, ix = counter
    _advance_row(g, r, pr, ix, dims)
    return r, c, lo, hi, ix


def gen_fold(s: KFold, check: bool):
    """Phase ``f`` over (row, chunk) tasks, ``mode`` chunks per row: each task folds its
    chunk into ``p`` (chunk 0 from z, the others from their first element; with one
    chunk per row the host passes the output as ``p``).  ``comb`` then combines the
    partials of each row sequentially in chunk order (only associativity is assumed).
    Folds with small element functions also get either phase ``b`` (rows in blocks) or,
    when their source is laid out along the rows (``_outer_major``), the interchanged
    phases ``o`` and ``oc``/``combc``; the host picks a phase per run from the sizes."""
    g = KernelGen(check)
    elt = s.out.type.elt
    ts = leaves(elt)
    rank = len(s.shape.type.items)
    m, n, nch = g.slot(("size",)), g.slot(("n",)), g.slot(("mode",))
    dims = [g.slot(("out", d)) for d in range(rank)]
    outs, parts = _out_names(0, s.out.type), _bufs("p", s.out.type)
    g.work = outs + parts
    g.begin("f")
    buffered = not isinstance(elt, TupleT) and _calls_mathlib(s.src)
    buf = g.fresh("buf") if buffered else None
    if buffered:
        g.emit(f"{buf} = np.empty({FOLD_SRC_BUF}, dtype={_CAST[ts[0].name]})")
    tk = g.fresh("tk")
    counter = _row_counter(g, dims)
    g.loop(tk, "range(lo, hi)")
    r, c, lo, hi, ix = _chunk_task(g, tk, n, nch, dims, counter)
    acc = [g.fresh("acc") for _ in ts]
    st = g.fresh("st")
    if s.z is not None:
        g.emit(f"if {c} == 0:")
        g.ind += 1
        g.set_vars(acc, ts, g.exp(s.z))
        g.emit(f"{st} = {lo}")
        g.ind -= 1
        g.emit("else:")
        g.ind += 1
    g.set_vars(acc, ts, g.apply(s.src, (tuple(ix + [lo]),)))
    g.emit(f"{st} = {lo} + 1")
    if s.z is not None:
        g.ind -= 1
    j = g.fresh("j")
    if buffered:
        _fold_buffered(g, s, acc, ix, st, hi, buf)
    else:
        g.loop(j, f"range({st}, {hi})")
        x = g.apply(s.src, (tuple(ix + [j]),))
        g.update(acc, ts, g.apply(s.f, (rebuild(elt, iter(acc)), x)))
        g.ind -= 1
    g.store(parts, tk, tuple(acc))
    # rows in blocks (each block's element functions emitted up to 16 times: only
    # for small ones), by rows or interchanged (see _outer_major)
    ops, loops = _ops(s.src, s.f)
    blocked = rank > 0 and ops + loops <= FOLD_BLOCK_MAX_OPS and len(ts) <= 4
    outer = blocked and _outer_major(s)
    if outer:
        _fold_interchanged(g, s, dims, outs, m, n)
        _fold_interchanged_chunked(g, s, dims, outs, parts, m, n, nch)
    elif blocked:
        _fold_blocked(g, s, dims, outs, n)
    g.begin("comb", ranged=False)
    r, c = g.fresh("r"), g.fresh("c")
    g.loop(r, f"range({m})")
    acc = [g.fresh("acc") for _ in ts]
    g.set_vars(acc, ts, tuple(at(p, f"{r} * {nch}") for p in parts))
    g.loop(c, f"range(1, {nch})")
    nxt = tuple(at(p, f"{r} * {nch} + {c}") for p in parts)
    g.update(acc, ts, g.apply(s.f, (rebuild(elt, iter(acc)), rebuild(elt, iter(nxt)))))
    g.ind -= 1
    g.store(outs, r, tuple(acc))
    return g, {"outer": outer, "blocked": blocked}


def _calls_mathlib(e) -> bool:
    """Whether ``e`` applies ``exp`` or ``log`` (``mathlib``: fast only when vectorized;
    a scalar call is slower than libm's)."""
    stack, seen = [e], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, N.PrimApp) and x.op in ("exp", "log"):
            return True
        stack.extend(children(x))
    return False


def _fold_buffered(g: KernelGen, s: KFold, acc: list, ix: list, st: str, hi: str,
                   buf: str) -> None:
    """The loop of phase ``f`` over ``[st, hi)`` for a source calling ``exp`` or ``log``:
    ``FOLD_SRC_BUF`` source elements at a time into ``buf`` (a loop LLVM vectorizes),
    then combined in order (the same result).  A single row's combinations form one
    chain that no vector unit can split, and the scalar ``mathlib`` functions are slower
    than libm's (the sum of 1000 logs: 5.9 us scalar, 2.6 us buffered, 3.3 us libm)."""
    ts = leaves(s.out.type.elt)
    jb, je, j = g.fresh("jb"), g.fresh("je"), g.fresh("j")
    g.loop(jb, f"range({st}, {hi}, {FOLD_SRC_BUF})")
    g.emit(f"{je} = min({jb} + {FOLD_SRC_BUF}, {hi})")
    g.loop(j, f"range({jb}, {je})")
    x = g.apply(s.src, (tuple(ix + [j]),))
    g.emit(f"{at(buf, f'{j} - {jb}')} = {x}")
    g.ind -= 1
    g.loop(j, f"range({jb}, {je})")
    g.update(acc, ts, g.apply(s.f, (acc[0], at(buf, f"{j} - {jb}"))))
    g.ind -= 2


def _fold_blocked(g: KernelGen, s: KFold, dims: list, outs: list, n: str):
    """Phase ``b``: the row-by-row fold (one chunk per row) on up to 16 rows at a
    time, adjacent along the last dimension: one loop over ``j`` updates all their
    accumulators.  The rows' chains of combinations are independent, so the CPU overlaps
    them (a single row's fold waits for each combination in turn: an add's latency per
    element), and reads that do not depend on the row's last index are shared.  Each row
    still combines its elements in order ``0 .. n-1``: the result is exactly phase ``f``'s.
    Rows left over at the end of a segment or a task are folded one by one."""
    g.begin("b")
    ix = [g.fresh("i") for _ in dims]
    for v, a in zip(ix, g.unravel("lo", dims)):
        g.emit(f"{v} = {a}")
    _row_blocks(g, s, dims, outs, "lo", "hi", ix, None, n)


def _row_blocks(g: KernelGen, s: KFold, dims: list, outs: list, first: str, end: str,
                ix: list, jlo: str | None, jhi: str) -> None:
    """Fold rows ``first .. end-1`` (multi-index variables ``ix`` of row ``first``, which
    this advances) over ``j`` in ``jlo .. jhi-1``, up to 16 adjacent rows at a time
    (``FOLD_WIDTHS``: D = 10 is a block of 8 and a pair) with their accumulators in
    variables; for sums of outer products (``_plane_blocked``), ``FOLD_PLANES`` rows of
    the dimension before the last too (``_plane_block``), wherever the range holds them
    whole.  ``jlo`` None: whole rows, from the seed (or element 0); else the
    accumulators continue from the rows' values in the output."""
    r = g.fresh("r")
    pre, last = ix[:-1], ix[-1]
    g.emit(f"{r} = {first}")
    g.emit(f"while {r} < {end}:")
    g.ind += 1
    planes = _plane_blocked(s)
    if planes:  # FOLD_PLANES whole rows of the last dimension at a time, when they are here
        h, d, ip = FOLD_PLANES, dims[-1], ix[-2]
        g.emit(f"if {last} == 0 and {end} - {r} >= {h} * {d} and {dims[-2]} - {ip} >= {h}:")
        g.ind += 1
        c = g.fresh("c")
        g.emit(f"{c} = 0")
        g.emit(f"while {c} < {d}:")
        g.ind += 1
        for width in FOLD_WIDTHS:
            g.emit("else:" if width == 1 else
                   f"{'if' if width == FOLD_WIDTHS[0] else 'elif'} {d} - {c} >= {width}:")
            g.ind += 1
            _plane_block(g, s, outs, r, ix, d, c, width, jlo, jhi)
            g.emit(f"{c} += {width}")
            g.ind -= 1
        g.ind -= 1
        g.emit(f"{r} += {h} * {d}")
        g.emit(f"{ip} += {h - 1}")  # and one more below, with the carry
        g.emit(f"{last} = {d}")
        g.ind -= 1
    for width in FOLD_WIDTHS:
        if width == FOLD_WIDTHS[0]:
            g.emit(f"{'elif' if planes else 'if'} {end} - {r} >= {width} and "
                   f"{dims[-1]} - {last} >= {width}:")
        elif width > 1:
            g.emit(f"elif {end} - {r} >= {width} and {dims[-1]} - {last} >= {width}:")
        else:
            g.emit("else:")
        g.ind += 1
        # row t's last index is the atom ``(last + t)``: its reads are at a shared
        # offset plus t (``KernelGen.read``), consecutive loads that SLP vectorizes
        _fold_rows(g, s, outs, [(f"{r} + {t}", pre + [last if t == 0 else f"({last} + {t})"])
                                for t in range(width)], jlo, jhi)
        g.emit(f"{r} += {width}")
        g.emit(f"{last} += {width}")
        g.ind -= 1
    g.emit(f"if {last} == {dims[-1]}:")
    g.ind += 1
    g.emit(f"{last} = 0")
    _increment(g, pre, dims[:-1])
    g.ind -= 2


def _plane_block(g: KernelGen, s: KFold, outs: list, r: str, ix: list, d: str, c: str,
                 width: int, jlo: str | None, jhi: str) -> None:
    """Fold the ``FOLD_PLANES x width`` rows ``(.., ix[-2] + u, c + t)`` (``r``: the
    position of row ``(.., ix[-2], 0)``) together (``_fold_rows``), as
    ``_row_blocks`` does for one row of blocks.  A read that does not depend on
    ``ix[-2]`` is loaded once for all ``u`` (LLVM merges the equal loads), one that
    does not depend on the last index once for all ``t``: a sum of outer products
    makes ``FOLD_PLANES * width`` multiply-adds per ``FOLD_PLANES + width`` loads (a
    GEMM micro-kernel; with one plane it is ``width`` per ``width + 1``).  The GMM's
    ``sum_i x[i, k, c] * y[i, k, r]`` (D = 32, K = 100, 327 points): 4.8 -> 2.8 ms; four
    planes were no faster than two, and compile for twice as long."""
    pre, ip = ix[:-2], ix[-2]
    rows = []
    for u in range(FOLD_PLANES):
        p = g.fresh("pp")
        g.emit(f"{p} = {r} + {u} * {d} + {c}")
        plane = ip if u == 0 else f"({ip} + {u})"
        rows += [(f"{p} + {t}", pre + [plane, c if t == 0 else f"({c} + {t})"])
                 for t in range(width)]
    _fold_rows(g, s, outs, rows, jlo, jhi)


def _fold_rows(g: KernelGen, s: KFold, outs: list, rows: list, jlo: str | None,
               jhi: str) -> None:
    """Fold the block ``rows`` ((output position, multi-index atoms) per row) over ``j``
    in ``jlo .. jhi-1`` with their accumulators in variables, one loop over ``j`` for
    all of them.  ``jlo`` None: from the seed (or element 0); else from the rows'
    values in the output."""
    elt = s.out.type.elt
    ts = leaves(elt)
    j = g.fresh("j")
    accs = [[g.fresh("acc") for _ in ts] for _ in rows]
    if jlo is not None:
        for acc, (pos, _) in zip(accs, rows):
            g.set_vars(acc, ts, tuple(at(o, pos) for o in outs))
        start = jlo
    elif s.z is not None:
        z = g.exp(s.z)
        for acc in accs:
            g.set_vars(acc, ts, z)
        start = "0"
    else:
        for acc, (_, row) in zip(accs, rows):
            g.set_vars(acc, ts, g.apply(s.src, (tuple(row + ["0"]),)))
        start = "1"
    g.loop(j, f"range({start}, {jhi})")
    for acc, (_, row) in zip(accs, rows):
        x = g.apply(s.src, (tuple(row + [j]),))
        g.update(acc, ts, g.apply(s.f, (rebuild(elt, iter(acc)), x)))
    g.ind -= 1
    for acc, (pos, _) in zip(accs, rows):
        g.store(outs, pos, tuple(acc))


def _ops(*exprs) -> tuple:
    """(number of primitive applications and reads, number of ``While`` loops) in
    ``exprs``, shared subexpressions counted once."""
    ops, loops, seen, stack = 0, 0, set(), list(exprs)
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, N.While):
            loops += 1
        elif isinstance(e, (N.PrimApp, N.Index)):
            ops += 1
        stack.extend(children(e))
    return ops, loops


def _fold_interchanged(g: KernelGen, s: KFold, dims: list, outs: list, m: str, n: str):
    """Phase ``o``: the fold with its loops interchanged, for sources that are contiguous
    along the rows rather than along the folded dimension (AD's folds over replicated
    dimensions: sums over points of per-point contributions).  A task is a tile of
    ``tile`` rows (at most ``FOLD_TILE``; fewer when that gives every thread work),
    initialised in the output and then folded over ``FOLD_J_CHUNK`` elements at a time:
    the chunk's part of the source stays in cache while the tile's rows go over it in
    blocks of rows (``_row_blocks``).  Each row still
    combines its elements in order ``0 .. n-1``, so the result is exactly the row-by-row
    fold's."""
    g.begin("o")
    t, r0, r1, r, jc, je = (g.fresh(x) for x in ("t", "r", "r", "r", "jc", "je"))
    tile = g.slot(("tile",))
    g.loop(t, "range(lo, hi)")
    g.emit(f"{r0} = {t} * {tile}")
    g.emit(f"{r1} = min({r0} + {tile}, {m})")
    base = g.unravel(r0, dims)
    bix = [g.fresh("b") for _ in dims]
    for v, a in zip(bix, base):
        g.emit(f"{v} = {a}")
    ix = [g.fresh("i") for _ in dims]
    for v, b in zip(ix, bix):
        g.emit(f"{v} = {b}")
    g.loop(r, f"range({r0}, {r1})")  # every row from the seed or its element 0
    g.store(outs, r, g.exp(s.z) if s.z is not None else g.apply(s.src, (tuple(ix + ["0"]),)))
    _increment(g, ix, dims)
    g.ind -= 1
    g.loop(jc, f"range({0 if s.z is not None else 1}, {n}, {FOLD_J_CHUNK})")
    g.emit(f"{je} = min({jc} + {FOLD_J_CHUNK}, {n})")
    _fold_tile(g, s, dims, outs, r0, r1, bix, ix, jc, je)
    g.ind -= 2


def _fold_tile(g: KernelGen, s: KFold, dims: list, outs: list, r0: str, r1: str, bix: list,
               ix: list, jlo: str, jhi: str) -> None:
    """Fold elements ``jlo .. jhi-1`` into the rows ``r0 .. r1-1`` of ``outs`` (row
    ``r0``'s multi-index: the atoms ``bix``; ``ix``: variables for ``_row_blocks``), in
    blocks of rows.  (Counted loops over segments of the last dimension, which LLVM's
    loop vectorizer handles, were 1.5-2.5x slower than SLP-vectorized blocks for D = 32.)"""
    for v, b in zip(ix, bix):
        g.emit(f"{v} = {b}")
    _row_blocks(g, s, dims, outs, r0, r1, ix, jlo, jhi)


def _fold_interchanged_chunked(g: KernelGen, s: KFold, dims: list, outs: list, parts: list,
                               m: str, n: str, nch: str):
    """Phases ``oc`` and ``combc``: the interchanged fold of long rows, up to
    ``FOLD_OUTER_CHUNK_MAX_ROWS`` of them (a sum over all points into a (K, D) or
    (K, D, D) array).  Task ``c`` folds chunk ``c`` of the folded dimension into
    partials ``p[c * m + row]`` for every row (in blocks of rows, like phase ``o``; its
    part of the source is read from memory once), then ``combc`` combines each
    row's partials in chunk order, as phase ``comb`` does for row-by-row chunks (every
    chunk has elements: the host chunks only folds with ``n >= FOLD_CHUNKS``)."""
    elt = s.out.type.elt
    ts = leaves(elt)
    g.begin("oc")
    c, r, base, jlo, jhi = (g.fresh(x) for x in ("c", "r", "o", "jlo", "jhi"))
    g.loop(c, "range(lo, hi)")
    g.emit(f"{jlo} = ({c} * {n}) // {nch}")
    g.emit(f"{jhi} = (({c} + 1) * {n}) // {nch}")
    g.emit(f"{base} = {c} * {m}")
    ix = [g.fresh("i") for _ in dims]
    for v in ix:
        g.emit(f"{v} = 0")
    g.loop(r, f"range({m})")  # chunk 0 from the seed, the others from their first element
    if s.z is not None:
        g.emit(f"if {c} == 0:")
        g.ind += 1
        g.store(parts, f"{base} + {r}", g.exp(s.z))
        g.ind -= 1
        g.emit("else:")
        g.ind += 1
    g.store(parts, f"{base} + {r}", g.apply(s.src, (tuple(ix + [jlo]),)))
    if s.z is not None:
        g.ind -= 1
    _increment(g, ix, dims)
    g.ind -= 1
    st = g.fresh("st")
    if s.z is not None:
        g.emit(f"{st} = {jlo} if {c} == 0 else {jlo} + 1")
    else:
        g.emit(f"{st} = {jlo} + 1")
    _fold_tile(g, s, dims, parts, base, f"{base} + {m}", ["0"] * len(dims), ix, st, jhi)
    g.ind -= 1
    g.begin("combc", ranged=False)
    acc = [g.fresh("acc") for _ in ts]
    g.loop(r, f"range({m})")
    g.set_vars(acc, ts, tuple(at(p, r) for p in parts))
    g.loop(c, f"range(1, {nch})")
    nxt = tuple(at(p, f"{c} * {m} + {r}") for p in parts)
    g.update(acc, ts, g.apply(s.f, (rebuild(elt, iter(acc)), rebuild(elt, iter(nxt)))))
    g.ind -= 1
    g.store(outs, r, tuple(acc))


def _outer_major(s: KFold) -> bool:
    """Whether the interchanged loop (phase ``o``) suits the fold's source: some read
    has the folded index as its first index (consecutive elements of a row are far apart
    in memory: a row-by-row fold would fetch a cache line per element), some read has the
    row's last index as its own last index (a block of consecutive rows reads adjacent
    elements: vector loads) and no read has the
    folded index last while the row's last index sits elsewhere (such a read is
    contiguous only along the row, as a dot product's).  AD's sums over points of
    per-point contributions (``sum_i a[i, k, c] * b[i, k, r]``) are of this kind; its
    transposed products (``sum_r l[k, r, c] * y[i, k, r]``) read little memory per row
    and fold best in blocks of rows (phase ``b``)."""
    rank = len(s.shape.type.items)
    if rank == 0:
        return False
    good = bad = major = 0
    for pos in _read_positions(s):
        if pos[-1] == rank - 1:
            good += 1
        elif pos[-1] == rank and rank - 1 in pos:
            bad += 1
        if len(pos) > 1 and pos[0] == rank:
            major += 1
    return good > 0 and bad == 0 and major > 0


def _read_positions(s: KFold) -> list:
    """For each array read of the fold's source (with a tuple index), which component of
    the source's index (rows, then the folded index) each of its index components is:
    ``a[i, k, j]`` in ``\\(i, k, r, j) -> ...`` gives ``[0, 1, 3]`` (None: not one)."""
    p = s.src.params[0]
    env: dict = {}

    def resolve(e):  # through let-bound variables and projections of tuples
        while True:
            if isinstance(e, N.Var) and e.name in env:
                e = env[e.name]
            elif isinstance(e, N.Prj):
                t = resolve(e.tup)
                if not isinstance(t, N.Tuple):
                    return N.Prj(e.index, t) if t is not e.tup else e
                e = t.items[e.index]
            else:
                return e

    def position(e):  # which index component of the source ``e`` is, or None
        e = resolve(e)
        if isinstance(e, N.Prj) and isinstance(e.tup, N.Var) and e.tup.name == p.name:
            return e.index
        return None

    out = []
    stack = [s.src.body]
    while stack:
        x = stack.pop()
        if isinstance(x, N.Let):
            env[x.var.name] = x.bound
        if isinstance(x, N.Index) and isinstance(x.array, N.Avar):
            ix = resolve(x.index)
            if isinstance(ix, N.Tuple) and ix.items:
                out.append([position(c) for c in ix.items])
        stack.extend(children(x))
    return out


def _plane_blocked(s: KFold) -> bool:
    """Whether ``_row_blocks`` also blocks ``FOLD_PLANES`` adjacent rows of the second to
    last dimension (``_plane_block``): for small element functions with a read that
    depends on the rows' last index but not on the one before (``x[j, k, c]`` in
    ``g[k, r, c] = sum_j x[j, k, c] * y[j, k, r]``: a sum of outer products)."""
    rank = len(s.shape.type.items)
    if rank < 2 or len(leaves(s.out.type.elt)) != 1:
        return False
    ops, loops = _ops(s.src, s.f)
    if loops or ops > FOLD_PLANE_MAX_OPS:
        return False
    return any(None not in pos and rank - 2 not in pos and rank - 1 in pos
               for pos in _read_positions(s))


def scan_chunked(s: KScan) -> bool:
    """Whether the scan has the chunked (three-phase) path: only for scans of a single
    row (outer rank 0), where rows give no parallelism (it costs compile time)."""
    return len(s.shape.type.items) == 0


def gen_scan(s: KScan, check: bool):
    """Phase ``s`` scans (row, chunk) tasks, ``mode`` chunks per row.  With one chunk per
    row every task scans a row.  With ``mode`` chunks (single-row scans only) the host
    first runs phase ``t`` (the totals of the chunks, in parallel) and ``carry`` (the
    carry into each chunk, sequentially in scan order); then every chunk is scanned from
    its carry (the first chunk in scan order from z or its first element)."""
    g = KernelGen(check)
    elt = s.out.type.elt
    ts = leaves(elt)
    rank = len(s.shape.type.items)
    m, n, nch = g.slot(("size",)), g.slot(("n",)), g.slot(("mode",))
    kout = g.slot(("kout",))
    dims = [g.slot(("out", d)) for d in range(rank)]
    outs = _out_names(0, s.out.type)
    hz, left = s.z is not None, s.left
    chunked = scan_chunked(s)
    tots, cars = _bufs("tot", s.out.type), _bufs("car", s.out.type)
    g.work = outs + (tots + cars if chunked else [])
    # Left scans with z store element j's partial result at j + 1 (the seed at 0); right
    # scans with z store it at j (the seed at n); the 1-forms store it at j.
    off = 1 if (hz and left) else 0
    first_c = "0" if left else f"({nch} - 1)"
    last_c = f"({nch} - 1)" if left else "0"

    def combine(acc, x):  # f in the scan's order: f(acc, x) left, f(x, acc) right
        a = rebuild(elt, iter(acc))
        g.update(acc, ts, g.apply(s.f, (a, x) if left else (x, a)))

    if chunked:
        g.begin("t")
        tk = g.fresh("tk")
        counter = _row_counter(g, dims)
        g.loop(tk, "range(lo, hi)")
        r, c, lo, hi, ix = _chunk_task(g, tk, n, nch, dims, counter)
        g.emit(f"if {c} != {last_c}:")
        g.ind += 1
        acc = [g.fresh("acc") for _ in ts]
        g.set_vars(acc, ts, g.apply(s.src, (tuple(ix + [lo if left else f"{hi} - 1"]),)))
        j = g.fresh("j")
        g.loop(j, f"range({lo} + 1, {hi})" if left else f"range({hi} - 2, {lo} - 1, -1)")
        combine(acc, g.apply(s.src, (tuple(ix + [j]),)))
        g.ind -= 1
        g.store(tots, tk, tuple(acc))
        g.begin("carry", ranged=False)
        r, c = g.fresh("r"), g.fresh("c")
        g.loop(r, f"range({m})")
        acc = [g.fresh("acc") for _ in ts]
        if hz:
            g.set_vars(acc, ts, g.exp(s.z))
            g.store(cars, f"{r} * {nch} + {first_c}", tuple(acc))
        order = f"range(1, {nch})" if left else f"range({nch} - 2, -1, -1)"
        prev = f"{r} * {nch} + {c} - 1" if left else f"{r} * {nch} + {c} + 1"
        g.loop(c, order)
        tv = rebuild(elt, iter(at(p, prev) for p in tots))
        if hz:
            combine(acc, tv)
        else:
            start = "1" if left else f"{nch} - 2"
            g.emit(f"if {c} == {start}:")
            g.ind += 1
            g.set_vars(acc, ts, tv)
            g.ind -= 1
            g.emit("else:")
            g.ind += 1
            combine(acc, tv)
            g.ind -= 1
        g.store(cars, f"{r} * {nch} + {c}", tuple(acc))
    g.begin("s")
    tk = g.fresh("tk")
    counter = _row_counter(g, dims)
    g.loop(tk, "range(lo, hi)")
    r, c, lo, hi, ix = _chunk_task(g, tk, n, nch, dims, counter)
    base = g.fresh("base")
    g.emit(f"{base} = {r} * {kout}")
    if not hz:
        g.emit(f"if {lo} < {hi}:")
        g.ind += 1
    acc = [g.fresh("acc") for _ in ts]
    st = g.fresh("st")  # left: first j of the loop; right: the first (highest) j
    if chunked:
        g.emit(f"if {c} == {first_c}:")
        g.ind += 1
    if hz:
        g.set_vars(acc, ts, g.exp(s.z))
        g.store(outs, base if left else f"{base} + {n}", tuple(acc))
        g.emit(f"{st} = {lo}" if left else f"{st} = {hi} - 1")
    else:
        f0 = g.fresh("f")
        g.emit(f"{f0} = {lo}" if left else f"{f0} = {hi} - 1")
        g.set_vars(acc, ts, g.apply(s.src, (tuple(ix + [f0]),)))
        g.store(outs, f"{base} + {f0}", tuple(acc))
        g.emit(f"{st} = {lo} + 1" if left else f"{st} = {hi} - 2")
    if chunked:
        g.ind -= 1
        g.emit("else:")
        g.ind += 1
        g.set_vars(acc, ts, tuple(at(p, tk) for p in cars))
        g.emit(f"{st} = {lo}" if left else f"{st} = {hi} - 1")
        g.ind -= 1
    j = g.fresh("j")
    g.loop(j, f"range({st}, {hi})" if left else f"range({st}, {lo} - 1, -1)")
    combine(acc, g.apply(s.src, (tuple(ix + [j]),)))
    g.store(outs, f"{base} + {j} + {off}", tuple(acc))
    return g, {"chunked": chunked}


def gen_permute(s: KPermute, check: bool):
    """Phase ``d``: the defaults (parallel over targets).  Phase ``p``: the scatter of the
    sources ``[lo, hi)``.  For a recognised combination (+, *, max, min on a number) it
    writes into ``priv[c * size + target]``: the host passes the output as ``priv`` with
    ``c == 0`` to scatter serially, or ``mode`` private buffers (initialised to the
    identity) scattered in parallel, chunk c of the sources into buffer c, and phase
    ``m`` then combines, for every target, its chunks' values in chunk order.  Any other
    combination scatters serially into the output."""
    if projection_side(s.comb) is not None:
        return gen_projection(s, check)
    g = KernelGen(check)
    elt = s.out.type.elt
    ts = leaves(elt)
    trank = len(s.out_shape.type.items)
    srank = len(s.shape.type.items)
    tn, nch = g.slot(("size",)), g.slot(("mode",))
    tdims = [g.slot(("out", d)) for d in range(trank)]
    sdims = [g.slot(("src", d)) for d in range(srank)]
    outs = _out_names(0, s.out.type)
    fast = fast_comb(s.comb)
    g.work = outs + (["priv"] if fast else [])
    g.begin("d")
    k = g.fresh("k")
    g.loop(k, "range(lo, hi)")
    ix = g.unravel(k, tdims)
    g.store(outs, k, g.apply(s.defaults, (tuple(ix),)))
    g.begin("p", parallel=fast is not None)
    bufs = ["priv"] if fast else outs
    base = g.fresh("pb")
    g.emit(f"{base} = c * {tn}" if fast else f"{base} = 0")
    # the source's multi-index is carried from element to element (divisions by the
    # dimensions, once per element, were most of a scatter's time)
    ix = [g.fresh("i") for _ in sdims]
    for v, a in zip(ix, g.unravel("lo", sdims)):
        g.emit(f"{v} = {a}")
    k = g.fresh("k")
    g.loop(k, "range(lo, hi)")
    body = g.ind
    tv = g.apply(s.target, (tuple(ix),))
    keep, tix = tv[0], flat(tv[1])
    g.emit(f"if {keep}:")
    g.ind += 1
    if check and tix:
        g.emit(f"if not ({g.in_bounds(tix, tdims)}):")
        g.ind += 1
        g.record(Site("permute (target index)", None, len(tix)), tix)
        g.ind -= 1
        g.emit("else:")
        g.ind += 1
    lin = g.offset(tix, tdims)
    pos = g.fresh("pos")
    g.emit(f"{pos} = {base} + {lin}")
    v = g.apply(s.value, (tuple(ix),))
    old = rebuild(elt, iter(at(b, pos) for b in bufs))
    new = flat(g.apply(s.comb, (v, old)))
    for b, a in zip(bufs, new):
        g.emit(f"{at(b, pos)} = {a}")
    g.ind = body
    _increment(g, ix, sdims)
    if fast:
        g.begin("m")
        k, c, acc = g.fresh("k"), g.fresh("c"), g.fresh("acc")
        g.loop(k, "range(lo, hi)")
        g.emit(f"{acc} = {at(outs[0], k)}")
        g.loop(c, f"range({nch})")
        g.update([acc], ts, g.apply(s.comb, (at("priv", f"{c} * {tn} + {k}"), acc)))
        g.ind -= 1
        g.emit(f"{at(outs[0], k)} = {acc}")
    return g, {"fast": fast}


def gen_projection(s: KPermute, check: bool):
    """A permute whose combination is a projection (``\\new old -> new``: the write from
    the last source in row-major order wins; ``\\new old -> old``), in parallel and
    deterministic, O(n) with no sorting or atomics.  Phase ``d``: the defaults.  Phase
    ``p``: chunk ``c`` of the sources records, in ``priv[c * size + target]``
    (initialised to -1), the last source index of the chunk writing each target.
    Phase ``m``, parallel over targets: the last chunk that wrote a target holds its
    winner, whose value is computed there and combined once."""
    g = KernelGen(check)
    elt = s.out.type.elt
    trank = len(s.out_shape.type.items)
    srank = len(s.shape.type.items)
    tn, nch = g.slot(("size",)), g.slot(("mode",))
    tdims = [g.slot(("out", d)) for d in range(trank)]
    sdims = [g.slot(("src", d)) for d in range(srank)]
    outs = _out_names(0, s.out.type)
    g.work = outs + ["priv"]
    g.begin("d")
    k = g.fresh("k")
    g.loop(k, "range(lo, hi)")
    g.store(outs, k, g.apply(s.defaults, (tuple(g.unravel(k, tdims)),)))
    g.begin("p")
    base = g.fresh("pb")
    g.emit(f"{base} = c * {tn}")
    k = g.fresh("k")
    g.loop(k, "range(lo, hi)")
    tv = g.apply(s.target, (tuple(g.unravel(k, sdims)),))
    keep, tix = tv[0], flat(tv[1])
    g.emit(f"if {keep}:")
    g.ind += 1
    if check and tix:
        g.emit(f"if not ({g.in_bounds(tix, tdims)}):")
        g.ind += 1
        g.record(Site("permute (target index)", None, len(tix)), tix)
        g.ind -= 1
        g.emit("else:")
        g.ind += 1
    g.emit(f"priv[{base} + {g.offset(tix, tdims)}] = {k}")
    g.begin("m")
    k, c, w = g.fresh("k"), g.fresh("c"), g.fresh("w")
    g.loop(k, "range(lo, hi)")
    g.emit(f"{w} = -1")
    g.loop(c, f"range({nch} - 1, -1, -1)")
    g.emit(f"{w} = priv[{c} * {tn} + {k}]")
    g.emit(f"if {w} >= 0:")
    g.emit("    break")
    g.ind -= 1
    g.emit(f"if {w} >= 0:")
    g.ind += 1
    v = g.apply(s.value, (tuple(g.unravel(w, sdims)),))
    old = rebuild(elt, iter(at(b, k) for b in outs))
    g.store(outs, k, g.apply(s.comb, (v, old)))
    return g, {"fast": "winner"}


_GEN = {KGenerate: gen_generate, KFold: gen_fold, KScan: gen_scan, KPermute: gen_permute}


def step_weight(s) -> int:
    """A rough per-element cost of a loop step: 1 for a few operations, more for long
    element functions, and large if they loop (``While``), so that a few expensive
    elements still run in parallel."""
    ops, loops = _ops(*(getattr(s, f) for f in ("f", "src", "target", "value", "comb",
                                                "defaults") if getattr(s, f, None) is not None))
    return PAR_MIN_WORK if loops else max(1, ops // 8)


# --------------------------------------------------------------------------- module


@dataclass
class Module:
    source: str
    plans: dict = field(default_factory=dict)  # id(step) -> KernelPlan


def generate(body: KBlock, check_bounds: bool) -> Module:
    """The module source for every loop step in ``body`` (and nested blocks)."""
    with recursion_headroom(_RECURSION_LIMIT):
        return _generate(body, check_bounds)


_RECURSION_LIMIT = 20000


def _generate(body: KBlock, check_bounds: bool) -> Module:
    flush = fpmode.flush_subnormals()
    steps: dict = {}  # text of a step's functions (base name KERNEL) -> base name
    texts: list = []
    mod = Module("")

    def visit(block: KBlock):
        for s in block.steps:
            gen = _GEN.get(type(s))
            if gen is not None:
                g, extra = gen(s, check_bounds)
                text = "\n\n".join(g.texts("KERNEL", flush))
                name = steps.get(text)
                if name is None:  # identical steps share their functions
                    name = steps[text] = f"k{len(steps)}"
                    texts.append(text.replace("KERNEL_", name + "_"))
                mod.plans[id(s)] = KernelPlan(s, name, list(g.array_order), list(g.layout),
                                              list(g.sites), extra.get("fast"),
                                              extra.get("chunked", False), list(g.parallel),
                                              step_weight(s), extra.get("outer", False),
                                              extra.get("blocked", False))
            elif isinstance(s, KAcond):
                visit(s.t)
                visit(s.e)
            elif isinstance(s, KAwhile):
                visit(s.cond)
                visit(s.body)
            elif not isinstance(s, KUse):
                raise BackendError(f"cpu backend: unknown kernel step {type(s).__name__}")

    visit(body)
    mod.source = (HEADER + (fpmode.SOURCE if flush else "")
                  + "".join("\n\n" + t for t in texts))
    return mod
