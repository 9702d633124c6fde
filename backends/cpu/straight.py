"""A straight-line program's replayed plan as one compiled numba function.

Replaying a step's plan (``runtime._StepCall``) still costs the Python host about 7 us
a step: buffers from the pool, argument lists, the launch, the bounds flag.  A GMM
gradient is 35 steps and 53 launches, so on 1000 points the host took 0.4 ms of a 0.63
ms call.  When a program's top level is only loop steps and constants and its plan
depends only on the arguments (every guard reads an argument), :class:`StraightLine`
generates one numba function that makes every launch of the plan in order and checks
the bounds flag after each step, and the host calls it once.

The function's text names the kernels and wires their buffers; every size (loop
counts, chunk counts, each step's ``shp``) is data, in two int64 arrays.  So one
function serves every argument shape whose plan makes the same launches, and like the
kernels it is a module named by its content hash, cached on disk.  Intermediate arrays
live in an arena owned by the driver (its plan fixes their sizes), results in buffers
from the runner's pool; a call that finds the arena busy (another thread) runs step
by step instead.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from accel.ast.types import leaves, scalar_of_dtype
from accel.fusion.kernels import KUse, step_outs

from . import cache
from .codegen import ERR_SIZE, SERIAL, const_atom
from .vectorize import MARK, enable_slp

__all__ = ["StraightLine", "eligible"]


def eligible(kp, plans: list) -> bool:
    """Whether ``plans`` (one per top-level step, None for constants) can be compiled:
    only loop steps and constants, and no plan depends on an element of a computed
    array (the shapes of computed arrays are fixed by the plans of their steps)."""
    params = {p.name for p in kp.params}
    for s, sc in zip(kp.body.steps, plans):
        if sc is None:
            if not isinstance(s, KUse):
                return False
        elif any(reads and name not in params for name, _, reads in sc.guards):
            return False
    return True


class StraightLine:
    """The compiled driver of one replayed plan (see the module docstring).  Its buffer
    parameters are named by role: ``a`` program arguments, ``u`` constants, ``r``
    results, ``t`` the arena."""

    def __init__(self, runner, plans: list, threads: int):
        kp = runner.kp
        self.threads = threads
        self.lock = threading.Lock()
        self.counts = collections.Counter(c for sc in plans if sc is not None
                                          for _, _, c in sc.calls)
        where: dict = {}  # array name -> parameter names of its leaves
        self.inputs: list = []  # (argument index, leaf index) per ``a`` parameter
        for i, p in enumerate(kp.params):
            where[p.name] = []
            for k in range(len(leaves(p.type.elt))):
                where[p.name].append(f"a{len(self.inputs)}")
                self.inputs.append((i, k))
        self.plans = plans
        self.uses: list = []  # the ``u`` buffers
        self.fixed: dict = {}  # constant arrays by name (results may be constants)
        for s in kp.body.steps:
            if isinstance(s, KUse):
                where[s.out.name] = [f"u{len(self.uses)}"]
                self.fixed[s.out.name] = runner._uses[id(s)]
                self.uses.append(self.fixed[s.out.name].leaves[0])
        results = {r.name for r in kp.body.result}
        self.results: list = []  # (array name, shape, [(size, dtype)] per leaf): ``r``
        self.arena: list = []  # the ``t`` buffers
        nres = 0
        body, shp, lead = [], [], []

        def scratch(size, dtype) -> str:
            self.arena.append(np.empty(size, dtype=dtype))
            return f"t{len(self.arena) - 1}"

        for si, (s, sc) in enumerate(zip(kp.body.steps, plans)):
            if sc is None:
                continue
            outs = []
            for avar, (shape, size, dts) in zip(step_outs(s), sc.outs):
                if avar.name in results:
                    ps = [f"r{nres + k}" for k in range(len(dts))]
                    nres += len(dts)
                    self.results.append((avar.name, shape, [(size, dt) for dt in dts]))
                else:
                    ps = [scratch(size, dt) for dt in dts]
                where[avar.name] = ps
                outs += ps
            work = []
            for w in sc.work:
                if w[0] == "o":
                    work.append(outs[w[1]])
                    continue
                work.append(scratch(w[1], w[2]))
                if w[0] == "f":
                    body.append(f"    {work[-1]}[:] = {const_atom(w[3], scalar_of_dtype(w[2]))}")
            o = sum(len(x) for x in shp)
            shp.append(sc.shp)
            args = work + [b for a in sc.plan.inputs for b in where[a.name]]
            args += [f"shp[{o}:{o + len(sc.shp)}]", "err"]
            for fn, lead_args, _ in sc.calls:
                leads = [f"lead[{len(lead) + k}]" for k in range(len(lead_args))]
                lead += lead_args
                body.append(f"    {fn}({', '.join(leads + args)})")
            body += ["    if err[0] != 0:", f"        return {si}"]
        params = ([f"a{k}" for k in range(len(self.inputs))]
                  + [f"u{k}" for k in range(len(self.uses))]
                  + [f"r{k}" for k in range(nres)]
                  + [f"t{k}" for k in range(len(self.arena))] + ["shp", "lead", "err"])
        self.shp = np.concatenate(shp) if shp else np.zeros(0, np.int64)
        self.lead = np.array(lead, dtype=np.int64)
        self.guards = _merge_guards(plans, {p.name for p in kp.params})
        fns = sorted({fn for sc in plans if sc is not None for fn, _, _ in sc.calls})
        self.source = "\n".join([
            '"""accel straight-line driver (generated; the file name is its content hash)."""',
            MARK, "import numba as nb", "import numpy as np  # noqa: F401",
            f"from {runner.module.__name__} import {', '.join(fns)}", "", "", SERIAL,
            f"def run({', '.join(params)}):", *body, "    return -1", ""])
        self.module = cache.load(self.source)
        enable_slp(self.module)
        self.fn = self.module.run

    def run(self, runner, inputs: list, taken: list):
        """The program's arrays by name (results, arguments, constants) on ``inputs`` (an
        ``ArrVal`` per argument), or None when the guards fail, the arena is busy or a
        bounds check failed (the caller then runs the program step by step)."""
        from .runtime import ArrVal, _guards_hold
        env = {p.name: v for p, v in zip(runner.kp.params, inputs)}
        if not _guards_hold(self.guards, env) or not self.lock.acquire(blocking=False):
            return None
        try:
            take = runner._pool.take
            res, bufs = {}, []
            for name, shape, lv in self.results:
                res[name] = ArrVal(shape, [take(size, dt, taken) for size, dt in lv])
                bufs += res[name].leaves
            err = np.zeros(ERR_SIZE, dtype=np.int64)
            failed = self.fn(*[inputs[i].leaves[k] for i, k in self.inputs], *self.uses,
                             *bufs, *self.arena, self.shp, self.lead, err)
        finally:
            self.lock.release()
        if failed != -1:
            return None
        runner._counts.update(self.counts)
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
