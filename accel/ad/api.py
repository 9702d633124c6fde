"""The differentiation API of API.md: gradientA, value_and_gradientA, gradientE,
vjp, jvp (see ``forward``) and check_grad.

Every function returned here is an ordinary program: called on ``Acc`` values
while another program is being traced it inlines its derivative program (so
it composes, and can be differentiated again); called on NumPy arrays it runs
on the default backend.
"""

from __future__ import annotations

import numpy as np

from ..ast import nodes as N
from ..ast.types import ArrayT, ATupleT, Scalar
from ..errors import NotDifferentiableError, ProgramTypeError, ShapeError
from ..frontend import (Acc, arg_type, call_program, current_context,
                        from_term, located, to_term, trace_lam, trace_program)
from .reverse.driver import reverse_program
from .wrt import resolve_wrt


def default_backend() -> str:
    """The backend used when a derivative is run on NumPy arrays: cpu when available."""
    from ..pipeline import BACKENDS
    return "cpu" if "cpu" in BACKENDS else "interpreter"


def _signature(args, op: str) -> tuple:
    if all(isinstance(a, Acc) for a in args):
        return tuple(a.type for a in args), True
    if any(isinstance(a, Acc) for a in args):
        raise ProgramTypeError(f"{op}: mixing Acc values and NumPy arrays in one call")
    return tuple(arg_type(a, i) for i, a in enumerate(args)), False


def gradient_program(prog: N.Program, wrt, op="gradientA", with_value=False,
                     mode: str | None = None):
    """(derivative program, whether a single gradient array is returned)."""
    t = prog.type
    if not (isinstance(t, ArrayT) and t.rank == 0 and isinstance(t.elt, Scalar)
            and t.elt.is_float):
        raise NotDifferentiableError(
            f"{op}: the program must return a rank-0 floating array (a scalar loss), but it "
            f"returns {t!r}; use A.vjp for other results")
    idx, single = resolve_wrt(op, prog, wrt)
    return _reverse_cached(prog, idx, mode, with_value), single


def _reverse_cached(prog: N.Program, idx, mode, with_value: bool) -> N.Program:
    """``reverse_program(prog, idx, "one", mode, with_value)``, kept in the program cache
    (``accel.progcache``) across processes.  Programs reading arrays of an enclosing
    program (free variables, named by this process) are not cached."""
    from .. import progcache
    from ..ast.traverse import free_vars
    text = None
    if progcache.enabled() and not free_vars(prog):
        text = progcache.key("reverse", prog, tuple(idx), mode, bool(with_value))
        hit = progcache.load(text)
        if isinstance(hit, N.Program) and len(hit.params) == len(prog.params):
            return hit
    g = reverse_program(prog, idx, "one", mode, with_value)
    if text is not None:
        progcache.store(text, g)
    return g


def _derivative(f, wrt, op: str, with_value: bool, mode: str):
    from ..pipeline import run

    @located
    def program(*args):
        sig, traced = _signature(args, op)
        if not traced:
            return run(program, *args, backend=default_backend())
        prog = trace_program(f, sig)
        g, single = gradient_program(prog, wrt, op, with_value, mode)
        out = call_program(g, list(args))
        if not isinstance(out, tuple):
            out = (out,)
        value, grads = (out[0], out[1:]) if with_value else (None, out)
        grads = grads[0] if single else tuple(grads)
        return (value, grads) if with_value else grads

    program.__name__ = f"{op}_{getattr(f, '__name__', 'f')}"
    return program


def gradientA(f, wrt=None, *, mode: str | None = None):
    """The gradient program of a scalar-valued program ``f``.

    ``mode`` picks how expression temporaries reach the dual pass: ``"store"``
    (computed once, kept in arrays) or ``"recompute"`` (recomputed in the dual; the
    default, ``reverse.DEFAULT_MODE``, chosen by ``benchmarks/ad_modes.py``).

    >>> g = A.gradientA(lambda x: A.sum_all(A.map(lambda v: v * v, x)))
    >>> A.run(g, np.arange(3.0), backend="interpreter")   # array([0., 2., 4.])
    """
    return _derivative(f, wrt, "gradientA", False, mode)


