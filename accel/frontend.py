"""Tracing Python functions into accel ASTs.

``Acc`` and ``Exp`` are proxies recording operations while a user's function
runs.  Every array combinator and every scalar operation inside a scalar
function is bound to a fresh variable in the *current trace context* (a
let-stack), so a value used twice is one ``Alet``/``Let`` by construction:
sharing is recovered by identity, never duplicated.  Scalars computed at the
top level of a program (``a.shape[0]``, ``A.the(s)``) are small expression
trees that later functions embed.  After tracing, ``float_in`` moves each
binding into the branch of the conditional that alone uses it, so that only
the taken branch of ``cond``/``acond`` is evaluated.

Errors raised while tracing name the operation and point at the user's line.
"""

from __future__ import annotations

import functools
import sys

import numpy as np

from .ast import nodes as N
from .ast.types import (ArrayT, ATupleT, Scalar, TupleT, bool_, float64, int32, int64,
                        scalar_of_dtype)
from .errors import AccelError, ProgramTypeError
from .float_in import float_in


def _inside_accel(module_name: str) -> bool:
    """Whether a frame of module ``module_name`` is accel's own code (the language, the
    compiler and the backends; ``accel.adbench`` is an application written in accel)."""
    return (module_name == "accel" or module_name.startswith("accel.")) \
        and not module_name.startswith("accel.adbench")


# --------------------------------------------------------------------------- errors


def user_location() -> str:
    """``file:line`` of the innermost stack frame outside accel itself."""
    f = sys._getframe(1)
    while f is not None:
        if not _inside_accel(f.f_globals.get("__name__", "")):
            return f"{f.f_code.co_filename}:{f.f_lineno}"
        f = f.f_back
    return "<unknown>"


def located(fn):
    """Decorate a user-facing operation: errors it raises gain the user's line."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except AccelError as e:
            if not getattr(e, "_accel_located", False):
                e.args = (f"{e.args[0] if e.args else ''} (at {user_location()})",) + e.args[1:]
                e._accel_located = True
            raise
    return wrapper


# --------------------------------------------------------------------------- contexts


class _Context:
    """A let-stack being recorded: array level (``Alet``) or expression level (``Let``)."""

    def __init__(self, level: str):
        self.level = level
        self.bindings: list = []
        self.embedded: dict = {}  # id(outer term) -> (term, Var bound to it here)

    def close(self, body):
        """Wrap ``body`` in this context's bindings, innermost last."""
        make = N.Alet if self.level == "array" else N.Let
        bindings = list(self.bindings)
        if bindings and body == bindings[-1][0]:  # `let x = e in x` is just `e`
            body = bindings.pop()[1]
        for var, bound in reversed(bindings):
            body = make(var, bound, body)
        return body


_stack: list[_Context] = []


def current_context() -> _Context | None:
    return _stack[-1] if _stack else None


class _Open:
    def __init__(self, level: str):
        self.ctx = _Context(level)

    def __enter__(self):
        _stack.append(self.ctx)
        return self.ctx

    def __exit__(self, *exc):
        _stack.pop()


def _in_scalar_function() -> bool:
    ctx = current_context()
    return ctx is not None and ctx.level == "exp"


def require_array_level(op: str):
    ctx = current_context()
    if ctx is None:
        raise ProgramTypeError(f"{op}: array operations are only available while tracing a "
                               "program (use A.run, A.compile or A.show)")
    if ctx.level != "array":
        raise ProgramTypeError(f"{op}: an array combinator cannot be used inside a scalar "
                               "function (nested parallelism is not supported)")
    return ctx


def bind_array(term: N.Arr):
    """Bind ``term`` in the current array context; return proxies for its value."""
    ctx = current_context()
    if isinstance(term, N.Avar):
        v = term
    else:
        v = N.Avar(N.fresh("a"), term.type)
        ctx.bindings.append((v, term))
    if isinstance(v.type, ATupleT):
        return tuple(bind_array(N.APrj(i, v)) for i in range(len(v.type.items)))
    return Acc(v)


def bind_exp(term: N.Exp) -> N.Exp:
    ctx = current_context()
    if ctx is None or ctx.level != "exp" or isinstance(term, (N.Var, N.Const)):
        return term
    v = N.Var(N.fresh("x"), term.type)
    ctx.bindings.append((v, term))
    return v


