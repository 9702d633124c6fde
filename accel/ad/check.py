"""``check_grad``: reverse mode vs forward mode vs finite differences.

Finite differences are central differences with one Richardson extrapolation
step, ``(4 D(h/2) - D(h)) / 3`` with ``D(h) = (f(x+h) - f(x-h)) / 2h`` and
``h = 1e-3 * max(1, |x|)``: error O(h^4), evaluated in float64 whenever the
program can be traced at float64 (a float32 program is retraced), which is
better than the thesis's least-squares fit of four float32 differences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..frontend import arg_type, call_program, trace_program
from ..pipeline import compile as compile_program
from .api import default_backend, gradient_program
from .wrt import resolve_wrt


@dataclass
class GradCheckReport:
    """The three gradients (one array per differentiated parameter) and their agreement."""

    ok: bool
    max_error: float
    reverse: tuple
    forward: tuple
    finite_difference: tuple
    wrt: tuple
    rtol: float
    atol: float

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        status = "ok" if self.ok else "MISMATCH"
        return (f"GradCheckReport({status}, max_error={self.max_error:.3g}, wrt={self.wrt}, "
                f"rtol={self.rtol:g}, atol={self.atol:g})")


def _scalar(v) -> float:
    return float(np.asarray(v).reshape(()))


def check_grad(f, *args, rtol=1e-5, atol=1e-7, wrt=None, backend=None) -> GradCheckReport:
    """Compare reverse mode, forward mode and central finite differences at ``args``.

    For float32 programs the tolerances are raised to at least rtol=1e-3,
    atol=1e-4 (float32 cannot do better).  Returns a report; ``bool(report)``
    is ``report.ok``.
    """
    from .forward.driver import jvp_program
    backend = backend or default_backend()
    args = [np.array(a, copy=True) for a in args]
    sig = tuple(arg_type(a, i) for i, a in enumerate(args))
    prog = trace_program(f, sig)
    idx, _ = resolve_wrt("check_grad", prog, wrt)
    gprog, _ = gradient_program(prog, tuple(idx), "check_grad")
    rev = compile_program(lambda *a: call_program(gprog, list(a)), backend)(*args)
    rev = rev if isinstance(rev, tuple) else (rev,)

    jprog = jvp_program(prog, tuple(idx))
    jrun = compile_program(lambda *a: call_program(jprog, list(a)), backend)
    fwd = []
    for k, i in enumerate(idx):
        g = np.zeros_like(args[i])
        zeros = [np.zeros_like(args[j]) for j in idx]
        for pos in np.ndindex(args[i].shape):
            t = [z.copy() for z in zeros]
            t[k][pos] = 1
            out = jrun(*args, *t)
            g[pos] = _scalar(out[-1])
        fwd.append(g)

    low = any(args[i].dtype == np.float32 for i in idx)
    if low:
        rtol, atol = max(rtol, 1e-3), max(atol, 1e-4)
    fd = _finite_differences(f, args, idx, backend)
    err = 0.0
    ok = True
    for r, fw, d in zip(rev, fwd, fd):
        for other in (fw, d):
            r64, o64 = np.asarray(r, np.float64), np.asarray(other, np.float64)
            if r64.size:
                err = max(err, float(np.max(np.abs(r64 - o64))))
            ok &= bool(np.allclose(r64, o64, rtol=rtol, atol=atol, equal_nan=True))
    return GradCheckReport(ok, err, tuple(rev), tuple(fwd), tuple(fd), tuple(idx), rtol, atol)


def _finite_differences(f, args, idx, backend):
    run64 = compile_program(f, backend)
    hi = [a.astype(np.float64) if a.dtype == np.float32 else a for a in args]
    try:
        run64(*hi)
        base = hi
    except Exception:  # the program is not dtype-generic: difference at its own precision
        base = args

    def value(xs):
        return _scalar(run64(*xs)).__float__()

    out = []
    for i in idx:
        x = base[i]
        g = np.zeros(x.shape, np.float64)
        for pos in np.ndindex(x.shape):
            h = 1e-3 * max(1.0, abs(float(x[pos])))
            if x.dtype == np.float32:
                h = 1e-2 * max(1.0, abs(float(x[pos])))

            def d(step):
                xp, xm = x.copy(), x.copy()
                xp[pos] += step
                xm[pos] -= step
                a_p, a_m = list(base), list(base)
                a_p[i], a_m[i] = xp, xm
                return (value(a_p) - value(a_m)) / (2 * step)

            g[pos] = (4 * d(h / 2) - d(h)) / 3
        out.append(g.astype(args[i].dtype))
    return out
