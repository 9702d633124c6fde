"""The numba multicore CPU backend: a ``KernelProgram`` compiled to numba kernels.

``prepare_kernels(kp, check_bounds)`` generates the source of a module with one
``@numba.njit(parallel=True, error_model="numpy", cache=True)`` function per loop
step (``codegen``), loads it through a content-addressed disk and memory cache
(``cache``), and returns a ``Runner`` whose ``runner(args)`` runs the program with
host orchestration in Python (``runtime``) and returns NumPy values like
``backends.interpreter.evaluate``; ``runner.stats()`` reports ``kernels`` (parallel
loops) and ``compile_seconds``.
"""

from __future__ import annotations

from .runtime import Runner

__all__ = ["Runner", "prepare_kernels"]


def prepare_kernels(kp, check_bounds: bool = False) -> Runner:
    """Compile the kernel program ``kp`` for the CPU (kernels compile on first use)."""
    return Runner(kp, check_bounds)
