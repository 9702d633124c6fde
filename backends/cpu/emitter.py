"""The CPU dialect of the shared scalar emitter, and the loop-building helpers the step
kinds share.

``KernelGen`` writes a step's functions (one per phase, see ``codegen``): the scalar
emitter (``accel.backends.numba.kernelgen``) plus the CPU's math library (NumPy's
functions; ``exp``/``log`` from ``mathlib``, which LLVM can vectorize), the argument
list (work buffers, the arrays read, ``shp``, ``err``), a prologue reading ``shp``,
and a ``parallel=True`` driver per parallel phase.  The row helpers keep a multi-index
of rows by increments (no division per row).  ``PAR_*`` are the runtime's launch
policy: they only spread independent tasks over threads and never change a result.

Imports ``accel.backends.numba`` and this folder's leaf modules (``fpmode``,
``mathlib``, ``vectorize``).
"""

from __future__ import annotations

from accel.ast import nodes as N
from accel.ast.traverse import children
from accel.ast.types import Scalar, leaves
from accel.backends.numba.kernelgen import ScalarEmitter, store_at
from accel.backends.numba.literals import cast
from accel.backends.numba.trees import flat

from . import fpmode, mathlib
from .vectorize import MARK

#: Phases with less work (elements times ``step_weight``) run serially: no parallel
#: launch, no driver.  A parallel launch wakes the OpenMP threads, which sleep between
#: launches (``OMP_WAIT_POLICY=PASSIVE``, see ``backends/cpu/__init__``): 20-50 us on this
#: 2-core machine, the time a serial kernel takes for about 30,000 element-operations.
#: Measured: the RNN of ``benchmarks/loops.py`` (10^4 ``tanh`` per step, 100 steps) ran
#: its primal in 7.3 ms with 4096 here and 2.7 ms with 32768, its gradient in 29.6 and
#: 14.2 ms; the corpus's large programs did not change.  Raised again to 131072: the
#: corpus RNN's reverse loop (hidden 128) launched a 128 x 128 adjoint generate in parallel
#: at every step, 92 us a launch; its gradient went from 27 to 18.6 ms (min of 20, two
#: processes each), and no corpus program's gradient got slower (min of 2-3 alternating
#: processes: stencil 3.5 -> 2.6 ms, conv2d 17 -> 14, cumsum 16 -> 13, the others equal).
PAR_MIN_WORK = 131072
PAR_TASKS_PER_THREAD = 8  # chunks of tasks per thread in a parallel driver
#: ... of a matrix product's BLAS phase (``contract``): each chunk's ``np.dot`` packs the
#: other operand again, so small chunks multiply that cost.  An attention gradient's
#: (64, 256) x (256, 256) product took 673 us in 16 chunks of 4 rows and 273 us in 2
#: (one BLAS thread, numba alone on this 2-core machine).
MM_TASKS_PER_THREAD = 1

#: ``contract`` lets LLVM fuse a multiply and an add into one FMA instruction (one rounding
#: instead of two): folds of products run 10-17% faster (GMM, D = 32); no other fast-math
#: licence (reassociation, no-NaN) is given.
FLAGS = 'error_model="numpy", fastmath={"contract"}, cache=True, nogil=True'
SERIAL = f"@nb.njit({FLAGS})"

