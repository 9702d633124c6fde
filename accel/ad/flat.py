"""What the two flattenings share: trees of variables and the way back to let chains.

AD differentiates flat blocks at two levels: scalar functions (``blocks``: ``Let``,
``Tuple``, ``Prj``, ``Var``, ``Cond``) and array programs (``anf``: ``Alet``,
``ATuple``, ``APrj``, ``Avar``, ``Acond``).  Both split tuples into leaves, keep a
result *tree* (a Python tuple of trees, or a leaf), and convert a block back into a
let chain, binding a tuple-valued node to a temporary whose projections name the
leaves.  ``Level`` writes that once; ``EXP`` and ``ARR`` are the two instances.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ast import nodes as N
from ..ast.types import ATupleT, TupleT


def leaves(tree) -> list:
    """The leaves of a tree, left to right."""
    if isinstance(tree, tuple):
        return [x for t in tree for x in leaves(t)]
    return [tree]


@dataclass(frozen=True)
class Level:
    """The node kinds of one level: tuple type, tuple/projection/let/variable/cond nodes."""

    tuple_type: type
    tuple_node: type
    prj_node: type
    let_node: type
    var_node: type
    cond_node: type

    def tree_term(self, tree):
        """The term of a tree of atoms (a tuple node for a Python tuple)."""
        if isinstance(tree, tuple):
            return self.tuple_node(tuple(self.tree_term(t) for t in tree))
        return tree

    def tree_like(self, t, it):
        """A tree shaped like the type ``t``, its leaves taken from the iterator ``it``."""
        if isinstance(t, self.tuple_type):
            return tuple(self.tree_like(i, it) for i in t.items)
        return next(it)

    def type_leaves(self, t) -> list:
        if isinstance(t, self.tuple_type):
            return [x for i in t.items for x in self.type_leaves(i)]
        return [t]

    def paths(self, t, prefix=()) -> list:
        """The projection path of each leaf of the type ``t``."""
        if isinstance(t, self.tuple_type):
            return [p for i, s in enumerate(t.items) for p in self.paths(s, prefix + (i,))]
        return [prefix]

    def to_term(self, block, result=None):
        """A let chain computing ``block``, then ``result`` (default: the block's)."""
        body = self.tree_term(block.result if result is None else result)
        for b in reversed(block.binds):
            body = self.wrap(b, body)
        return body

    def bind_term(self, b):
        """The node a binding binds (a conditional's branches back as let chains)."""
        op = b.op
        if not isinstance(op, N.Node):  # a conditional whose branches are blocks
            return self.cond_node(op.c, self.to_term(op.t), self.to_term(op.e))
        return op

    def wrap(self, b, body):
        """``let outs = node in body``, through a temporary when the node is a tuple."""
        term = self.bind_term(b)
        if len(b.outs) == 1 and not isinstance(term.type, self.tuple_type):
            return self.let_node(b.outs[0], term, body)
        tmp = self.var_node(N.fresh("t"), term.type)
        for v, path in reversed(list(zip(b.outs, self.paths(term.type)))):
            p = tmp
            for i in path:
                p = self.prj_node(i, p)
            body = self.let_node(v, p, body)
        return self.let_node(tmp, term, body)


EXP = Level(TupleT, N.Tuple, N.Prj, N.Let, N.Var, N.Cond)
ARR = Level(ATupleT, N.ATuple, N.APrj, N.Alet, N.Avar, N.Acond)
