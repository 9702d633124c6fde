"""Builders of kernel-program IR for the backend tests (test_cpu_backend, test_cuda_backend),
and the assembly of a generated cpu kernel."""

from __future__ import annotations

from accel.ast import nodes as N
from accel.ast.types import ArrayT, ATupleT, float64, int64, shape_type
from accel.fusion.kernels import KBlock, KernelProgram, KGenerate


def P(op, *args):
    return N.PrimApp(op, tuple(args))


def i64(v):
    return N.Const(v, int64)


def f64(v):
    return N.Const(v, float64)


def lam(types, fn):
    params = tuple(N.Var(N.fresh("x"), t) for t in types)
    return N.Lam(params, fn(*params))


def av(elt, rank, p="a"):
    return N.Avar(N.fresh(p), ArrayT(elt, rank))


def sh(*exps):
    return N.Tuple(tuple(i64(e) if isinstance(e, int) else e for e in exps))


def dim(a, k):
    return N.Prj(k, N.Shape(a))


def at(a, *ix):
    return N.Index(a, sh(*ix))


def ix_lam(rank, fn):
    """A function of an index of ``rank``; ``fn`` gets the components."""
    return lam((shape_type(rank),), lambda i: fn(*(N.Prj(k, i) for k in range(rank))))


def kprog(params, steps, result):
    res = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    rt = ATupleT(tuple(r.type for r in res)) if isinstance(result, (tuple, list)) else result.type
    return KernelProgram(tuple(params), KBlock(tuple(steps), res), rt)


def kernel_asm(runner, name_pattern: str):
    """``(python function, x86 assembly)`` of the generated function of ``runner`` whose
    name matches ``name_pattern`` (e.g. ``k\\d+_b``), compiled again uncached (numba
    cannot inspect cached code) with emitter.FLAGS, as the kernels are
    (``vectorize.as_kernel``), for the types the runner compiled it for."""
    import re

    import numba

    from accel.backends.cpu import vectorize
    (name,) = [n for n in vars(runner.module) if re.fullmatch(name_pattern, n)]
    py = getattr(runner.module, name).py_func
    fn = numba.njit(error_model="numpy", fastmath={"contract"})(py)
    vectorize.as_kernel(fn)
    sig = dict(runner.compiled_signatures()).get(name)  # the types the runner compiled
    if sig is None:  # not run yet: float64 arrays
        import inspect
        arr, i64_t = numba.float64[::1], numba.int64
        sig = tuple(i64_t if p in ("lo", "hi", "c") else
                    numba.int64[::1] if p in ("shp", "err") else arr
                    for p in inspect.signature(py).parameters)
    fn.compile(sig)
    return py, fn.inspect_asm(sig)


def unary_prog(op, elt):
    """``y[i] = op(x[i])``: one element loop of a unary primitive."""
    xs, out = av(elt, 1, "x"), av(elt, 1, "y")
    return kprog((xs,), [KGenerate((out,), sh(dim(xs, 0)), ix_lam(1, lambda i: P(op, at(xs, i))))],
                 out)
