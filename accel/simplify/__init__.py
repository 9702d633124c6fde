"""The simplifier: semantics-preserving clean-up of programs, run before and after AD.

The pipeline runs ``driver.simplify`` on every program before fusion; fusion runs
``rounds.tidy`` on the index functions and shapes it builds by substitution.  One module
per pass, each stating its invariant; the passes are also public functions from
``Program`` to ``Program``:

- ``rename``: unique binder names (every pass relies on them), ``uniquify``;
- ``uses``: use counts and depths (what inlining and splitting decide from);
- ``cse``: common subexpression elimination and A-normal form (``cse``, ``anf``);
- ``inline``: trivial and single-use lets (``inline_lets``);
- ``dce``: dead lets (``eliminate_dead_code``);
- ``local`` with ``rules`` (expressions) and ``array_rules`` (arrays), reading the shape
  facts of ``shapes``: local rewriting (``fold_constants``, ``eliminate_zeros``);
- ``tuples``: let-bound tuples split per component (``project_tuples``);
- ``split``: AD's arrays of pairs split per component (``split_element_tuples``);
- ``rounds``: one round of all passes, and ``tidy``; ``driver``: rounds to a fixpoint.

Shared invariants: every pass maps a well-typed program to a well-typed program with
the same results (up to the errors dead code would have raised); binder names stay
globally unique; no pass duplicates work or moves it into a more frequently executed
place.  Let chains are walked iteratively and the passes run with a raised recursion
limit, so programs with thousands of bindings are fine.

May import: ``accel.ast`` and ``accel.errors`` only (nothing of AD, fusion or backends).
"""
