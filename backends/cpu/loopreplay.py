"""A loop's iterations replayed from prepared launch lists.

The runtime walks a loop body step by step (``Runner._block``): for every step it checks
the plan's guards, takes buffers from the pool, builds the argument list and launches,
and between iterations it binds the state and returns buffers to the pool.  That walk
costs about 7-10 us a step, and a loop whose body is a few small kernels (an RNN with
hidden size 128: five launches an iteration, 1.3 ms of kernels in a 6 ms forward pass
of 100 steps) spends most of its time in it.

:class:`LoopReplay` learns, after the runtime has run an iteration of an ``awhile``
whose condition and body are only kernel launches and constants, that iteration as a
:class:`Variant`: every launch as (kernel entry point, argument template, the positions
that take buffers known only per iteration), the intermediate arrays in an arena owned
by the replay, the state's new buffers in one of two alternating sets of buffers taken
from the call's pool (iteration ``i`` reads the set ``i - 1`` wrote), and what the
plans read on the host.  Later iterations (of this call or the next) whose state has
the same shapes and whose loop counters (one-element state arrays a plan read) have the
same values run the variant's launches directly: about 1 us a launch on the host.

A variant holds while the reads its plans made hold: the state's shapes and counters
(its key), elements of other state arrays and of arrays bound outside the loop (checked
every iteration: a few reads, and variants often differ in them, as in an offset into
a tape), and the shapes of the arrays bound outside the loop (checked once per run of
the loop: they do not change during it).  When no variant holds, the runtime runs the
iteration step by step and learns it.  A plan that read an element of an array
computed by the iteration itself cannot be checked before the iteration runs: such a
loop is not replayed.  Buffers a result carries over from the state (a parameter
returned as it is, or updated in place by a permute) must not be one the iteration
writes; an iteration where one is runs step by step.
"""

from __future__ import annotations

import collections
import itertools
import operator
import threading

import numpy as np

from accel.fusion.kernels import KAwhile, KUse, step_outs

from accel.backends.numba.host import ArrVal
from accel.backends.numba.kernelgen import ERR_SIZE

from .plan import bounds_error

__all__ = ["LoopReplay", "replayable"]

MAX_VARIANTS = 256  # iteration keys a loop keeps variants for (then it stops learning)
MAX_ARENA_BYTES = 1 << 28  # intermediates a loop's replay may hold
MAX_FAILED = 8  # iterations that could not be learned before a loop stops trying


def replayable(s: KAwhile, launches: tuple) -> bool:
    """Whether the blocks of loop ``s`` are only steps of the kinds ``launches`` and
    constants (no nested loop or conditional, whose plans the host decides inside)."""
    return all(isinstance(t, launches) or isinstance(t, KUse)
               for b in (s.cond, s.body) for t in b.steps)


class Variant:
    """One learned iteration (see the module docstring).  Buffers are referred to by
    slot: the arrays bound outside the loop (``outer``, per run), the state's leaves,
    and the leaves of the set the iteration writes (``owned``); everything else (the
    arena, constants) is in the argument templates."""

    __slots__ = ("outer", "outer_checks", "outer_id", "checks", "owned", "consts", "cond",
                 "body", "test", "results", "next_shapes", "next_leaves", "carried",
                 "shapes", "counts", "ends", "runs", "ends_run")

    def __init__(self):
        self.outer: list = []  # names of arrays bound outside the loop, in slot order
        self.outer_checks: list = []  # (name, shape, reads) of their guards; then (name, shape)
        self.checks: list = []  # (state leaf slot, offset, value): other state reads
        self.outer_id = 0  # equal for variants with equal outer arrays and guards on them
        self.owned: list = []  # (size, dtype) per owned slot (a tuple shared by equal ones)
        self.consts: list = []  # the buffers and values every iteration passes as they are
        self.cond: list = []  # (fills, [(kernel, argument getter)], step call) per step
        self.body: list = []  # ... of the body
        self.test = None  # the condition's result buffer
        self.results: list = []  # (shape, [slot or buffer]) per state array
        self.next_shapes: tuple = ()  # the shapes of the next state
        self.next_leaves = None  # slots -> the next state's leaves (an itemgetter)
        self.carried: list = []  # state leaf slots the results carry over
        self.shapes: dict = {}  # shape of every array bound in the iteration
        self.counts = collections.Counter()  # launches per iteration, by counter
        self.ends = collections.Counter()  # ... of the condition alone
        self.runs = 0  # iterations replayed
        self.ends_run = 0  # ... that ended the loop