def from_term(term: N.Exp):
    """User-facing value of an expression term: tuples become Python tuples of Exp."""
    if isinstance(term.type, TupleT):
        term = bind_exp(term)
        if isinstance(term, N.Tuple):
            return tuple(from_term(i) for i in term.items)
        return tuple(from_term(N.Prj(i, term)) for i in range(len(term.type.items)))
    return Exp(bind_exp(term))


# --------------------------------------------------------------------------- lifting


class IgnoreMarker:
    """``A.ignore``: a permute target that drops its source element."""

    def __repr__(self):
        return "A.ignore"


ignore = IgnoreMarker()


class AllMarker:
    """``A.All``: keep a dimension in a replicate or slice specifier."""

    def __repr__(self):
        return "A.All"


All = AllMarker()


class MaybeIndex:
    """A permute target that may be ``A.ignore``: a (keep, index) tuple term."""

    def __init__(self, term: N.Exp):
        self.term = term


class PermuteTarget:
    """The result kind of a permute's index function: a target of rank ``rank`` or ignore.

    The rank comes from the permute's defaults array, not from the function's body, so
    a function that never targets anything (``lambda ix: A.ignore``, or a ``cond`` whose
    every branch is ``A.ignore``) still has a well-defined type (Accelerate's
    ``const ignore``).
    """

    def __init__(self, rank: int):
        self.rank = rank


def ignore_target(rank: int) -> N.Exp:
    """The (keep, index) term of ``A.ignore`` as a permute target of rank ``rank``."""
    return N.Tuple((N.Const(False, bool_), N.Tuple(tuple(N.Const(0, int64)
                                                         for _ in range(rank)))))


def _default_scalar(x) -> Scalar:
    if isinstance(x, (bool, np.bool_)):
        return bool_
    if isinstance(x, (int, np.integer)):
        return scalar_of_dtype(x.dtype) if isinstance(x, np.integer) else int64
    if isinstance(x, (float, np.floating)):
        return scalar_of_dtype(x.dtype) if isinstance(x, np.floating) else float64
    raise ProgramTypeError(f"cannot use {type(x).__name__} value {x!r} as a scalar")


def const(x, ty: Scalar | None = None) -> N.Const:
    """Lift a Python number to a constant of type ``ty`` (or its natural type)."""
    if ty is None:
        return N.Const(x, _default_scalar(x))
    if isinstance(ty, Scalar):
        nat = _default_scalar(x)
        ok = (nat == ty or (ty.is_float and (nat.is_int or nat.is_float))
              or (ty.is_int and nat.is_int))
        if ok:
            return N.Const(x, ty)
    raise ProgramTypeError(f"cannot use the Python value {x!r} where a {ty!r} is expected "
                           "(convert explicitly with A.to_float / A.to_int)")


def _trivial(term: N.Exp) -> bool:
    """Terms cheap enough to copy wherever they are used (no binders, no work)."""
    while isinstance(term, N.Prj):
        term = term.tup
    if isinstance(term, N.Tuple):
        return all(_trivial(i) for i in term.items)
    return isinstance(term, (N.Var, N.Const, N.Shape))


def _embed(term: N.Exp) -> N.Exp:
    """``term`` as used in the current scalar function.

    Scalar-function terms are bound (``Var``) when built; a compound term that reaches a
    scalar function from outside (a scalar computed at the top level of the program) is
    bound once per function, on first use, so that it is shared like any other value and
    its binders are fresh in each copy.
    """
    ctx = current_context()
    if ctx is None or ctx.level != "exp" or _trivial(term):
        return term
    for c in reversed(_stack):
        if c.level != "exp":
            break
        ctx = c  # the outermost scalar function: not re-evaluated in inner loops
        hit = c.embedded.get(id(term))
        if hit is not None and hit[0] is term:
            return hit[1]
    from .ast.traverse import freshen
    v = N.Var(N.fresh("x"), term.type)
    ctx.bindings.append((v, freshen(term)))
    ctx.embedded[id(term)] = (term, v)
    return v


