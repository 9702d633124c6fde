"""Backends that run accel programs: interpreter, fused (NumPy), cpu (numba), cuda
(numba-cuda).

A backend consumes what ``accel.pipeline`` hands it (an optimised program, or a fused
``KernelProgram`` for backends with ``prepare_kernels``) and may import ``accel``'s
ast, errors, fusion and types.  The layers:

* ``interpreter``, ``fused``: the reference semantics and the NumPy evaluator;
* ``numba/``: what the two numba backends share (the scalar emitter and module
  assembly, the host side, host expression evaluation, the module cache);
* ``cpu/`` and ``cuda/``: one backend each, importing ``numba/`` and never each other.
"""
