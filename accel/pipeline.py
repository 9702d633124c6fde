"""The compilation pipeline, written down in one place.

    trace -> typecheck -> [differentiate] -> simplify -> fuse -> backend

``A.run``/``A.compile`` go through ``Compiled``: it traces once per (dtype,
rank) signature, runs the optimisation passes listed in ``PASSES`` and hands
the result to a backend.  Each backend module provides
``prepare(program, check_bounds) -> runner`` where ``runner(args)`` returns
NumPy values; ``stats`` of the prepared runner report what it runs.  A backend that can
run a program on a tier needing no compilation while its kernels compile (``cpu``, see
``backends/cpu/tiered.py``) says so with ``TIERED = True``; it then takes ``tiered``
(``None``: ``$ACCEL_TIERED``) and its runners have ``wait(timeout)``.  A backend with
``PROGRAM_CACHE = True`` (``cpu``) has the optimised and fused programs kept in the
program cache (``progcache``, ``optimise_cached``): a program traced before skips
simplification and fusion, in any process.
"""

from __future__ import annotations

import importlib
import time

import numpy as np

from .ast import nodes as N
from .ast.pretty import show_program
from .ast.types import ATupleT, ArrayT
from .errors import BackendError, ProgramTypeError, ShapeError
from .frontend import arg_type, located, trace_program

#: Backend name -> module.  A module with ``prepare_kernels`` consumes the fused kernel
#: program; one with only ``prepare`` consumes the AST (the reference interpreter).
BACKENDS = {"interpreter": "accel.backends.interpreter", "fused": "accel.backends.fused",
            "cpu": "accel.backends.cpu", "cuda": "accel.backends.cuda"}

def _simplify(prog):
    from .simplify.driver import simplify
    return simplify(prog)


#: Optimisation passes run on every traced program, in order (name, function).  Fusion
#: runs after them, inside the kernel backends' ``prepare``.
PASSES: list = [("simplify", _simplify)]


def optimise(prog: N.Program, timings: dict | None = None) -> N.Program:
    """Run ``PASSES`` over ``prog``, type-checking after each one."""
    from .ast.typecheck import typecheck
    for name, fn in PASSES:
        t0 = time.perf_counter()
        prog = fn(prog)
        typecheck(prog)
        if timings is not None:
            timings[name] = time.perf_counter() - t0
    return prog


def prepare(prog: N.Program, backend: str, check_bounds: bool, tiered: bool | None = None,
            kp=None):
    """A runner for ``prog`` on ``backend`` (fusing first for kernel backends, unless the
    fused kernel program ``kp`` is given); ``tiered`` is passed to backends that have
    tiers (``TIERED``) and ignored by the others."""
    module = get_backend(backend)
    if hasattr(module, "prepare_kernels"):
        if kp is None:
            from .fusion.fuse import fuse
            kp = fuse(prog)
        if getattr(module, "TIERED", False):
            return module.prepare_kernels(kp, check_bounds, tiered=tiered)
        return module.prepare_kernels(kp, check_bounds)
    return module.prepare(prog, check_bounds)


def optimise_cached(traced: N.Program, backend: str):
    """``(optimised program, fused kernel program or None)`` for ``traced`` on
    ``backend``: from the program cache (``progcache``) for backends that use it
    (``PROGRAM_CACHE = True``), else made now (and stored there)."""
    from . import progcache
    module = get_backend(backend)
    kernels = hasattr(module, "prepare_kernels")
    text = None
    if kernels and getattr(module, "PROGRAM_CACHE", False) and progcache.enabled():
        from .fusion.kernels import KernelProgram
        text = progcache.key("pipeline", traced, backend)
        hit = progcache.load(text)
        if (isinstance(hit, tuple) and len(hit) == 2 and isinstance(hit[0], N.Program)
                and isinstance(hit[1], KernelProgram)
                and [p.type for p in hit[0].params] == [p.type for p in traced.params]
                and hit[0].type == traced.type):
            return hit
    prog = optimise(traced)
    kp = None
    if kernels:
        from .fusion.fuse import fuse
        kp = fuse(prog)
    if text is not None:
        progcache.store(text, (prog, kp))
    return prog, kp


def get_backend(name: str):
    """The backend module called ``name`` (raises BackendError if unavailable)."""
    if name not in BACKENDS:
        known = ", ".join(sorted(BACKENDS))
        raise BackendError(f"backend {name!r} is not available (available: {known})")
    return importlib.import_module(BACKENDS[name])


