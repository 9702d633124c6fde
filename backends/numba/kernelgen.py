"""The scalar-expression emitter both numba backends share, and module assembly.

A kernel's body is Python source in numba's dialect: tuples are scalarised (a value is
an atom, a generated name or literal, or a nested tuple of atoms, ``trees``), ``Cond``
and ``While`` become statements, and every primitive result is assigned to a fresh
name, cast to its accel type where numba might type it differently.  ``ScalarEmitter``
writes all of that once; a backend's subclass supplies only its dialect through a few
hooks:

* ``const(value, t)``: the spelling of a constant (the CUDA simulator runs kernels as
  Python, so there every constant is a typed NumPy scalar);
* ``tc(t, expr)``: when a value is cast to its type;
* ``math(fn, t)``: the function called for ``fmod``/``floor``/``copysign``;
* ``math_prim(op, args, t0, rt)``: the primitives the backend's math library computes
  (CPU: NumPy and ``mathlib``; CUDA: libdevice through ``cuda/intrinsics``);
* ``record(site, ix)``: how a failed bounds check is reported in ``err``;
* ``load(buf, pos)`` and ``ALWAYS_PASS``: a checked read's spelling.

Expression nodes are dispatched through the table ``_EXP`` (node type -> method).
``loop_steps`` walks a kernel program's blocks; ``StepTexts`` names every distinct
step's functions once (identical steps share them) and joins the module.

The primitives are in ``prims`` (a mixin), constants and casts in ``literals``.
Imports only ``accel`` (ast, errors, fusion.kernels) and this folder's ``flatreads``,
``literals``, ``prims`` and ``trees``.
"""

from __future__ import annotations

import contextlib

import re
from dataclasses import dataclass

from accel.ast import nodes as N
from accel.ast.types import ArrayT, Scalar, leaves
from accel.errors import BackendError
from accel.fusion.kernels import KAcond, KAwhile, KBlock, KUse

from .flatreads import flat_position
from .literals import cast, const_atom
from .prims import PrimEmitter
from .trees import flat, rebuild

ERR_SIZE = 16  # err[0] = failing site (1-based), err[1:] = its index
FLAT_COND_DEPTH = 60  # deeper else-if chains are emitted flat

#: Combination functions the parallel scatters handle, with their identity elements.
FAST_COMBS = ("add", "mul", "max", "min")


def fast_comb(lam: N.Lam):
    """``'add'``/``'mul'``/``'max'``/``'min'`` if ``lam`` is ``\\x y -> op x y`` (either order)
    on a float or int scalar, else None."""
    if len(lam.params) != 2 or not isinstance(lam.type, Scalar) or not lam.type.is_num:
        return None
    b = lam.body
    if not (isinstance(b, N.PrimApp) and b.op in FAST_COMBS):
        return None
    if not all(isinstance(a, N.Var) for a in b.args):
        return None
    p, q = (x.name for x in lam.params)
    if p != q and {a.name for a in b.args} == {p, q}:
        return b.op
    return None


# --------------------------------------------------------------------------- positions

#: An index atom ``(v + c)``: row c of a block of rows starting at index v.
SHIFTED = re.compile(r"\((\w+) \+ (\d+)\)")


def at(buf: str, pos: str) -> str:
    """The element of the flat array ``buf`` at ``pos``, known to be in bounds and
    non-negative: ``_ld`` (the dialect's header defines it).

    Numba's own indexing wraps a negative signed index around (a compare and select per
    access, up to 2x in memory-bound loops), and its typing and lowering of one
    ``buf[i]`` cost milliseconds of compilation: ``_ld`` is one address computation and
    load with the same IR as numba's unsigned index (``base + k`` stays visible to LLVM,
    so reads of consecutive positions load as vectors), typed and lowered in a fraction
    of the time."""
    return f"_ld({buf}, {pos})"


