"""Tiered execution: the first calls run on NumPy while the kernels compile elsewhere.

A cold program spends seconds to minutes in numba before its first result (the ADBench
GMM gradient: 47 s on an idle 2-core machine, 90-190 s under load).  A ``TieredRunner``
answers those calls with the fused NumPy evaluator of the same kernel program
(``backends.fused``: no compilation; the GMM gradient on 1000 points takes about 10 ms a
call) and sends the program and the first call's arguments to a compile worker process
(``worker``), which compiles the kernels those shapes use into numba's disk cache.  When
the worker is done, the receiving thread loads the kernels from the cache (well under a
second) and the following calls run them.  ``stats()["tier"]`` says which tier ran the
last call (``"numpy"`` or ``"compiled"``).

Why a process, not a thread (``benchmarks/compile_contention.py``: calls made back to
back while the kernels compile into an empty cache; 2 cores shared with other sessions,
load average 3-5; two runs, the second with the committed script):

============  =======  ==================================  ==================================
program       alone    thread: median / max, compiled in   process: median / max, compiled in
============  =======  ==================================  ==================================
GMM gradient  8-12 ms  24 / 790-832 ms, 152-161 s          24-25 / 86-171 ms, 188-227 s
MLP gradient  16-27    37-42 / 685-1727 ms, 113-129 s      24-52 / 160-194 ms, 121-154 s
============  =======  ==================================  ==================================

A compiling thread stalls the caller for up to 1.7 s at a time (numba holds the GIL
through whole passes) and lets it make about half as many calls (GMM: 5371 calls in 152
s against 9070 in 227 s); a process never stalls it for more than 0.2 s.  The thread's
compilation finished sooner here because the GIL throttled the caller's competing
calls; with a caller that is not calling back to back the process has a core to
itself.  A thread would also hold numba's global compiler lock, blocking every other
compilation in the process (another program's compiled-only call), and its work would
be lost with the process, where the worker's kernels stay in the disk cache for the
next run.  The price of a process: starting an interpreter that imports numba (about
1 s of CPU, once per process) and pickling the first call's arguments to it.

Semantics.  Both tiers evaluate the same fused kernel program, so results differ only by
floating-point reassociation (the compiled folds combine rows in blocks and chunks;
``exp``/``log`` are within an ulp of NumPy's).  The NumPy tier always checks bounds,
so with ``check_bounds=False`` an out-of-bounds index raises ``OutOfBoundsError`` there
where compiled kernels would read garbage.  Other shapes later may need kernels (e.g.
parallel drivers) the first call's shapes did not: those compile on the call, as without
tiers.  A compilation error in the worker (a ``BackendError``) is raised by the next call;
later calls compile in this process (and raise it again if it persists).  A worker that
cannot start or dies, or a fork, makes the runner compile in-process on its next call
(fork: resubmit from the child).

Skipping the NumPy tier.  Where the fused evaluator materialises what the kernels never
do (a fold over a large ``generate``), a NumPy call can take longer than compiling.
Each call's time on the NumPy tier is estimated from its arguments' shapes first
(``tiercost``); over ``tiercost.budget()`` seconds the call waits for the running job
(then runs compiled), or with no job compiles in this process, and later calls run
compiled.  A NumPy call that took longer than estimated scales the later estimates by
that ratio (the estimate misses memory effects: the corpus's 256^3 matrix product
gradient took 6.7 times its estimate on NumPy, the MLP about once).  ``stats()`` has
``numpy_estimate_seconds`` and ``numpy_skipped``.

Nothing before the first NumPy call imports numba (about 0.4 s) or loads the generated
module (0.3 s): the runner transposes and generates the module text itself (numba-free,
for its hash and the job), and makes the ``runtime.Runner`` (``compiled``) on first
need, normally on the receiving thread when the worker is done.

Choosing: ``A.compile(f, tiered=False)`` or ``ACCEL_TIERED=0`` runs compiled kernels
only (what benchmarks and the test suite use); ``compiled.wait()`` blocks until the
compiled tier is ready.  Tiering needs a POSIX system and ``sys.executable``; elsewhere
runners are compiled-only.
"""

from __future__ import annotations

import os
import sys
import threading
import time

from accel.backends import fused
from accel.backends.numba.cache import module_name, source_hash
from accel.backends.numba.cachedir import usable_dir
from accel.errors import BackendError
from accel.fusion.kernels import count_loops

from . import codegen, compilelog, tiercost, worker
from .transpose import transpose_reads


def tiering_enabled(tiered: bool | None) -> bool:
    """``tiered``, or ``$ACCEL_TIERED`` when it is None (on unless ``0``/``off``/...),
    and only where a worker process can be started."""
    if tiered is None:
        v = os.environ.get("ACCEL_TIERED", "1").strip().lower()
        tiered = v not in ("0", "off", "no", "false")
    return bool(tiered) and os.name == "posix" and bool(sys.executable)