def convert_args(args, op: str = "run") -> list:
    """The arguments as contiguous NumPy arrays (no copy when they already are).

    Backends never write to their inputs and never return them, so the caller's arrays
    are neither mutated nor aliased by results.
    """
    out = []
    for i, a in enumerate(args):
        if isinstance(a, (list, tuple)) and not isinstance(a, np.ndarray):
            raise ProgramTypeError(f"{op}: argument {i} is a {type(a).__name__}; pass NumPy "
                                   "arrays")
        out.append(np.asarray(a, order="C"))  # not ascontiguousarray: it makes 0-d arrays 1-d
    return out


class Compiled:
    """A program compiled once per (dtype, rank) signature (Accelerate's ``runN``)."""

    def __init__(self, fn, backend: str = "cpu", check_bounds: bool = False,
                 tiered: bool | None = None):
        self.fn = fn
        self.backend = backend
        self.check_bounds = check_bounds
        self.tiered = tiered
        self._cache: dict = {}
        self._by_dtypes: dict = {}  # ((dtype, ndim) per argument) -> an entry of _cache
        get_backend(backend)
        self.__name__ = getattr(fn, "__name__", "program")
        self.__doc__ = getattr(fn, "__doc__", None)

    def _entry(self, args):
        key = tuple((a.dtype, a.ndim) for a in args)  # cheaper to hash than the types
        entry = self._by_dtypes.get(key)
        if entry is not None:
            return entry
        sig = tuple(arg_type(a, i) for i, a in enumerate(args))
        entry = self._cache.get(sig)
        if entry is None:
            prog, kp = optimise_cached(trace_program(self.fn, sig), self.backend)
            runner = prepare(prog, self.backend, self.check_bounds, self.tiered, kp)
            entry = self._cache[sig] = (prog, runner)
        self._by_dtypes[key] = entry
        return entry

    @located
    def __call__(self, *args):
        from .frontend import call_program, current_context
        if current_context() is not None:  # called on Acc values inside another program
            sig = tuple(a.type for a in args)
            return call_program(trace_program(self.fn, sig), list(args))
        args = convert_args(args)
        prog, runner = self._entry(args)
        return runner(args)

    @located
    def program(self, *args) -> str:
        """The optimised program for these arguments' signature, as text."""
        prog, runner = self._entry(convert_args(args))
        text = show_program(prog)
        if hasattr(runner, "show"):
            text += "\n\n" + runner.show()
        return text

    def release_buffers(self) -> None:
        """Let the compiled runners forget the buffers they keep for reuse between calls
        (the cpu backend keeps up to 1 GiB of intermediates and 1 GiB of dropped results
        per signature)."""
        for _, runner in self._cache.values():
            release = getattr(runner, "release_buffers", None)
            if release is not None:
                release()

    @located
    def wait(self, *args, timeout: float | None = None) -> bool:
        """Wait until the compiled kernels run the calls (tiered execution, see the
        README): for the signature of ``args`` (starting its compilation if no call has
        yet), or with no arguments for every signature called so far.  True when they
        do, False if ``timeout`` seconds passed first; raises ``BackendError`` if the
        compilation failed.  Immediate on untiered runners."""
        if args:
            args = convert_args(args)
            wait = getattr(self._entry(args)[1], "wait", None)
            return True if wait is None else wait(timeout, args)
        deadline = None if timeout is None else time.monotonic() + timeout
        for _, runner in list(self._cache.values()):
            wait = getattr(runner, "wait", None)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if wait is not None and not wait(left):
                return False
        return True

    @located
    def stats(self, *args) -> dict:
        """Facts about the compiled program, at least ``{"kernels": n}``."""
        prog, runner = self._entry(convert_args(args))
        return runner.stats() if hasattr(runner, "stats") else {"kernels": None}


@located
def compile(fn, backend: str = "cpu", check_bounds: bool = False,  # noqa: A001
            tiered: bool | None = None) -> Compiled:
    """Compile ``fn`` for ``backend``; the result compiles per signature and then runs.
    ``tiered`` (cpu backend; default ``$ACCEL_TIERED``, on unless it is ``0``): the first
    calls run on NumPy while the kernels compile in a background process."""
    return Compiled(fn, backend, check_bounds, tiered)


@located
def run(fn, *args, backend: str = "cpu", check_bounds: bool = False,
        tiered: bool | None = None):
    """Trace, compile and run ``fn`` on NumPy arguments; return NumPy results."""
    return compile(fn, backend, check_bounds, tiered)(*args)


@located
def show(fn, *example_args) -> str:
    """The traced program of ``fn`` for arguments like ``example_args``, as text."""
    sig = tuple(arg_type(a, i) for i, a in enumerate(convert_args(example_args, "show")))
    return show_program(trace_program(fn, sig))


def result_types(prog: N.Program):
    t = prog.type
    return t.items if isinstance(t, ATupleT) else (t,)


__all__ = ["Compiled", "compile", "run", "show", "ArrayT", "ShapeError"]
