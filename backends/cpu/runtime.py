"""Host orchestration of a compiled kernel program.

The host walks the kernel program's blocks in Python: it evaluates shapes and conditions
(``hosteval``), allocates every output, calls the generated numba kernel of each loop
step with flat buffers and an int64 ``shp`` array of sizes, raises ``OutOfBoundsError``
when a kernel's bounds check recorded a failure, and runs ``KAcond``/``KAwhile`` control
flow. That walk costs tens of microseconds a step, as much as the kernels of a small
gradient, so each top-level step's plan (``StepCall``) is replayed by the next call
with arguments of the same shapes when what the host read to make it (array shapes, a
few elements) is unchanged. Steps inside ``KAwhile``/``KAcond`` blocks keep their last
plan each (by step, across iterations and calls) and replay it while its guards hold,
through a prepared launch list (``_fast``): an iteration of a loop whose shapes do not
change costs its kernel launches, a guard check and a few buffers per step (about 3 us
a step on the host, against 20-30 us when every iteration planned every step), and the
buffers of an iteration go back to the pool once the next one has replaced them. Arrays
are immutable once built, so arrays are shared freely between steps; results that would
alias an input, a ``KUse`` constant or another result are copied on the way out.
Buffers are recycled (``BufferPool``): intermediates by the next call, results once the
caller has dropped them. Fresh large allocations are fresh pages, and faulting them in
cost more than the loops that fill them (BA's Jacobian: 12 ms against 1.4 ms for a
1M-element step). The price: a runner keeps up to ``BufferPool.max_bytes`` of idle
buffers until it is garbage collected.
"""

from __future__ import annotations

import collections
import sys
import threading
import time

import numba
import numpy as np
from numba.core.caching import NullCache
from numba.core.registry import CPUDispatcher

from accel.ast.types import TupleT
from accel.ast.traverse import free_vars
from accel.fusion.kernels import (KAcond, KAwhile, KBlock, KFold, KGenerate, KPermute, KScan,
                                  KUse, KernelProgram, count_loops, show_kernel_program,
                                  step_elt, step_label, step_outs)
from accel.errors import BackendError, ShapeError
from accel.memory import check_allocatable, out_of_memory
from accel.backends.numba import cache
from accel.backends.numba.host import (ArrVal, collect_uses, nest, read_input, result_layout,
                                       run_control)
from accel.backends.numba.hosteval import HostEval
from accel.backends.numba.kernelgen import ERR_SIZE
from accel.backends.numba.trees import rebuild

from . import codegen, compilelog
from .drivers import driver, range_name, range_signature
from .plan import (StepCall, bounds_error, calls as launch_calls, choose, entry_point,
                   guard_key, guards, guards_hold)
from .loopreplay import LoopReplay, replayable
from .straight import StraightLine, eligible
from .transpose import transpose_reads
from .vectorize import compile_as_kernels


_MAX_REPLAYS = 8  # argument shapes whose step plans a runner remembers
_MAX_VARIANTS = 256  # counter values a step inside a loop keeps plans for (``_variant``)
_MAX_VARIANTS_PER_KEY = 32  # ... and plans per counter value (differing in other reads)
_TAKEN = "$taken"  # env key of the call's list of allocated buffers (no variable's name)
_MEMO = "$memo"  # env key of the call's values of host expressions
_ERR = "$err"  # env key of the call's ``err`` array (kernels' bounds-check failures)
_LOOP_STEPS = (KGenerate, KFold, KScan, KPermute)  # steps that launch kernels
_PLANS = "$plans"  # env key of the plans of steps inside loops and conditionals (by step id)


def _bound_in_loops(block: KBlock, inside: bool = False) -> set:
    """Names of arrays bound inside ``KAwhile`` conditions and bodies (and the loops'
    parameters): their values change from one iteration to the next."""
    out: set = set()
    for s in block.steps:
        if inside:  # every array bound in a loop, a nested loop's or conditional's too
            out.update(o.name for o in step_outs(s))
        if isinstance(s, KAwhile):
            out.update(p.name for p in s.params)
            out |= _bound_in_loops(s.cond, True) | _bound_in_loops(s.body, True)
        elif isinstance(s, KAcond):
            out |= _bound_in_loops(s.t, inside) | _bound_in_loops(s.e, inside)
    return out


