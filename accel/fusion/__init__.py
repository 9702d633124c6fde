"""Fusion: from a simplified AST program to the kernel program the backends run.

Owns: the kernel program and the one walk into its nested blocks (``kernels``), delayed-
array fusion (``fuse``), the rewrites of reductions after fusion (``reductions``:
interchanged sums, reused folds) and reads of materialised arrays (``materialised``).

May import: ``accel.ast``, ``accel.simplify`` (``tidy`` for the terms fusion builds) and
``accel.ad.anf`` (the A-normal array blocks fusion walks; they belong in ``accel.ast``
once AD's restructuring moves them).  Never the backends or the frontend.
"""
