"""ADBench GMM and BA objectives in accel, with I/O, runner and benchmarks.

* ``adbench.io``: readers (GMM incl. the 2.5M replicate-point files, compressed BA) and
  the ``_F_`` / ``_J_`` writers; malformed input raises ``adbench.io.InputFormatError``.
* ``adbench.gmm``: the GMM objective in accel, its ``A.gradientA`` program, and the NumPy
  objective and hand-written gradient.
* ``adbench.ba``: BA residuals and the CSR Jacobian via ``A.gradientE``, and NumPy.
* ``adbench.check``: comparison with the golden references (ADBench's metric).
* ``python -m accel.adbench {gmm,ba,bench}``: the command line (``adbench.__main__``,
  ``adbench.bench``).
"""
