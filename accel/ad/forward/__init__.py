"""Forward-mode AD (dual numbers) as a source transformation.

Owns ``driver`` (``ArrayForward``: the sweep over an array block, the rule table
``RULES`` keyed by node type, ``Acond``; ``jvp_program`` and the user-facing ``jvp``),
``arr`` (the array constructs' rules, functions ``rule(fwd, bind)``), ``exp`` (scalar
functions: ``ScalarForward``, ``SCALAR_RULES``, ``jvp_lam``) and ``terms`` (the term
builders they share).

May import ``accel.ast``, ``accel.errors``, ``accel.ad``'s flattening (``anf``,
``blocks``), primitive table (``rules``) and ``wrt``; the frontend and pipeline only
inside ``jvp`` (to trace and run).
"""
