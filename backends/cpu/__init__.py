"""The numba multicore CPU backend: a ``KernelProgram`` compiled to numba kernels.

``prepare_kernels(kp, check_bounds)`` generates the source of a module of numba
functions for the loop steps (``codegen``), loads it through a content-addressed disk
and memory cache (``backends.numba.cache``), and returns a ``Runner``: ``runner(args)``
runs the program with host orchestration in Python (``runtime``: shapes and conditions
via ``backends.numba.hosteval``, allocation, ``KAcond``/``KAwhile``, ``KUse`` constants
passed at run time) and returns NumPy values like ``backends.interpreter.evaluate``.

Modules: ``codegen`` (the driver: a step kind's module per loop step), one module per
loop-step kind holding its kernel emitter and its launch rule (``generate``, ``fold``,
``scan``, ``permute``), ``emitter`` (the CPU dialect of the shared scalar emitter, the
row helpers), ``plan`` (the plan types and the serial/parallel choice), ``runtime``
(the host walk, buffer pool), ``straight`` (straight-line replays), ``loopreplay``
(loop iterations replayed from launch lists), ``transpose``
(transposed copies of matrices read across a fold's rows), ``mathlib``, ``fpmode`` and
``vectorize`` (leaf modules); ``tiered`` (the first calls on the fused NumPy evaluator,
``backends.fused``, while ``worker``, a child process, compiles the kernels into the
disk cache; ``prepare_kernels(kp, check_bounds, tiered)`` returns a ``TieredRunner``
unless tiers are off), ``tiercost`` (the NumPy tier's estimated time, to skip it where it
would be slower than compiling) and ``compilelog`` (one log line for a long compilation).
Only ``runtime`` (and what it imports) imports numba, so that a first call on the NumPy
tier needs none; ``Runner`` is imported on first use.  May
import ``accel`` (ast, errors, fusion, types), ``backends.numba`` and
``backends.fused``; never ``backends.cuda``.
``runner.stats()`` reports ``kernels`` (parallel loops, ``count_loops``),
``compile_seconds`` (numba compilation or disk-cache loading done by this runner),
``numba_cache_hits``, ``launches`` (which phases ran serially / in parallel),
``planned_steps`` (loop steps whose host plan was made rather than replayed) and more;
``runner.show()`` and ``runner.source()`` give the kernel program and the module.

Design in brief (details in the modules' docstrings):

* Each loop step becomes serial ``njit`` *range functions* (the loop body over a range
  of tasks); a parallel phase calls one through a generic ``parallel=True`` driver
  (``drivers``) whose ``prange`` over chunks calls the function's address: numba's
  parfor passes are superlinear in the size of a ``prange`` body and a driver calling a
  function by name re-optimised it, so this cuts compile times several-fold at no
  run-time cost.  Phases with little work call
  the range function directly (no launch; a driver is compiled only when needed).
* Arrays are flat C-contiguous buffers, one per scalar leaf (struct of arrays), plus
  an int64 array of sizes.  Tuples are scalarised; ``Cond`` evaluates only the taken
  branch; ``While`` is a loop over scalarised state.  ``error_model="numpy"``,
  ``fastmath={"contract"}`` (a multiply and an add may fuse into one FMA: one rounding
  instead of two; no other fast-math licence); primitives follow ``accel.ast.prims``
  exactly (floored integer ``//``/``%`` with 0 for a zero divisor, NumPy's float floor
  division and remainder, integer powers with negative exponents, truncating
  conversions with nan -> 0; ``exp`` and ``log`` within 1 ulp of NumPy's and ``tanh``
  within 2.3 ulp of the true value, by vectorizable polynomials, ``mathlib``).  LLVM's
  SLP vectorizer is on for these kernels only (``vectorize``).
* Folds that are matrix products (``accel.fusion.contraction``) call BLAS on chunks of
  rows (``contract``).
* Folds: parallel over rows, in blocks of up to 16 adjacent rows (independent
  accumulators, SLP-vectorized; sums of outer products also 2 rows of the dimension
  before the last, sharing their loads);
  folds whose source is laid out along the rows (sums over points) interchange their
  loops; a matrix read across a fold's rows is first copied transposed (``transpose``);
  few long rows are cut into 64 chunks (a fixed number, so results do not depend
  on the thread count) folded in parallel and combined in chunk order; only
  associativity is assumed.
  Scans: parallel over rows; a single long row is scanned in three phases (chunk
  totals, carries, rescans).  Permute: defaults in parallel, then a serial scatter,
  or for ``+``/``*``/``max``/``min`` on numbers and a large source, 2 to 16 private
  buffers (chunks of the source in parallel; as many as the shapes make worth it)
  merged in order.  A projection (``\\new old -> new``, scatter) runs in parallel and
  deterministically: each chunk of sources records per target its last writing source
  index, then each target takes the winner of the last chunk that wrote it (the last
  source in row-major order) and computes that one value.
* Subnormals are exact unless ``ACCEL_FLUSH_SUBNORMALS=1`` at compile time, which has
  every kernel function set and restore FTZ/DAZ (``fpmode``).
* Programs whose plan depends only on their arguments' shapes replay it as a list of
  kernel calls (``straight``), without re-evaluating host expressions; so do the
  iterations of a loop whose body is only kernel launches, keyed by the state's shapes
  and loop counters (``loopreplay``).
* ``check_bounds=True``: every ``Index`` and kept permute target is checked; a failure
  sets a flag (with the index) and the host raises ``OutOfBoundsError`` after the loop.
  Without it no checks are generated (an out-of-bounds access is undefined behaviour),
  but for the fixed row of a matrix product run by BLAS (``contract``), checked always.
  Host-side reads (in shapes and conditions) are always checked.
* Caching: module files are named by the sha256 of their source in ``$ACCEL_CACHE_DIR``
  (default ``$XDG_CACHE_HOME/accel/<version>-numba<version>/cpu``), written once and
  never rewritten; numba's ``cache=True`` files live next to them.  Corrupted module or
  numba cache files are rebuilt.  A directory another user could write to is refused
  (``cachedir``: a warning, and no disk cache for the process).

Limitations: the chunked scan exists only for single-row scans (rank-1 sources); a
permute with another combination (or tuple elements), other than a projection, scatters
serially; kernels run in
the threading layer numba picks (omp by default here: not fork-safe, see
NUMBA_NOTES.md section 4), with ``OMP_WAIT_POLICY=PASSIVE`` unless set; a cold
kernel costs about 0.1-1 s of numba compilation, plus about 0.5 s for a step's
parallel driver the first time it is needed.
"""