def store_at(buf: str, pos: str, value: str) -> str:
    """The statement writing ``value`` at ``pos`` of ``buf`` (``_st``; see ``at``)."""
    return f"_st({buf}, {pos}, {value})"


@dataclass
class Site:
    """A bounds-checked access: what it is and where to find the shape for the message."""

    what: str  # "index into array x" / "permute (target index)"
    avar: N.Avar | None  # the array (None: the permute's output)
    rank: int


@dataclass
class ArgArray:
    avar: N.Avar
    leaves: list  # buffer argument names
    dims: list  # atoms of the dimensions


_MISSING = object()
_LET = object()  # marks a saved entry of ``lets`` among the old bindings


#: Primitives that cannot fault or trap and cost about one instruction.
_CHEAP_OPS = frozenset({"add", "sub", "mul", "neg", "min", "max", "abs", "lt", "le", "gt",
                        "ge", "eq", "ne", "and", "or", "not"})
SPECULABLE_NODES = 8  # most nodes of a conditional's arm computed unconditionally


def speculable(e) -> bool:
    """Whether ``e`` may be computed whether or not its conditional picks it: a few cheap
    primitives on variables, constants and tuples (no element read, which may be out of
    bounds when the test guards it; no division).

    A dialect with ``SELECT`` computes both arms of such a conditional and picks one
    (``_select``: an LLVM ``select``) instead of branching.  Index arithmetic under a
    test on sizes (``if oh >= kh then u - a else a``, as reverse mode writes a window's
    adjoint) then leaves a block of rows one straight-line body.  (Measured on such a
    16-row block: the selects alone did not shorten its 3-minute compilation; dropping
    the block's divided fallback loop did, ``fold._inner_loop``'s ``positive``.)"""
    stack, n = [e], 0
    while stack:
        x = stack.pop()
        n += 1
        if n > SPECULABLE_NODES:
            return False
        if isinstance(x, N.PrimApp):
            if x.op not in _CHEAP_OPS:
                return False
            stack.extend(x.args)
        elif isinstance(x, N.Prj):
            stack.append(x.tup)
        elif isinstance(x, N.Tuple):
            stack.extend(x.items)
        elif not isinstance(x, (N.Var, N.Const)):
            return False
    return True


