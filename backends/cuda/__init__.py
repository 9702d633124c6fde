"""The CUDA backend: a ``KernelProgram`` compiled to numba-cuda kernels.

``prepare_kernels(kp, check_bounds)`` generates the source of a module with one
``@cuda.jit(cache=True)`` kernel per loop step (``codegen``), loads it through the
content-addressed module cache shared with the CPU backend (``backends.numba.cache``,
directory ``.../cuda``), and returns a ``Runner`` whose ``runner(args)`` copies the
inputs to the device, launches the kernels with host orchestration in Python
(``runtime``) and copies the results back as NumPy values, like
``backends.interpreter.evaluate``.  ``runner.stats()`` reports ``kernels`` (parallel
loops), ``launches`` and the launch configuration.

It needs numba-cuda (``pip install "numba-cuda[cu13]"``, or ``pip install -e
".[cuda]"``) and either a CUDA GPU or the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` set
before ``numba.cuda`` is first imported); otherwise ``prepare_kernels`` raises
``BackendError``.  ``python -m accel.backends.cuda.ptxcheck`` compiles every kernel of a
corpus to PTX without a GPU.

Modules: ``codegen`` (the CUDA dialect of the shared scalar emitter and one kernel per
step kind), ``runtime`` (the host walk on the device), ``intrinsics`` (libdevice or
NumPy under the simulator), ``ptxcheck``.  May import ``accel`` (ast, errors, fusion,
types) and ``backends.numba``; never ``backends.cpu``.
"""

from __future__ import annotations

from accel.errors import BackendError

__all__ = ["available", "cuda_module", "prepare_kernels"]


def cuda_module():
    """``numba.cuda`` from numba-cuda, or a ``BackendError`` saying why not."""
    try:
        import numba_cuda  # noqa: F401
        from numba import cuda
    except ImportError as e:
        raise BackendError("cuda backend: numba-cuda is not installed (pip install "
                           "\"numba-cuda[cu13]\", or pip install -e \".[cuda]\"): "
                           f"{e}") from e
    if getattr(cuda, "implementation", None) != "NVIDIA":
        raise BackendError("cuda backend: numba.cuda is numba's deprecated built-in target, "
                           "not numba-cuda (pip install \"numba-cuda[cu13]\")")
    return cuda


def available() -> tuple:
    """``(True, "gpu" | "simulator")`` or ``(False, reason)``."""
    try:
        cuda = cuda_module()
        from .intrinsics import SIMULATOR
    except BackendError as e:
        return False, str(e)
    if SIMULATOR:
        return True, "simulator"
    try:
        ok = cuda.is_available()
    except Exception:  # noqa: BLE001 - a broken driver is "no GPU"
        ok = False
    if not ok:
        return False, ("cuda backend: no CUDA GPU (or driver) is available; set "
                       "NUMBA_ENABLE_CUDASIM=1 before numba.cuda is imported to run on the "
                       "CUDA simulator")
    return True, "gpu"


def prepare_kernels(kp, check_bounds: bool = False, block_size: int | None = None,
                    max_blocks: int | None = None):
    """Compile the kernel program ``kp`` for CUDA (kernels compile on first launch).

    ``block_size`` (threads per block; the fold kernels reduce over it) and
    ``max_blocks`` (the grid-stride loops' grid) default to 128 and 1024 on a GPU, 32
    and 4 under the simulator, or ``$ACCEL_CUDA_BLOCK_SIZE``/``$ACCEL_CUDA_MAX_BLOCKS``.
    """
    ok, why = available()
    if not ok:
        raise BackendError(why)
    from .runtime import Runner
    return Runner(kp, check_bounds, block_size, max_blocks)
