"""Host orchestration of a compiled kernel program.

The host walks the kernel program's blocks in Python: it evaluates shapes and conditions
(``hosteval``), allocates every output, calls the generated numba kernel of each loop
step with flat buffers and an int64 ``shp`` array of sizes, raises ``OutOfBoundsError``
when a kernel's bounds check recorded a failure, and runs ``KAcond``/``KAwhile`` control
flow. That walk costs tens of microseconds a step, as much as the kernels of a small
gradient, so each top-level step's plan (``_StepCall``) is replayed by the next call
with arguments of the same shapes when what the host read to make it (array shapes, a
few elements) is unchanged. Arrays are immutable once built, so arrays are shared freely
between steps; results that would alias an input, a ``KUse`` constant or another result
are copied on the way out. Buffers are recycled (``BufferPool``): intermediates by the
next call, results once the caller has dropped them. Fresh large allocations are fresh
pages, and faulting them in cost more than the loops that fill them (BA's Jacobian: 12
ms against 1.4 ms for a 1M-element step). The price: a runner keeps up to
``BufferPool.max_bytes`` of idle buffers until it is garbage collected.
"""

from __future__ import annotations

import collections
import math
import sys
import threading
import time

import numba
import numpy as np
from numba.core.caching import NullCache
from numba.core.registry import CPUDispatcher

from accel.ast.types import ArrayT, ATupleT, TupleT, leaves, scalar_of_dtype
from accel.ast.traverse import free_vars
from accel.errors import BackendError, OutOfBoundsError, ProgramTypeError, ShapeError
from accel.fusion.kernels import (KAcond, KAwhile, KBlock, KFold, KGenerate, KPermute, KScan,
                                  KUse, KernelProgram, count_loops, show_kernel_program,
                                  step_elt, step_label, step_outs)
from accel.memory import check_allocatable, out_of_memory

from . import cache, codegen
from .codegen import ERR_SIZE
from .hosteval import HostEval
from .layout import transpose_reads
from .straight import StraightLine, eligible
from .vectorize import enable_slp


_MAX_REPLAYS = 8  # argument shapes whose step plans a runner remembers
_TAKEN = "$taken"  # env key of the call's list of allocated buffers (no variable's name)
_MEMO = "$memo"  # env key of the call's values of host expressions
_ERR = "$err"  # env key of the call's ``err`` array (kernels' bounds-check failures)


def _bound_in_loops(block: KBlock, inside: bool = False) -> set:
    """Names of arrays bound inside ``KAwhile`` conditions and bodies (and the loops'
    parameters): their values change from one iteration to the next."""
    out: set = set()
    for s in block.steps:
        if isinstance(s, KAwhile):
            out.update(p.name for p in s.params)
            out |= _bound_in_loops(s.cond, True) | _bound_in_loops(s.body, True)
        elif isinstance(s, KAcond):
            out |= _bound_in_loops(s.t, inside) | _bound_in_loops(s.e, inside)
        elif inside:
            out.update(o.name for o in step_outs(s))
    return out


class _Memo:
    """Host evaluation of a step's shapes, remembered for the rest of the call when they
    read only arrays that stay bound (the same shape expressions recur in many steps,
    e.g. every step of a gradient over (points, K, D) arrays).  With a ``log``, the
    host's reads behind every value are logged again when it is remembered (a step's
    plan depends on them just as much)."""

    def __init__(self, runner, env: dict, log: list | None = None):
        self.runner, self.env, self.ev, self.log = runner, env, None, log

    def __call__(self, e):
        known = self.runner._memoisable.get(id(e))
        if known is None:  # first sight: equal expressions share one key
            fv = free_vars(e)
            ok = not (fv & self.runner._loop_bound) and all(
                isinstance(self.env.get(name), ArrVal) for name in fv)
            key = id(self.runner._canonical.setdefault(e, e)) if ok else None
            known = self.runner._memoisable[id(e)] = (e, key)  # (e keeps id(e) unique)
        key = known[1]
        memo = self.env[_MEMO]
        log = self.log
        if key is not None and key in memo:
            v, reads = memo[key]
            if log is not None:
                log.extend(reads)  # what this step's value depends on, all the same
            return v
        if self.ev is None:
            self.ev = HostEval(self.env, log)
        start = len(log) if log is not None else 0
        v = self.ev(e)
        if key is not None:
            memo[key] = (v, log[start:] if log is not None else ())
        return v


