"""The two-level AST of accel programs and what every later layer shares about it.

Owns: the types (``types``), the nodes (``nodes``), the primitive registry (``prims``),
type checking (``typecheck``), printing (``pretty``), the one generic traversal
(``traverse``), alpha-equivalence (``alpha``), nested-tuple leaves (``trees``), the one
cost model (``cost``) and the one recogniser of ``\\x y -> op x y`` combiners
(``patterns``).

May import: ``accel.errors`` and NumPy only; every other layer (frontend, AD, simplify,
fusion, backends) imports from here, never the other way round.
"""