def to_term(x, expect=None) -> N.Exp:
    """The expression term of a user value (Exp, Python number or tuple of them)."""
    if isinstance(x, Exp):
        return _embed(x.term)
    if isinstance(x, tuple):
        items = expect.items if isinstance(expect, TupleT) and len(expect.items) == len(x) \
            else (None,) * len(x)
        return N.Tuple(tuple(to_term(v, t) for v, t in zip(x, items)))
    if isinstance(x, Acc):
        raise ProgramTypeError("an array was used where a scalar expression is expected "
                               "(index it, or use A.the for a rank-0 array)")
    if isinstance(x, (IgnoreMarker, MaybeIndex)):
        raise ProgramTypeError("A.ignore can only be a permute target")
    if isinstance(x, (bool, int, float, np.number, np.bool_)):
        return const(x, expect if isinstance(expect, Scalar) else None)
    raise ProgramTypeError(f"cannot use {type(x).__name__} value {x!r} in an accel expression")


_NUMBER = (bool, int, float, np.number, np.bool_)


def lift_like(xs) -> list[N.Exp]:
    """Terms of values that must have one type (operands, branches).

    Python numbers take the type of an ``Exp`` among ``xs``; if there is none, their
    common NumPy type (``A.cond(c, 1, 0.5)`` is float64).  Tuples lift componentwise.
    """
    xs = list(xs)
    if xs and all(isinstance(x, tuple) for x in xs) and len({len(x) for x in xs}) == 1:
        cols = [lift_like([x[i] for x in xs]) for i in range(len(xs[0]))]
        return [N.Tuple(tuple(c[j] for c in cols)) for j in range(len(xs))]
    ty = next((x.term.type for x in xs if isinstance(x, Exp)), None)
    if ty is None and len(xs) > 1 and all(isinstance(x, _NUMBER) for x in xs):
        try:
            ty = scalar_of_dtype(np.result_type(*xs))
        except (KeyError, TypeError):
            ty = None
    return [to_term(x, ty if not isinstance(x, Exp) else None) for x in xs]


def _unify(op: str, xs: tuple) -> list[N.Exp]:
    """Terms of the operands, lifting Python numbers to the type of an Exp operand."""
    return lift_like(xs)


def prim(op: str, *xs) -> "Exp":
    """Apply scalar primitive ``op`` to user values."""
    try:
        terms = _unify(op, xs)
    except ProgramTypeError as e:
        raise ProgramTypeError(f"{op}: {e}") from None
    return Exp(bind_exp(N.PrimApp(op, tuple(terms))))


def _int_index_component(x) -> N.Exp:
    t = to_term(x, int64)
    if t.type == int32:
        t = N.PrimApp("to_int64", (t,))
    if t.type != int64:
        raise ProgramTypeError(f"index components must be integers, got {t.type!r}")
    return t


def shape_term(sh, what: str = "shape") -> N.Exp:
    """A shape or index given as a tuple of ints/Exps (or a bare rank-1 value)."""
    if isinstance(sh, Exp) and isinstance(sh.term.type, TupleT):
        sh = from_term(sh.term)
    if not isinstance(sh, (tuple, list)):
        sh = (sh,)
    try:
        return N.Tuple(tuple(_int_index_component(c) for c in sh))
    except ProgramTypeError as e:
        raise ProgramTypeError(f"{what}: {e}") from None


# --------------------------------------------------------------------------- Exp