from __future__ import annotations

import os

# OpenMP threads that spin at barriers (libgomp's default) make every kernel launch
# wait for a time slice when the machine has other work: measured 10-30x slower
# kernels on a loaded 2-core machine.  Threads that sleep cost a wake-up per launch
# instead (the README gives both measurements).  Set before numba loads its OpenMP
# layer (on the first parallel launch); a value the user chose is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Matrix products run as BLAS calls inside the kernels' own parallel chunks (``contract``),
# one BLAS thread each: OpenBLAS's own threads spin too (a 256^3 product took 26 ms with
# two of them on the loaded machine, 0.66 ms with one).  Read when SciPy's OpenBLAS
# loads (numba's first BLAS call), so it does not change a NumPy already imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from .tiered import TieredRunner, tiering_enabled  # noqa: E402

__all__ = ["PROGRAM_CACHE", "Runner", "TIERED", "TieredRunner", "prepare_kernels"]

#: This backend has tiers (``accel.pipeline.prepare`` passes ``tiered``).
TIERED = True
#: The pipeline keeps this backend's fused programs in the program cache
#: (``accel.progcache``).
PROGRAM_CACHE = True


def __getattr__(name):
    # ``runtime`` imports numba (about 0.4 s), which a first call on the NumPy tier does
    # not need: it is imported when something asks for compiled kernels.
    if name == "Runner":
        from .runtime import Runner
        return Runner
    raise AttributeError(name)


def prepare_kernels(kp, check_bounds: bool = False, tiered: bool | None = None):
    """Compile the kernel program ``kp`` for the CPU (kernels compile on first use); with
    tiers (``tiered``, default ``$ACCEL_TIERED``) the first calls run on NumPy while the
    kernels compile in a worker process (``tiered``)."""
    if tiering_enabled(tiered):
        return TieredRunner(kp, check_bounds)
    from .runtime import Runner
    return Runner(kp, check_bounds)
