"""Matrix-product folds on the NumPy evaluator: one ``einsum`` instead of the source.

The fused evaluator (``backends.fused``: the ``fused`` backend and the cpu backend's
NumPy tier) runs a ``KFold`` by materialising its whole source, ``shape ++ (n,)``
elements, and folding it: for a matrix product that is the ``m x n x k`` array of
products (an MLP's first layer, 2000 x 256 x 100 doubles, 400 MB and seconds of
NumPy).  A fold that ``fusion.contraction`` recognises as a (batched) matrix product is
``einsum`` of its two operand arrays instead (BLAS through NumPy), scaled by its
index-free factors and multiplied by its per-element ones, under the checks the cpu
backend's BLAS path makes too (``fusion.contraction.fits``, ``fixed_in_bounds``);
otherwise the fold runs as before.  Results differ from the
source's by floating-point reassociation only, as the compiled kernels' do.
"""

from __future__ import annotations

import numpy as np

from accel.ast import nodes as N
from accel.ast.traverse import substitute
from accel.backends import interpreter as I
from accel.backends.interpreter_values import ArrayValue
from accel.fusion.contraction import contraction, fits, fixed_in_bounds
from accel.fusion.kernels import KFold

__all__ = ["matrix_product", "product_of"]

_FOUND: dict = {}  # id(fold step) -> (step, Contraction or None)


def product_of(s: KFold):
    """``fusion.contraction.contraction(s)``, remembered for the step."""
    hit = _FOUND.get(id(s))
    if hit is None or hit[0] is not s:
        if len(_FOUND) > 4096:
            _FOUND.clear()
        hit = _FOUND[id(s)] = (s, contraction(s))
    return hit[1]


def matrix_product(s: KFold, aenv: dict) -> ArrayValue | None:
    """The value of ``s`` computed by ``einsum`` if it is a matrix product whose checks
    hold in ``aenv``, else None."""
    c = product_of(s)
    if c is None:
        return None

    def ev(e):  # an index-free term: a tuple of ints (a shape) or a number
        v = I.eval_scalar(e, aenv)
        return tuple(int(x[0]) for x in v) if isinstance(v, tuple) else v[0]

    shape = ev(s.shape)
    ext = shape + (int(ev(s.n)),)
    if not (fits(c, ext, ev) and fixed_in_bounds(c, ev)):
        return None
    ops = [np.asarray(aenv[arr.name].data).reshape(aenv[arr.name].shape)[
               tuple(int(ev(f)) for f in fixed)]
           for arr, fixed in ((c.a, c.a_fixed), (c.b, c.b_fixed))]
    letters = "abcdefghijklmnopqrstuvwxyz"
    rank = len(shape)
    spec = (f"{''.join(letters[a] for a in c.a_axes)},{''.join(letters[a] for a in c.b_axes)}"
            f"->{letters[:rank]}")
    dt = s.out.type.elt.dtype
    out = np.einsum(spec, *ops, optimize=True)
    for e in c.scale:
        out = out * ev(e)
    if c.post:
        q = N.Var(N.fresh("i"), s.shape.type)  # the output's index; the folded one at 0
        point = N.Tuple(tuple(N.Prj(k, q) for k in range(rank))
                        + (N.Const(0, c.index.type.items[-1]),))
        for e in c.post:
            f = N.Lam((q,), substitute(e, {c.index.name: point}))
            out = out * np.asarray(I.eval_array(N.Generate(s.shape, f), aenv).data).reshape(shape)
    return ArrayValue(shape, np.ascontiguousarray(out, dtype=dt).reshape(shape))