class Exp:
    """A scalar value inside a traced program (an expression of the AST)."""

    __array_priority__ = 1000  # so numpy scalars defer to our operators

    def __init__(self, term: N.Exp, index1: bool = False):
        self.term = term
        self._index1 = index1

    @property
    def dtype(self):
        return self.term.type

    def __repr__(self):
        return f"Exp<{self.term.type!r}>"

    def __bool__(self):
        raise ProgramTypeError("an Exp has no Python truth value while tracing: use A.cond "
                               "or A.while_ instead of if/while/and/or")

    __hash__ = object.__hash__

    # a rank-1 index also behaves as a 1-tuple
    def __getitem__(self, i):
        if self._index1 and i in (0, -1):
            return Exp(self.term)
        raise ProgramTypeError(f"cannot index a scalar of type {self.term.type!r}")

    def __iter__(self):
        if self._index1:
            return iter((Exp(self.term),))
        raise ProgramTypeError(f"cannot iterate over a scalar of type {self.term.type!r}")

    def __len__(self):
        if self._index1:
            return 1
        raise ProgramTypeError(f"a scalar of type {self.term.type!r} has no length")

    def __add__(self, o): return prim("add", self, o)
    def __radd__(self, o): return prim("add", o, self)
    def __sub__(self, o): return prim("sub", self, o)
    def __rsub__(self, o): return prim("sub", o, self)
    def __mul__(self, o): return prim("mul", self, o)
    def __rmul__(self, o): return prim("mul", o, self)
    def __truediv__(self, o): return prim("div", self, o)
    def __rtruediv__(self, o): return prim("div", o, self)
    def __floordiv__(self, o): return prim("floordiv", self, o)
    def __rfloordiv__(self, o): return prim("floordiv", o, self)
    def __mod__(self, o): return prim("mod", self, o)
    def __rmod__(self, o): return prim("mod", o, self)
    def __pow__(self, o): return prim("pow", self, o)
    def __rpow__(self, o): return prim("pow", o, self)
    def __neg__(self): return prim("neg", self)
    def __pos__(self): return self
    def __abs__(self): return prim("abs", self)
    def __lt__(self, o): return prim("lt", self, o)
    def __le__(self, o): return prim("le", self, o)
    def __gt__(self, o): return prim("gt", self, o)
    def __ge__(self, o): return prim("ge", self, o)
    def __eq__(self, o): return prim("eq", self, o)
    def __ne__(self, o): return prim("ne", self, o)
    def __and__(self, o): return prim("and", self, o)
    def __rand__(self, o): return prim("and", o, self)
    def __or__(self, o): return prim("or", self, o)
    def __ror__(self, o): return prim("or", o, self)
    def __xor__(self, o): return prim("xor", self, o)
    def __rxor__(self, o): return prim("xor", o, self)
    def __invert__(self): return prim("not", self)


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__",
              "__rmod__", "__pow__", "__rpow__", "__neg__", "__abs__", "__lt__", "__le__",
              "__gt__", "__ge__", "__eq__", "__ne__", "__and__", "__rand__", "__or__",
              "__ror__", "__xor__", "__rxor__", "__invert__"):
    setattr(Exp, _name, located(getattr(Exp, _name)))


# --------------------------------------------------------------------------- Acc


class Acc:
    """An array value inside a traced program (always an array variable)."""

    def __init__(self, var: N.Avar):
        self.var = var

    @property
    def type(self) -> ArrayT:
        return self.var.type

    @property
    def rank(self) -> int:
        return self.var.type.rank

    @property
    def dtype(self):
        return self.var.type.elt

    @property
    def shape(self) -> tuple:
        sh = N.Shape(self.var)
        if _in_scalar_function():
            sh = bind_exp(sh)
        return tuple(Exp(N.Prj(i, sh)) for i in range(self.rank))

    @located
    def __getitem__(self, ix):
        idx = shape_term(ix, "index")
        if len(idx.items) != self.rank:
            raise ProgramTypeError(f"index: an array of rank {self.rank} indexed with "
                                   f"{len(idx.items)} components")
        return from_term(N.Index(self.var, idx))

    def __repr__(self):
        return f"Acc<{self.var.type!r}>"

    def __bool__(self):
        raise ProgramTypeError("an Acc has no Python truth value while tracing: use A.acond")

    def __iter__(self):
        raise ProgramTypeError("cannot iterate over an Acc array while tracing; index it or "
                               "use a combinator")


# --------------------------------------------------------------------------- lambdas


def _arg_value(var: N.Var, index_rank: int | None = None):
    if index_rank == 1:
        return Exp(N.Prj(0, var), index1=True)
    return from_term(var)


def trace_lam(op: str, fn, param_types: tuple, index_rank: int | None = None,
              result_type=None) -> N.Lam:
    """Trace a scalar function ``fn`` of ``len(param_types)`` arguments into a ``Lam``."""
    if not callable(fn):
        raise ProgramTypeError(f"{op}: expected a function, got {type(fn).__name__}")
    params = tuple(N.Var(N.fresh("x"), t) for t in param_types)
    with _Open("exp") as ctx:
        args = [_arg_value(p, index_rank) for p in params]
        try:
            out = fn(*args)
        except TypeError as e:
            if isinstance(e, AccelError):
                raise
            raise ProgramTypeError(f"{op}: calling the function with {len(args)} "
                                   f"argument(s) failed: {e}") from None
        if isinstance(result_type, PermuteTarget):
            body = _permute_target(out, result_type.rank)
        else:
            body = to_term(out, result_type)
        body = ctx.close(body)
    # only the taken branch of a cond is evaluated: move branch-only bindings into the
    # branches now, so that derivatives of this function (gradientE) respect that too
    return float_in(N.Lam(params, body))


