"""Whole-program type checking of accel ASTs.

``typecheck(p)`` re-checks a program (or any array, expression or function term)
and returns its type, or raises ``ProgramTypeError`` naming the operation and the
types involved.  Node constructors check local typing rules; this pass adds what
they cannot see:

- every node sits in a position of the right kind (expression, array, function);
- every ``Var``/``Avar`` is bound in scope (array variables by ``Alet``, ``ALam`` and
  program parameters; expression variables by ``Let`` and ``Lam`` parameters) and is
  used at its binder's type;
- expression variables never escape the function that binds them: array-level
  expression positions (a ``Generate`` shape, a ``Fold`` initial value, ...) see array
  variables only;
- the local rule of every node still holds, re-validated by rebuilding the node from
  its fields (``type(n)(**fields)``) and comparing the recomputed type.

The checker runs on an explicit stack (no recursion), so let-chains of any length
are fine.  A subtree shared by identity is re-checked only when its free variables
are bound differently at the new occurrence.
"""

from __future__ import annotations

from dataclasses import fields

from ..errors import ProgramTypeError
from .nodes import (Acond, ALam, Alet, APrj, Arr, ATuple, Avar, Awhile, Backpermute, Cond,
                    Const, Exp, Fold, Generate, Index, Lam, Let, Map, Node, Permute, PrimApp,
                    Prj, Program, Replicate, Reshape, Scan, Shape, Slice, Tuple, Unit, Use, Var,
                    While, ZipWith)
from .traverse import children
from .types import SCALARS, ArrayT, ATupleT, TupleT, scalar_of_dtype

# Field kinds: E expression, E? optional expression, ES tuple of expressions,
# SPEC tuple of optional expressions, A array, AS tuple of arrays, L function,
# AL array function, AV array variable (the array of Index/Shape).
_SCHEMA = {
    Tuple: (("items", "ES"),),
    Prj: (("tup", "E"),),
    PrimApp: (("args", "ES"),),
    Index: (("array", "AV"), ("index", "E")),
    Shape: (("array", "AV"),),
    Cond: (("c", "E"), ("t", "E"), ("e", "E")),
    While: (("cond", "L"), ("body", "L"), ("init", "E")),
    ATuple: (("items", "AS"),),
    APrj: (("tup", "A"),),
    Unit: (("exp", "E"),),
    Generate: (("shape", "E"), ("f", "L")),
    Map: (("f", "L"), ("a", "A")),
    ZipWith: (("f", "L"), ("a", "A"), ("b", "A")),
    Fold: (("f", "L"), ("z", "E?"), ("a", "A")),
    Scan: (("f", "L"), ("z", "E?"), ("a", "A")),
    Permute: (("comb", "L"), ("defaults", "A"), ("f", "L"), ("src", "A")),
    Backpermute: (("shape", "E"), ("f", "L"), ("a", "A")),
    Reshape: (("shape", "E"), ("a", "A")),
    Replicate: (("spec", "SPEC"), ("a", "A")),
    Slice: (("a", "A"), ("spec", "SPEC")),
    Acond: (("c", "E"), ("t", "A"), ("e", "A")),
    Awhile: (("cond", "AL"), ("body", "AL"), ("init", "A")),
}
_KINDS = {"E": (Exp, "an expression"), "A": (Arr, "an array"), "L": (Lam, "a function"),
          "AL": (ALam, "an array function"), "AV": (Avar, "an array variable"),
          "P": (Program, "a program")}
_OPNAMES = {Alet: "let", ATuple: "tuple", APrj: "projection", Unit: "unit", Use: "use",
            Generate: "generate", Map: "map", ZipWith: "zip_with", Permute: "permute",
            Backpermute: "backpermute", Reshape: "reshape", Replicate: "replicate",
            Slice: "slice", Acond: "acond", Awhile: "awhile", Index: "index", Shape: "shape"}
_EMPTY = frozenset()


def typecheck(p, env=()):
    """Check a whole program (or term) and return its type; raise ``ProgramTypeError``.

    ``env`` lists variables (``Var``/``Avar``) assumed bound around a bare term.
    Example: ``typecheck(Program((a,), Map(f, a)))`` returns ``ArrayT(float64, 1)``.
    """
    return _Checker(env).run(p)


check = typecheck


def _is_elt(t) -> bool:
    if isinstance(t, TupleT):
        return isinstance(t.items, tuple) and all(_is_elt(i) for i in t.items)
    return t in SCALARS


