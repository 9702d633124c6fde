"""The layer the two numba backends (``cpu``, ``cuda``) share.

Owns: ``kernelgen`` (the one scalar-expression emitter, with dialect hooks, and module
assembly), ``host`` (arrays at the program's boundary, sizes, ``KAcond``/``KAwhile``
control flow), ``hosteval`` (host-side evaluation of shapes and conditions), ``cache``
(content-addressed generated modules on disk and in memory), ``prims`` and
``literals`` (the emitter's primitives and constants) and ``trees`` (scalarised tuples).

May import ``accel`` (ast, errors, fusion.kernels, types), numba and NumPy; never
``backends.cpu`` or ``backends.cuda`` (they import this).
"""