def _work_buffers(spec, leaves_: list, take, taken: list) -> list:
    """A step's work buffers from its plan's ``work`` specification: an output leaf
    (``("o", k)``), a pooled buffer (``("b", size, dtype)``) or a filled one."""
    work = []
    for w in spec:
        if w[0] == "o":
            work.append(leaves_[w[1]])
        elif w[0] == "b":
            work.append(take(w[1], w[2], taken))
        else:
            work.append(np.full(w[1], w[3], dtype=w[2]))
    return work


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


# --------------------------------------------------------------------------- boundary


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


# --------------------------------------------------------------------------- runner


class Runner:
    """A kernel program compiled for the CPU: ``runner(args)`` runs it."""

    def __init__(self, kp: KernelProgram, check_bounds: bool = False, rewritten: bool = False,
                 gen: codegen.Module | None = None):
        # ``rewritten``: ``kp`` is another runner's ``.kp`` (its reads already transposed;
        # the compile worker gets it so, as the rewrite's fresh names differ by process);
        # ``gen``: its generated module when the caller has made it already (``tiered``)
        self.kp = kp = kp if rewritten else transpose_reads(kp)
        self.check_bounds = bool(check_bounds)
        t0 = time.perf_counter()
        self.gen = gen if gen is not None else codegen.generate(kp.body, self.check_bounds)
        t1 = time.perf_counter()
        self.module = cache.load(self.gen.source)
        compile_as_kernels(self.module)
        t2 = time.perf_counter()
        self._codegen_seconds = t1 - t0
        self._load_seconds = t2 - t1
        self._compile_seconds = 0.0
        self._compiled: set = set()  # function names this runner has made ready
        self._ready: dict = {}  # ... and their dispatchers
        self._signatures: dict = {}  # name -> the numba signature it was compiled for
        self._watch = None  # the compile log's timer while a call compiles (``compilelog``)
        self._cache_hits = 0
        self._lock = threading.Lock()
        self._uses: dict = {}
        self._calls = 0
        self._counts: collections.Counter = collections.Counter()  # phase launches
        self._pool = BufferPool()
        self._loop_bound = _bound_in_loops(kp.body)  # names rebound by KAwhile iterations
        self._memoisable: dict = {}  # id(host expression) -> (expression, memo key or None)
        self._canonical: dict = {}  # host expression -> the first equal one seen
        self._replays: dict = {}  # argument shapes -> (threads, [StepCall or None])
        self._planned = 0  # loop steps whose host expressions were evaluated
        # threads -> {id(step): StepCall}: the last plan of each step inside a loop or
        # conditional, replayed by its next run (iteration or call) while its guards hold
        self._inner: dict = {}
        self._straight: dict = {}  # argument shapes -> StraightLine (wired plans)
        self._straight_ok = True  # False once wiring a plan failed
        self._straight_calls = 0  # calls run by a straight-line replay
        self._loop_replays: list = []  # every loop's ``LoopReplay`` (for ``stats``)
        self._replayed = 0  # iterations replayed by loop replays since released
        collect_uses(kp.body, self._uses, "cpu")
        self._what = [f"argument {i} ({p.name})" for i, p in enumerate(kp.params)]
        result_arrays: list = []
        self._result_nest = result_layout(kp.result_type, result_arrays)
        self._result_elts = [a.elt if isinstance(a.elt, TupleT) else None
                             for a in result_arrays]
        self._use_ids = frozenset(id(b) for v in self._uses.values() for b in v.leaves)

    # ---- running

    def __call__(self, args):
        args = list(args)
        params = self.kp.params
        if len(args) != len(params):
            raise ShapeError(f"program takes {len(params)} arguments, got {len(args)}")
        inputs = [read_input(x, p.type, what) for p, x, what in zip(params, args, self._what)]
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
        try:
            with np.errstate(all="ignore"):
                self._top(env, key)
        finally:
            if self._watch is not None:  # this call compiled kernels: stop the log's timer
                self._watch.cancel()
                self._watch = None
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
            arrays.append(bufs[0] if elt is None else rebuild(elt, iter(bufs)))
        return nest(self._result_nest, arrays)

    def _block(self, block: KBlock, env: dict) -> None:
        """A block inside a loop or conditional: each loop step replays its last plan
        (``_fast`` once wired) while its guards hold, else is planned again."""
        plans = env[_PLANS]
        for s in block.steps:
            if type(s) not in _LOOP_STEPS:
                self._step(s, env)
                continue
            sc = plans.get(id(s))
            if sc is None or not guards_hold(sc.guards, env):
                sc = plans[id(s)] = self._variant(s, sc, env)
            if sc.fast is not None:
                self._fast(s, sc, env)
            else:
                self._run(s, sc, env)
                self._wire(s, sc)

    def _variant(self, s, last, env: dict) -> "StepCall":
        """The plan of a loop step whose last plan ``last`` (or None) no longer holds: an
        earlier plan whose guards hold now, else a new one.  A step whose host reads a
        loop counter (a matrix-vector product with row ``t`` of an array, a tape read at
        ``t - 1``) is planned afresh at every iteration of the first call and replays its
        iteration's plan in later calls.  Plans are found by ``guard_key`` (the counters'
        values, then checked); a step keeps at most ``_MAX_VARIANTS`` keys."""
        variants = env[_PLANS].setdefault(("variants", id(s)), {})
        if last is not None:
            for sc in variants.get(guard_key(last.guards, env), ()):
                if guards_hold(sc.guards, env):
                    return sc
        sc = self._plan(s, env)
        key = guard_key(sc.guards, env)
        if key is not None:
            if len(variants) >= _MAX_VARIANTS:
                variants.pop(next(iter(variants)))
            same = variants.setdefault(key, [])
            if len(same) >= _MAX_VARIANTS_PER_KEY:  # plans differing in other reads
                del same[0]
            same.append(sc)
        return sc

    def _step(self, s, env: dict) -> None:
        if isinstance(s, KUse):
            env[s.out.name] = self._uses[id(s)]
        elif isinstance(s, KAwhile):
            self._loop(s, env)
        elif isinstance(s, KAcond):
            run_control(s, env, self._block)
        else:
            self._run(s, self._plan(s, env), env)

    def _loop(self, s: KAwhile, env: dict) -> None:
        """Run an ``awhile`` (as ``host.run_control``, whose walk this is), giving the
        buffers of an iteration back to the pool once the next one has run if nothing
        refers to them any more (a T-step loop then touches a few buffers per step, not
        T fresh ones).  What could refer to one: the loop state (a body returning its
        parameter, or an array of an earlier iteration), an array bound in a branch of a
        conditional not taken since, a view; anything but the iteration's list counts."""
        state = [env[a.name] for a in s.init]
        if s.owned:
            state = [self._copy(v, env) if p.name in s.owned else v
                     for p, v in zip(s.params, state)]
        names = [p.name for p in s.params]
        cond, body, block = s.cond, s.body, self._block
        test = cond.result[0].name
        results = [r.name for r in body.result]
        outer = env[_TAKEN]
        give = self._pool.give
        last: list = []  # the buffers taken by the previous iteration
        replay = self._loop_replay(s, env)
        sets: list = [[], []]  # the replay's owned buffers in this run of the loop
        env[_TAKEN] = []  # (not ``outer``: the replay may finish the loop before a walk)
        try:
            while True:
                if replay is not None:
                    state, done = replay.run(state, env, self._pool, outer, sets)
                    if done:
                        break
                for name, v in zip(names, state):
                    env[name] = v
                taken = env[_TAKEN] = []
                block(cond, env)
                if not env[test].leaves[0][0]:
                    break
                block(body, env)
                if replay is not None and replay.learning():
                    replay.learn(env, env[_PLANS], self._uses)
                state = [env[r] for r in results]
                if last:
                    free = []
                    for k in range(len(last)):
                        b = last[k]
                        if sys.getrefcount(b) <= _POOL_REFS:
                            free.append(b)
                        else:
                            outer.append(b)
                    del b
                    give(free, ())
                last = taken
        finally:
            outer += last
            outer += env[_TAKEN]
            env[_TAKEN] = outer
        for o, v in zip(s.outs, state):
            env[o.name] = v

    def _loop_replay(self, s: KAwhile, env: dict):
        """The ``LoopReplay`` of loop ``s`` for this call's thread count, or None when its
        blocks are not only kernel launches."""
        plans = env[_PLANS]
        key = ("replay", id(s))
        replay = plans.get(key)
        if replay is None:
            replay = plans[key] = LoopReplay(s) if replayable(s, _LOOP_STEPS) else False
            if replay:
                self._loop_replays.append(replay)
        return replay or None

    def _copy(self, v: ArrVal, env: dict) -> ArrVal:
        """A private copy of ``v`` in pooled buffers of this call."""
        taken = env[_TAKEN]
        bufs = []
        for b in v.leaves:
            c = self._pool.take(b.size, b.dtype, taken)
            np.copyto(c, b)
            bufs.append(c)
        return ArrVal(v.shape, bufs)

    def _top(self, env: dict, key: tuple) -> None:
        """The program's body, replaying each step's plan from the last call with
        arguments of these shapes when its guards hold (planning it afresh if not)."""
        threads = numba.get_num_threads()
        env[_PLANS] = self._inner.setdefault(threads, {})
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
            if sc is None or not guards_hold(sc.guards, env):
                sc = self._plan(s, env)
                fresh = True
            self._run(s, sc, env)
            plans.append(sc)
        if fresh:
            if key not in self._replays and len(self._replays) >= _MAX_REPLAYS:
                self._replays.pop(next(iter(self._replays)))  # the oldest shapes
            self._replays[key] = (threads, plans)

    def _plan(self, s, env: dict) -> "StepCall":
        """Evaluate a loop step's host expressions and decide its launches."""
        self._planned += 1
        log: list = []
        ev = _Memo(self, env, log)
        plan = choose(self.gen.plans[id(s)], ev)
        launch = codegen.STEPS[type(s)].launch(plan.step, plan, ev)
        shape, size, outs, work, vals = (launch.shape, launch.size, launch.outs, launch.work,
                                         launch.vals)
        check_allocatable("cpu backend", step_label(s), outs[0][0], step_elt(s))
        vals[("size",)] = size
        for d, x in enumerate(shape):
            vals[("out", d)] = x
        ins = [env[a.name] for a in plan.inputs]
        shp = np.empty(len(plan.layout), dtype=np.int64)
        for i, key in enumerate(plan.layout):
            shp[i] = ins[key[1]].shape[key[2]] if key[0] == "in" else vals[key]
        calls = launch_calls(plan, launch.phases)
        guards_ = guards(log, [a.name for a in plan.inputs], env)
        return StepCall(plan, shape, outs, work, shp, calls, guards_)

    def _run(self, s, sc: "StepCall", env: dict) -> None:
        """Allocate a planned step's buffers and launch its kernels."""
        taken = env[_TAKEN]
        take = self._pool.take
        calls = sc.calls
        into = getattr(s, "into", None)
        try:
            if into is not None:  # update the dead defaults' buffer (``fusion.inplace``)
                outs = [ArrVal(sc.shape, list(env[into.name].leaves))]
                calls = [c for c in calls if not c[2].startswith("d_")]
            else:
                outs = [ArrVal(shape, [take(size, dt, taken) for dt in dts])
                        for shape, size, dts in sc.outs]
            work = _work_buffers(sc.work, [b for o in outs for b in o.leaves], take, taken)
        except MemoryError as e:  # the call's buffers go with it: the runner stays usable
            raise out_of_memory("cpu backend", step_label(s), sc.outs[0][0], step_elt(s),
                                f"{type(e).__name__}: {e}") from None
        plan = sc.plan
        err = env[_ERR]  # (zero: a failure raises at once)
        args = work + [b for a in plan.inputs for b in env[a.name].leaves] + [sc.shp, err]
        counts = self._counts
        ready = self._ready
        for name, lead, counter in calls:
            fn = ready.get(name)
            if fn is None:
                self._call(name, [*lead, *args])
            else:
                fn(*lead, *args)
            counts[counter] += 1
        if err[0] != 0:
            self._bounds_error(sc, env)
        for o, v in zip(step_outs(s), outs):
            env[o.name] = v

    def _wire(self, s, sc: "StepCall") -> None:
        """Prepare ``sc.fast`` for ``_fast`` once every kernel of the step is compiled:
        the outputs' and work buffers' specifications, the input names, and the calls
        with each kernel's entry point (``plan.entry_point``)."""
        ready = self._ready
        into = getattr(s, "into", None)
        calls = [c for c in sc.calls if into is None or not c[2].startswith("d_")]
        if any(name not in ready for name, _, _ in calls):
            return
        sc.fast = (into.name if into is not None else None,
                   [(tuple(sh), size, tuple(dts)) for sh, size, dts in sc.outs],
                   tuple(sc.work), tuple(a.name for a in sc.plan.inputs),
                   tuple((entry_point(ready[name]), tuple(lead), counter)
                         for name, lead, counter in calls),
                   tuple(o.name for o in step_outs(s)))

    def _fast(self, s, sc: "StepCall", env: dict) -> None:
        """``_run`` of a wired plan (``_wire``): the same buffers and launches with less
        Python in between (a loop body runs it for every step of every iteration)."""
        into, outs_, work_, inputs, calls, names = sc.fast
        taken = env[_TAKEN]
        take = self._pool.take
        try:
            if into is not None:
                leaves_ = list(env[into].leaves)
                outs = [ArrVal(sc.shape, leaves_)]
            else:
                leaves_, outs = [], []
                for shape, size, dts in outs_:
                    bufs = [take(size, dt, taken) for dt in dts]
                    leaves_ += bufs
                    outs.append(ArrVal(shape, bufs))
            work = _work_buffers(work_, leaves_, take, taken)
        except MemoryError as e:
            raise out_of_memory("cpu backend", step_label(s), sc.outs[0][0], step_elt(s),
                                f"{type(e).__name__}: {e}") from None
        err = env[_ERR]
        for name in inputs:
            work += env[name].leaves
        work.append(sc.shp)
        work.append(err)
        counts = self._counts
        for fn, lead, counter in calls:
            fn(*lead, *work)
            counts[counter] += 1
        if err[0] != 0:
            self._bounds_error(sc, env)
        for name, v in zip(names, outs):
            env[name] = v

    def _bounds_error(self, sc: "StepCall", env: dict) -> None:
        """Raise the ``OutOfBoundsError`` a step's kernels recorded in ``err``."""
        raise bounds_error(sc, env[_ERR], lambda name: env[name].shape)

    def _call(self, name: str, args: list) -> None:
        if name not in self._compiled:
            with self._lock:
                if name not in self._compiled:
                    self._make_ready(name, tuple(numba.typeof(a) for a in args))
        self._ready[name](*args)

    def _make_ready(self, name: str, sig: tuple) -> None:
        """Make call ``name`` with argument types ``sig`` ready: its function compiled for
        them (or loaded from numba's disk cache), counting; a parallel call
        (``drivers.range_name``) runs its range function through the shared driver."""
        rng = range_name(name)
        fn = getattr(self.module, rng or name)
        fsig = range_signature(sig) if rng else sig
        hits = sum(fn.stats.cache_hits.values())
        t0 = time.perf_counter()
        if fsig not in fn.signatures:
            if self._watch is None:
                self._watch = compilelog.watch(self.gen.source, self.kp)
            self._compile(name, fn, fsig)
        self._ready[name] = driver(fn, sig) if rng else fn
        self._compile_seconds += time.perf_counter() - t0
        self._cache_hits += sum(fn.stats.cache_hits.values()) - hits
        self._signatures[name] = sig
        self._compiled.add(name)

    def compiled_signatures(self) -> list:
        """``[(call name, numba signature)]`` of what this runner has compiled: what
        another process's runner of the same module loads with :meth:`load_compiled`."""
        with self._lock:
            return list(self._signatures.items())

    def load_compiled(self, entries) -> None:
        """Make the calls of ``entries`` (:meth:`compiled_signatures` of a runner of the
        same module elsewhere, which put them in the disk cache) ready: loaded from
        numba's cache, or compiled if they are not there."""
        for name, sig in entries:
            with self._lock:
                if name not in self._compiled:
                    self._make_ready(name, sig)

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
        """Forget the pooled buffers and the straight-line and loop replays' arenas
        (memory returns once nothing else refers to it; replays are rewired by later
        calls)."""
        self._pool = BufferPool()
        for straight in self._straight.values():
            self._retire(straight)
        self._straight = {}
        for plans in self._inner.values():
            for key in [k for k in plans if isinstance(k, tuple) and k[0] == "replay"]:
                del plans[key]
        for replay in self._loop_replays:  # (their counts stay in ``stats``)
            self._counts.update(replay.launches())
            self._replayed += replay.iterations()
        self._loop_replays = []

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
        for replay in self._loop_replays:
            counts.update(replay.launches())
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
            # loop iterations run from a learned launch list (``loopreplay``)
            "replayed_iterations": self._replayed + sum(r.iterations()
                                                        for r in self._loop_replays),
            # bytes of intermediates the loop replays hold (``release_buffers`` frees them)
            "replay_arena_bytes": sum(r.arena_bytes for r in self._loop_replays),
            "check_bounds": self.check_bounds,
            "tiered": False,
            "tier": "compiled" if self._calls else None,  # which tier ran the last call
        }