class ScalarEmitter(PrimEmitter):
    """Emits the statements of one kernel's body into ``self.body`` (a list of lines the
    backend points at the function being written).  Arrays read become arguments
    (``array``), host-provided sizes become slots (``slot``: ``layout`` says what each
    holds), bounds checks become ``sites``."""

    BACKEND = "cpu"  # named in error messages
    ALWAYS_PASS = False  # end both branches of a checked read with ``pass``
    SELECT = False  # the module defines ``_select`` (see ``speculable``)

    def __init__(self, check_bounds: bool):
        self.check = check_bounds
        self.body: list = []
        self._reuse = None  # memo of offsets and reads (``reusing``), or None
        self.ind = 1
        self.count = 0
        self.env: dict = {}  # Var name -> value
        self.lets: dict = {}  # let-bound Var name -> its bound expression
        self.arrays: dict = {}  # Avar name -> ArgArray
        self.array_order: list = []
        self.slots: dict = {}  # layout key -> atom
        self.layout: list = []
        self.sites: list = []
        # rank-0 arrays read once before the loops (``KernelGen(hoist=True)``): array
        # name -> the names of its leaves' values, else None
        self.scalar_reads: dict | None = None

    # ---- dialect hooks (the CPU's spelling here; see the module docstring)

    def const(self, value, t: Scalar) -> str:
        return const_atom(value, t)

    @staticmethod
    def tc(t: Scalar, expr: str) -> str:
        """``expr`` cast to ``t`` if numba might type it differently (int32, float32)."""
        return cast(t, expr) if t.name in ("int32", "float32") else expr

    def math(self, fn: str, t: Scalar) -> str:
        return f"np.{fn}"

    def math_prim(self, op: str, args: list, t0: Scalar, rt: Scalar) -> str | None:
        return None

    def load(self, buf: str, pos: str) -> str:
        return at(buf, pos)

    def record(self, site: Site, ix: list) -> None:
        self.sites.append(site)
        self.emit(f"err[0] = {len(self.sites)}")
        for k, i in enumerate(ix[:ERR_SIZE - 1]):
            self.emit(f"err[{k + 1}] = {i}")

    # ---- emission helpers

    @property
    def ind(self) -> int:
        return self._ind

    @ind.setter
    def ind(self, value: int) -> None:
        self._ind = value
        if self._reuse:  # a name bound in another block may be unbound here
            self._reuse.clear()

    @contextlib.contextmanager
    def reusing(self):
        """Within the block, an offset or unchecked read already emitted at the same
        indentation is reused, not emitted again.  For straight-line code that rebinds
        no index variable (``cpu.fold``'s unrolled blocks of rows: the 32 rows of a
        plane block read the same element of one operand 16 times and compute each
        offset 32 times; LLVM merged them, but numba typed and lowered every copy,
        9 s for an 820-line phase).  Leaving or entering a nested block forgets."""
        outer = self._reuse
        self._reuse = {}
        try:
            yield
        finally:
            self._reuse = None if outer is None else {}

    def fresh(self, prefix: str = "t") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def emit(self, line: str) -> None:
        if self.ind > 90:
            raise BackendError(f"{self.BACKEND} backend: expression nesting too deep for "
                               "generated code")
        self.body.append("    " * self.ind + line)

    def assign(self, t: Scalar, expr: str, name: str | None = None) -> str:
        """``name = expr`` (cast if needed); a fresh name unless given."""
        name = name or self.fresh()
        self.emit(f"{name} = {self.tc(t, expr)}")
        return name

    def slot(self, key) -> str:
        """The atom holding the host-provided size ``key``."""
        a = self.slots.get(key)
        if a is None:
            a = self.slots[key] = f"s{len(self.layout)}"
            self.layout.append(key)
        return a

    def array(self, avar: N.Avar) -> ArgArray:
        a = self.arrays.get(avar.name)
        if a is None:
            j = len(self.array_order)
            t = avar.type
            if not isinstance(t, ArrayT):
                raise BackendError(f"{self.BACKEND} backend: array {avar.name} of type {t!r} "
                                   "is read inside a kernel")
            lv = [f"a{j}_{k}" for k in range(len(leaves(t.elt)))]
            dims = [self.slot(("in", j, d)) for d in range(t.rank)]
            a = self.arrays[avar.name] = ArgArray(avar, lv, dims)
            self.array_order.append(avar)
        return a

    # ---- scopes

    def bind(self, var: N.Var, value) -> tuple:
        old = (var.name, self.env.get(var.name, _MISSING))
        self.env[var.name] = value
        return old

    def unbind(self, olds) -> None:
        for old in reversed(olds):
            table, (name, v) = (self.lets, old[1:]) if old[0] is _LET else (self.env, old)
            if v is _MISSING:
                table.pop(name, None)
            else:
                table[name] = v

    def apply(self, lam: N.Lam, args) -> object:
        olds = [self.bind(p, a) for p, a in zip(lam.params, args)]
        try:
            return self.exp(lam.body)
        finally:
            self.unbind(olds)

    # ---- expressions

    def exp(self, e: N.Exp):
        m = _EXP.get(type(e))
        if m is None:
            raise BackendError(f"{self.BACKEND} backend: cannot compile expression node "
                               f"{type(e).__name__}")
        return m(self, e)

    def e_Const(self, e: N.Const):
        return self.const(e.value, e.ty)

    def e_Var(self, e: N.Var):
        try:
            return self.env[e.name]
        except KeyError:
            raise BackendError(f"{self.BACKEND} backend: free scalar variable {e.name} in a "
                               "kernel (kernels may only read manifest arrays)") from None

    def e_Let(self, e: N.Let):
        olds = []
        try:
            e = self.bind_lets(e, olds)
            return self.exp(e)
        finally:
            self.unbind(olds)

    def bind_lets(self, e: N.Exp, olds: list) -> N.Exp:
        """Bind the lets ``e`` starts with (their old bindings into ``olds``, for
        ``unbind``), keeping the bound expressions (``flatreads`` looks through them);
        the body."""
        while isinstance(e, N.Let):
            olds.append(self.bind(e.var, self.exp(e.bound)))
            olds.append((_LET, e.var.name, self.lets.get(e.var.name, _MISSING)))
            self.lets[e.var.name] = e.bound
            e = e.body
        return e

    def e_Tuple(self, e: N.Tuple):
        return tuple(self.exp(i) for i in e.items)

    def e_Prj(self, e: N.Prj):
        return self.exp(e.tup)[e.index]

    def e_Shape(self, e: N.Shape):
        return tuple(self.array(e.array).dims)

    def e_Index(self, e: N.Index):
        arr = self.array(e.array)
        elt = e.array.type.elt
        if self.scalar_reads is not None and e.array.type.rank == 0:
            names = self.scalar_reads.get(e.array.name)
            if names is None:
                names = self.scalar_reads[e.array.name] = [f"h{b[1:]}" for b in arr.leaves]
            return rebuild(elt, iter(names))
        olds: list = []
        try:
            index = self.bind_lets(e.index, olds)
            j = None if self.check else flat_position(e.array, index, self.lets)
            if j is not None:  # a read by a flat position through a reshape
                return rebuild(elt, iter(self.read(arr, [self.exp(j)], elt)))
            ix = flat(self.exp(index))
        finally:
            self.unbind(olds)
        return rebuild(elt, iter(self.read(arr, ix, elt)))

    def offset(self, ix: list, dims: list) -> str:
        if not ix:
            return "0"
        expr = ix[0]
        for i, d in zip(ix[1:], dims[1:]):
            expr = f"({expr}) * {d} + {i}"
        if len(ix) == 1:
            return expr
        memo = self._reuse
        if memo is not None and ("o", expr) in memo:
            return memo[("o", expr)]
        off = self.fresh("o")
        self.emit(f"{off} = {expr}")
        if memo is not None:
            memo[("o", expr)] = off
        return off

    def in_bounds(self, ix: list, dims: list) -> str:
        return " & ".join(f"({i} >= 0) & ({i} < {d})" for i, d in zip(ix, dims))

    def read(self, arr: ArgArray, ix: list, elt) -> list:
        """Atoms of the element of ``arr`` at index ``ix`` (checked if asked)."""
        ts = leaves(elt)
        if self.check and ix:
            names = [self.fresh("v") for _ in ts]
            self.emit(f"if {self.in_bounds(ix, arr.dims)}:")
            self.ind += 1
            off = self.offset(ix, arr.dims)
            for n, b in zip(names, arr.leaves):
                self.emit(f"{n} = {self.load(b, off)}")
            if not ts or self.ALWAYS_PASS:
                self.emit("pass")
            self.ind -= 1
            self.emit("else:")
            self.ind += 1
            self.record(Site(f"index into array {arr.avar.name}", arr.avar, len(ix)), ix)
            for n, t in zip(names, ts):
                self.emit(f"{n} = {self.const(0, t)}")
            if self.ALWAYS_PASS:
                self.emit("pass")
            self.ind -= 1
            return names
        shifted = SHIFTED.fullmatch(ix[-1]) if ix else None
        if shifted:  # a row of a block: the block's offset plus a constant
            off = self.offset(ix[:-1] + [shifted.group(1)], arr.dims)
            off = f"{off} + {shifted.group(2)}"
        else:
            off = self.offset(ix, arr.dims)
        memo = self._reuse
        key = ("r", tuple(arr.leaves), off)
        if memo is not None and key in memo:
            return list(memo[key])
        out = []
        for b in arr.leaves:
            n = self.fresh("v")
            self.emit(f"{n} = {self.load(b, off)}")
            out.append(n)
        if memo is not None:
            memo[key] = tuple(out)
        return out

    def e_Cond(self, e: N.Cond):
        if self.ind >= FLAT_COND_DEPTH and isinstance(e.e, N.Cond):
            return self.cond_chain(e)
        c = self.exp(e.c)
        ts = leaves(e.type)
        if self.SELECT and speculable(e.t) and speculable(e.e):
            # both arms computed, one picked: no branch in the loop (see ``speculable``)
            a, b = flat(self.exp(e.t)), flat(self.exp(e.e))
            return rebuild(e.type, iter([
                self.assign(t, f"_select({c}, {cast(t, x)}, {cast(t, y)})")
                for t, x, y in zip(ts, a, b)]))
        names = [self.fresh("c") for _ in ts]
        self.emit(f"if {c}:")
        self.branch(e.t, ts, names)
        self.emit("else:")
        self.branch(e.e, ts, names)
        return rebuild(e.type, iter(names))

    def cond_chain(self, e: N.Cond):
        """An else-if chain without nesting (Python allows at most 100 indentation
        levels): a ``done`` flag guards every later condition and branch."""
        ty = e.type
        ts = leaves(ty)
        names = [self.fresh("c") for _ in ts]
        done = self.fresh("done")
        self.emit(f"{done} = False")
        first = True
        while True:
            if isinstance(e, N.Cond):
                if first:
                    c = self.exp(e.c)
                else:
                    c = self.fresh("g")
                    self.emit(f"if {done}:")
                    self.emit(f"    {c} = False")
                    self.emit("else:")
                    self.ind += 1
                    self.emit(f"{c} = {self.exp(e.c)}")
                    self.ind -= 1
                self.emit(f"if {c}:")
                self.branch(e.t, ts, names)
                self.emit(f"    {done} = True")
                e, first = e.e, False
            else:
                self.emit(f"if not {done}:")
                self.branch(e, ts, names)
                return rebuild(ty, iter(names))

    def branch(self, e, ts, names) -> None:
        self.ind += 1
        v = flat(self.exp(e))
        for n, t, a in zip(names, ts, v):
            self.assign(t, a, n)
        if not ts:
            self.emit("pass")
        self.ind -= 1

    def e_While(self, e: N.While):
        ts = leaves(e.type)
        init = flat(self.exp(e.init))
        names = [self.fresh("w") for _ in ts]
        for n, t, a in zip(names, ts, init):
            self.assign(t, a, n)
        state = rebuild(e.type, iter(names))
        self.emit("while True:")
        self.ind += 1
        c = self.apply(e.cond, (state,))
        self.emit(f"if not {c}:")
        self.emit("    break")
        nxt = flat(self.apply(e.body, (state,)))
        tmp = []
        for t, a in zip(ts, nxt):  # simultaneous update through temporaries
            tmp.append(self.assign(t, a))
        for n, a in zip(names, tmp):
            self.emit(f"{n} = {a}")
        self.ind -= 1
        return state

    def e_PrimApp(self, e: N.PrimApp):
        args = [self.exp(a) for a in e.args]
        ats = [a.type for a in e.args]
        return self.prim(e.op, args, ats, e.type)

    # ---- steps

    def rows(self, s, *keys) -> tuple:
        """For a step over the innermost dimension of its rows (fold, scan): the element
        type, its leaves, the slots of ``("size",)``, ``("n",)`` and ``keys`` (in this
        order: it is the layout's), and the slots of the outer dimensions."""
        elt = s.out.type.elt
        slots = [self.slot(k) for k in (("size",), ("n",)) + keys]
        dims = [self.slot(("out", d)) for d in range(len(s.shape.type.items))]
        return elt, leaves(elt), slots, dims

    def scatter_target(self, target: N.Lam, ix: list, tdims: list) -> list:
        """Emit a permute's target function at source index ``ix`` and open ``if keep:``;
        with bounds checks also open ``if not (in bounds):`` and record the failure
        there (the caller closes that branch).  Returns the target index's atoms."""
        tv = self.apply(target, (tuple(ix),))
        keep, tix = tv[0], flat(tv[1])
        self.emit(f"if {keep}:")
        self.ind += 1
        if self.check and tix:
            self.emit(f"if not ({self.in_bounds(tix, tdims)}):")
            self.ind += 1
            self.record(Site("permute (target index)", None, len(tix)), tix)
        return tix

    # ---- statements

    def unravel(self, k: str, dims: list) -> list:
        """Row-major multi-index (atoms) of the flat position ``k`` in ``dims``."""
        r = len(dims)
        if r == 0:
            return []
        if r == 1:
            return [k]
        ix = [None] * r
        q = k
        for d in range(r - 1, 0, -1):
            ix[d] = self.fresh("i")
            self.emit(f"{ix[d]} = {q} % {dims[d]}")
            nq = self.fresh("q")
            self.emit(f"{nq} = {q} // {dims[d]}")
            q = nq
        ix[0] = q
        return ix

    def set_vars(self, names: list, ts: list, value) -> None:
        for n, t, a in zip(names, ts, flat(value)):
            self.assign(t, a, n)

    def update(self, names: list, ts: list, value) -> None:
        """Assign ``value`` to the variables ``names`` simultaneously (the atoms of
        ``value`` may be those variables)."""
        atoms = flat(value)
        if len(names) == 1:
            self.assign(ts[0], atoms[0], names[0])
            return
        tmp = [self.assign(t, a) for t, a in zip(ts, atoms)]
        for n, a in zip(names, tmp):
            self.emit(f"{n} = {a}")


