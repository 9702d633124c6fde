"""ADBench GMM and BA objectives in accel, with I/O, runner and benchmarks.

It is an application written in accel: it imports ``accel``'s public API (and the cpu
backend's ``fpmode``, for the flush-to-zero mode ``bench`` reports); nothing in accel imports
it.  Installed as ``accel.adbench``.

* ``adbench.io``: readers (GMM incl. the 2.5M replicate-point files, compressed BA) and
  the ``_F_`` / ``_J_`` writers; malformed input raises ``adbench.io.InputFormatError``.
* ``adbench.gmm``: the GMM objective in accel, its ``A.gradientA`` program, and the NumPy
  objective and hand-written gradient.
* ``adbench.ba``: BA residuals and the CSR Jacobian via ``A.gradientE``, and NumPy.
* ``adbench.check``: comparison with the golden references (ADBench's metric).
* ``python -m accel.adbench {gmm,ba,bench}``: the command line (``adbench.__main__``,
  ``adbench.bench``).
"""

#: The backend the command line uses when ``--backend`` is not given.
DEFAULT_BACKEND = "cpu"