class ArrVal:
    """A manifest array: its shape and one flat C-contiguous buffer per scalar leaf."""

    __slots__ = ("leaves", "shape")

    def __init__(self, shape: tuple, leaves_: list):
        self.shape = shape
        self.leaves = leaves_

    def __repr__(self) -> str:
        return f"ArrVal({self.shape}, {[b.dtype for b in self.leaves]})"


def _size(shape) -> int:
    return math.prod(shape)


def _shape_of(v, op: str) -> tuple:
    sh = tuple(int(x) for x in (v if isinstance(v, tuple) else (v,)))
    if any(x < 0 for x in sh):
        raise ShapeError(f"{op}: negative size in shape {sh}")
    return sh


def _identity(op: str, dtype) -> object:
    """The identity element of a recognised permute combination on ``dtype``."""
    dtype = np.dtype(dtype)
    if op == "add":
        return dtype.type(-0.0) if dtype.kind == "f" else dtype.type(0)
    if op == "mul":
        return dtype.type(1)
    if dtype.kind == "f":
        return dtype.type(-np.inf if op == "max" else np.inf)
    info = np.iinfo(dtype)
    return info.min if op == "max" else info.max


def _shown(ix: tuple) -> str:
    return f"({ix[0]},)" if len(ix) == 1 else str(tuple(ix))


# --------------------------------------------------------------------------- boundary


def _input(v, t, what: str) -> ArrVal:
    """A caller's argument as an ``ArrVal`` of type ``t`` (flat views or canonical copies;
    never written to)."""
    if not isinstance(t, ArrayT):
        raise ProgramTypeError(f"{what}: parameter of non-array type {t!r}")
    if type(v) is np.ndarray and v.ndim == t.rank and not isinstance(t.elt, TupleT):
        flags = v.flags
        if v.dtype == t.elt.dtype and flags.c_contiguous and flags.writeable:
            return ArrVal(v.shape, [v.reshape(-1)])  # the common case, in a microsecond
    bufs, shapes = [], []

    def leaf(x, s, path):
        if isinstance(s, TupleT):
            if not isinstance(x, (tuple, list)) or len(x) != len(s.items):
                raise ShapeError(f"{what}: expected a tuple of {len(s.items)} component arrays "
                                 f"for elements of type {s!r}")
            for i, (xi, si) in enumerate(zip(x, s.items)):
                leaf(xi, si, path + (i,))
            return
        arr = np.asarray(x)
        if arr.dtype != s.dtype:
            try:
                scalar_of_dtype(arr.dtype)
                ok = np.can_cast(arr.dtype, s.dtype, "same_kind")
            except KeyError:
                ok = False
            if not ok:
                raise ProgramTypeError(f"{what}: expected an array of {s!r}, got {arr.dtype}")
        if arr.ndim != t.rank:
            raise ShapeError(f"{what}: expected an array of rank {t.rank}, got shape {arr.shape}")
        shapes.append(arr.shape)
        # Kernels never write to their inputs, so a C-contiguous, writeable array of the
        # right dtype is used in place (read-only arrays would make numba compile another
        # specialisation); results that are inputs are copied on the way out.
        buf = np.ascontiguousarray(arr, dtype=s.dtype)
        if not buf.flags.writeable:
            buf = buf.copy()
        bufs.append(buf.reshape(-1))

    leaf(v, t.elt, ())
    if shapes:
        if any(sh != shapes[0] for sh in shapes):
            raise ShapeError(f"{what}: component arrays of different shapes {shapes}")
        shape = tuple(int(x) for x in shapes[0])
    else:
        shape = (0,) * t.rank  # an array of unit elements carries no data
    return ArrVal(shape, bufs)


def _rebuild_elt(t, it):
    if isinstance(t, TupleT):
        return tuple(_rebuild_elt(x, it) for x in t.items)
    return next(it)


# --------------------------------------------------------------------------- buffers


#: Smaller buffers are not pooled: malloc serves them from its heap without fresh pages,
#: faster than the pool's bookkeeping (taking and returning the four results of a GMM
#: gradient on 1000 points cost 4 us of a 0.15 ms call).  Read at run time.
POOL_MIN_BYTES = 1 << 15


