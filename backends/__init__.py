"""Backends that run accel programs: interpreter, cpu (numba), cuda (numba-cuda)."""