#: Expression node type -> the emitter's method for it.
_EXP = {N.Const: ScalarEmitter.e_Const, N.Var: ScalarEmitter.e_Var, N.Let: ScalarEmitter.e_Let,
        N.Tuple: ScalarEmitter.e_Tuple, N.Prj: ScalarEmitter.e_Prj,
        N.Shape: ScalarEmitter.e_Shape, N.Index: ScalarEmitter.e_Index,
        N.Cond: ScalarEmitter.e_Cond, N.While: ScalarEmitter.e_While,
        N.PrimApp: ScalarEmitter.e_PrimApp}


# --------------------------------------------------------------------------- modules


def out_names(k: int, t) -> list:
    """The buffer arguments of output ``k`` (of array type ``t``), one per leaf."""
    return [f"r{k}_{j}" for j in range(len(leaves(t.elt)))]


def loop_steps(body: KBlock, kinds, backend: str):
    """The loop steps (of the types in ``kinds``) of ``body`` and its nested blocks, in
    program order."""
    for s in body.steps:
        if type(s) in kinds:
            yield s
        elif isinstance(s, KAcond):
            yield from loop_steps(s.t, kinds, backend)
            yield from loop_steps(s.e, kinds, backend)
        elif isinstance(s, KAwhile):
            yield from loop_steps(s.cond, kinds, backend)
            yield from loop_steps(s.body, kinds, backend)
        elif not isinstance(s, KUse):
            raise BackendError(f"{backend} backend: unknown kernel step {type(s).__name__}")


class StepTexts:
    """The functions of a module's steps: a step's text is written with the placeholder
    base name ``KERNEL``; identical texts share one name (``k0``, ``k1``, ...)."""

    def __init__(self):
        self.names: dict = {}  # text with the placeholder -> name
        self.texts: list = []

    def add(self, text: str, rename) -> str:
        """The name of ``text``'s functions; ``rename(text, name)`` gives the text under
        that name (added to the module the first time)."""
        name = self.names.get(text)
        if name is None:
            name = self.names[text] = f"k{len(self.names)}"
            self.texts.append(rename(text, name))
        return name

    def module(self, header: str) -> str:
        return header + "".join("\n\n" + t for t in self.texts)
