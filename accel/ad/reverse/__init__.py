"""Reverse-mode AD (the thesis's chapter 3, plus loops, general folds/scans, permute).

Owns the reverse rules, one module per construct: ``driver`` (the sweep over an array
block, the rule table keyed by node type, ``Acond``, ``reverse_program``), ``exp``
(scalar functions and ``while_``), ``map``, ``reduce`` (folds), ``scan``,
``recurrences`` (folds and scans with any operator), ``scatter`` (permute), ``shape``
(backpermute, reshape, replicate, slice) and ``loop`` (awhile); ``terms`` holds the
term builders they share.  A rule is a function ``rule(rev, bind, y, dy)`` that gets
the driver ``rev`` passed in, so no rule module imports the driver.

May import ``accel.ast``, ``accel.errors`` and ``accel.ad``'s flattening (``anf``,
``blocks``) and primitive table (``rules``); nothing from fusion, simplify or backends.
"""