def _is_arr_type(t) -> bool:
    if isinstance(t, ATupleT):
        return isinstance(t.items, tuple) and all(_is_arr_type(i) for i in t.items)
    return (isinstance(t, ArrayT) and _is_elt(t.elt) and isinstance(t.rank, int)
            and t.rank >= 0)


def _expression_binders(p) -> set:
    """Names of all expression variables bound anywhere in ``p`` (iterative walk)."""
    names, seen, stack = set(), set(), [p]
    while stack:
        n = stack.pop()
        if id(n) in seen or not isinstance(n, Node):
            continue
        seen.add(id(n))
        if isinstance(n, Let) and isinstance(n.var, Var):
            names.add(n.var.name)
        elif isinstance(n, Lam) and isinstance(n.params, tuple):
            names.update(v.name for v in n.params if isinstance(v, Var))
        stack.extend(children(n))
    return names


def _opname(n, where: str) -> str:
    if isinstance(n, (Fold, Scan)):
        return n.opname if isinstance(n, Scan) else ("fold" if n.z is not None else "fold1")
    return _OPNAMES.get(type(n), where)


class _Checker:
    def __init__(self, env):
        self.scope = {"e": {}, "a": {}}  # level -> name -> stack of binder types
        self.ever = set()  # expression variables bound anywhere (for escape messages)
        self.fv = {}  # id(node) -> frozenset of (level, name, type): checked nodes
        for v in env:
            self._bind(v, "bound variable")

    def run(self, p):
        self.ever |= _expression_binders(p)
        kind = ("P" if isinstance(p, Program) else "L" if isinstance(p, Lam)
                else "AL" if isinstance(p, ALam) else "A" if isinstance(p, Arr) else "E")
        stack = [("visit", p, kind, "program")]
        while stack:
            item = stack.pop()
            tag = item[0]
            if tag == "visit":
                self._visit(item[1], item[2], item[3], stack)
            elif tag == "bind":
                self._bind(item[1], item[2])
            elif tag == "unbind":
                self._unbind(item[1])
            else:
                self._post(item[1], item[2])
        return p.type

    # ------------------------------------------------------------------ scopes

    def _level(self, v) -> str:
        return "e" if isinstance(v, Var) else "a"

    def _bind(self, v, where: str):
        if isinstance(v, Var):
            if not _is_elt(v.ty):
                raise ProgramTypeError(f"{where}: variable {v.name} has type {v.ty!r}, "
                                       "which is not an element type")
            self.ever.add(v.name)
        elif isinstance(v, Avar):
            if not _is_arr_type(v.ty):
                raise ProgramTypeError(f"{where}: array variable {v.name} has type {v.ty!r}, "
                                       "which is not an array type")
        else:
            raise ProgramTypeError(f"{where}: expected a variable to bind, got "
                                   f"{type(v).__name__}")
        self.scope[self._level(v)].setdefault(v.name, []).append(v.ty)

    def _unbind(self, v):
        names = self.scope[self._level(v)]
        names[v.name].pop()
        if not names[v.name]:
            del names[v.name]

    def _use(self, v, where: str):
        level = self._level(v)
        kind = "variable" if level == "e" else "array variable"
        bound = self.scope[level].get(v.name)
        if not bound:
            if level == "e" and v.name in self.ever:
                raise ProgramTypeError(
                    f"{where}: expression variable {v.name} : {v.ty!r} is used outside the "
                    "function or let that binds it")
            raise ProgramTypeError(f"{where}: {kind} {v.name} : {v.ty!r} is not in scope")
        if bound[-1] != v.ty:
            raise ProgramTypeError(f"{where}: {kind} {v.name} is used at type {v.ty!r} but "
                                   f"bound at type {bound[-1]!r}")
        self.fv[id(v)] = frozenset([(level, v.name, v.ty)])

    def _still_valid(self, n) -> bool:
        fv = self.fv.get(id(n))
        if fv is None:
            return False
        for level, name, ty in fv:
            bound = self.scope[level].get(name)
            if not bound or bound[-1] != ty:
                return False
        return True

    # ------------------------------------------------------------------ traversal

    def _visit(self, n, kind: str, where: str, stack: list):
        cls, what = _KINDS[kind]
        if not isinstance(n, cls):
            got = type(n).__name__ if isinstance(n, Node) else repr(n)
            raise ProgramTypeError(f"{where}: expected {what}, got {got}")
        if self._still_valid(n):
            return
        if isinstance(n, (Var, Avar)):
            self._use(n, where)
            return
        if isinstance(n, (Const, Use)):
            stack.append(("post", n, where))
            return
        todo = []
        if isinstance(n, (Let, Alet)):
            sub = "E" if isinstance(n, Let) else "A"
            if not isinstance(n.var, Var if sub == "E" else Avar):
                raise ProgramTypeError(f"{where}: a let binds {n.var!r}, not a variable of "
                                       "its level")
            todo = [("visit", n.bound, sub, where), ("bind", n.var, where),
                    ("visit", n.body, sub, where), ("unbind", n.var)]
        elif isinstance(n, (Lam, ALam, Program)):
            params = n.params if isinstance(n, (Lam, Program)) else (n.param,)
            if not isinstance(params, tuple):
                raise ProgramTypeError(f"{where}: parameters must be a tuple, got {params!r}")
            if isinstance(n, Program):
                where = "program"
                for v in params:
                    if not isinstance(v, Avar):
                        raise ProgramTypeError(f"program: parameter {v!r} is not an array "
                                               "variable")
            elif isinstance(n, Lam) and not all(isinstance(v, Var) for v in params):
                raise ProgramTypeError(f"{where}: function parameters must be variables")
            names = [v.name for v in params]
            if len(set(names)) != len(names):
                raise ProgramTypeError(f"{where}: a function binds the same name twice: "
                                       f"{', '.join(names)}")
            body = "E" if isinstance(n, Lam) else "A"
            todo = ([("bind", v, where) for v in params] + [("visit", n.body, body, where)]
                    + [("unbind", v) for v in reversed(params)])
        else:
            where = _opname(n, where)
            for name, fkind in _SCHEMA[type(n)]:
                todo += self._field_visits(n, name, fkind, where)
        todo.append(("post", n, where))
        stack.extend(reversed(todo))

    def _field_visits(self, n, name: str, fkind: str, where: str) -> list:
        v = getattr(n, name)
        if fkind in ("ES", "AS", "SPEC"):
            if not isinstance(v, tuple):
                raise ProgramTypeError(f"{where}: field {name} must be a tuple, got {v!r}")
            sub = "A" if fkind == "AS" else "E"
            return [("visit", x, sub, where) for x in v if not (fkind == "SPEC" and x is None)]
        if fkind == "E?":
            return [] if v is None else [("visit", v, "E", where)]
        return [("visit", v, fkind, where)]

    def _children(self, n) -> list:
        if isinstance(n, (Const, Use)):
            return []
        if isinstance(n, (Let, Alet)):
            return [n.bound, n.body]
        if isinstance(n, (Lam, ALam, Program)):
            return [n.body]
        out = []
        for name, _ in _SCHEMA[type(n)]:
            v = getattr(n, name)
            out += [x for x in v if x is not None] if isinstance(v, tuple) else (
                [] if v is None else [v])
        return out

    def _post(self, n, where: str):
        self._revalidate(n, where)
        sets = [self.fv[id(c)] for c in self._children(n)]
        fv = sets[0] if len(sets) == 1 else frozenset().union(*sets) if sets else _EMPTY
        if isinstance(n, (Let, Alet)):
            fv = self.fv[id(n.bound)] | (self.fv[id(n.body)] - {
                (self._level(n.var), n.var.name, n.var.ty)})
        elif isinstance(n, (Lam, ALam, Program)):
            params = n.params if isinstance(n, (Lam, Program)) else (n.param,)
            fv = fv - {(self._level(v), v.name, v.ty) for v in params}
        self.fv[id(n)] = fv

    def _revalidate(self, n, where: str):
        """Rebuild ``n`` from its fields so that its constructor re-checks its local rule."""
        try:
            if isinstance(n, Use):
                want = ArrayT(scalar_of_dtype(n.array.dtype), n.array.ndim)
                new_type = want
            else:
                if isinstance(n, Const) and n.ty not in SCALARS:
                    raise ProgramTypeError(f"constant of non-scalar type {n.ty!r}")
                kw = {f.name: getattr(n, f.name) for f in fields(n) if f.init}
                new_type = type(n)(**kw).type
        except ProgramTypeError as ex:
            msg = str(ex)
            raise ProgramTypeError(msg if msg.startswith(where) else f"{where}: {msg}") from None
        except Exception as ex:  # a malformed node (wrong field contents)
            raise ProgramTypeError(f"{where}: malformed {type(n).__name__} node: "
                                   f"{type(ex).__name__}: {ex}") from None
        if new_type != n.type:
            raise ProgramTypeError(f"{where}: {type(n).__name__} node records type "
                                   f"{n.type!r} but its fields give {new_type!r}")
