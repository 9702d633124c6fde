"""GradBench's ``det`` eval: the determinant by expansion in minors, and its gradient.

The recursion of the eval's C++ (``det_of_minor``) expands the minor of rows ``k..l-1``
along its first row, once per ordered choice of columns for rows ``0..k-1``.  accel has
no recursion, so the same tree is evaluated level by level, bottom-up, as data-parallel
arrays (the non-recursive form the eval's README suggests, without expanding the ``l!``
products separately):

* a node at level ``k`` is an ordered choice of ``k`` columns, numbered so that choosing
  the ``j``-th still unused column (in increasing order) for row ``k`` gives child
  ``node * (l - k) + j``; ``mask_k[node]`` is the set of chosen columns as bits and
  ``col_k[node, j]`` the column the child chooses (integer ``generate``/``while_``
  programs, no derivative);
* ``V_k[node] = sum_j (-1)^j A[k, col_k[node, j]] V_{k+1}[node, j]`` (``V_{k+1}`` reshaped
  to ``(nodes, l - k)``), starting from the minors of the last ``min(l, 3)`` rows,
  expanded by minors directly; ``det = V_0[0]``.

The work is that of the recursion (about ``e l!`` multiply-adds); the gradient is
``A.gradientA`` of that program.  The level count depends on ``l``, so a program is
compiled per ``l`` (the protocol reports each one's compile timing).
"""

from __future__ import annotations

import math

import accel as A

from .evalfn import PROGRAMS, EvalFunction, InputError, field, floats, integer, scalar, tolist

#: Rows expanded directly at the bottom of the tree (their minors are at most 3 x 3).
BASE = 3


def _jth_free(mask, j):
    """``(c, 2**c)`` for the ``j``-th (from 0) column ``c`` whose bit is clear in ``mask``."""
    def free(c_p):
        return (mask // c_p) % 2 == 0

    def cond(s):
        _, cnt, p = s
        return ~(free(p) & (cnt == j))

    def body(s):
        c, cnt, p = s
        return c + 1, cnt + A.cond(free(p), 1, 0), p * 2

    c, _, p = A.while_(cond, body, (A.to_int(0), A.to_int(0), A.to_int(1)))
    return c, p


def _base_minor(a, row, cols):
    """Determinant of rows ``row..`` of ``a`` on the sorted columns ``cols``, by minors."""
    if len(cols) == 1:
        return a[row, cols[0]]
    total = None
    for j, c in enumerate(cols):
        term = a[row, c] * _base_minor(a, row + 1, cols[:j] + cols[j + 1:])
        total = term if total is None else (total + term if j % 2 == 0 else total - term)
    return total


def program(ell: int):
    """The determinant of an ``ell x ell`` matrix (given flat, row-major) as a program."""
    base = max(0, ell - BASE)
    sizes = [math.perm(ell, k) for k in range(ell + 1)]     # nodes at each level

    def det(flat):
        a = A.reshape((ell, ell), flat)
        masks = A.fill((1,), A.to_int(0))
        cols = []
        for k in range(base):                               # forward: the chosen columns
            r = ell - k
            m_k = masks

            def child(ix, m_k=m_k):
                c, p = _jth_free(m_k[ix[0]], ix[1])
                return c, m_k[ix[0]] + p

            both = A.generate((sizes[k], r), child)
            cols.append(A.map(lambda t: t[0], both))
            masks = A.reshape((sizes[k + 1],), A.map(lambda t: t[1], both))

        # the base minors' sorted columns, an integer array of their own, so that the
        # differentiated program reads ``a`` at precomputed indices (no loops to reverse)
        leaf_cols = A.generate((sizes[base], ell - base),
                               lambda ix: _jth_free(masks[ix[0]], ix[1])[0])

        def leaf(i):
            return _base_minor(a, base, [leaf_cols[i, j] for j in range(ell - base)])

        vals = A.generate((sizes[base],), leaf)
        for k in reversed(range(base)):                     # backward: expand row k
            r = ell - k
            col = cols[k]
            terms = A.zip_with(lambda x, y: x * y,
                               A.generate((sizes[k], r), lambda ix, k=k, col=col: A.cond(
                                   ix[1] % 2 == 0, 1.0, -1.0) * a[k, col[ix[0], ix[1]]]),
                               A.reshape((sizes[k], r), vals))
            vals = A.sum(terms)
        return A.reshape((), vals)

    det.__name__ = f"det{ell}"
    return det


def _decode(inp) -> tuple:
    flat = floats(field(inp, "A"), "A", 1)
    ell = integer(field(inp, "ell"), "ell", lo=1)
    if flat.shape != (ell * ell,):
        raise InputError(f"det: 'A' has {flat.size} entries, expected ell * ell = {ell * ell}")
    return flat, ell


def _primal(flat, ell):
    return PROGRAMS.get(("det", "primal", ell), lambda: program(ell))(flat)


def _gradient(flat, ell):
    return PROGRAMS.get(("det", "gradient", ell), lambda: A.gradientA(program(ell)))(flat)


FUNCTIONS = {
    "primal": EvalFunction(decode=_decode, run=_primal, encode=scalar),
    "gradient": EvalFunction(decode=_decode, run=_gradient, encode=tolist),
}