HEADER = '''"""accel CPU kernels (generated; do not edit: the file name is its content hash)."""
''' + MARK + '''
import math  # noqa: F401

import numba as nb
import numpy as np
from numba import types as _nbt
from numba.core import cgutils as _cgutils
from numba.core.extending import intrinsic as _intrinsic
''' + mathlib.SOURCE + '''

@_intrinsic
def _radd(typingctx, a, b):
    """``a + b`` that LLVM may reassociate with other such adds (``fadd reassoc
    contract``): a sum's chain in a fold, whose order the fold leaves open, vectorizes."""
    if a != b or not isinstance(a, _nbt.Float):
        return None
    def codegen(context, builder, signature, args):
        return builder.fadd(args[0], args[1], flags=("reassoc", "contract"))
    return a(a, b), codegen


def _flat_item(context, builder, aty, a, i, ity):
    # the address of element i of a 1-D array, as numba's own indexing computes it
    ary = context.make_array(aty)(context, builder, a)
    ix = context.cast(builder, i, ity, _nbt.intp)
    return _cgutils.get_item_pointer2(context, builder, ary.data,
                                      _cgutils.unpack_tuple(builder, ary.shape, 1),
                                      _cgutils.unpack_tuple(builder, ary.strides, 1),
                                      aty.layout, [ix])


@_intrinsic
def _ld(typingctx, a, i):
    """``a[i]`` of a flat array at an index known to be in bounds and non-negative
    (``kernelgen.at``): numba's address computation and load, without its indexing's
    typing and lowering."""
    if not isinstance(a, _nbt.Array) or a.ndim != 1 or not isinstance(i, _nbt.Integer):
        return None
    def codegen(context, builder, signature, args):
        aty = signature.args[0]
        ptr = _flat_item(context, builder, aty, args[0], args[1], signature.args[1])
        return context.unpack_value(builder, aty.dtype, ptr,
                                    align=None if aty.aligned else 1)
    return a.dtype(a, i), codegen


@_intrinsic
def _st(typingctx, a, i, v):
    """``a[i] = v`` (see ``_ld``), ``v`` converted to the array's type."""
    if not isinstance(a, _nbt.Array) or a.ndim != 1 or not isinstance(i, _nbt.Integer):
        return None
    def codegen(context, builder, signature, args):
        aty = signature.args[0]
        ptr = _flat_item(context, builder, aty, args[0], args[1], signature.args[1])
        val = context.cast(builder, args[2], signature.args[2], aty.dtype)
        context.pack_value(builder, aty.dtype, val, ptr, align=None if aty.aligned else 1)
        return context.get_dummy_value()
    return _nbt.none(a, i, v), codegen


@_intrinsic
def _select(typingctx, c, a, b):
    """``a if c else b`` as one LLVM ``select``, both computed (``kernelgen.speculable``)."""
    if a != b or not isinstance(c, _nbt.Boolean):
        return None
    def codegen(context, builder, signature, args):
        return builder.select(args[0], args[1], args[2])
    return a(c, a, b), codegen
'''

_NP_UNARY = {"sin": "np.sin", "cos": "np.cos", "tan": "np.tan", "asin": "np.arcsin",
             "acos": "np.arccos", "atan": "np.arctan", "sinh": "np.sinh", "cosh": "np.cosh",
             "tanh": "np.tanh", "expm1": "np.expm1",
             "log1p": "np.log1p", "sqrt": "np.sqrt", "floor": "np.floor", "ceil": "np.ceil",
             "round": "np.rint", "truncate": "np.trunc"}


class KernelGen(ScalarEmitter):
    """Builds the functions of one step: shared arguments (work buffers, the arrays read,
    ``shp``, ``err``), a prologue reading ``shp``, and one body per function."""

    SELECT = True  # ``HEADER`` defines ``_select``

    def __init__(self, check_bounds: bool, hoist: bool = False):
        """``hoist``: read each rank-0 array once, in the prologue, for a step that never
        writes an array it reads (any but a permute, which may update its defaults in
        place).  Read in a loop, ``x ! ()`` (logsumexp's maximum in ``exp(x - m)``) is
        loaded again after every store to a work buffer, which LLVM cannot prove is
        another array: the loop of ``exp`` over a block of 32 then did not vectorize."""
        super().__init__(check_bounds)
        if hoist:
            self.scalar_reads = {}
        self.funcs: dict = {}  # phase -> [lines]
        self.kinds: dict = {}  # phase -> "range" | "plain"
        self.parallel: list = []  # phases with a parallel driver
        self.work: list = []  # work buffer argument names

    # ---- functions

    def begin(self, phase: str, ranged: bool = True, parallel: bool = True) -> None:
        """Start the body of function ``phase`` (a range function over ``lo, hi``)."""
        self.body = self.funcs[phase] = []
        self.kinds[phase] = "range" if ranged else "plain"
        if ranged and parallel:
            self.parallel.append(phase)
        self.ind = 1

    def texts(self, base: str, flush: bool = False) -> list:
        """The source of every function of the step, named ``base_<phase>`` (``flush``:
        each sets and restores the floating-point mode, ``fpmode``)."""
        ins = [b for av in self.array_order for b in self.arrays[av.name].leaves]
        args = ", ".join(self.work + ins + ["shp", "err"])
        pro = [f"    s{i} = _ld(shp, {i})" for i in range(len(self.layout))]
        for name, hs in (self.scalar_reads or {}).items():
            pro += [f"    {h} = _ld({b}, 0)" for h, b in zip(hs, self.arrays[name].leaves)]
        fp = ([fpmode.PROLOGUE], [fpmode.EPILOGUE]) if flush else ([], [])
        out = []
        for phase, lines in self.funcs.items():
            head = "lo, hi, c, " if self.kinds[phase] == "range" else ""
            body = fp[0] + _fill_empty_blocks(pro + lines) + fp[1]
            out.append("\n".join([SERIAL, f"def {base}_{phase}({head}{args}):"] + body))
        # (a parallel phase runs its range function through a shared driver: ``drivers``)
        return [t + "\n" for t in out]

    # ---- the CPU's math library

    def math_prim(self, op: str, args: list, t0: Scalar, rt: Scalar) -> str | None:
        if op in ("exp", "log", "tanh"):  # mathlib: vectorizable, unlike libm's
            if t0.name == "float64":
                return self.assign(rt, f"_{op}({args[0]})")
            return self.assign(rt, cast(rt, f"_{op}(np.float64({args[0]}))"))
        if op in _NP_UNARY:
            return self.assign(rt, f"{_NP_UNARY[op]}({args[0]})")
        if op == "atan2":
            return self.assign(rt, f"np.arctan2({args[0]}, {args[1]})")
        if op == "pow" and not t0.is_int:
            return self.assign(rt, f"np.power({args[0]}, {args[1]})")
        return None

    # ---- loops

    def store(self, bufs: list, pos: str, value) -> None:
        for b, a in zip(bufs, flat(value)):
            self.emit(store_at(b, pos, a))

    def loop(self, var: str, rng: str) -> None:
        self.emit(f"for {var} in {rng}:")
        self.ind += 1


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


