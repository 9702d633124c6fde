"""The ``fused`` backend: the kernel program evaluated with NumPy (no compiler).

It exists so that fusion is tested end to end without numba: every program
runs through simplify + fuse and the plain kernel-program evaluator.
"""

from __future__ import annotations

from accel.fusion.kernels import KernelProgram, count_loops, show_kernel_program
from accel.fusion.numpy_eval import evaluate


class Runner:
    def __init__(self, kp: KernelProgram):
        self.kp = kp

    def __call__(self, args):
        return evaluate(self.kp, args)

    def stats(self) -> dict:
        return {"kernels": count_loops(self.kp.body)}

    def show(self) -> str:
        return show_kernel_program(self.kp)


def prepare_kernels(kp: KernelProgram, check_bounds: bool = False) -> Runner:
    """The backend entry point (bounds are always checked by the evaluator)."""
    return Runner(kp)