class BufferPool:
    """A caching allocator for the flat buffers of one runner, by (dtype, size).

    Buffers of a finished call's intermediate arrays are free at once.  Buffers of its
    results are *lent*: the caller's arrays are views of them, and a lent buffer is
    reused only once nothing but the pool refers to it (CPython reference count: every
    NumPy view, memoryview or exported buffer of it holds a reference), i.e. after the
    caller has dropped every array that shares its memory.  At most ``per_key`` free
    buffers per key, ``max_bytes`` of free buffers and ``max_bytes`` of lent ones (the
    oldest are forgotten first) are kept."""

    def __init__(self, per_key: int = 4, max_bytes: int = 1 << 30):
        self.per_key, self.max_bytes = per_key, max_bytes
        self.free: dict = {}
        self.lent: list = []
        self.bytes = 0  # free buffers
        self.lock = threading.Lock()

    def take(self, size: int, dtype: np.dtype, taken: list) -> np.ndarray:
        if size * dtype.itemsize < POOL_MIN_BYTES:  # not pooled: see POOL_MIN_BYTES
            return np.empty(size, dtype=dtype)
        key = (dtype, size)
        with self.lock:
            bufs = self.free.get(key)
            if bufs:
                b = bufs.pop()
                self.bytes -= b.nbytes
            else:
                b = self._returned(key) if self.lent else None
        if b is None:
            b = np.empty(size, dtype=dtype)
        taken.append(b)
        return b

    def _returned(self, key):
        """A lent buffer of ``key`` that nobody else refers to any more (or None)."""
        lent = self.lent
        for k in range(len(lent)):
            b = lent[k]
            # references: the list, ``b`` and getrefcount's argument
            if (b.dtype, b.size) == key and sys.getrefcount(b) <= _POOL_REFS:
                del lent[k]
                return b
        return None

    def give(self, bufs: list, keep: set) -> None:
        """Return a finished call's buffers: those in ``keep`` (results) are lent."""
        with self.lock:
            for b in bufs:
                if id(b) in keep:
                    self.lent.append(b)
                    continue
                if self.bytes + b.nbytes > self.max_bytes:
                    continue
                lst = self.free.setdefault((b.dtype, b.size), [])
                if len(lst) < self.per_key:
                    lst.append(b)
                    self.bytes += b.nbytes
            held = sum(b.nbytes for b in self.lent)
            while self.lent and held > self.max_bytes:  # forget the oldest lent buffers
                held -= self.lent.pop(0).nbytes


def _result_layout(t, arrays: list):
    """The nesting of the result type ``t`` with its arrays numbered in order (appended
    to ``arrays``), for :func:`_nest`."""
    if isinstance(t, ATupleT):
        return tuple(_result_layout(x, arrays) for x in t.items)
    if not isinstance(t, ArrayT):
        raise BackendError(f"a program result of type {t!r} (not an array or tuple of arrays)")
    arrays.append(t)
    return len(arrays) - 1


def _nest(layout, arrays: list):
    """The caller's (nested tuple of) arrays (a plain function: a recursive closure
    would be a reference cycle keeping the result buffers referenced until the next
    garbage collection, and so out of the buffer pool)."""
    if isinstance(layout, int):
        return arrays[layout]
    return tuple(_nest(x, arrays) for x in layout)


def _count_launches(counts: collections.Counter, straight) -> None:
    """Add a straight-line replay's launches (per replay, times its replays) to ``counts``."""
    for phase, n in straight.counts.items():
        counts[phase] += n * straight.runs


def _pool_refs() -> int:
    """The reference count ``BufferPool._returned`` sees for a buffer only it holds."""
    lst = [np.empty(1)]
    for k in range(len(lst)):
        b = lst[k]
        return sys.getrefcount(b)
    return 0


_POOL_REFS = _pool_refs()


def _permute_chunks(size: int, ssize: int) -> int:
    """Private buffers of a parallel scatter of ``ssize`` sources into ``size`` targets:
    the most (``PERMUTE_CHUNKS``, 8, 4 or 2) whose initialisation and merge cost at most
    two scatters' worth of elements (a scatter's element costs several times a merge's:
    its index and value are computed), or 0 (serial).  A function of the shapes only,
    so the combination order, and the result, does not depend on the thread count."""
    if ssize < codegen.PERMUTE_PAR_MIN_SRC:
        return 0
    nch = codegen.PERMUTE_CHUNKS
    while nch >= 2 and (nch * size > 2 * ssize or nch * size > codegen.PERMUTE_PAR_MAX_PRIV):
        nch //= 2
    return nch if nch >= 2 else 0


