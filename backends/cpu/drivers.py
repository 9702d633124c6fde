"""Parallel launches: one generic ``prange`` driver per number of arguments, calling a
step's range function through its address.

A parallel phase splits its tasks into chunks, and a ``parallel=True`` function's
``prange`` runs the range function (``codegen``) on each chunk.  That driver used to be
generated next to every phase, calling the range function by name: numba then linked
the range function's LLVM module into the driver's and optimised it all again, so a
driver took 2-4 s to compile for a 2-3 s range function (the fold of 2x2 matrix
products of ``tests/test_cpu_backend.py``: 3.2 s, against 0.8 s for one calling a
trivial function).  Here the driver receives the range function's native entry point
as an integer (``address``) and calls it as a numba first-class function (numba's own
calling convention: arrays and errors as for any numba call), so nothing is linked:
the driver's source depends only on the number of arguments, numba compiles it once
per argument types and caches it on disk, and every phase of every program with those
types shares it (measured: 1.0 s for the first, then a disk-cache load).

The driver's module is generated (``driver_source``) and loaded as the kernels' are
(``accel.backends.numba.cache``: named by its content hash, never rewritten).
"""

from __future__ import annotations

import functools

from accel.backends.numba import cache

__all__ = ["PARALLEL", "address", "driver", "driver_module", "driver_source", "range_name",
           "range_signature"]

#: What a parallel call's name has between the step and the phase (``k3_par_o``): the
#: call runs range function ``k3_o`` through :func:`driver`.
PARALLEL = "_par_"


def range_name(name: str) -> str | None:
    """The range function a parallel call's ``name`` runs, or None for a direct call."""
    if PARALLEL not in name:
        return None
    step, phase = name.split(PARALLEL, 1)
    return f"{step}_{phase}"


def range_signature(sig: tuple) -> tuple:
    """The range function's argument types for a parallel call's ``(ntask, nch, *args)``
    types: ``(lo, hi, c, *args)``."""
    from numba import types
    return (types.int64,) * 3 + tuple(sig[2:])


def address(dispatcher, sig: tuple) -> int:
    """The native entry point of ``dispatcher``'s compiled specialisation for ``sig``."""
    cres = dispatcher.overloads[tuple(sig)]
    return cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)


def driver(dispatcher, sig: tuple):
    """A callable ``(ntask, nch, *args)`` running ``dispatcher`` (compiled for
    ``range_signature(sig)``) on ``nch`` chunks of ``ntask`` tasks in parallel; ``sig``
    are the call's argument types.  The driver is compiled or loaded now."""
    from numba import types
    par = driver_module(len(sig) - 2).par
    par.compile((types.int64,) + tuple(sig))
    return functools.partial(par, address(dispatcher, range_signature(sig)))


@functools.lru_cache(maxsize=None)
def driver_module(n: int):
    """The loaded driver module for range functions of ``n`` arguments after ``lo, hi, c``."""
    return cache.load(driver_source(n), kind="cpu")


def driver_source(n: int) -> str:
    """The driver module for range functions of ``n`` arguments after ``lo, hi, c``."""
    bs = ", ".join(f"b{i}" for i in range(n))
    return f'''"""accel: parallel driver for range functions of {n} arguments (generated)."""
import numba as nb
import numpy as np
from numba import prange
from numba import types as _nbt
from numba.core import cgutils as _cgutils
from numba.core.extending import intrinsic as _intrinsic


@_intrinsic
def _range_function(typingctx, addr, {bs}):
    """The first-class function at native address ``addr`` taking ``(lo, hi, c, {bs})``."""
    fty = _nbt.FunctionType(_nbt.none(_nbt.int64, _nbt.int64, _nbt.int64, {bs}))

    def codegen(context, builder, signature, args):
        f = _cgutils.create_struct_proxy(fty)(context, builder)
        vp = context.get_value_type(_nbt.voidptr)
        f.jit_addr = builder.inttoptr(args[0], vp)
        f.c_addr = _cgutils.get_null_value(vp)
        f.py_addr = _cgutils.get_null_value(vp)
        return f._getvalue()
    return fty(addr, {bs}), codegen


@nb.njit(parallel=True, error_model="numpy", cache=True, nogil=True)
def par(addr, ntask, nch, {bs}):
    fn = _range_function(addr, {bs})
    for c in prange(nch):
        ci = np.int64(c)
        fn(ci * ntask // nch, (ci + 1) * ntask // nch, ci, {bs})
'''
