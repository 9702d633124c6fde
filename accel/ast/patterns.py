"""The one recogniser of binary combiners ``\\x y -> op x y``.

Reductions, scans and permutes with such a combiner have fast paths everywhere: AD
differentiates ``+``/``*``/``max``/``min`` reductions in closed form, the interpreter
reduces with a NumPy ufunc, the code generators emit the operator inline.  Each use
needs a slightly different question, so there are three entry points over one matcher:

- ``binop_of(lam)``: the primitive's name if ``lam`` is ``\\x y -> op x y`` in either
  argument order (two distinct parameters), following the lets of its body
  (``\\x y -> let z = op x y in z``); any binary primitive, any type.
- ``scalar_binop(lam, ops, numeric=False)``: the same for a body that *is* the
  application (no lets followed), on a scalar type (a numeric one when ``numeric``),
  with ``op`` in ``ops``; else None.  The backends' fast paths (the interpreter's
  ufunc reductions, the code generators' inline combiners).
- ``leafwise_binop(lam)``: ``op`` if both parameters have one (possibly tuple) type and
  every leaf of the result is ``op`` of the two parameters' leaves at the same path
  (either order per leaf), lets and projections followed; ``\\(a, b) (c, d) -> (a + c,
  d + b)`` gives ``"add"``; a bool leaf may instead be the first parameter's (the sum
  reverse mode writes for adjoints of tuples with bool leaves).  Forward mode's rule for
  reductions of tuples; the AD rules of permutes of tuples.
- ``projection_side(lam)``: 0 for ``\\new old -> new``, 1 for ``\\new old -> old`` (lets,
  tuples and projections followed, so ``(x.0, x.1)`` is ``x``), else None.  A scatter:
  among colliding writes the last source in row-major order wins (API.md); the
  backends make that deterministic and AD gives the winner the adjoint.
"""

from __future__ import annotations

from .nodes import Lam, Let, PrimApp, Prj, Tuple, Var
from .types import Scalar, TupleT


def _direct(lam: Lam, body):
    """``op`` if ``body`` is ``op x y`` of ``lam``'s two distinct parameters, else None."""
    if len(lam.params) != 2 or type(body) is not PrimApp or len(body.args) != 2:
        return None
    if not all(type(a) is Var for a in body.args):
        return None
    p, q = (x.name for x in lam.params)
    if p != q and sorted(a.name for a in body.args) == sorted((p, q)):
        return body.op
    return None


def binop_of(lam: Lam):
    """``op`` if ``lam`` is ``\\x y -> op x y`` (either order, lets followed), else None."""
    if len(lam.params) != 2:
        return None
    body, env = lam.body, {}
    while type(body) is Let:
        env[body.var.name] = body.bound
        body = body.body
    while type(body) is Var and body.name in env:
        body = env[body.name]
    return _direct(lam, body)


def scalar_binop(lam: Lam, ops, numeric: bool = False):
    """``op`` in ``ops`` if ``lam`` is literally ``\\x y -> op x y`` (either order) on a
    scalar type (a numeric one when ``numeric``), else None."""
    t = lam.type
    if not isinstance(t, Scalar) or (numeric and not t.is_num):
        return None
    op = _direct(lam, lam.body)
    return op if op in ops else None


class _Leaf:
    """Leaf ``path`` of parameter ``side`` (0 or 1) in the symbolic evaluation."""

    __slots__ = ("side", "path")

    def __init__(self, side: int, path: tuple):
        self.side, self.path = side, path


def _param_tree(t, side: int, path: tuple = ()):
    if isinstance(t, TupleT):
        return tuple(_param_tree(s, side, path + (k,)) for k, s in enumerate(t.items))
    return _Leaf(side, path)


class _NoMatch(Exception):
    pass


def _sym(e, env: dict):
    """``e`` evaluated over parameter leaves: nested tuples of leaves and ``(op, a, b)``
    applications of a primitive to two leaves; anything else does not match."""
    t = type(e)
    if t is Var:
        if e.name not in env:
            raise _NoMatch
        return env[e.name]
    if t is Let:
        env[e.var.name] = _sym(e.bound, env)
        return _sym(e.body, env)
    if t is Tuple:
        return tuple(_sym(x, env) for x in e.items)
    if t is Prj:
        v = _sym(e.tup, env)
        if type(v) is not tuple:
            raise _NoMatch
        return v[e.index]
    if t is PrimApp and len(e.args) == 2:
        a, b = (_sym(x, env) for x in e.args)
        if type(a) is not _Leaf or type(b) is not _Leaf:
            raise _NoMatch
        return ("app", e.op, a, b)
    raise _NoMatch


def _result_ops(t, v, path: tuple, ops: set) -> bool:
    if isinstance(t, TupleT):
        return type(v) is tuple and len(v) == len(t.items) and all(
            _result_ops(s, x, path + (k,), ops) for k, (s, x) in enumerate(zip(t.items, v)))
    if t.is_bool and type(v) is _Leaf and v.side == 0 and v.path == path:
        return True
    if type(v) is not tuple or len(v) != 4 or v[0] != "app":
        return False
    _, op, a, b = v
    if a.path != path or b.path != path or {a.side, b.side} != {0, 1}:
        return False
    ops.add(op)
    return True


def _symbolic(lam: Lam):
    """``lam``'s body evaluated over its two parameters' leaves (None if it does not
    match or the parameters differ in type)."""
    if len(lam.params) != 2 or lam.params[0].type != lam.params[1].type:
        return None
    t = lam.params[0].type
    p, q = lam.params
    if p.name == q.name:
        return None
    env = {p.name: _param_tree(t, 0), q.name: _param_tree(t, 1)}
    try:
        return _sym(lam.body, env)
    except _NoMatch:
        return None


def _is_param(t, v, side: int, path: tuple) -> bool:
    if isinstance(t, TupleT):
        return type(v) is tuple and len(v) == len(t.items) and all(
            _is_param(s, x, side, path + (k,)) for k, (s, x) in enumerate(zip(t.items, v)))
    return type(v) is _Leaf and v.side == side and v.path == path


def projection_side(lam: Lam):
    """0 if ``lam`` is ``\\new old -> new``, 1 if it is ``\\new old -> old``, else None."""
    v = _symbolic(lam)
    if v is None:
        return None
    t = lam.params[0].type
    for side in (0, 1):
        if _is_param(t, v, side, ()):
            return side
    return None


def leafwise_binop(lam: Lam):
    """``op`` if ``lam`` applies ``op`` leafwise to its two parameters of one type (either
    order per leaf; bool leaves may be the first parameter's), else None."""
    v = _symbolic(lam)
    if v is None:
        return None
    t = lam.params[0].type
    ops: set = set()
    if not _result_ops(t, v, (), ops):
        return None
    return ops.pop() if len(ops) == 1 else None
