"""Reverse-mode and forward-mode automatic differentiation of accel programs."""
