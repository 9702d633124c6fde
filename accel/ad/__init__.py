"""Reverse-mode and forward-mode automatic differentiation of accel programs.

Owns: ``api`` (gradientA, value_and_gradientA, gradientE, vjp), ``check``
(check_grad), ``wrt`` (which parameters are differentiated), ``rules`` (the
derivative of every primitive), the flat forms AD works on (``flat``: trees and let
chains shared by both levels; ``blocks``: scalar functions; ``anf``: array programs),
and the two modes as packages, one module per construct: ``reverse`` and ``forward``.

May import ``accel.ast``, ``accel.errors`` and (in ``api``, ``check`` and
``forward.driver.jvp`` only, to trace and run) ``accel.frontend`` and
``accel.pipeline``; never fusion, simplify or backends.
"""
