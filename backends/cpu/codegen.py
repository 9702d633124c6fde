"""Code generation: a ``KernelProgram``'s loop steps as the source of a numba module.

This module is the driver: it walks the program's blocks and asks each step kind's
module (``STEPS``: ``generate``, ``fold``, ``scan``, ``permute``; each holds its kernel
emitter and its launch rule) for the step's functions, written by ``emitter.KernelGen``
over the scalar emitter the numba backends share (``accel.backends.numba.kernelgen``).

Every loop step (``KGenerate``, ``KFold``, ``KScan``, ``KPermute``) becomes a few
functions named ``k<i>_<phase>``:

* *range functions* ``k<i>_<phase>(lo, hi, c, *bufs, shp, err)``: serial
  ``@numba.njit(error_model="numpy", fastmath={"contract"}, cache=True)`` loops over the tasks
  ``[lo, hi)`` of one phase (elements, tiles, (row, chunk) pairs, source chunks ...);
* a parallel phase is a call ``k<i>_par_<phase>(ntask, nch, *bufs, shp, err)`` that
  runs the range function on ``nch`` chunks of the tasks through a generic
  ``parallel=True`` driver shared by every range function with the same argument
  types (``drivers``: it calls the function's address, so numba neither links nor
  re-optimises the range function into it); numba compiles a function when it is
  first called, so phases a run never uses cost nothing;
* serial helpers without a range (``k<i>_comb``: combining fold partials, ...).

Numba's parfor passes cost time superlinear in the size of a ``prange`` body, and a
driver that called its range function by name re-optimised it whole (2-4 s a phase),
so the bodies live in the serial range functions (compiled by the plain pipeline, and
called once per chunk, so nothing is lost at run time) and the drivers are generic.
The host calls a range function directly when a phase is too small to be worth a
parallel launch.

``bufs`` are, in order: the step's work buffers (outputs, then partials/carries/private
buffers), the leaf buffers of every array the step reads (struct of arrays: one flat,
C-contiguous 1-D buffer per scalar leaf of the element type); ``shp`` is an int64 array
of every size the step needs (loop counts, dimensions, a mode switch: the step's
``layout``) and ``err`` an int64 array where bounds checks record a failure.

Scalar expressions are scalarised: a value is a nested tuple of *atoms* (Python
expressions that are a variable name or a constant) mirroring its element type.
``Let`` binds names to atoms, ``Cond`` becomes ``if``/``else`` assigning result
variables (only the taken branch runs), ``While`` a ``while True`` loop over state
variables.  Results of type int32 and float32 (and conversions) are cast to their
accel type (numba promotes int32 arithmetic to int64); other operations already have
the right numba type, and every cast is a call numba must type, so none is emitted.

The generated text depends only on the structure of the program (variable names of
the AST never appear in it), so the same program traced twice, in two processes,
gives the same module and the same cache entries.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from accel.ast.traverse import recursion_headroom
from accel.backends.numba.kernelgen import StepTexts, loop_steps
from accel.fusion.kernels import KBlock, KFold, KGenerate, KPermute, KScan

from . import fold, fpmode, generate as generate_step, permute, scan, versions
from .emitter import HEADER, step_weight
from .plan import KernelPlan

#: Loop-step type -> its module: ``emit(step, check_bounds)`` writes the kernels (a
#: ``KernelGen`` and facts for the plan), ``launch(step, plan, ev)`` decides the phases.
STEPS = {KGenerate: generate_step, KFold: fold, KScan: scan, KPermute: permute}


@dataclass
class Module:
    source: str
    plans: dict = field(default_factory=dict)  # id(step) -> KernelPlan


def generate(body: KBlock, check_bounds: bool) -> Module:
    """The module source for every loop step in ``body`` (and nested blocks)."""
    with recursion_headroom(_RECURSION_LIMIT):
        return _generate(body, check_bounds)


_RECURSION_LIMIT = 20000


def _rename(text: str, name: str) -> str:
    return text.replace("KERNEL_", name + "_")


def _generate(body: KBlock, check_bounds: bool) -> Module:
    flush = fpmode.flush_subnormals()
    texts = StepTexts()  # identical steps share their functions
    mod = Module("")
    for s in loop_steps(body, STEPS, "cpu"):
        tests = versions.size_tests(s)
        if not tests:
            mod.plans[id(s)] = _plan(s, texts, check_bounds, flush)
            continue
        # one kernel set per outcome of the size tests; the host picks (``versions``)
        choices = tuple((values, _plan(versions.decided(s, tests, values), texts,
                                       check_bounds, flush))
                        for values in versions.outcomes(tests))
        mod.plans[id(s)] = replace(choices[0][1], tests=tuple(tests), choices=choices)
    mod.source = texts.module(HEADER + (fpmode.SOURCE if flush else ""))
    return mod


def _plan(s, texts: StepTexts, check_bounds: bool, flush: bool) -> KernelPlan:
    """Emit the kernels of loop step ``s`` into ``texts``; their plan."""
    g, extra = STEPS[type(s)].emit(s, check_bounds)
    name = texts.add("\n\n".join(g.texts("KERNEL", flush)), _rename)
    return KernelPlan(s, name, list(g.array_order), list(g.layout), list(g.sites),
                      extra.get("fast"), extra.get("chunked", False), list(g.parallel),
                      step_weight(s), extra.get("outer", False), extra.get("blocked", False),
                      extra.get("contract"))