def _dtypes(t) -> tuple:
    """The dtypes of the flat buffers of an array of type ``t``."""
    return tuple(s.dtype for s in leaves(t.elt))


class _StepCall:
    """A loop step with its host expressions evaluated: the buffers to allocate, the
    ``shp`` array and the launches.  Replayed as is by later calls whose ``guards`` hold
    (the arrays the host read have the same shapes and the elements it read the same
    values), so that a call of a program on arguments of recurring shapes does no host
    evaluation at all."""

    __slots__ = ("plan", "shape", "outs", "work", "shp", "calls", "guards")

    def __init__(self, plan, shape, outs, work, shp, calls, guards):
        self.plan, self.shape, self.outs, self.work = plan, shape, outs, work
        self.shp, self.calls, self.guards = shp, calls, guards


def _guards(log: list, inputs: list, env: dict) -> list:
    """``[(name, shape, [(offset, values)])]``: what a step's plan depends on.  ``log`` is
    the host's reads (``HostEval``), ``inputs`` the arrays whose shapes are in ``shp``."""
    by_name: dict = {}
    for name in inputs:
        by_name.setdefault(name, [])
    for kind, name, *rest in log:
        reads = by_name.setdefault(name, [])
        if kind == "index":
            reads.append(tuple(rest))
    return [(name, env[name].shape, reads) for name, reads in by_name.items()]


def _guards_hold(guards: list, env: dict) -> bool:
    for name, shape, reads in guards:
        v = env.get(name)
        if v is None or v.shape != shape:
            return False
        for off, vals in reads:
            for b, x in zip(v.leaves, vals):
                if not b[off] == x:  # NaN never holds: the step is planned again
                    return False
    return True


def run_control(s, env: dict, block) -> None:
    """Run a ``KAcond`` or ``KAwhile`` step, its blocks by ``block(b, env)`` (the cpu and
    cuda hosts share this walk; the loop condition is one element, read back from the
    device on a GPU)."""
    if isinstance(s, KAcond):
        b = s.t if bool(HostEval(env)(s.c)) else s.e
        block(b, env)
        vals = [env[r.name] for r in b.result]
        for o, v in zip(s.outs, vals):
            env[o.name] = v
        return
    state = [env[a.name] for a in s.init]
    while True:
        for p, v in zip(s.params, state):
            env[p.name] = v
        block(s.cond, env)
        if not bool(env[s.cond.result[0].name].leaves[0][0]):
            break
        block(s.body, env)
        state = [env[r.name] for r in s.body.result]
    for o, v in zip(s.outs, state):
        env[o.name] = v


# --------------------------------------------------------------------------- runner


