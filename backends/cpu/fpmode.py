"""Opt-in flushing of subnormal numbers to zero in the generated kernels.

An x86 multiply or FMA whose input or result is subnormal (below 2.2e-308 in float64)
takes a microcode assist of about 100 cycles.  Gradients meet them where an adjoint is
scaled by a vanishing weight: in the GMM with D = 32, about 0.8% of the weighted
adjoints are subnormal, and the two D x D products that read them run twice as slowly
as the objective's one (1k points, K = 10: gradient 2.8 -> 2.2 ms with flushing).  XLA
sets the CPU's flush-to-zero and denormals-are-zero modes for all its code, so JAX
never pays this; PyTorch leaves them off unless asked (``torch.set_flush_denormal``).

accel computes subnormals exactly by default, as NumPy and the interpreter do.  With
``ACCEL_FLUSH_SUBNORMALS=1`` in the environment when a program is compiled for the
``cpu`` backend, every kernel function sets FTZ and DAZ (bits 15 and 6 of MXCSR) on
entry and puts back the caller's MXCSR on exit (the functions have no early return),
so a subnormal input reads as zero and a subnormal result is written as zero, on
whichever thread runs the function, and the caller's own floating-point mode is never
changed.  Normal results are unchanged unless they came from subnormal intermediates.
The setting is part of the generated source, so modules compiled with and without it
are cached apart.  x86-64 only (the modes are MXCSR bits); on other machines asking
for it is a ``BackendError``.  The ``cuda`` backend ignores it: GPUs handle float64
subnormals at full speed.
"""

from __future__ import annotations

import os
import platform

from accel.errors import BackendError

__all__ = ["ENV", "PROLOGUE", "EPILOGUE", "SOURCE", "flush_subnormals"]

ENV = "ACCEL_FLUSH_SUBNORMALS"
_ON, _OFF = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


def flush_subnormals() -> bool:
    """Whether kernels compiled now flush subnormals (``$ACCEL_FLUSH_SUBNORMALS``)."""
    value = os.environ.get(ENV, "").strip().lower()
    if value in _OFF:
        return False
    if value not in _ON:
        raise BackendError(f"cpu backend: {ENV}={os.environ[ENV]!r} is neither on "
                           f"({', '.join(_ON)}) nor off ({', '.join(v for v in _OFF if v)})")
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise BackendError(f"cpu backend: {ENV} needs an x86-64 CPU (MXCSR), not "
                           f"{platform.machine()}")
    return True


#: The first and last line of every kernel function's body when flushing.
PROLOGUE = "    fpm_ = _flush_subnormals_on()"
EPILOGUE = "    _restore_mxcsr(fpm_)"

#: Pasted after ``codegen.HEADER`` in modules compiled with flushing on.
SOURCE = '''

def _mxcsr_call(builder, name, ptr):
    """``name`` (LLVM's stmxcsr or ldmxcsr) on the 32-bit slot ``ptr``."""
    from llvmlite import ir
    i8p = ir.IntType(8).as_pointer()
    fn = builder.module.declare_intrinsic(name, fnty=ir.FunctionType(ir.VoidType(), [i8p]))
    builder.call(fn, [builder.bitcast(ptr, i8p)])


@_intrinsic
def _flush_subnormals_on(typingctx):
    """Set MXCSR's FTZ and DAZ bits; the previous MXCSR."""
    def codegen(context, builder, signature, args):
        from llvmlite import ir
        from numba.core.cgutils import alloca_once  # slots in the entry block
        old = alloca_once(builder, ir.IntType(32))
        _mxcsr_call(builder, "llvm.x86.sse.stmxcsr", old)
        prev = builder.load(old)
        new = alloca_once(builder, ir.IntType(32))
        builder.store(builder.or_(prev, ir.Constant(ir.IntType(32), 0x8040)), new)
        _mxcsr_call(builder, "llvm.x86.sse.ldmxcsr", new)
        return builder.zext(prev, ir.IntType(64))
    return _nbt.int64(), codegen


@_intrinsic
def _restore_mxcsr(typingctx, prev):
    """Put back the MXCSR that ``_flush_subnormals_on`` returned."""
    def codegen(context, builder, signature, args):
        from llvmlite import ir
        from numba.core.cgutils import alloca_once
        slot = alloca_once(builder, ir.IntType(32))
        builder.store(builder.trunc(args[0], ir.IntType(32)), slot)
        _mxcsr_call(builder, "llvm.x86.sse.ldmxcsr", slot)
        return context.get_dummy_value()
    return _nbt.none(_nbt.int64), codegen
'''
