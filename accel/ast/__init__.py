"""The two-level AST of accel programs: types, nodes, primitives, traversals."""