class TieredRunner:
    """A ``runtime.Runner`` whose first calls run on the fused NumPy evaluator while its
    kernels compile in the worker process (module docstring)."""

    def __init__(self, kp, check_bounds: bool = False):
        self.kp = kp  # the NumPy tier runs it as fused it (the worker gets _tkp)
        self.check_bounds = check_bounds
        # The compiled tier's program and module text, made without numba: the
        # ``runtime.Runner`` (which imports numba and loads the module, about 0.7 s) is
        # made when compiled kernels are first needed (``compiled``), usually on the
        # receiving thread when the worker is done, not before the first result.
        self._tkp = transpose_reads(kp)
        self._gen = codegen.generate(self._tkp.body, bool(check_bounds))
        self._source = self._gen.source
        self._hash = source_hash(self._source)
        self._runner = None
        self._runner_lock = threading.Lock()
        self._lock = threading.RLock()  # _done may run inside _start
        self._ready = threading.Event()  # set: calls run the compiled tier
        self._job = None
        self._payload = None  # the running (or forked-away) job's, until it is done
        self._error: BackendError | None = None  # from the worker, raised once
        self._watch = None
        self._state = "idle"  # idle | compiling | ready | local | failed
        self._tier = None
        self._numpy_calls = 0
        self._compiled_calls = 0
        self._background_seconds = None
        self._switch_seconds = None  # loading the worker's kernels here
        self._estimates: dict = {}  # argument shapes -> estimated NumPy-tier seconds
        self._estimate = None  # ... of the last call that asked
        self._skipped = 0  # calls that skipped the NumPy tier on their estimate
        self._wait = None  # estimated seconds from a standing start to compiled kernels
        self._scale = 1.0  # measured / estimated time of the slowest NumPy call so far

    @property
    def compiled(self):
        """The compiled tier (a ``runtime.Runner``), made on first use."""
        r = self._runner
        if r is None:
            with self._runner_lock:
                if self._runner is None:
                    from .runtime import Runner
                    self._runner = Runner(self._tkp, self.check_bounds, rewritten=True,
                                          gen=self._gen)
                r = self._runner
        return r

    # ---- calls

    def __call__(self, args):
        if self._ready.is_set():
            return self._run_compiled(args)
        if not self._numpy_worth_it(args):
            return self._run_compiled(args)
        self._start(args)
        if self._ready.is_set():  # the job failed at once: no worker here
            return self._run_compiled(args)
        self._tier = "numpy"
        self._numpy_calls += 1
        t0 = time.perf_counter()
        out = fused.evaluate(self.kp, args)
        secs = time.perf_counter() - t0
        if self._estimate and secs > tiercost.MIN_SECONDS:  # later estimates: as measured
            self._scale *= max(1.0, secs / self._estimate)
        return out

    def _numpy_worth_it(self, args) -> bool:
        """Whether this call runs on the NumPy tier: not when its estimated time there
        (``tiercost``) is over the budget.  Then the caller waits for the worker's job
        if one is running, and otherwise compiles here (calls run compiled from now)."""
        key = tuple(getattr(a, "shape", None) for a in args)
        secs = self._estimates.get(key)
        if secs is None:
            try:
                secs = tiercost.estimate(self.kp, args)
            except Exception:  # noqa: BLE001 - no estimate: the NumPy tier, as before
                secs = 0.0
            self._estimates[key] = secs
        secs *= self._scale
        self._estimate = secs
        if not tiercost.skip_numpy(secs, self._wait_seconds):
            return True
        self._skipped += 1
        with self._lock:
            job = self._job
        if job is not None:
            job.done.wait()  # its answer has been handled when this is set
        with self._lock:
            if not self._ready.is_set():  # no job, or it ended without kernels for us
                self._finish("local")
        return False

    def _wait_seconds(self) -> float:
        """Estimated seconds until the compiled tier is ready (``tiercost``)."""
        if self._wait is None:
            try:
                self._wait = tiercost.wait_estimate(
                    self._tkp, module_name(self._source), str(usable_dir("cpu")))
            except Exception:  # noqa: BLE001 - unknown: as if compiling from scratch
                self._wait = float("inf")
        t0 = getattr(self, "_t0", None)
        spent = time.perf_counter() - t0 if t0 is not None and self._job is not None else 0.0
        return max(0.0, self._wait - spent)

    def _run_compiled(self, args):
        err = self._error
        if err is not None:
            self._error = None  # raised once; later calls compile here (and may raise)
            raise err
        self._tier = "compiled"
        self._compiled_calls += 1
        return self.compiled(args)

    def _start(self, args=None) -> None:
        """Submit the compile job for ``args`` (None: the job a fork lost) unless one is
        running."""
        with self._lock:
            if self._job is not None or self._ready.is_set():
                return
            if args is not None:
                self._payload = {"kp": self._tkp, "check_bounds": self.check_bounds,
                                 "args": list(args), "hash": self._hash, "env": _accel_env(),
                                 "cache_dir": str(usable_dir("cpu"))}
            elif self._payload is None:
                return
            self._state = "compiling"
            self._t0 = time.perf_counter()
            with _jobs_lock:  # one job per module in a process (e.g. ``A.run`` in a loop)
                job = _jobs.get(self._hash)
                if job is not None and (job.result is None or job.result["status"] == "ok"):
                    self._job = job
                    self._payload = None
            if self._job is not None:
                self._watch = compilelog.watch(None, None)  # the job's first runner logs
                self._job.add_done(self._done)
                return
            self._watch = compilelog.watch(self._source, self.kp, background=True)
            self._job = job = worker.submit(self._payload, self._done)
            with _jobs_lock:
                if job.result is None or job.result["status"] == "ok":
                    _jobs[self._hash] = job

    def _done(self, res: dict) -> None:
        """The worker's answer (on the receiving thread, or at once if no worker or if
        the module's job had already ended)."""
        self._watch.cancel()
        status = res.get("status")
        if status != "ok":
            with _jobs_lock:  # the next runner of this module submits a job of its own
                if self._job is not None and _jobs.get(self._hash) is self._job:
                    del _jobs[self._hash]
        self._background_seconds = time.perf_counter() - self._t0
        if status == "ok":
            t0 = time.perf_counter()
            try:
                self.compiled.load_compiled(res["entries"])
            except BackendError as e:
                self._error = e
            except Exception:  # noqa: BLE001 - the compiled tier compiles what it lacks
                pass
            self._switch_seconds = time.perf_counter() - t0
            self._finish("ready" if self._error is None else "failed")
        elif status == "compile-error":
            self._error = BackendError(f"{res.get('message')} (compiled in the background "
                                       "while calls ran on NumPy)")
            self._finish("failed")
        elif status in ("program-error", "lost"):
            with self._lock:  # the next call (or, if lost in a fork, wait()) submits again
                self._job = None
                self._state = "idle"
                if status == "program-error":
                    self._payload = None
        else:  # failed: no worker, or it died; compile in this process on the next call
            self._finish("local")

    def _finish(self, state: str) -> None:
        self._payload = None
        self._state = state
        self._ready.set()

    def wait(self, timeout: float | None = None, args=None) -> bool:
        """Block until calls run the compiled kernels (starting the compilation with
        ``args`` if none is running); False after ``timeout`` seconds; raises the
        compilation's ``BackendError`` if it failed."""
        if not self._ready.is_set():
            self._start(args)
        if self._job is None and not self._ready.is_set():
            return False  # nothing to wait for: no call has started a compilation
        if not self._ready.wait(timeout):
            return False
        err = self._error
        if err is not None:
            self._error = None
            raise err
        return True

    # ---- the rest of the runner's interface

    def stats(self) -> dict:
        r = self._runner
        if r is not None:
            s = r.stats()
        else:  # not made yet: asking must not load numba and the module in the caller
            s = {"kernels": count_loops(self._tkp.body), "compile_seconds": 0.0,
                 "numba_cache_hits": 0, "compiled_functions": 0, "module": None,
                 "launches": {}, "planned_steps": 0, "straight_line_calls": 0,
                 "check_bounds": bool(self.check_bounds)}
        s.update(tiered=True, tier=self._tier, compile_state=self._state,
                 numpy_calls=self._numpy_calls, compiled_calls=self._compiled_calls,
                 background_compile_seconds=self._background_seconds,
                 switch_seconds=self._switch_seconds, numpy_estimate_seconds=self._estimate,
                 numpy_skipped=self._skipped)
        return s

    def show(self) -> str:
        return self.compiled.show()

    def source(self) -> str:
        return self.compiled.source()

    def release_buffers(self) -> None:
        self.compiled.release_buffers()


#: source hash -> the job compiling (or that compiled) that module in this process: a new
#: runner of the same module (``A.run`` of one program in a loop) joins it, and runs
#: compiled at once when it ended well.  Failed jobs are forgotten.
_jobs: dict = {}
_jobs_lock = threading.Lock()


def forget_jobs() -> None:
    """Forget the jobs of every module (for tests: the next runner of each submits its
    own job to the worker, instead of joining a finished one)."""
    with _jobs_lock:
        _jobs.clear()


def _accel_env() -> dict:
    return {k: v for k, v in os.environ.items() if k.startswith("ACCEL_")}
