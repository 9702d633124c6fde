"""A straight-line program's replayed plan as one flat list of kernel calls.

Replaying a step's plan (``plan.StepCall``) still cost the Python host about 7 us
a step: buffers from the pool, argument lists, launch bookkeeping, the bounds flag.  A
GMM gradient is 35 steps and 53 launches, so on 1000 points the host took 0.4 ms of a
0.63 ms call, while numba's own dispatch of a call is about 0.5 us.  When a program's
top level is only loop steps and constants and its plan depends only on the arguments
(every guard reads an argument), :class:`StraightLine` wires the plan once: every
launch becomes (kernel, leading arguments, buffer slots, ``shp``), intermediate arrays
live in an arena owned by the replay (the plan fixes their sizes), results in buffers
from the runner's pool, and a call only fills the argument and result slots and makes
the launches.  (Generating one numba function making all the launches was tried: it
saved another 0.1 ms a call, but numba links every kernel into it and optimises them
again, 6.5 s of compilation per program.)  A call that finds the arena busy (another
thread) runs step by step instead.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from accel.ast.types import leaves
from accel.fusion.kernels import KUse, step_outs

from accel.backends.numba.host import ArrVal
from accel.backends.numba.kernelgen import ERR_SIZE

from .plan import entry_point, guards_hold, launch_prepared

__all__ = ["StraightLine", "eligible"]


def eligible(kp, plans: list) -> bool:
    """Whether ``plans`` (one per top-level step, None for constants) can be wired into a
    straight-line replay: only loop steps and constants, and no plan depends on an
    element of a computed array (the shapes of computed arrays are fixed by the plans of
    their steps)."""
    params = {p.name for p in kp.params}
    for s, sc in zip(kp.body.steps, plans):
        if sc is None:
            if not isinstance(s, KUse):
                return False
        elif any(reads and name not in params for name, _, reads in sc.guards):
            return False
    return True


class StraightLine:
    """The replay of one plan (see the module docstring): a call's buffers are the
    program's argument leaves and then its results'; constants and the arena are
    bound into the launches once."""

    def __init__(self, runner, plans: list, threads: int):
        kp = runner.kp
        self.plans = plans
        self.threads = threads
        self.lock = threading.Lock()
        self.counts = collections.Counter()  # launches per replay (filled below)
        self.runs = 0  # completed replays (``Runner.stats`` multiplies ``counts`` by it)
        # Every leaf buffer is either an int, its position in a call's ``bufs`` (the
        # arguments' leaves, then the results'), or the ndarray itself (constants and the
        # arena, fixed for the replay's life).  Each launch's argument list is built here;
        # a call only copies the lists that take arguments or results and puts those in.
        where: dict = {}  # array name -> its leaf buffers
        self.inputs: list = []  # (argument index, leaf index) per argument slot
        for i, p in enumerate(kp.params):
            where[p.name] = []
            for k in range(len(leaves(p.type.elt))):
                where[p.name].append(len(self.inputs))
                self.inputs.append((i, k))
        nin = len(self.inputs)
        self.fixed: dict = {}  # constant arrays by name (results may be constants)
        for s in kp.body.steps:
            if isinstance(s, KUse):
                self.fixed[s.out.name] = runner._uses[id(s)]
                where[s.out.name] = [self.fixed[s.out.name].leaves[0]]
        results = {r.name for r in kp.body.result}
        self.results: list = []  # (array name, shape, [(size, dtype)] per leaf)
        self.arena: list = []  # intermediate arrays and scratch buffers
        self.err = np.zeros(ERR_SIZE, dtype=np.int64)  # zero between calls
        self.steps: list = []  # ([(arena buffer, fill value)], [(kernel, arguments, varying)])
        nres = 0

        def arena(size, dtype):
            self.arena.append(np.empty(size, dtype=dtype))
            return self.arena[-1]

        for s, sc in zip(kp.body.steps, plans):
            if sc is None:
                continue
            outs = []
            into = getattr(s, "into", None)
            skip_defaults = (into is not None and s.out.name not in results
                             and into.name not in self.fixed
                             and all(isinstance(b, np.ndarray)
                                     for b in where.get(into.name, [None])))
            for avar, (shape, size, dts) in zip(step_outs(s), sc.outs):
                if skip_defaults:  # the permute updates its dead defaults in place
                    where[avar.name] = list(where[into.name])
                    outs += where[avar.name]
                    continue
                if avar.name in results:
                    ps = list(range(nin + nres, nin + nres + len(dts)))
                    nres += len(dts)
                    self.results.append((avar.name, shape, [(size, dt) for dt in dts]))
                else:
                    ps = [arena(size, dt) for dt in dts]
                where[avar.name] = ps
                outs += ps
            work, fills = [], []
            for w in sc.work:
                if w[0] == "o":
                    work.append(outs[w[1]])
                    continue
                work.append(arena(w[1], w[2]))
                if w[0] == "f":
                    fills.append((work[-1], w[3]))
            slots = work + [b for a in sc.plan.inputs for b in where[a.name]]
            calls = []
            for fn, lead, counter in sc.calls:
                if skip_defaults and counter.startswith("d_"):
                    continue  # (as ``Runner._run``: the defaults are already there)
                args = [*lead, *(None if isinstance(x, int) else x for x in slots), sc.shp,
                        self.err]
                varying = tuple((len(lead) + p, x) for p, x in enumerate(slots)
                                if isinstance(x, int))
                self.counts[counter] += 1
                calls.append((entry_point(runner._ready.get(fn) or getattr(runner.module, fn)),
                              args if varying else tuple(args), varying))
            self.steps.append((fills, calls))
        self.guards = _merge_guards(plans, {p.name for p in kp.params})

    def run(self, runner, inputs: list, taken: list):
        """The program's arrays by name (results, arguments, constants) on ``inputs`` (an
        ``ArrVal`` per argument), or None when the guards fail, the arena is busy or a
        bounds check failed (the caller then runs the program step by step)."""
        env = {p.name: v for p, v in zip(runner.kp.params, inputs)}
        if not guards_hold(self.guards, env) or not self.lock.acquire(blocking=False):
            return None
        try:
            take = runner._pool.take
            res, bufs = {}, [inputs[i].leaves[k] for i, k in self.inputs]
            for name, shape, lv in self.results:
                try:
                    res[name] = ArrVal(shape, [take(size, dt, taken) for size, dt in lv])
                except MemoryError:  # the step-by-step run names the step that failed
                    return None
                bufs += res[name].leaves
            err = self.err
            for fills, calls in self.steps:
                launch_prepared(fills, calls, bufs)
                if err[0] != 0:  # the step-by-step run that follows raises the error
                    err[:] = 0
                    return None
            self.runs += 1
        finally:
            self.lock.release()
        res.update(env)
        res.update(self.fixed)
        return res


def _merge_guards(plans: list, params: set) -> list:
    """The steps' guards on the program's arguments, each (array, shape, element reads)
    once (the other arrays' shapes follow from the plans)."""
    out, seen = [], set()
    for sc in plans:
        for name, shape, reads in (sc.guards if sc is not None else ()):
            key = (name, shape, tuple((off, tuple(v)) for off, v in reads))
            if name in params and key not in seen:
                seen.add(key)
                out.append((name, shape, reads))
    return out