def _permute_target(out, rank: int) -> N.Exp:
    if isinstance(out, MaybeIndex):
        return out.term
    if isinstance(out, IgnoreMarker):
        return ignore_target(rank)
    idx = shape_term(out, "permute target")
    return N.Tuple((N.Const(True, bool_), idx))


def trace_alam(op: str, fn, state_type) -> N.ALam:
    """Trace an array function of the (possibly tuple) state into an ``ALam``."""
    param = N.Avar(N.fresh("a"), state_type)
    with _Open("array") as ctx:
        arg = bind_array(param)
        out = fn(arg)
        body = ctx.close(array_term(out, op))
    return N.ALam(param, body)


def array_term(x, op: str) -> N.Arr:
    """The array term of a user value: an Acc or a (nested) tuple of them."""
    if isinstance(x, Acc):
        return x.var
    if isinstance(x, tuple):
        return N.ATuple(tuple(array_term(i, op) for i in x))
    if isinstance(x, np.ndarray):
        return bind_array(N.Use(x)).var
    if isinstance(x, Exp) or isinstance(x, (int, float, bool)):
        return bind_array(N.Unit(to_term(x))).var
    raise ProgramTypeError(f"{op}: expected an array (Acc), got {type(x).__name__}")


def as_acc(x, op: str) -> Acc:
    if isinstance(x, Acc):
        return x
    if isinstance(x, np.ndarray):
        return bind_array(N.Use(x))
    raise ProgramTypeError(f"{op}: expected an array, got {type(x).__name__}")


# --------------------------------------------------------------------------- programs


def arg_type(x, pos: int):
    """The array type of a NumPy argument (Python scalars are rank-0 arrays)."""
    a = np.asarray(x)
    try:
        return ArrayT(scalar_of_dtype(a.dtype), a.ndim)
    except KeyError:
        raise ProgramTypeError(f"argument {pos}: unsupported dtype {a.dtype} (use float32, "
                               "float64, int32, int64 or bool)") from None


def trace_program(fn, param_types: tuple) -> N.Program:
    """Trace ``fn`` (a program over arrays of ``param_types``) into a ``Program``."""
    from .ast.typecheck import typecheck
    if _in_scalar_function():
        raise ProgramTypeError("a program cannot be traced inside a scalar function")
    params = tuple(N.Avar(N.fresh("a"), t) for t in param_types)
    with _Open("array") as ctx:
        args = [bind_array(p) for p in params]
        try:
            out = fn(*args)
        except TypeError as e:
            if isinstance(e, AccelError):
                raise
            raise ProgramTypeError(f"program {getattr(fn, '__name__', fn)!s}: calling it with "
                                   f"{len(args)} array argument(s) failed: {e}") from None
        body = ctx.close(array_term(out, "program result"))
    prog = float_in(N.Program(params, body))
    typecheck(with_captured(prog) if _stack else prog)
    return prog


def with_captured(prog: N.Program) -> N.Program:
    """``prog`` with the arrays it captures from enclosing programs as extra parameters.

    A program traced while another is being traced (``A.gradientA(f)(x)`` inside a
    program, a closure over an outer ``Acc``) may read the outer program's arrays; they
    stay free variables, bound where the program is inlined, and count as constants for
    the derivatives of the inner program.
    """
    from .ast.traverse import free_vars, walk
    free = free_vars(prog)
    if not free:
        return prog
    caps = {}
    for n in walk(prog.body):
        if isinstance(n, N.Avar) and n.name in free:
            caps[n.name] = n
    return N.Program(prog.params + tuple(caps.values()), prog.body)


def call_program(prog: N.Program, args: list):
    """Inline ``prog`` applied to the Acc ``args`` in the current trace context."""
    from .ast.traverse import freshen
    require_array_level("calling a program")
    if len(args) != len(prog.params):
        raise ProgramTypeError(f"program takes {len(prog.params)} arrays, got {len(args)}")
    env = {}
    for i, (p, a) in enumerate(zip(prog.params, args)):
        a = as_acc(a, "program argument")
        if a.type != p.type:
            raise ProgramTypeError(f"argument {i}: expected {p.type!r}, got {a.type!r}")
        env[p.name] = a.var
    # One walk: fresh binders, parameters replaced by the arguments (a derivative program
    # inlined here has thousands of nodes: two walks were most of tracing a gradient).
    return bind_array(freshen(prog.body, env))
