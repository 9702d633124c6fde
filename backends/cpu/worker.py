"""The compile worker: a child process that fills the disk cache with a program's kernels.

Why a process and not a thread (measured, see ``tiered``): numba holds the GIL for most
of a compilation and serialises compilations behind one lock, so a compiling thread
slows the caller's NumPy calls and every other numba compilation of the process; a
separate process compiles on the other core, and the caller then loads the compiled
kernels from numba's disk cache (``cache.load``; GMM gradient: 31 functions in 0.8 s).

Protocol.  The parent starts one worker per process, lazily, with ``sys.executable``
and two pipes (``pass_fds``): it writes pickled jobs to one and reads pickled results
from the other.  The first message is the parent's ``sys.path`` (so the child imports
the same ``accel``), then each job is a dict: ``id``, ``kp`` (the parent runner's kernel
program, after the runtime's rewrites, whose fresh names depend on the process),
``check_bounds``, ``args`` (the NumPy arguments of the
call that started it), ``hash`` (the sha256 of the parent's generated module, which the
child must reproduce), ``cache_dir`` (the parent's module directory, so both processes
use the same numba cache even when it is a private temporary one) and ``env`` (the
parent's ``ACCEL_*`` variables).  The child builds a ``Runner`` and runs the program
once on the arguments, which compiles exactly the functions (phases, serial or
parallel) that these shapes use, and answers ``{"id", "status", ...}``: ``ok`` with
``entries`` (``Runner.compiled_signatures``), ``compile-error`` (a ``BackendError``:
numba failed, the parent raises it on the call that needs the kernels), ``program-error``
(the program itself failed on these arguments, as the caller's NumPy tier will have
reported: the parent resubmits on a later call) or ``failed`` (anything else; the parent
compiles in its own process).  Jobs run one at a time, in order.

Lifetime and fork safety.  The child exits as soon as its job pipe reaches end of file,
i.e. when the parent exits or dies (a reader thread watches it while the main thread
compiles), and the parent's ``atexit`` handler terminates it (SIGTERM, then SIGKILL).
numba writes each cache file atomically, so a killed worker leaves only complete
entries, which the next process loads: a program whose compilation was cut short by the
end of a script compiles less the next time.  After ``os.fork`` the child process
closes its copies of the pipes and forgets the parent's worker (``os.register_at_fork``):
its own tiered calls start a worker of their own, and it never signals the parent's.
Jobs the fork copied are reported ``lost`` to their runners, which resubmit them.  The
worker process itself never forks.  (Kernels still run in numba's threading layer,
OpenMP here, which is not fork-safe: see the README.)
"""

from __future__ import annotations

import atexit
import itertools
import os
import pickle
import queue
import subprocess
import sys
import threading

#: Run by ``sys.executable -c``: read the parent's ``sys.path``, then serve jobs.  The
#: module and function serving them (``SERVE``) can be replaced by tests, to inject
#: failures into the child.
BOOT = ("import sys, os, pickle\n"
        "fd = int(sys.argv[1])\n"
        "n = int.from_bytes(os.read(fd, 8), 'little')\n"
        "data = b''\n"
        "while len(data) < n:\n"
        "    data += os.read(fd, n - len(data))\n"
        "sys.path[:] = pickle.loads(data)\n"
        "import importlib\n"
        "mod, fn = sys.argv[3].split(':')\n"
        "getattr(importlib.import_module(mod), fn)(fd, int(sys.argv[2]))\n")
SERVE = "accel.backends.cpu.worker:serve"


def write_message(fd: int, obj) -> None:
    """Send ``obj`` (or bytes already pickled) as one message: its length, then it."""
    data = obj if isinstance(obj, bytes) else pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(len(data).to_bytes(8, "little") + data)
    while view:
        view = view[os.write(fd, view):]


def read_message(fd: int):
    """The next message of ``fd`` (``EOFError`` at end of file).  Plain ``os.read``: no
    buffered file object, whose lock a fork could copy in the locked state."""
    head = _read_exactly(fd, 8)
    return pickle.loads(_read_exactly(fd, int.from_bytes(head, "little")))


