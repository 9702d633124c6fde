"""Code generation: a ``KernelProgram``'s loop steps as the source of a numba-cuda module.

The scalar-expression emitter is the one the numba backends share
(``accel.backends.numba.kernelgen.ScalarEmitter``: scalarised tuples, ``Cond``/``While``
as statements, a cast on every primitive result); ``CudaKernelGen`` supplies only the
dialect hooks that differ on a GPU:

* float functions go through ``backends.cuda.intrinsics`` (libdevice on a GPU, NumPy
  ufuncs under the simulator: IEEE ``inf``/``nan`` in both, never a Python exception);
* every constant is a typed NumPy scalar (``np.float64(1.0)``), so that the simulator,
  which runs kernels as Python, computes ``1.0 / 0.0 = inf`` like the GPU;
* float -> int conversions are range-checked (NaN/inf -> 0, out of range -> the minimum
  integer, as NumPy on x86) instead of relying on the hardware's conversion;
* a failed bounds check claims ``err[0]`` with ``cuda.atomic.cas`` (the first failure
  wins), then writes its index;
* sizes are kernel arguments (``s0, s1, ...``), not an array.

Kernels (``@cuda.jit(cache=True)``), one per loop step, launched by ``runtime``:

* ``KGenerate``: a grid-stride loop over the output elements;
* ``KFold``: one block per output row (grid-stride over rows); each of the ``BLOCK``
  threads folds a contiguous chunk of the row sequentially, then the partials are
  combined by a shared-memory tree that only ever combines adjacent ranges in index
  order (only associativity is assumed; empty chunks are skipped);
* ``KScan``: one thread per row, sequential (grid-stride over rows);
* ``KPermute``: one kernel with a ``phase`` argument: phase 0 writes the defaults (and
  clears the per-target locks), phase 1 scatters: ``cuda.atomic.add`` for ``+`` on
  numbers, ``cuda.atomic.max/min`` for integer max/min, a compare-and-swap loop on the
  bit pattern for any other combination of one 32/64-bit number (float max/min
  included, for NaN propagation), and a per-target spin lock (taken with
  ``cuda.atomic.cas``) for anything else (tuples, bools).  A projection (scatter) is
  deterministic: phase 1 takes each target's largest writing source index with
  ``cuda.atomic.max``, phase 2 lets that winner alone write.

No warp shuffles or votes are used: everything runs on the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accel.ast.patterns import projection_side
from accel.ast.traverse import recursion_headroom
from accel.ast.types import Scalar, leaves
from accel.errors import BackendError
from accel.fusion.kernels import (KBlock, KFold, KGenerate, KPermute, KScan)
from accel.backends.numba.kernelgen import (ERR_SIZE, ScalarEmitter, Site, StepTexts,
                                           fast_comb, loop_steps, out_names)
from accel.backends.numba.literals import CAST, cast, typed_const
from accel.backends.numba.trees import flat, rebuild

from . import intrinsics

#: Threads per block: the fold kernels' shared-memory arrays are sized by it.
DEFAULT_BLOCK_SIZE = 128

HEADER = '''"""accel CUDA kernels (generated; do not edit: the file name is its content hash)."""
import numpy as np
from numba import cuda

from accel.backends.cuda.intrinsics import ({names})  # noqa: F401

BLOCK = {block}
'''


def _header(block: int) -> str:
    names = ", ".join(intrinsics.NAMES)
    return HEADER.format(names=names, block=block)


def _bits(t: Scalar) -> int:
    return 32 if t.name in ("float32", "int32") else 64


def _f(fn: str, t: Scalar) -> str:
    return intrinsics.name(fn, _bits(t))


# Integer range of float -> int conversions: [lo, hi) as exact float literals.
_INT_RANGE = {"int64": ("-9.223372036854775808e18", "9.223372036854775808e18"),
              "int32": ("-2147483648.0", "2147483648.0")}


class CudaKernelGen(ScalarEmitter):
    """The shared emitter in the CUDA dialect (see the module docstring)."""

    BACKEND = "cuda"
    ALWAYS_PASS = True  # no pass fills empty blocks afterwards, as on the CPU

    def __init__(self, check_bounds: bool):
        super().__init__(check_bounds)
        self.lines = self.body  # the body of the (one) kernel function
        self.extra: list = []  # (name, descriptor) of extra array arguments after the outputs

    # ---- dialect hooks

    def const(self, value, t: Scalar) -> str:
        return typed_const(value, t)

    @staticmethod
    def tc(t: Scalar, expr: str) -> str:
        """Every value is cast to its accel type: typed NumPy scalars under the simulator
        (IEEE arithmetic, wrap-around), and no numba int32 -> int64 promotion."""
        return cast(t, expr)

    def math(self, fn: str, t: Scalar) -> str:
        return _f(fn, t)

    def math_prim(self, op: str, args: list, t0: Scalar, rt: Scalar) -> str | None:
        if op in intrinsics.UNARY and t0.is_float:
            return self.assign(rt, f"{_f(intrinsics.UNARY[op], t0)}({args[0]})")
        if op == "atan2":
            return self.assign(rt, f"{_f('atan2', t0)}({args[0]}, {args[1]})")
        if op == "pow" and t0.is_float:
            return self.assign(rt, f"{_f('pow', t0)}({args[0]}, {args[1]})")
        return None

    def load(self, buf: str, pos: str) -> str:
        return f"{buf}[{pos}]"

    def record(self, site: Site, ix: list) -> None:
        self.sites.append(site)
        self.emit(f"if cuda.atomic.cas(err, 0, 0, {len(self.sites)}) == 0:")
        for k, i in enumerate(ix[:ERR_SIZE - 1]):
            self.emit(f"    err[{k + 1}] = {i}")
        self.emit("    pass")

    def put(self, bufs: list, pos: str, ts: list, value) -> None:
        """``bufs[k][pos] = value`` for each leaf (cast to its type)."""
        for b, t, a in zip(bufs, ts, flat(value)):
            self.emit(f"{b}[{pos}] = {cast(t, a)}")

    # ---- primitives

    def convert(self, x: str, src: Scalar, rt: Scalar) -> str:
        if rt.is_int and src.is_float:
            lo, hi = _INT_RANGE[rt.name]
            r = self.fresh()
            self.emit(f"if {_f('isfinite', src)}({x}):")
            self.emit(f"    if {x} >= {lo} and {x} < {hi}:")
            self.emit(f"        {r} = {cast(rt, x)}")
            self.emit("    else:")
            self.emit(f"        {r} = {typed_const(-(1 << (_bits(rt) - 1)), rt)}")
            self.emit("else:")
            self.emit(f"    {r} = {typed_const(0, rt)}")
            return r
        return super().convert(x, src, rt)

    # ---- functions

    def function(self, name: str, outs: list) -> str:
        ins = [b for av in self.array_order for b in self.arrays[av.name].leaves]
        slots = [f"s{j}" for j in range(len(self.layout))]
        args = ", ".join(outs + [n for n, _ in self.extra] + ins + slots + ["err"])
        return "\n".join(["@cuda.jit(cache=True)", f"def {name}({args}):"] + self.lines) + "\n"

    def arg_descriptors(self, outs_types: list) -> list:
        """``(kind, dtype)`` per argument, in order (for ahead-of-time compilation)."""
        ins = [t.dtype.name for av in self.array_order for t in leaves(av.type.elt)]
        return ([("array", d) for d in outs_types] + [d for _, d in self.extra]
                + [("array", d) for d in ins] + [("scalar", "int64")] * len(self.layout)
                + [("array", "int64")])

    def grid_loop(self, var: str, n: str) -> None:
        self.emit(f"for {var} in range(cuda.grid(1), {n}, cuda.gridsize(1)):")
        self.ind += 1


def _dtypes(t) -> list:
    return [s.dtype.name for s in leaves(t.elt)]


# --------------------------------------------------------------------------- step kernels


def gen_generate(s: KGenerate, check: bool, block: int):
    g = CudaKernelGen(check)
    rank = len(s.shape.type.items)
    dims = [g.slot(("out", d)) for d in range(rank)]
    n = g.slot(("size",))
    outs = [out_names(k, o.type) for k, o in enumerate(s.outs)]
    k = g.fresh("k")
    g.grid_loop(k, n)
    ix = g.unravel(k, dims)
    v = g.apply(s.f, (tuple(ix),))
    comps = (v,) if len(s.outs) == 1 else v
    for bufs, o, c in zip(outs, s.outs, comps):
        g.put(bufs, k, leaves(o.type.elt), c)
    g.emit("pass")
    types = [d for o in s.outs for d in _dtypes(o.type)]
    return g, [b for bs in outs for b in bs], types, {}


def gen_fold(s: KFold, check: bool, block: int):
    """One block per row: contiguous per-thread chunks, then an in-order tree."""
    g = CudaKernelGen(check)
    elt, ts, (m, n), dims = g.rows(s)
    outs = out_names(0, s.out.type)
    shs = [g.fresh("sh") for _ in ts]
    for b, t in zip(shs, ts):
        g.emit(f"{b} = cuda.shared.array(BLOCK, {CAST[t.name]})")
    has, tid = g.fresh("has"), g.fresh("tid")
    g.emit(f"{has} = cuda.shared.array(BLOCK, np.int32)")
    g.emit(f"{tid} = cuda.threadIdx.x")
    r = g.fresh("r")
    g.emit(f"for {r} in range(cuda.blockIdx.x, {m}, cuda.gridDim.x):")
    g.ind += 1
    ix = g.unravel(r, dims)
    lo, hi, h, st = g.fresh("lo"), g.fresh("hi"), g.fresh("h"), g.fresh("st")
    g.emit(f"{lo} = ({tid} * {n}) // BLOCK")
    g.emit(f"{hi} = (({tid} + 1) * {n}) // BLOCK")
    acc = [g.fresh("acc") for _ in ts]
    g.set_vars(acc, ts, tuple(typed_const(0, t) for t in ts))
    g.emit(f"{h} = np.int32(0)")
    g.emit(f"{st} = {lo}")
    if s.z is not None:  # thread 0 starts from z (so an empty row gives z)
        g.emit(f"if {tid} == 0:")
        g.ind += 1
        g.set_vars(acc, ts, g.exp(s.z))
        g.emit(f"{h} = np.int32(1)")
        g.ind -= 1
    g.emit(f"if {h} == 0 and {lo} < {hi}:")
    g.ind += 1
    g.set_vars(acc, ts, g.apply(s.src, (tuple(ix + [lo]),)))
    g.emit(f"{h} = np.int32(1)")
    g.emit(f"{st} = {lo} + 1")
    g.ind -= 1
    j = g.fresh("j")
    g.emit(f"for {j} in range({st}, {hi}):")
    g.ind += 1
    x = g.apply(s.src, (tuple(ix + [j]),))
    g.update(acc, ts, g.apply(s.f, (rebuild(elt, iter(acc)), x)))
    g.emit("pass")
    g.ind -= 1
    g.put(shs, tid, ts, tuple(acc))
    g.emit(f"{has}[{tid}] = {h}")
    g.emit("cuda.syncthreads()")
    w = g.fresh("w")
    g.emit(f"{w} = 1")
    g.emit(f"while {w} < BLOCK:")
    g.ind += 1
    g.emit(f"if {tid} % (2 * {w}) == 0 and {tid} + {w} < BLOCK:")
    g.ind += 1
    g.emit(f"if {has}[{tid} + {w}] != 0:")
    g.ind += 1
    g.emit(f"if {has}[{tid}] != 0:")
    g.ind += 1
    left = [g.fresh("p") for _ in ts]
    right = [g.fresh("q") for _ in ts]
    for a, b in zip(left, shs):
        g.emit(f"{a} = {b}[{tid}]")
    for a, b in zip(right, shs):
        g.emit(f"{a} = {b}[{tid} + {w}]")
    res = g.apply(s.f, (rebuild(elt, iter(left)), rebuild(elt, iter(right))))
    g.put(shs, tid, ts, res)
    g.emit("pass")
    g.ind -= 1
    g.emit("else:")
    g.ind += 1
    for b in shs:
        g.emit(f"{b}[{tid}] = {b}[{tid} + {w}]")
    g.emit(f"{has}[{tid}] = np.int32(1)")
    g.ind -= 3
    g.emit("cuda.syncthreads()")
    g.emit(f"{w} = {w} * 2")
    g.ind -= 1
    g.emit(f"if {tid} == 0:")
    g.ind += 1
    fin = [g.fresh("v") for _ in ts]
    for a, b in zip(fin, shs):
        g.emit(f"{a} = {b}[0]")
    g.put(outs, r, ts, tuple(fin))
    g.emit("pass")
    g.ind -= 1
    g.emit("cuda.syncthreads()")
    return g, outs, _dtypes(s.out.type), {"block_threads": True}


def gen_scan(s: KScan, check: bool, block: int):
    """One thread per row, scanning sequentially (left or right, with or without z)."""
    g = CudaKernelGen(check)
    elt, ts, (m, n, kout), dims = g.rows(s, ("kout",))
    outs = out_names(0, s.out.type)
    hz, left = s.z is not None, s.left
    # Left scans with z store element j's partial result at j + 1 (the seed at 0); right
    # scans with z store it at j (the seed at n); the 1-forms store it at j.
    off = 1 if (hz and left) else 0

    def combine(acc, x):  # f in the scan's order: f(acc, x) left, f(x, acc) right
        a = rebuild(elt, iter(acc))
        g.update(acc, ts, g.apply(s.f, (a, x) if left else (x, a)))

    r = g.fresh("r")
    g.grid_loop(r, m)
    ix = g.unravel(r, dims)
    base = g.fresh("base")
    g.emit(f"{base} = {r} * {kout}")
    acc = [g.fresh("acc") for _ in ts]
    st = g.fresh("st")
    if not hz:
        g.emit(f"if {n} > 0:")
        g.ind += 1
    if hz:
        g.set_vars(acc, ts, g.exp(s.z))
        g.put(outs, base if left else f"{base} + {n}", ts, tuple(acc))
        g.emit(f"{st} = 0" if left else f"{st} = {n} - 1")
    else:
        f0 = g.fresh("f")
        g.emit(f"{f0} = 0" if left else f"{f0} = {n} - 1")
        g.set_vars(acc, ts, g.apply(s.src, (tuple(ix + [f0]),)))
        g.put(outs, f"{base} + {f0}", ts, tuple(acc))
        g.emit(f"{st} = 1" if left else f"{st} = {n} - 2")
    j = g.fresh("j")
    g.emit(f"for {j} in range({st}, {n}):" if left else f"for {j} in range({st}, -1, -1):")
    g.ind += 1
    combine(acc, g.apply(s.src, (tuple(ix + [j]),)))
    g.put(outs, f"{base} + {j} + {off}", ts, tuple(acc))
    g.emit("pass")
    g.ind -= 1
    g.emit("pass")
    return g, outs, _dtypes(s.out.type), {}


def permute_mode(s: KPermute) -> str:
    """How the scatter combines: ``atomic_add``, ``atomic_max``, ``atomic_min``, ``cas``
    (a compare-and-swap loop on one 32/64-bit number), ``lock`` (per-target lock) or
    ``winner`` (a projection: the last source in row-major order writes, see
    ``_gen_winner``)."""
    ts = leaves(s.out.type.elt)
    if projection_side(s.comb) is not None:
        return "winner"
    fast = fast_comb(s.comb)
    if len(ts) == 1 and ts[0].is_num:
        t = ts[0]
        if fast == "add":
            return "atomic_add"
        if fast in ("max", "min") and t.is_int:
            return "atomic_" + fast
        return "cas"
    return "lock"


def gen_permute(s: KPermute, check: bool, block: int):
    g = CudaKernelGen(check)
    elt = s.out.type.elt
    ts = leaves(elt)
    trank = len(s.out_shape.type.items)
    srank = len(s.shape.type.items)
    tn, sn, phase = g.slot(("size",)), g.slot(("ssize",)), g.slot(("phase",))
    tdims = [g.slot(("out", d)) for d in range(trank)]
    sdims = [g.slot(("src", d)) for d in range(srank)]
    outs = out_names(0, s.out.type)
    mode = permute_mode(s)
    if mode == "cas" and ts[0].is_float:
        bits = "rbits"
        g.extra.append((bits, ("array", "int64" if _bits(ts[0]) == 64 else "int32")))
    elif mode == "cas":
        bits = outs[0]
    if mode == "lock":
        g.extra.append(("lock", ("array", "int32")))
    if mode == "winner":
        g.extra.append(("win", ("array", "int64")))
    g.emit(f"if {phase} == 0:")
    g.ind += 1
    k = g.fresh("k")
    g.grid_loop(k, tn)
    ix = g.unravel(k, tdims)
    g.put(outs, k, ts, g.apply(s.defaults, (tuple(ix),)))
    if mode == "lock":
        g.emit(f"lock[{k}] = np.int32(0)")
    if mode == "winner":
        g.emit(f"win[{k}] = np.int64(-1)")
    g.emit("pass")
    g.ind -= 2
    if mode == "winner":
        _gen_winner(g, s, check, (phase, sn, tdims, sdims, outs, ts))
        return g, outs, _dtypes(s.out.type), {"mode": mode}
    g.emit("else:")
    g.ind += 1
    k = g.fresh("k")
    g.grid_loop(k, sn)
    ix = g.unravel(k, sdims)
    tix = g.scatter_target(s.target, ix, tdims)
    if check and tix:
        g.emit("continue")
        g.ind -= 1
    pos = g.offset(tix, tdims)
    v = [g.assign(t, a) for t, a in zip(ts, flat(g.apply(s.value, (tuple(ix),))))]
    if mode.startswith("atomic_"):
        g.emit(f"cuda.atomic.{mode[7:]}({outs[0]}, {pos}, {v[0]})")
    elif mode == "cas":
        t = ts[0]
        ob, pv = g.fresh("ob"), g.fresh("pv")
        bt = Scalar("int64" if _bits(t) == 64 else "int32") if t.is_float else t
        g.emit(f"{ob} = {bits}[{pos}]")
        g.emit("while True:")
        g.ind += 1
        old = g.assign(t, f"bits_f{_bits(t)}({ob})") if t.is_float else ob
        new = g.assign(t, flat(g.apply(s.comb, (v[0], old)))[0])
        nb = g.assign(bt, f"f{_bits(t)}_bits({new})") if t.is_float else new
        g.emit(f"{pv} = cuda.atomic.cas({bits}, {pos}, {ob}, {nb})")
        g.emit(f"if {pv} == {ob}:")
        g.emit("    break")
        g.emit(f"{ob} = {pv}")
        g.ind -= 1
    else:
        done = g.fresh("done")
        g.emit(f"{done} = False")
        g.emit(f"while not {done}:")
        g.ind += 1
        g.emit(f"if cuda.atomic.cas(lock, {pos}, np.int32(0), np.int32(1)) == 0:")
        g.ind += 1
        old = []
        for b, t in zip(outs, ts):
            if t.is_num:  # a coherent read (L2) of a value another SM may have written
                zero = typed_const(-0.0 if t.is_float else 0, t)
                old.append(g.assign(t, f"cuda.atomic.add({b}, {pos}, {zero})"))
            else:
                old.append(g.assign(t, f"{b}[{pos}]"))
        new = g.apply(s.comb, (rebuild(elt, iter(v)), rebuild(elt, iter(old))))
        g.put(outs, pos, ts, new)
        g.emit("cuda.threadfence()")
        g.emit(f"cuda.atomic.exch(lock, {pos}, np.int32(0))")
        g.emit(f"{done} = True")
        g.ind -= 2
    g.emit("pass")
    return g, outs, _dtypes(s.out.type), {"mode": mode}


def _gen_winner(g, s: KPermute, check: bool, slots) -> None:
    """A projection's scatter, deterministic under any schedule: phase 1 records each
    target's winner, the largest source linear index writing it (``cuda.atomic.max`` on
    ``win``); phase 2 (a second launch, so phase 1 has finished everywhere) lets each
    winner alone apply the combination.  Two passes over the sources, no sorting."""
    phase, sn, tdims, sdims, outs, ts = slots
    elt = s.out.type.elt
    base = g.ind
    for ph in (1, 2):
        g.ind = base
        g.emit(f"elif {phase} == 1:" if ph == 1 else "else:")
        g.ind += 1
        k = g.fresh("k")
        g.grid_loop(k, sn)
        ix = g.unravel(k, sdims)
        tv = g.apply(s.target, (tuple(ix),))
        keep, tix = tv[0], flat(tv[1])
        g.emit(f"if {keep}:")
        g.ind += 1
        if check and tix:
            g.emit(f"if not ({g.in_bounds(tix, tdims)}):")
            g.ind += 1
            if ph == 1:
                g.record(Site("permute (target index)", None, len(tix)), tix)
            g.emit("continue")
            g.ind -= 1
        pos = g.offset(tix, tdims)
        if ph == 1:
            g.emit(f"cuda.atomic.max(win, {pos}, np.int64({k}))")
        else:
            g.emit(f"if win[{pos}] == {k}:")
            g.ind += 1
            v = flat(g.apply(s.value, (tuple(ix),)))
            old = rebuild(elt, iter(f"{b}[{pos}]" for b in outs))
            g.put(outs, pos, ts, g.apply(s.comb, (rebuild(elt, iter(v)), old)))
        g.emit("pass")
    g.ind = base


_GEN = {KGenerate: gen_generate, KFold: gen_fold, KScan: gen_scan, KPermute: gen_permute}


# --------------------------------------------------------------------------- module


@dataclass
class KernelPlan:
    """What the host needs to launch one generated kernel."""

    step: object
    fn: str  # function name in the module
    inputs: list  # Avars whose leaf buffers follow the outputs (and extras), in order
    layout: list  # what the size arguments s0, s1, ... hold (see runtime)
    sites: list  # Site per 1-based id recorded in err[0]
    args: list  # (kind, dtype) per argument, for ahead-of-time compilation
    mode: str | None = None  # the permute's scatter strategy
    block_threads: bool = False  # launched with exactly BLOCK threads per block (fold)


@dataclass
class Module:
    source: str
    block: int
    plans: dict = field(default_factory=dict)  # id(step) -> KernelPlan


def generate(body: KBlock, check_bounds: bool, block: int = DEFAULT_BLOCK_SIZE) -> Module:
    """The module source for every loop step in ``body`` (and nested blocks)."""
    with recursion_headroom(20000):
        return _generate(body, check_bounds, block)


def _rename(text: str, name: str) -> str:
    return text.replace("def KERNEL(", f"def {name}(", 1)


def _generate(body: KBlock, check_bounds: bool, block: int) -> Module:
    if block < 1 or block > 1024:
        raise BackendError(f"cuda backend: block size {block} is not in 1..1024")
    texts = StepTexts()  # identical steps share their kernel
    mod = Module("", block)
    for s in loop_steps(body, _GEN, "cuda"):
        g, outs, types, extra = _GEN[type(s)](s, check_bounds, block)
        name = texts.add(g.function("KERNEL", outs), _rename)
        mod.plans[id(s)] = KernelPlan(s, name, list(g.array_order), list(g.layout),
                                      list(g.sites), g.arg_descriptors(types),
                                      extra.get("mode"), extra.get("block_threads", False))
    mod.source = texts.module(_header(block))
    return mod
