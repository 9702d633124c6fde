"""The plan types of the CPU backend: what code generation tells the host about a step,
and what the host decides when it launches one.

``KernelPlan`` is made once per loop step by ``codegen`` (which functions exist, what
goes into ``shp``, which phases have parallel drivers).  Each step kind's ``launch``
rule (in ``generate``, ``fold``, ``scan``, ``permute``) turns it and the step's
evaluated shapes into a ``Launch``: the outputs, the work buffers, the size slots and
the phases to run with their amounts of work; :func:`calls` then picks a serial call
or a parallel launch per phase, and the result is a ``StepCall``, which the runtime
replays while its ``guards`` hold.  These types live here, not in ``runtime``, so
that ``straight`` (which wires ``StepCall``s into one replay) and ``runtime`` both
import them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field


from accel.ast.types import leaves
from accel.errors import OutOfBoundsError, ShapeError
from accel.backends.numba.host import shown

from .emitter import MM_TASKS_PER_THREAD, PAR_MIN_WORK, PAR_TASKS_PER_THREAD


def num_threads() -> int:
    """numba's thread count (numba is imported when a launch is first decided, not with
    this module: code generation needs no numba, ``tiered``)."""
    import numba
    return numba.get_num_threads()


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
    outer: bool = False  # the fold has the interchanged phase (see ``fold``)
    blocked: bool = False  # the fold has the phase of blocks of rows
    contract: object = None  # the fold's ``Contraction``: it has phase ``mm`` (BLAS)
    # tests of sizes alone the step's kernels are specialised on (``versions``), and
    # ((truth values, plan of the step with the tests decided), ...): ``choose`` picks
    tests: tuple = ()
    choices: tuple = ()


def choose(plan: KernelPlan, ev) -> KernelPlan:
    """The plan to launch: ``plan``, or the one of its ``choices`` whose truth values
    the size tests have now (``ev`` evaluates them on the host, logging its reads)."""
    if not plan.tests:
        return plan
    values = tuple(bool(ev(t)) for t in plan.tests)
    for vals, p in plan.choices:
        if vals == values:
            return p
    raise AssertionError("versions.outcomes covers every assignment")


@dataclass
class Launch:
    """A step kind's launch decision for one set of shapes."""

    shape: tuple  # the output's shape
    size: int  # its number of elements (the ``size`` slot)
    outs: list  # (shape, size, dtypes) per output array
    work: list  # ("o", output leaf) | ("b", size, dtype) | ("f", size, dtype, value)
    phases: list  # (phase, ntask or None for a plain function, work elements)
    vals: dict  # layout key -> value, for the step's own size slots


def dtypes(t) -> tuple:
    """The dtypes of the flat buffers of an array of type ``t``."""
    return tuple(s.dtype for s in leaves(t.elt))


def inner_length(v, op: str) -> int:
    n = int(v)
    if n < 0:
        raise ShapeError(f"{op}: negative inner length {n}")
    return n


def calls(plan: KernelPlan, phases: list) -> list:
    """``(function name, leading arguments, launch counter)`` per phase to run: a serial
    call of the range function, or its parallel driver when the phase has one and
    enough work (``PAR_MIN_WORK``, scaled by the step's per-element weight)."""
    out = []
    for phase, ntask, amount in phases:
        if ntask is None:
            out.append((f"{plan.fn}_{phase}", (), phase))
        elif ntask == 0:
            continue
        elif amount < 0:  # a fixed number of chunks (the private-buffer scatter)
            out.append((f"{plan.fn}_par_{phase}", (ntask, -amount), f"{phase}_parallel"))
        elif (ntask >= 2 and amount * plan.weight >= PAR_MIN_WORK
              and phase in plan.parallel):
            per = MM_TASKS_PER_THREAD if phase == "mm" else PAR_TASKS_PER_THREAD
            nch = min(ntask, per * num_threads())
            out.append((f"{plan.fn}_par_{phase}", (ntask, nch), f"{phase}_parallel"))
        else:
            out.append((f"{plan.fn}_{phase}", (0, ntask, 0), f"{phase}_serial"))
    return out


def entry_point(dispatcher):
    """The compiled entry point of a kernel's only specialisation, else the dispatcher.
    A replay's arguments always have the types the kernel was compiled for (flat
    C-contiguous buffers of fixed dtypes, ints), so numba's type dispatch (0.16 us of
    a 0.44 us call) can be skipped.  An entry point does not check its arguments (an
    int64 buffer would be read as float64 bits), hence only one specialisation: two
    mean two programs share the module's kernel text with other dtypes."""
    overloads = getattr(dispatcher, "overloads", {})
    if len(overloads) != 1:
        return dispatcher
    return next(iter(overloads.values())).entry_point


def bounds_error(sc, err, shape_of) -> OutOfBoundsError:
    """The ``OutOfBoundsError`` a step's kernels recorded in ``err`` (site, index);
    ``shape_of(name)`` gives the shape of the array the site reads (``None``: the
    step's own output, shaped ``sc.shape``)."""
    site = sc.plan.sites[int(err[0]) - 1]
    ix = tuple(int(i) for i in err[1:1 + site.rank])
    shape = shape_of(site.avar.name) if site.avar is not None else sc.shape
    return OutOfBoundsError(f"{site.what}: index {shown(ix)} is out of bounds for shape "
                            f"{shape}")


def launch_prepared(fills: list, calls: list, bufs: list) -> None:
    """Launch a step prepared for a replay (``straight``, ``loopreplay``): fill its
    filled work buffers, then call each ``(kernel, arguments, varying)``, where
    ``varying`` gives the argument positions taking ``bufs[slot]`` in this run."""
    for buf, value in fills:
        buf.fill(value)
    for fn, args, varying in calls:
        if varying:
            args = args.copy()
            for pos, slot in varying:
                args[pos] = bufs[slot]
        fn(*args)


class StepCall:
    """A loop step with its host expressions evaluated: the buffers to allocate, the
    ``shp`` array and the launches.  Replayed as is by later calls whose ``guards`` hold
    (the arrays the host read have the same shapes and the elements it read the same
    values), so that a call of a program on arguments of recurring shapes does no host
    evaluation at all.  ``fast``: what the runtime's replay of a step inside a loop
    needs, prepared by its first run (``Runner._wire``), or None."""

    __slots__ = ("plan", "shape", "outs", "work", "shp", "calls", "guards", "fast")

    def __init__(self, plan, shape, outs, work, shp, calls, guards):
        self.plan, self.shape, self.outs, self.work = plan, shape, outs, work
        self.shp, self.calls, self.guards = shp, calls, guards
        self.fast = None


def guards(log: list, inputs: list, env: dict) -> list:
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


def guard_key(guards: list, env: dict):
    """A hashable summary of what ``guards`` test, read from ``env`` now: the arrays'
    names and shapes and the values of the one-element arrays read (loop counters), or
    None if an array is missing.  Plans with equal keys may still differ in the other
    elements they read: a caller checks ``guards_hold``."""
    key = []
    for name, _, reads in guards:
        v = env.get(name)
        if v is None:
            return None
        key.append((name, v.shape))
        if reads and not v.shape:
            key.append(tuple([b[0] for b in v.leaves]))
    return tuple(key)


def guards_hold(guards: list, env: dict) -> bool:
    for name, shape, reads in guards:
        v = env.get(name)
        if v is None or v.shape != shape:
            return False
        for off, vals in reads:
            for b, x in zip(v.leaves, vals):
                if not b[off] == x:  # NaN never holds: the step is planned again
                    return False
    return True
