"""Host-side evaluation of the scalar expressions a kernel program needs outside loops.

Shapes, inner lengths and ``KAcond`` conditions are evaluated once per step on the
host, in Python, with the primitives' NumPy implementations applied to one-element
arrays, i.e. exactly the reference semantics.  They may read manifest arrays
(``Index``/``Shape``); host reads are always bounds-checked (they are cheap).
A value is a NumPy scalar or a nested tuple of them.
"""

from __future__ import annotations

import numpy as np

from accel.ast import nodes as N
from accel.ast import prims
from accel.ast.types import bool_, int64
from accel.errors import BackendError, OutOfBoundsError

from .trees import flat, rebuild


class HostEval:
    """Evaluate expressions reading the arrays of ``env`` (name -> ``ArrVal``); with a
    ``log`` list, every array shape and element read is appended to it (``("shape",
    name)``, ``("index", name, offset, values)``) so a caller can tell when a result
    may be reused."""

    def __init__(self, env: dict, log: list | None = None):
        self.env = env
        self.vars: dict = {}
        self.log = log

    def __call__(self, e: N.Exp):
        return self.exp(e)

    def exp(self, e: N.Exp):
        m = _EXP.get(type(e))
        if m is None:
            raise BackendError(f"cpu backend: cannot evaluate {type(e).__name__} on the host")
        return m(self, e)

    def e_Const(self, e):
        return e.ty.dtype.type(e.value)

    def e_Var(self, e):
        try:
            return self.vars[e.name]
        except KeyError:
            raise BackendError(f"cpu backend: free scalar variable {e.name} in a host "
                               "expression") from None

    def _bind(self, names_vals):
        olds = [(n, self.vars.get(n, _MISSING)) for n, _ in names_vals]
        for n, v in names_vals:
            self.vars[n] = v
        return olds

    def _unbind(self, olds):
        for n, v in reversed(olds):
            if v is _MISSING:
                self.vars.pop(n, None)
            else:
                self.vars[n] = v

    def e_Let(self, e):
        olds = []
        try:
            while isinstance(e, N.Let):
                olds += self._bind([(e.var.name, self.exp(e.bound))])
                e = e.body
            return self.exp(e)
        finally:
            self._unbind(olds)

    def e_Tuple(self, e):
        return tuple(self.exp(i) for i in e.items)

    def e_Prj(self, e):
        return self.exp(e.tup)[e.index]

    def e_PrimApp(self, e):
        fast = _INT_FAST.get(e.op)
        if fast is not None and e.type in (int64, bool_) and all(
                a.type == int64 for a in e.args):
            # shape arithmetic: NumPy int64 scalars behave as one-element arrays here
            return fast(*[np.int64(self.exp(a)) for a in e.args])
        args = [np.array([self.exp(a)], dtype=a.type.dtype) for a in e.args]
        r = np.asarray(prims.PRIMS[e.op].impl(*args))
        return r.astype(e.type.dtype).reshape(-1)[0]

    def e_Shape(self, e):
        if self.log is not None:
            self.log.append(("shape", e.array.name))
        return tuple(np.int64(s) for s in self.env[e.array.name].shape)

    def e_Index(self, e):
        av = self.env[e.array.name]
        ix = tuple(int(i) for i in flat(self.exp(e.index)))
        if any(not 0 <= i < s for i, s in zip(ix, av.shape)):
            shown = f"({ix[0]},)" if len(ix) == 1 else str(ix)
            raise OutOfBoundsError(f"index into array {e.array.name}: index {shown} is out of "
                                   f"bounds for shape {av.shape}")
        off = 0
        for i, s in zip(ix, av.shape):
            off = off * s + i
        vals = [b[off] for b in av.leaves]
        if self.log is not None:
            self.log.append(("index", e.array.name, off, tuple(vals)))
        return rebuild(e.array.type.elt, iter(vals))

    def e_Cond(self, e):
        return self.exp(e.t) if bool(self.exp(e.c)) else self.exp(e.e)

    def apply(self, lam: N.Lam, args):
        olds = self._bind([(p.name, a) for p, a in zip(lam.params, args)])
        try:
            return self.exp(lam.body)
        finally:
            self._unbind(olds)

    def e_While(self, e):
        s = self.exp(e.init)
        while bool(self.apply(e.cond, (s,))):
            s = self.apply(e.body, (s,))
        return s


_MISSING = object()

#: Expression node type -> its evaluation (one method of ``HostEval`` per node).
_EXP = {N.Const: HostEval.e_Const, N.Var: HostEval.e_Var, N.Let: HostEval.e_Let,
        N.Tuple: HostEval.e_Tuple, N.Prj: HostEval.e_Prj, N.PrimApp: HostEval.e_PrimApp,
        N.Shape: HostEval.e_Shape, N.Index: HostEval.e_Index, N.Cond: HostEval.e_Cond,
        N.While: HostEval.e_While}

#: Primitives on int64 scalars evaluated directly (no one-element arrays): the host's
#: shape arithmetic.  NumPy scalars wrap around like arrays (warnings are off).
_INT_FAST = {
    "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
    "min": lambda x, y: min(x, y), "max": lambda x, y: max(x, y),
    "lt": lambda x, y: np.bool_(x < y), "le": lambda x, y: np.bool_(x <= y),
    "gt": lambda x, y: np.bool_(x > y), "ge": lambda x, y: np.bool_(x >= y),
    "eq": lambda x, y: np.bool_(x == y), "ne": lambda x, y: np.bool_(x != y),
}