class LoopReplay:
    """The learned iterations of one ``awhile`` step (per thread count, as its plans)."""

    def __init__(self, s: KAwhile):
        self.loop = s
        self.lock = threading.Lock()
        self.variants: dict = {}  # key -> Variant
        self.counters: list = []  # state indices whose values key the variants
        self.arena: dict = {}  # (size, dtype, ordinal) -> buffer
        self.arena_bytes = 0
        self.failed = 0
        self.retired = collections.Counter()  # launches of variants forgotten
        self.retired_iterations = 0  # ... and their iterations
        self.err = np.zeros(ERR_SIZE, dtype=np.int64)
        self.interned: dict = {}  # variants' outer guards and owned sets -> one object each

    # ---- learning

    def learning(self) -> bool:
        return self.failed < MAX_FAILED and len(self.variants) < MAX_VARIANTS

    def learn(self, env: dict, plans: dict, uses: dict) -> None:
        """Learn the iteration the runtime has just run in ``env`` (the state still bound
        to the parameters, every step's plan in ``plans`` by step id)."""
        s = self.loop
        steps = [*s.cond.steps, *s.body.steps]
        scs = [plans.get(id(t)) for t in steps]
        if any(sc is None or sc.fast is None for t, sc in zip(steps, scs)
               if not isinstance(t, KUse)):
            return  # kernels not compiled yet: the next iteration will have them
        if not self.lock.acquire(blocking=False):
            return
        try:
            var = self._wire(env, steps, scs, uses)
        finally:
            self.lock.release()
        if var is None:
            self.failed += 1
            return
        self.variants[self._key([env[p.name] for p in s.params])] = var

    def _key(self, state: list) -> tuple:
        return (tuple(v.shape for v in state),
                tuple(b[0] for i in self.counters for b in state[i].leaves))

    def _wire(self, env: dict, steps: list, scs: list, uses: dict):
        s = self.loop
        var = Variant()
        where: dict = {}  # array name -> [slot or buffer] per leaf
        state_slot = 0  # the state's leaves follow the outer ones: offsets fixed below
        params = {p.name: i for i, p in enumerate(s.params)}
        bound = set(params) | {o.name for t in steps for o in step_outs(t)}
        # the state's leaves: slots ("s", k); outer arrays' leaves ("o", k); owned ("w", k)
        for p in s.params:
            var.shapes[p.name] = env[p.name].shape
            where[p.name] = [("s", k) for k in range(state_slot,
                                                     state_slot + len(env[p.name].leaves))]
            state_slot += len(env[p.name].leaves)
        # arrays whose buffers become the next state: written into an owned set
        owned_names = {r.name for r in s.body.result}
        for t in reversed(steps):
            into = getattr(t, "into", None)
            if into is not None and t.out.name in owned_names:
                owned_names.add(into.name)
        counters = list(self.counters)
        ordinal: collections.Counter = collections.Counter()
        arena_new = 0

        def arena(size, dtype):
            nonlocal arena_new
            k = (size, np.dtype(dtype), ordinal[(size, np.dtype(dtype))])
            ordinal[k[:2]] += 1
            b = self.arena.get(k)
            if b is None:
                b = self.arena[k] = np.empty(size, dtype=dtype)
                arena_new += b.nbytes
            return b

        def refs(name):
            if name not in where:  # bound outside the loop
                if name in bound:
                    return None
                where[name] = [("o", len(var.outer), k) for k in range(len(env[name].leaves))]
                var.outer.append(name)
            return where[name]

        for t, sc in zip(steps, scs):
            if isinstance(t, KUse):
                where[t.out.name] = list(uses[id(t)].leaves)
                continue
            for name, shape, reads in sc.guards:
                if name in params:
                    i = params[name]
                    if reads and not shape:
                        if i not in counters:
                            counters.append(i)
                    else:
                        for off, vals in reads:
                            for (_, slot), v in zip(where[name], vals):
                                var.checks.append((slot, off, v))
                elif name in bound:
                    if reads:
                        return None  # read from this iteration's arrays: not checkable
                else:
                    refs(name)
                    var.outer_checks.append((name, shape, reads))
            into, outs_, work_, inputs, calls, names = sc.fast
            for o, (shape, _, _) in zip(step_outs(t), outs_):
                var.shapes[o.name] = tuple(shape)
            out_leaves = []
            if into is not None:
                r = refs(into)
                if r is None or (isinstance(r[0], tuple) and r[0][0] == "o"):
                    return None  # updating an array bound outside the loop
                where[t.out.name] = list(r)
                out_leaves = list(r)
            else:
                for o, (shape, size, dts) in zip(step_outs(t), outs_):
                    if o.name in owned_names:
                        lv = []
                        for dt in dts:
                            lv.append(("w", len(var.owned)))
                            var.owned.append((size, np.dtype(dt)))
                    else:
                        lv = [arena(size, dt) for dt in dts]
                    where[o.name] = lv
                    out_leaves += lv
            work, fills = [], []
            for w in work_:
                if w[0] == "o":
                    work.append(out_leaves[w[1]])
                else:
                    work.append(arena(w[1], w[2]))
                    if w[0] == "f":
                        fills.append((work[-1], w[3]))
            for name in inputs:
                r = refs(name)
                if r is None:
                    return None
                work += r
            prepared = []
            for fn, lead, counter in calls:
                args = [*lead, *work, sc.shp, self.err]
                varying = tuple((p, a) for p, a in enumerate(args) if isinstance(a, tuple))
                prepared.append((fn, args, varying))
                var.counts[counter] += 1
                if t in s.cond.steps:
                    var.ends[counter] += 1
            (var.cond if t in s.cond.steps else var.body).append((fills, prepared, sc))
        if self.arena_bytes + arena_new > MAX_ARENA_BYTES:
            return None
        self.arena_bytes += arena_new
        test = where[s.cond.result[0].name]
        if isinstance(test[0], tuple):
            return None  # the condition is a state array or outer one (not a launch)
        var.test = test[0]
        for r, p in zip(s.body.result, s.params):
            lv = refs(r.name)
            if lv is None:
                return None
            shape = var.shapes[r.name] if r.name in var.shapes else env[r.name].shape
            var.results.append((shape, lv))
            var.carried += [x[1] for x in lv if isinstance(x, tuple) and x[0] == "s"]
        # slots as flat positions: outer leaves first, then the state's, then owned
        nouter = sum(len(env[n].leaves) for n in var.outer)
        starts, k = [], 0
        for n in var.outer:
            starts.append(k)
            k += len(env[n].leaves)

        def flat(x):
            if not isinstance(x, tuple):
                return x
            if x[0] == "o":
                return starts[x[1]] + x[2]
            return nouter + x[1] if x[0] == "s" else nouter + state_slot + x[1]

        # everything else an iteration passes (arena buffers, ``shp``, constants) is a
        # slot after the owned ones, so that every launch's arguments are one itemgetter
        consts: dict = {}  # id -> slot

        def slot(x):
            if isinstance(x, tuple):
                return flat(x)
            k = consts.get(id(x))
            if k is None:
                k = consts[id(x)] = nouter + state_slot + len(var.owned) + len(var.consts)
                var.consts.append(x)
            return k

        for part in (var.cond, var.body):
            for j, (fills, prepared, sc) in enumerate(part):
                ops = [(fn, operator.itemgetter(*[slot(a) for a in args]))
                       for fn, args, _ in prepared]
                part[j] = (fills, ops, sc)
        var.results = [(shape, [slot(x) for x in lv]) for shape, lv in var.results]
        var.next_shapes = tuple(shape for shape, _ in var.results)
        leaves = [x for _, lv in var.results for x in lv]
        if len(leaves) > 1:
            var.next_leaves = operator.itemgetter(*leaves)
        else:  # (an itemgetter of one item returns it, not a tuple)
            var.next_leaves = lambda bufs, ks=tuple(leaves): tuple(bufs[k] for k in ks)
        var.carried = [nouter + x for x in var.carried]
        # the elements read of outer arrays are checked with the state's, every iteration
        # (a few reads, often of a tape at the iteration's offset: variants differ in
        # them); their shapes once per run of the loop, for all variants that share them
        checks = {(nouter + slot, off): v for slot, off, v in var.checks}
        for name, _, reads in var.outer_checks:
            first = starts[var.outer.index(name)]
            for off, vals in reads:
                for k, v in enumerate(vals):
                    checks[(first + k, off)] = v
        var.checks = [(j, off, v) for (j, off), v in checks.items()]
        var.outer_checks = list(dict.fromkeys((name, shape)
                                              for name, shape, _ in var.outer_checks))
        var.owned = self.interned.setdefault(("owned", *var.owned), tuple(var.owned))
        guards = ("outer", tuple(var.outer), tuple(var.outer_checks))
        var.outer_id = self.interned.setdefault(guards, len(self.interned))
        if counters != self.counters:  # a newly read counter: earlier keys lack it
            self.counters = counters
            self.retired.update(self.launches())
            self.retired_iterations = self.iterations()
            self.variants.clear()
        return var

    # ---- replaying

    def run(self, state: list, env: dict, pool, taken: list, sets: list):
        """Run iterations from ``state`` while learned variants hold: ``(state, done)``,
        ``done`` when the condition failed.  Owned buffers come from ``pool`` into
        ``taken`` (the call's, not the iteration's); ``sets`` (the call's, two lists)
        keeps them between runs."""
        if not self.variants or not self.lock.acquire(blocking=False):
            return state, False
        try:
            return self._iterate(state, env, pool, taken, sets)
        finally:
            self.lock.release()

    def _iterate(self, state, env, pool, taken, sets):
        """The replay proper.  Between iterations the state is its shapes and its flat
        leaves, not ``ArrVal`` objects: the corpus RNN's dual step launches ten kernels
        in about 27 us, and the host's work around them took 46 us before."""
        variants = self.variants
        checked: dict = {}  # outer_id -> the variant's outer leaves, checked for this run
        held = {id(b) for v in state for b in v.leaves}
        p = 1 if any(id(b) in held for b in sets[0]) else 0
        ready = [None, None]  # the owned tuple each set of buffers was checked for
        starts = list(itertools.accumulate((len(v.leaves) for v in state), initial=0))
        counters = [starts[i] + k for i in self.counters
                    for k in range(len(state[i].leaves))]
        shapes = tuple(v.shape for v in state)
        leaves = [b for v in state for b in v.leaves]
        done = False
        while True:
            var = variants.get((shapes, tuple(leaves[j][0] for j in counters)))
            if var is None:
                break
            outer = checked.get(var.outer_id)
            if outer is None:
                outer = self._outer(var, env)
                if outer is None:
                    break
                checked[var.outer_id] = outer
            own = sets[p]
            if ready[p] is not var.owned:
                if len(own) != len(var.owned) or any(
                        b.size != size or b.dtype != dt for b, (size, dt) in zip(own, var.owned)):
                    own[:] = [pool.take(size, dt, taken) for size, dt in var.owned]
                ready[p] = var.owned
            bufs = outer + leaves + own + var.consts
            if var.carried and any(bufs[j] is b for j in var.carried for b in own):
                break  # a carried buffer would be overwritten
            if var.checks and any(not bufs[j][off] == v for j, off, v in var.checks):
                break
            self._launch(var.cond, bufs, var, env)
            if not var.test[0]:
                var.ends_run += 1
                done = True
                break
            self._launch(var.body, bufs, var, env)
            var.runs += 1
            shapes, leaves = var.next_shapes, list(var.next_leaves(bufs))
            p = 1 - p
        state = [ArrVal(shape, leaves[a:b])
                 for shape, a, b in zip(shapes, starts, starts[1:])]
        return state, done

    def _launch(self, part: list, bufs: list, var: Variant, env: dict) -> None:
        """Run the steps of ``part`` (a variant's condition or body) on ``bufs``."""
        err = self.err
        for fills, ops, sc in part:
            for buf, value in fills:
                buf.fill(value)
            for fn, args in ops:
                fn(*args(bufs))
            if err[0] != 0:
                self._raise(sc, var, env)

    def _outer(self, var: Variant, env: dict):
        """The leaves of ``var``'s outer arrays in ``env`` if its guards on them hold."""
        for name, shape in var.outer_checks:
            v = env.get(name)
            if v is None or v.shape != shape:
                return None
        return [b for n in var.outer for b in env[n].leaves]

    def _raise(self, sc, var: Variant, env: dict) -> None:
        error = bounds_error(sc, self.err, lambda name: var.shapes[name] if name in var.shapes
                             else env[name].shape)
        self.err[:] = 0
        raise error

    def iterations(self) -> int:
        """Iterations run from learned variants (those that ended the loop included)."""
        return self.retired_iterations + sum(var.runs + var.ends_run
                                             for var in list(self.variants.values()))

    def launches(self) -> collections.Counter:
        """Launches made by replayed iterations, by counter."""
        out = collections.Counter(self.retired)
        for var in list(self.variants.values()):  # (another thread may be learning)
            for counter, n in var.counts.items():
                out[counter] += n * var.runs
            for counter, n in var.ends.items():
                out[counter] += n * var.ends_run
        return out