def work_bufs(prefix: str, t) -> list:
    return [f"{prefix}_{j}" for j in range(len(leaves(t.elt)))]



def row_counter(g: KernelGen, dims: list):
    """Before a loop over tasks: the variables of an incrementally maintained multi-index
    of rows (see ``advance_row``); returns (previous row, index atoms)."""
    pr = g.fresh("pr")
    g.emit(f"{pr} = -2")
    ix = [g.fresh("i") for _ in dims]
    for v in ix:
        g.emit(f"{v} = 0")
    return pr, ix


def advance_row(g: KernelGen, r: str, pr: str, ix: list, dims: list) -> None:
    """Bring the multi-index ``ix`` of row ``pr`` to row ``r``: by one increment with
    carries when ``r`` is the next row (the common case: no division per row), else by
    unravelling ``r``."""
    if not dims:
        return
    g.emit(f"if {r} == {pr} + 1:")
    g.ind += 1
    increment(g, ix, dims)
    g.ind -= 1
    g.emit(f"elif {r} != {pr}:")
    g.ind += 1
    for v, a in zip(ix, g.unravel(r, dims)):
        g.emit(f"{v} = {a}")
    g.ind -= 1
    g.emit(f"{pr} = {r}")


def increment(g: KernelGen, ix: list, dims: list) -> None:
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


def chunk_task(g: KernelGen, tk: str, n: str, nch: str, dims: list, counter):
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
    advance_row(g, r, pr, ix, dims)
    return r, c, lo, hi, ix



def _nodes(exprs):
    """The nodes of ``exprs``, shared subexpressions once."""
    seen, stack = set(), list(exprs)
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        stack.extend(children(e))


def count_ops(*exprs) -> tuple:
    """(number of primitive applications and reads, number of ``While`` loops) in
    ``exprs``, shared subexpressions counted once."""
    ops = loops = 0
    for e in _nodes(exprs):
        if isinstance(e, N.While):
            loops += 1
        elif isinstance(e, (N.PrimApp, N.Index)):
            ops += 1
    return ops, loops



#: Operations a transcendental function counts for in ``step_weight``: ``exp`` costs
#: about 2.7 ns an element vectorized, 6-8 times a few arithmetic operations and a read.
TRANSCENDENTAL_OPS = 48
_TRANSCENDENTAL = frozenset({"exp", "log", "tanh", "sin", "cos", "tan", "asin", "acos",
                             "atan", "sinh", "cosh", "expm1", "log1p", "atan2", "pow"})


def step_weight(s) -> int:
    """A rough per-element cost of a loop step: 1 for a few operations, more for long
    element functions or transcendental ones (``TRANSCENDENTAL_OPS`` each), and large if
    they loop (``While``), so that a few expensive elements still run in parallel (the
    softmax's ``exp`` over 256 x 256 scores: 0.21 ms serial, under ``PAR_MIN_WORK``
    counted as one operation a read)."""
    fs = [getattr(s, f) for f in ("f", "src", "target", "value", "comb", "defaults")
          if getattr(s, f, None) is not None]
    ops, loops = count_ops(*fs)
    ops += (TRANSCENDENTAL_OPS - 1) * sum(
        isinstance(e, N.PrimApp) and e.op in _TRANSCENDENTAL for e in _nodes(fs))
    return PAR_MIN_WORK if loops else max(1, ops // 8)


