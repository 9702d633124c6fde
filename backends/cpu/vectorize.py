"""How accel's generated kernels are compiled (and nothing else): LLVM's SLP vectorizer
on, and array arguments that do not alias.

SLP.  Numba turns LLVM's superword-level-parallelism (SLP) vectorizer off by default
(numba #8705/#8852: miscompilations in the LLVM 14 of 2023; clang runs it at -O2), and
its loop vectorizer cannot help the loops accel generates for folds: a block of rows is
folded by independent scalar accumulator chains (one per row, so every row still
combines its elements in order), which only SLP packs into vector registers.  With it,
a block of 8 adjacent rows whose reads are consecutive in memory becomes one AVX
multiply and add per element instead of eight (measured: the GMM's D x D products
2-4x faster on 2 cores).

No aliasing.  A kernel writes only buffers allocated for its outputs (and scratch), and
reads inputs that are never the buffers it writes (an in-place permute does not read
the array it updates: ``fusion.inplace``), so LLVM may assume that no two array
arguments overlap (``noalias``), as numba already assumes for the body of every
``prange``.  Without it LLVM must assume an output store can change any input, and
leaves loops with calls or many arrays scalar: an element-wise ``tanh`` kernel over
10^4 doubles measured 75 us called serially against 12-15 us with ``noalias`` (the
same loop inside a parallel driver: 13 us on one thread).

Numba reads ``config.SLP_VECTORIZE`` when it builds the pass pipeline of a compilation,
and ``noalias`` from the flags its dispatcher makes for one, so :func:`as_kernel`
wraps each generated dispatcher's ``compile`` (which numba also calls for implicit
compilations and when typing a call from a parallel driver) and flag maker, for that
compilation only, under numba's global compiler lock: other numba code in the process
compiles with the user's settings.  The generated source carries :data:`MARK`, so
kernels cached on disk with other settings are never loaded instead.
"""

from __future__ import annotations

#: A line of every generated module's header (part of its content hash).
MARK = "# compiled with LLVM's SLP vectorizer and noalias arguments (backends/cpu/vectorize.py)"


def _with_slp(compile_):
    # numba is imported here, not with the module: ``MARK`` is needed by code generation,
    # which runs before the first call on the NumPy tier, and that needs no numba.
    from numba.core import config
    from numba.core.compiler_lock import global_compiler_lock

    def compile(sig):
        with global_compiler_lock:
            old = config.SLP_VECTORIZE
            config.SLP_VECTORIZE = 1
            try:
                return compile_(sig)
            finally:
                config.SLP_VECTORIZE = old
    compile._accel_slp = True
    return compile


def _noalias(customize):
    def customize_flags(flags):
        flags = customize(flags)
        flags.noalias = True
        return flags
    return customize_flags


def as_kernel(dispatcher) -> None:
    """Make ``dispatcher`` compile as accel's kernels do: SLP vectorization and
    ``noalias`` array arguments (idempotent)."""
    if not getattr(dispatcher.compile, "_accel_slp", False):
        dispatcher.compile = _with_slp(dispatcher.compile)
        compiler = dispatcher._compiler
        compiler._customize_flags = _noalias(compiler._customize_flags)


def compile_as_kernels(module) -> None:
    """Compile every numba function of the generated ``module`` as a kernel
    (``as_kernel``)."""
    from numba.core.registry import CPUDispatcher
    for d in vars(module).values():
        if isinstance(d, CPUDispatcher):
            as_kernel(d)