def value_and_gradientA(f, wrt=None, *, mode: str | None = None):
    """Like ``gradientA`` but the program returns ``(value, gradient)``."""
    return _derivative(f, wrt, "value_and_gradientA", True, mode)


# --------------------------------------------------------------------------- gradientE


def gradientE(f):
    """The partial derivatives of a scalar function, usable inside ``map``/``generate``.

    >>> A.map(A.gradientE(lambda x: x * A.sin(x)), a)
    """
    from .reverse.exp import gradient_lambda

    @located
    def partials(*args):
        if current_context() is None:
            return _gradientE_numpy(partials, args)
        types = tuple(to_term(a).type for a in args)
        lam = trace_lam("gradientE", f, types)
        g = gradient_lambda(lam)
        body = g.body
        for p, a in reversed(list(zip(g.params, args))):
            body = N.Let(p, to_term(a), body)
        out = from_term(body) if current_context().level == "exp" else from_term(body)
        return out[0] if len(args) == 1 else out

    partials.__name__ = f"gradientE_{getattr(f, '__name__', 'f')}"
    return partials


def _gradientE_numpy(fn, args):
    from ..language import generate
    from ..pipeline import run

    def prog(*arrs):
        def elem(_):
            return fn(*[a[()] for a in arrs])
        return generate((), elem)

    out = run(prog, *[np.asarray(a) for a in args], backend=default_backend())
    return out


# --------------------------------------------------------------------------- vjp


def vjp(f, *args):
    """``(outputs, pullback)``: ``pullback(cotangents)`` gives one cotangent per parameter."""
    from ..pipeline import run
    sig, traced = _signature(args, "vjp")
    prog = trace_program(f, sig)
    idx, _ = resolve_wrt("vjp", prog, None)
    vprog = reverse_program(prog, idx, "params")
    res_t = prog.type
    n_out = len(res_t.items) if isinstance(res_t, ATupleT) else 1
    nested = isinstance(res_t, ATupleT)

    def ct_leaves(cts):
        if nested:
            if not isinstance(cts, tuple) or len(cts) != n_out:
                raise ProgramTypeError(f"vjp pullback: expected a tuple of {n_out} cotangents")
            return list(cts)
        return [cts]

    def assemble(grads, zeros):
        out, k = [], 0
        for i in range(len(prog.params)):
            if i in idx:
                out.append(grads[k])
                k += 1
            else:
                out.append(zeros(i))
        return tuple(out)

    if traced:
        outs = call_program(prog, list(args))

        @located
        def pullback(cts):
            r = call_program(vprog, list(args) + ct_leaves(cts))
            r = r if isinstance(r, tuple) else (r,)
            from ..language import fill
            return assemble(r[n_out:], lambda i: fill(args[i].shape, _zero_like(args[i])))
        return outs, pullback

    backend = default_backend()
    outs = run(lambda *a: call_program(prog, list(a)), *args, backend=backend)

    outs_leaves = list(outs) if nested else [outs]

    @located
    def pullback_np(cts):
        cl = [np.asarray(c) for c in ct_leaves(cts)]
        for i, (c, o) in enumerate(zip(cl, outs_leaves)):
            o = np.asarray(o)
            if c.shape != o.shape:
                raise ShapeError(f"vjp pullback: cotangent {i} has shape {c.shape}, but the "
                                 f"output has shape {o.shape}")
        r = run(lambda *a: call_program(vprog, list(a)), *args, *cl, backend=backend)
        r = r if isinstance(r, tuple) else (r,)
        return assemble(r[n_out:], lambda i: np.zeros_like(np.asarray(args[i])))
    return outs, pullback_np


def _zero_like(a: Acc):
    """The zero element of ``a``'s type, as a user value (``Exp`` or tuple of them) that
    ``fill`` accepts: 0, 0.0, False or a tuple of those."""
    from .blocks import zero
    return from_term(zero(a.type.elt))


__all__ = ["gradientA", "value_and_gradientA", "gradientE", "vjp", "default_backend",
           "gradient_program"]
