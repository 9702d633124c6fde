"""Benchmarks: speed measured beside JAX/PyTorch in the same run, never asserted in tests.

Owns the performance corpus (``corpus/``, ``python -m benchmarks.corpus``), the loop
benchmark (``loops.py``), the general-permute benchmark (``permute_general.py``), kernel
and AD-cost benchmarks (``cpu_kernels.py``, ``ad_complexity.py``, ``ad_modes.py``) and
their timing helpers (``timing.py``).  It imports ``accel``'s public API (and JAX or
PyTorch when installed); nothing in accel imports it.
"""