def _read_exactly(fd: int, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        b = os.read(fd, min(n - got, 1 << 20))
        if not b:
            raise EOFError
        parts.append(b)
        got += len(b)
    return b"".join(parts)


# --------------------------------------------------------------------------- child side


def run_job(job: dict) -> dict:
    """Compile the job's program by running it once (see the module docstring)."""
    import time

    from accel.backends.numba.cache import source_hash
    from accel.errors import AccelError, BackendError

    from .runtime import Runner
    out = {"id": job["id"]}
    try:
        os.environ.update(job["env"])
        os.environ["ACCEL_CACHE_DIR"] = job["cache_dir"]
        t0 = time.perf_counter()
        runner = Runner(job["kp"], job["check_bounds"], rewritten=True)
        if source_hash(runner.gen.source) != job["hash"]:
            return {**out, "status": "failed",
                    "message": "the worker generated a different module than the caller"}
        try:
            runner(job["args"])
        except BackendError as e:
            return {**out, "status": "compile-error", "message": str(e)}
        except AccelError as e:
            return {**out, "status": "program-error", "message": f"{type(e).__name__}: {e}"}
        return {**out, "status": "ok", "entries": runner.compiled_signatures(),
                "seconds": time.perf_counter() - t0}
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which recovers
        return {**out, "status": "failed", "message": f"{type(e).__name__}: {e}"}


def serve(jobs_fd: int, result_fd: int, run=run_job) -> None:
    """The worker's main loop: jobs from ``jobs_fd``, results to ``result_fd``."""
    os.environ["ACCEL_COMPILE_LOG"] = "0"  # the parent logs long compilations
    todo: queue.Queue = queue.Queue()

    def read() -> None:
        try:
            while True:
                todo.put(read_message(jobs_fd))
        except BaseException:  # noqa: BLE001 - end of file: the parent is gone or done
            pass
        os._exit(0)  # at once, even in the middle of a compilation

    threading.Thread(target=read, name="accel-worker-jobs", daemon=True).start()
    while True:
        res = run(todo.get())
        try:
            data = pickle.dumps(res, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # noqa: BLE001 - e.g. an unpicklable signature
            data = {"id": res["id"], "status": "failed", "message": f"cannot send: {e}"}
        write_message(result_fd, data)


# --------------------------------------------------------------------------- parent side


class Job:
    """A job sent to the worker; ``done`` is set when ``result`` holds its answer.
    Callbacks (``on_done``, :meth:`add_done`) get the result on the receiving thread,
    or at once if it is already there."""

    def __init__(self, ident: int, data: bytes, on_done):
        self.id = ident
        self.data = data  # the pickled payload (pickled by the caller: a snapshot)
        self.callbacks = [on_done]
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.result: dict | None = None

    def add_done(self, fn) -> None:
        with self.lock:
            if self.result is None:
                self.callbacks.append(fn)
                return
        fn(self.result)

    def finish(self, result: dict) -> None:
        with self.lock:
            if self.result is not None:
                return
            self.result = result
            self.data = None  # the arguments are no longer needed
            callbacks, self.callbacks = self.callbacks, []
        try:
            for fn in callbacks:
                fn(result)
        finally:
            self.done.set()


class Worker:
    """The parent's handle on one worker process: a sending and a receiving thread
    (daemons; sending never blocks the caller on a full pipe)."""

    def __init__(self):
        r_job, w_job = os.pipe()
        r_res, w_res = os.pipe()
        env = dict(os.environ, ACCEL_TIERED="0")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", BOOT, str(r_job), str(w_res), SERVE],
                pass_fds=(r_job, w_res), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                env=env)
        except BaseException:
            for fd in (r_job, w_job, r_res, w_res):
                os.close(fd)
            raise
        os.close(r_job)
        os.close(w_res)
        self.owner = os.getpid()
        # raw fds (``read_message``/``write_message``): no buffer or lock for a fork to copy
        self.out, self.inp = w_job, r_res
        self.lock = threading.Lock()
        self.pending: dict = {}  # id -> Job
        self.closed = False
        self.outbox: queue.Queue = queue.Queue()
        self.outbox.put(pickle.dumps([p for p in sys.path if isinstance(p, str)]))  # BOOT's
        self.sender = threading.Thread(target=self._send, name="accel-compile-send",
                                       daemon=True)
        self.receiver = threading.Thread(target=self._receive, name="accel-compile-receive",
                                         daemon=True)
        self.sender.start()
        self.receiver.start()

    def submit(self, job: Job) -> None:
        with self.lock:
            if not self.closed:
                self.pending[job.id] = job
                self.outbox.put(job.data)
                return
        job.finish({"id": job.id, "status": "failed",
                    "message": "the compile worker has exited"})

    def _send(self) -> None:
        try:
            while True:
                msg = self.outbox.get()
                if msg is None:
                    break
                write_message(self.out, msg)
        except BaseException as e:  # noqa: BLE001 - a dead worker; _receive reports it
            self._fail_all(f"cannot send to the compile worker: {e}")

    def _receive(self) -> None:
        try:
            while True:
                res = read_message(self.inp)
                with self.lock:
                    job = self.pending.pop(res.get("id"), None)
                if job is not None:
                    job.finish(res)
        except BaseException:  # noqa: BLE001 - end of file: the worker exited
            pass
        code = self.proc.poll()
        self._fail_all(f"the compile worker exited (status {code})")

    def _fail_all(self, message: str) -> None:
        with self.lock:
            self.closed = True
            jobs = list(self.pending.values())
            self.pending.clear()
        for job in jobs:
            job.finish({"id": None, "status": "failed", "message": message})

    def shutdown(self) -> None:
        """End the worker process (at exit; pending jobs are reported failed)."""
        if os.getpid() != self.owner:
            return
        with self.lock:
            self.closed = True
        self.outbox.put(None)
        try:
            self.proc.terminate()
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        except OSError:
            pass
        self.receiver.join(timeout=2)
        self.sender.join(timeout=2)
        self._close()

    def _close(self) -> None:
        fds = (self.out, self.inp)
        self.out = self.inp = None
        for fd in fds:
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def forget_in_child(self) -> None:
        """After ``os.fork``, in the child: drop the copies of the pipes without touching
        the parent's worker; the copied jobs are reported lost."""
        self._close()
        self.closed = True
        jobs = list(self.pending.values())
        self.pending.clear()
        for job in jobs:
            job.finish({"id": None, "status": "lost", "message": "forked"})


_lock = threading.Lock()
_worker: Worker | None = None
_ids = itertools.count(1)


def submit(payload: dict, on_done) -> Job:
    """Send a job (``payload`` without its ``id``; pickled here, so later changes to its
    arrays do not reach the worker) to this process's worker, starting it if needed;
    ``on_done(result)`` is called on the receiving thread when it ends.  A worker that
    cannot be started makes the job end at once as ``failed``."""
    global _worker
    ident = next(_ids)
    try:
        data = pickle.dumps({**payload, "id": ident}, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # noqa: BLE001 - compile in-process instead
        job = Job(ident, None, on_done)
        job.finish({"id": ident, "status": "failed", "message": f"cannot pickle: {e}"})
        return job
    job = Job(ident, data, on_done)
    old = None
    with _lock:
        w = _worker
        if w is None or w.closed:
            old = w  # exited, or its pipe broke: make sure its process ends
            try:
                w = _worker = Worker()
            except Exception as e:  # noqa: BLE001 - no process here: compile in-process
                w = None
                failure = f"cannot start the compile worker: {type(e).__name__}: {e}"
    if old is not None:
        old.shutdown()
    if w is None:
        job.finish({"id": ident, "status": "failed", "message": failure})
    else:
        w.submit(job)
    return job


def worker_pid() -> int | None:
    """The pid of this process's worker (None if it has none): for tests and tools."""
    w = _worker
    return None if w is None or w.closed else w.proc.pid


def shutdown() -> None:
    """Terminate this process's worker (registered with ``atexit``; safe to call again)."""
    global _worker
    with _lock:
        w, _worker = _worker, None
    if w is not None:
        w.shutdown()


def _before_fork() -> None:
    _lock.acquire()


def _after_fork_parent() -> None:
    _lock.release()


def _after_fork_child() -> None:
    global _worker
    w, _worker = _worker, None
    _lock.release()
    if w is not None:
        w.forget_in_child()


atexit.register(shutdown)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                        after_in_child=_after_fork_child)
