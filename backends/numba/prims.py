"""The primitives of scalar expressions in generated numba code, with exactly
``accel.ast.prims``' semantics: floored integer ``//``/``%`` with 0 for a zero divisor,
NumPy's float floor division and remainder, integer powers with negative exponents,
truncating conversions with nan -> 0.

``PrimEmitter`` is the part of ``kernelgen.ScalarEmitter`` that writes primitive
applications; it relies on the emitter's ``assign``/``emit``/``fresh`` and on the
dialect hooks ``const``, ``tc``, ``math`` and ``math_prim`` (see ``kernelgen``).
Imports only ``accel`` (ast, errors).
"""

from __future__ import annotations

from accel.ast.types import Scalar
from accel.errors import BackendError

from .literals import cast, const_atom

_INFIX = {"add": "+", "sub": "-", "mul": "*", "lt": "<", "le": "<=", "gt": ">", "ge": ">=",
          "eq": "==", "ne": "!=", "and": "&", "or": "|", "xor": "^"}


class PrimEmitter:
    """Primitive applications (a mixin of ``ScalarEmitter``)."""

    def prim(self, op: str, args: list, ats: list, rt: Scalar) -> str:
        t0 = ats[0]
        lib = self.math_prim(op, args, t0, rt)
        if lib is not None:
            return lib
        if op in _INFIX:
            return self.assign(rt, f"{args[0]} {_INFIX[op]} {args[1]}")
        if op == "div":
            return self.assign(rt, f"{args[0]} / {args[1]}")
        if op == "neg":
            return self.assign(rt, f"-{args[0]}")
        if op == "abs":
            return self.assign(rt, f"abs({args[0]})")
        if op in ("max", "min"):
            x, y = args
            cmp = ">=" if op == "max" else "<="
            if self.SELECT:  # no branch: numba's passes cost time per block and per phi
                nan = f" | ({x} != {x})" if t0.is_float else ""
                a, b = (self.tc(rt, v) if v.isidentifier() else cast(rt, v) for v in args)
                return self.assign(rt, f"_select(({x} {cmp} {y}){nan}, {a}, {b})")
            nan = f" or {x} != {x}" if t0.is_float else ""
            return self.assign(rt, f"{x} if ({x} {cmp} {y}{nan}) else {y}")
        if op == "not":
            return self.assign(rt, f"not {args[0]}" if t0.is_bool else f"~{args[0]}")
        if op == "floordiv":
            return self.floordiv(args, rt) if t0.is_int else self.float_floordiv(args, rt)
        if op == "mod":
            return self.int_mod(args, rt) if t0.is_int else self.float_mod(args, rt)
        if op == "pow" and t0.is_int:
            return self.int_pow(args, rt)
        if op.startswith("to_"):
            return self.convert(args[0], t0, rt)
        raise BackendError(f"{self.BACKEND} backend: no code for primitive {op!r}")

    def floordiv(self, args, rt) -> str:
        x, y = args
        r = self.fresh()
        self.emit(f"if {y} == 0:")
        self.emit(f"    {r} = {self.const(0, rt)}")
        self.emit(f"elif {y} == -1:")
        self.emit(f"    {r} = {self.tc(rt, '-' + x)}")
        self.emit("else:")
        self.emit(f"    {r} = {self.tc(rt, f'{x} // {y}')}")
        return r

    def float_floordiv(self, args, rt) -> str:
        # NumPy's npy_floor_divide (via npy_divmod): exact floor of the quotient, like
        # Python's //, e.g. 5 // 0.001 == 4999 and 3.7 // -inf == -1.
        x, y = args
        r, m, d = self.fresh(), self.fresh("m"), self.fresh("d")
        fmod, floor, copysign = (self.math(n, rt) for n in ("fmod", "floor", "copysign"))
        c = lambda e: self.tc(rt, e)  # noqa: E731
        self.emit(f"if {y} == 0:")
        self.emit(f"    {r} = {c(f'{x} / {y}')}")
        self.emit("else:")
        self.emit(f"    {m} = {c(f'{fmod}({x}, {y})')}")
        self.emit(f"    {d} = {c(f'({x} - {m}) / {y}')}")
        self.emit(f"    if {m} != 0 and (({y} < 0) != ({m} < 0)):")
        self.emit(f"        {d} = {c(f'{d} - 1')}")
        self.emit(f"    if {d} != 0:")
        self.emit(f"        {r} = {c(f'{floor}({d})')}")
        self.emit(f"        if {d} - {r} > 0.5:")
        self.emit(f"            {r} = {c(f'{r} + 1')}")
        self.emit("    else:")
        self.emit(f"        {r} = {c(f'{copysign}({self.const(0.0, rt)}, {x} / {y})')}")
        return r

    def int_mod(self, args, rt) -> str:
        x, y = args
        r = self.fresh()
        self.emit(f"if {y} == 0 or {y} == -1:")
        self.emit(f"    {r} = {self.const(0, rt)}")
        self.emit("else:")
        self.emit(f"    {r} = {self.tc(rt, f'{x} % {y}')}")
        return r

    def float_mod(self, args, rt) -> str:
        # NumPy's npy_divmod: fmod, then move the remainder to the divisor's sign.
        x, y = args
        m = self.fresh("m")
        fmod, copysign = self.math("fmod", rt), self.math("copysign", rt)
        self.emit(f"{m} = {self.tc(rt, f'{fmod}({x}, {y})')}")
        self.emit(f"if {y} != 0:")
        self.emit(f"    if {m} != 0:")
        self.emit(f"        if ({y} < 0) != ({m} < 0):")
        self.emit(f"            {m} = {self.tc(rt, f'{m} + {y}')}")
        self.emit("    else:")
        self.emit(f"        {m} = {self.tc(rt, f'{copysign}({self.const(0.0, rt)}, {y})')}")
        return m

    def int_pow(self, args, rt) -> str:
        x, y = args
        r, acc, b, e = self.fresh(), self.fresh("p"), self.fresh("p"), self.fresh("p")
        # plain literals in both dialects (as the CUDA dialect has always had here)
        one = const_atom(1, rt)
        self.emit(f"if {y} < 0:")
        self.emit(f"    if {x} == 1:")
        self.emit(f"        {r} = {one}")
        self.emit(f"    elif {x} == -1:")
        self.emit(f"        {r} = {one} if {y} % 2 == 0 else {const_atom(-1, rt)}")
        self.emit("    else:")
        self.emit(f"        {r} = {const_atom(0, rt)}")
        self.emit("else:")
        self.emit(f"    {acc} = np.int64(1)")
        self.emit(f"    {b} = np.int64({x})")
        self.emit(f"    {e} = np.int64({y})")
        self.emit(f"    while {e} > 0:")
        self.emit(f"        if {e} & 1:")
        self.emit(f"            {acc} = np.int64({acc} * {b})")
        self.emit(f"        {b} = np.int64({b} * {b})")
        self.emit(f"        {e} = np.int64({e} >> 1)")
        self.emit(f"    {r} = {self.tc(rt, acc)}")
        return r

    def convert(self, x: str, src: Scalar, rt: Scalar) -> str:
        if rt.is_bool:
            return self.assign(rt, x if src.is_bool else f"{x} != 0")
        if rt.is_int and src.is_float:  # truncation; nan and +-inf give 0 (as in prims)
            return self.assign(rt, f"{cast(rt, x)} if np.isfinite({x}) else "
                                   f"{self.const(0, rt)}")
        if rt == src:
            return x
        return self.assign(rt, cast(rt, x))