class Runner:
    """A kernel program compiled for the CPU: ``runner(args)`` runs it."""

    def __init__(self, kp: KernelProgram, check_bounds: bool = False):
        self.kp = kp = transpose_reads(kp)
        self.check_bounds = bool(check_bounds)
        t0 = time.perf_counter()
        self.gen = codegen.generate(kp.body, self.check_bounds)
        t1 = time.perf_counter()
        self.module = cache.load(self.gen.source)
        enable_slp(self.module)
        t2 = time.perf_counter()
        self._codegen_seconds = t1 - t0
        self._load_seconds = t2 - t1
        self._compile_seconds = 0.0
        self._compiled: set = set()  # function names this runner has made ready
        self._ready: dict = {}  # ... and their dispatchers
        self._cache_hits = 0
        self._lock = threading.Lock()
        self._uses: dict = {}
        self._calls = 0
        self._counts: collections.Counter = collections.Counter()  # phase launches
        self._pool = BufferPool()
        self._loop_bound = _bound_in_loops(kp.body)  # names rebound by KAwhile iterations
        self._memoisable: dict = {}  # id(host expression) -> (expression, memo key or None)
        self._canonical: dict = {}  # host expression -> the first equal one seen
        self._replays: dict = {}  # argument shapes -> (threads, [_StepCall or None])
        self._planned = 0  # loop steps whose host expressions were evaluated
        self._straight: dict = {}  # argument shapes -> StraightLine (wired plans)
        self._straight_ok = True  # False once wiring a plan failed
        self._straight_calls = 0  # calls run by a straight-line replay
        self._collect_uses(kp.body)
        self._what = [f"argument {i} ({p.name})" for i, p in enumerate(kp.params)]
        result_arrays: list = []
        self._result_nest = _result_layout(kp.result_type, result_arrays)
        self._result_elts = [a.elt if isinstance(a.elt, TupleT) else None
                             for a in result_arrays]
        self._use_ids = frozenset(id(b) for v in self._uses.values() for b in v.leaves)

    # ---- preparation

    def _collect_uses(self, block: KBlock) -> None:
        for s in block.steps:
            if isinstance(s, KUse):
                a = np.array(s.array, copy=True, order="C")
                t = s.out.type
                if not isinstance(t, ArrayT) or len(leaves(t.elt)) != 1:
                    raise BackendError(f"cpu backend: use of type {t!r} is not supported")
                dt = leaves(t.elt)[0].dtype
                self._uses[id(s)] = ArrVal(tuple(int(x) for x in a.shape),
                                           [a.astype(dt, copy=False).reshape(-1)])
            elif isinstance(s, KAcond):
                self._collect_uses(s.t)
                self._collect_uses(s.e)
            elif isinstance(s, KAwhile):
                self._collect_uses(s.cond)
                self._collect_uses(s.body)

    # ---- running

    def __call__(self, args):
        args = list(args)
        params = self.kp.params
        if len(args) != len(params):
            raise ShapeError(f"program takes {len(params)} arguments, got {len(args)}")
        inputs = [_input(x, p.type, what) for p, x, what in zip(params, args, self._what)]
        key = tuple(v.shape for v in inputs)
        taken: list = []  # buffers allocated by this call
        self._calls += 1
        drv = self._straight.get(key)
        if drv is not None and drv.threads == numba.get_num_threads():
            arrays = drv.run(self, inputs, taken)  # kernels only: no NumPy errors to mute
            if arrays is not None:
                self._straight_calls += 1
                res = [arrays[r.name] for r in self.kp.body.result]
                out = self._outputs(res, inputs)
                self._pool.give(taken, {id(b) for v in res for b in v.leaves})
                return out
        env = {p.name: v for p, v in zip(params, inputs)}
        env[_TAKEN] = taken
        env[_MEMO] = {}
        env[_ERR] = np.zeros(ERR_SIZE, dtype=np.int64)
        with np.errstate(all="ignore"):
            self._top(env, key)
        res = [env[r.name] for r in self.kp.body.result]
        self._straighten(key, drv)
        out = self._outputs(res, inputs)
        self._pool.give(taken, {id(b) for v in res for b in v.leaves})
        return out

    def _straighten(self, key: tuple, old) -> None:
        """Wire the plan of ``key`` into a straight-line replay (``straight``) if it can
        be and has changed since ``old`` (the key's previous replay or None)."""
        entry = self._replays.get(key)
        if entry is None or (old is not None and old.plans is entry[1]):
            return
        self._retire(self._straight.pop(key, None))
        if not self._straight_ok or not eligible(self.kp, entry[1]):
            return
        for k in [k for k in self._straight if k not in self._replays]:
            self._retire(self._straight.pop(k))  # plans forgotten (``_MAX_REPLAYS``)
        try:
            self._straight[key] = StraightLine(self, entry[1], entry[0])
        except Exception:  # noqa: BLE001 - the step-by-step path always works
            self._straight_ok = False

    def _retire(self, straight) -> None:
        """Count the launches of a replay (or None) that is being forgotten."""
        if straight is not None:
            _count_launches(self._counts, straight)

    def _outputs(self, res: list, inputs: list):
        """The caller's (nested tuple of) arrays; results that are (views of) inputs or
        constants, or repeated, are copied."""
        protected = self._use_ids.union([id(b) for v in inputs for b in v.leaves])
        seen: set = set()
        arrays = []
        for v, elt in zip(res, self._result_elts):
            bufs = []
            for b in v.leaves:
                if id(b) in seen or id(b) in protected:
                    b = b.copy()
                seen.add(id(b))
                bufs.append(b.reshape(v.shape))
            arrays.append(bufs[0] if elt is None else _rebuild_elt(elt, iter(bufs)))
        return _nest(self._result_nest, arrays)

    def _block(self, block: KBlock, env: dict) -> None:
        for s in block.steps:
            self._step(s, env)

    def _step(self, s, env: dict) -> None:
        if isinstance(s, KUse):
            env[s.out.name] = self._uses[id(s)]
        elif isinstance(s, (KAcond, KAwhile)):
            run_control(s, env, self._block)
        else:
            self._run(s, self._plan(s, env), env)

    def _top(self, env: dict, key: tuple) -> None:
        """The program's body, replaying each step's plan from the last call with
        arguments of these shapes when its guards hold (planning it afresh if not)."""
        threads = numba.get_num_threads()
        old = self._replays.get(key)
        if old is not None and old[0] != threads:
            old = None
        fresh = old is None
        plans: list = []
        for i, s in enumerate(self.kp.body.steps):
            if isinstance(s, (KUse, KAcond, KAwhile)):
                self._step(s, env)
                plans.append(None)
                continue
            sc = old[1][i] if old is not None else None
            if sc is None or not _guards_hold(sc.guards, env):
                sc = self._plan(s, env)
                fresh = True
            self._run(s, sc, env)
            plans.append(sc)
        if fresh:
            if key not in self._replays and len(self._replays) >= _MAX_REPLAYS:
                self._replays.pop(next(iter(self._replays)))  # the oldest shapes
            self._replays[key] = (threads, plans)

    def _plan(self, s, env: dict) -> "_StepCall":
        """Evaluate a loop step's host expressions and decide its launches."""
        plan = self.gen.plans[id(s)]
        self._planned += 1
        log: list = []
        ev = _Memo(self, env, log)
        vals: dict = {}
        phases = []  # (phase, ntask or None for a plain function, work elements)
        work: list = []  # ("o", output leaf) | ("b", size, dtype) | ("f", size, dtype, value)
        if isinstance(s, KGenerate):
            shape = _shape_of(ev(s.shape), "generate")
            size = _size(shape)
            outs = [(shape, size, _dtypes(o.type)) for o in s.outs]
            work = [("o", k) for k in range(sum(len(o[2]) for o in outs))]
            if len(shape) >= 2:
                nrt = -(-shape[-2] // codegen.TILE_ROWS)
                nct = -(-shape[-1] // codegen.TILE_COLS)
                vals[("nrt",)], vals[("nct",)] = nrt, nct
                one_tile = len(shape) >= 3 and nrt == nct == 1  # phase s: same tasks
                phases.append(("s" if one_tile else "g", _size(shape[:-2]) * nrt * nct, size))
            else:
                phases.append(("g", size, size))
        elif isinstance(s, KFold):
            shape = _shape_of(ev(s.shape), "fold")
            n = self._inner(ev(s.n), "fold")
            size = _size(shape)
            if s.z is None and n == 0:
                raise ShapeError(f"fold1: the innermost dimension is empty (shape "
                                 f"{shape + (0,)})")
            rows = codegen.FOLD_OUTER_CHUNK_MAX_ROWS if plan.outer else \
                codegen.FOLD_CHUNK_MAX_ROWS
            chunk = n >= max(codegen.FOLD_CHUNK_MIN_N, codegen.FOLD_CHUNKS) and size < rows
            nch = codegen.FOLD_CHUNKS if chunk else 1
            vals[("n",)], vals[("mode",)] = n, nch
            outs = [(shape, size, _dtypes(s.out.type))]
            work = [("o", k) for k in range(sum(len(o[2]) for o in outs))]
            if nch == 1:  # each row folds straight into the output
                work += work
            else:
                work += [("b", size * nch, dt) for dt in _dtypes(s.out.type)]
            tile = 1
            if plan.outer and nch == 1 and n > 1:  # interchanged loops, tiles of rows
                tasks = codegen.PAR_TASKS_PER_THREAD * numba.get_num_threads()
                tile = max(8, min(codegen.FOLD_TILE, -(-size // tasks)))
                phases.append(("o", -(-size // tile), size * n))
            elif plan.outer and nch > 1:  # interchanged, a chunk of elements per task
                phases += [("oc", nch, size * n), ("combc", None, 0)]
            elif plan.blocked and nch == 1 and n > 1:  # (outer folds are blocked too)
                phases.append(("b", size, size * n))
            else:
                phases.append(("f", size * nch, size * n))
                if nch > 1:
                    phases.append(("comb", None, 0))
            vals[("tile",)] = tile
        elif isinstance(s, KScan):
            shape = _shape_of(ev(s.shape), "scan")
            n = self._inner(ev(s.n), "scan")
            size = _size(shape)
            kout = n + 1 if s.z is not None else n
            nch = codegen.SCAN_CHUNKS if (plan.chunked and n >= codegen.SCAN_CHUNK_MIN_N) \
                else 1
            vals[("n",)], vals[("mode",)], vals[("kout",)] = n, nch, kout
            outs = [(shape + (kout,), size * kout, _dtypes(s.out.type))]
            work = [("o", k) for k in range(sum(len(o[2]) for o in outs))]
            if plan.chunked:
                k = size * nch if nch > 1 else 0
                for _ in range(2):  # totals, carries
                    work += [("b", k, dt) for dt in _dtypes(s.out.type)]
            if nch > 1:
                phases += [("t", size * nch, size * n), ("carry", None, 0)]
            phases.append(("s", size * nch, size * n))
        elif isinstance(s, KPermute):
            shape = _shape_of(ev(s.out_shape), "permute")
            sshape = _shape_of(ev(s.shape), "permute")
            size, ssize = _size(shape), _size(sshape)
            for d, x in enumerate(sshape):
                vals[("src", d)] = x
            outs = [(shape, size, _dtypes(s.out.type))]
            work = [("o", k) for k in range(sum(len(o[2]) for o in outs))]
            phases.append(("d", size, size))
            nch = 0
            if plan.fast is not None:
                nch = _permute_chunks(size, ssize)
                priv = nch * size
                if nch:
                    dt = _dtypes(s.out.type)[0]
                    work.append(("f", priv, dt, _identity(plan.fast, dt)))
                    phases += [("p", ssize, -nch), ("m", size, size * nch)]
                else:
                    work.append(work[0])  # scatter straight into the output
                    phases.append(("p", ssize, 0))
            else:
                phases.append(("p", ssize, 0))
            vals[("mode",)] = nch
        else:
            raise BackendError(f"cpu backend: unknown step {type(s).__name__}")
        check_allocatable("cpu backend", step_label(s), outs[0][0], step_elt(s))
        vals[("size",)] = size
        for d, x in enumerate(shape):
            vals[("out", d)] = x
        ins = [env[a.name] for a in plan.inputs]
        shp = np.empty(len(plan.layout), dtype=np.int64)
        for i, key in enumerate(plan.layout):
            shp[i] = ins[key[1]].shape[key[2]] if key[0] == "in" else vals[key]
        calls = []  # (function name, leading arguments, launch counter)
        for phase, ntask, amount in phases:
            if ntask is None:
                calls.append((f"{plan.fn}_{phase}", (), phase))
            elif ntask == 0:
                continue
            elif amount < 0:  # a fixed number of chunks (the private-buffer scatter)
                calls.append((f"{plan.fn}_par_{phase}", (ntask, -amount), f"{phase}_parallel"))
            elif (ntask >= 2 and amount * plan.weight >= codegen.PAR_MIN_WORK
                  and phase in plan.parallel):
                nch = min(ntask, codegen.PAR_TASKS_PER_THREAD * numba.get_num_threads())
                calls.append((f"{plan.fn}_par_{phase}", (ntask, nch), f"{phase}_parallel"))
            else:
                calls.append((f"{plan.fn}_{phase}", (0, ntask, 0), f"{phase}_serial"))
        guards = _guards(log, [a.name for a in plan.inputs], env)
        return _StepCall(plan, shape, outs, work, shp, calls, guards)

    def _run(self, s, sc: "_StepCall", env: dict) -> None:
        """Allocate a planned step's buffers and launch its kernels."""
        taken = env[_TAKEN]
        take = self._pool.take
        try:
            outs = [ArrVal(shape, [take(size, dt, taken) for dt in dts])
                    for shape, size, dts in sc.outs]
            leaves_ = [b for o in outs for b in o.leaves]
            work = []
            for w in sc.work:
                if w[0] == "o":
                    work.append(leaves_[w[1]])
                elif w[0] == "b":
                    work.append(take(w[1], w[2], taken))
                else:
                    work.append(np.full(w[1], w[3], dtype=w[2]))
        except MemoryError as e:  # the call's buffers go with it: the runner stays usable
            raise out_of_memory("cpu backend", step_label(s), sc.outs[0][0], step_elt(s),
                                f"{type(e).__name__}: {e}") from None
        plan = sc.plan
        err = env[_ERR]  # (zero: a failure raises at once)
        args = work + [b for a in plan.inputs for b in env[a.name].leaves] + [sc.shp, err]
        counts = self._counts
        ready = self._ready
        for name, lead, counter in sc.calls:
            fn = ready.get(name)
            if fn is None:
                self._call(name, [*lead, *args])
            else:
                fn(*lead, *args)
            counts[counter] += 1
        if err[0] != 0:
            site = plan.sites[int(err[0]) - 1]
            ix = tuple(int(i) for i in err[1:1 + site.rank])
            tshape = env[site.avar.name].shape if site.avar is not None else sc.shape
            raise OutOfBoundsError(f"{site.what}: index {_shown(ix)} is out of bounds for "
                                   f"shape {tshape}")
        for o, v in zip(step_outs(s), outs):
            env[o.name] = v

    @staticmethod
    def _inner(v, op: str) -> int:
        n = int(v)
        if n < 0:
            raise ShapeError(f"{op}: negative inner length {n}")
        return n

    def _call(self, name: str, args: list) -> None:
        fn = getattr(self.module, name)
        if name not in self._compiled:
            with self._lock:
                if not fn.signatures:
                    sig = tuple(numba.typeof(a) for a in args)
                    hits = sum(fn.stats.cache_hits.values())
                    t0 = time.perf_counter()
                    self._compile(name, fn, sig)
                    self._compile_seconds += time.perf_counter() - t0
                    self._cache_hits += sum(fn.stats.cache_hits.values()) - hits
                self._compiled.add(name)
                self._ready[name] = fn
        fn(*args)

    def _compile(self, name: str, fn, sig) -> None:
        """``fn.compile(sig)``, surviving a corrupted numba cache: on failure the caches
        of the module's functions are flushed and, if that is not enough, disabled."""
        try:
            fn.compile(sig)
            return
        except Exception as e:  # noqa: BLE001 - retried below, then reported
            first = e
        dispatchers = [d for d in vars(self.module).values()
                       if isinstance(d, CPUDispatcher)]
        for fix in ("flush", "disable"):
            for d in dispatchers:
                try:
                    if fix == "flush":
                        d._cache.flush()
                    else:
                        d._cache = NullCache()
                except Exception:  # noqa: BLE001 - best effort
                    pass
            try:
                fn.compile(sig)
                return
            except Exception:  # noqa: BLE001
                continue
        raise BackendError(f"cpu backend: numba failed to compile kernel {name}: "
                           f"{first}") from first

    def release_buffers(self) -> None:
        """Forget the pooled buffers and the straight-line replays' arenas (memory
        returns once nothing else refers to it; replays are rewired by later calls)."""
        self._pool = BufferPool()
        for straight in self._straight.values():
            self._retire(straight)
        self._straight = {}

    def show(self) -> str:
        """The kernel program, as text."""
        return show_kernel_program(self.kp)

    def source(self) -> str:
        """The generated numba module."""
        return self.gen.source

    def _launches(self) -> dict:
        counts = collections.Counter(self._counts)
        for straight in self._straight.values():
            _count_launches(counts, straight)
        return dict(counts)

    def stats(self) -> dict:
        """Facts about the compiled program (``kernels``: parallel loops, as in
        ``count_loops``; ``compile_seconds``: numba compilation or cache loading so far)."""
        return {
            "kernels": count_loops(self.kp.body),
            "functions": len({p.fn for p in self.gen.plans.values()}),
            "compile_seconds": self._compile_seconds,
            "codegen_seconds": self._codegen_seconds,
            "load_seconds": self._load_seconds,
            "numba_cache_hits": self._cache_hits,
            "compiled_functions": len(self._compiled),
            "module": getattr(self.module, "__file__", None),
            "launches": self._launches(),  # e.g. {"g_parallel": 2, "p_serial": 1}
            "planned_steps": self._planned,  # loop steps planned, not replayed
            "straight_line_calls": self._straight_calls,  # replays of a wired plan
            "check_bounds": self.check_bounds,
        }
