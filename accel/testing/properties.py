"""Differential properties of generated programs (see ``programs``).

Each ``check_*`` function takes a ``ProgramDesc`` and raises ``PropertyFailure`` (an
``AssertionError``) when the property is violated, or ``Skip`` when it does not apply
(for instance finite differences at a kink).  ``PROPERTIES`` lists them by name for
the soak.

- ``backends``: every backend gives the interpreter's results (same structure, dtypes
  and shapes; float64 values to rtol 1e-9 of the output's magnitude, allowing for
  reassociation; float32 to 1e-5; integers and bools exactly).
- ``gradient``: for a differentiable program (``loss``), the gradient program
  type-checks; reverse mode (``A.gradientA``) agrees with forward mode (``A.jvp``)
  along random directions, and both with central finite differences away from kinks
  (a kink or jump is detected by comparing one-sided differences at two step sizes);
  store and recompute modes agree; every backend runs the gradient program like the
  interpreter; and the dot-product test ``<vjp(ct), t> == <ct, jvp(t)>`` holds for the
  program's (non-scalar, maybe tuple) results, with ``A.vjp`` traced inside a program.
- ``second_order``: the gradient program differentiates again, in both modes (reverse
  over reverse, forward over reverse), agreeing with finite differences of the gradient.
"""

from __future__ import annotations

import numpy as np

import accel as A

from .programs import ProgramDesc


class PropertyFailure(AssertionError):
    """A property does not hold; ``prop`` names it and ``kind`` classifies the failure."""

    def __init__(self, prop: str, kind: str, message: str):
        super().__init__(f"[{prop}] {kind}: {message}")
        self.prop = prop
        self.kind = kind


class Skip(Exception):
    """The property does not apply to this program (the message says why)."""


_USABLE: dict = {}


def usable(backend: str) -> bool:
    """Whether ``backend`` is listed in ``accel.pipeline.BACKENDS`` *and* runs here (the
    ``cuda`` backend is listed but needs a GPU or the simulator): probed once."""
    from accel.pipeline import BACKENDS
    if backend not in BACKENDS:
        return False
    if backend not in _USABLE:
        try:
            A.run(lambda a: A.map(lambda v: v + 1.0, a), np.zeros(2), backend=backend)
            _USABLE[backend] = True
        except A.BackendError:
            _USABLE[backend] = False
    return _USABLE[backend]


def available_backends(requested=None) -> list[str]:
    """The requested backends (default: all listed) that are usable here."""
    from accel.pipeline import BACKENDS
    names = list(BACKENDS) if requested is None else list(requested)
    return [b for b in names if usable(b)]


def leaves(v) -> list:
    if isinstance(v, tuple):
        return [x for item in v for x in leaves(item)]
    return [v]


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


def assert_same_values(ref, out, where: str, prop: str = "backends", rtol64=1e-9, rtol32=1e-5):
    """``out`` equals ``ref`` leaf by leaf (see the module docstring for tolerances)."""
    lr, lo = leaves(ref), leaves(out)
    if len(lr) != len(lo):
        raise PropertyFailure(prop, "structure", f"{where}: {len(lo)} results, expected "
                              f"{len(lr)}")
    for k, (x, y) in enumerate(zip(lr, lo)):
        if not isinstance(y, np.ndarray):
            raise PropertyFailure(prop, "type", f"{where}: result {k} is a {type(y).__name__}, "
                                  "not a numpy.ndarray")
        x = np.asarray(x)
        if x.dtype != y.dtype:
            raise PropertyFailure(prop, "dtype", f"{where}: result {k} has dtype {y.dtype}, "
                                  f"expected {x.dtype}")
        if x.shape != y.shape:
            raise PropertyFailure(prop, "shape", f"{where}: result {k} has shape {y.shape}, "
                                  f"expected {x.shape}")
        if x.dtype.kind == "f":
            rtol = rtol64 if x.dtype == np.float64 else rtol32
            fin = np.concatenate([np.ravel(x[np.isfinite(x)]), np.ravel(y[np.isfinite(y)])])
            scale = 1.0 + (float(np.max(np.abs(fin))) if fin.size else 0.0)
            ok = np.isclose(x, y, rtol=rtol, atol=rtol * scale, equal_nan=True)
            if not np.all(ok):
                i = tuple(np.argwhere(~ok)[0])
                raise PropertyFailure(prop, "values", f"{where}: result {k} differs at {i}: "
                                      f"{y[i]!r}, expected {x[i]!r} (of {x.size})")
        elif not np.array_equal(x, y):
            i = tuple(np.argwhere(x != y)[0]) if x.ndim else ()
            raise PropertyFailure(prop, "values", f"{where}: result {k} differs at {i}: "
                                  f"{y[i]!r}, expected {x[i]!r}")


def run_reference(desc: ProgramDesc, prog=None):
    """The interpreter's result of ``desc`` (a failure is reported as property ``runs``)."""
    if prog is None:
        prog, _ = desc.build()
    args = desc.args()
    try:
        out = A.run(prog, *args, backend="interpreter")
    except Exception as e:  # a generated program is well-typed and in bounds by construction
        raise PropertyFailure("runs", f"interpreter {type(e).__name__}", _describe(e)) from e
    for x, saved in zip(args, desc.inputs):
        if not np.array_equal(x, saved, equal_nan=True):
            raise PropertyFailure("runs", "mutation", "the interpreter mutated an argument")
    return out


def check_backends(desc: ProgramDesc, backends=None, check_bounds=False):
    """Every backend in ``backends`` (default: all available) matches the interpreter."""
    prog, _ = desc.build()
    ref = run_reference(desc, prog)
    for b in available_backends(backends):
        if b == "interpreter":
            continue
        args = desc.args()
        try:
            out = A.run(prog, *args, backend=b, check_bounds=check_bounds)
        except Exception as e:
            raise PropertyFailure("backends", f"{b} {type(e).__name__}", _describe(e)) from e
        for x, saved in zip(args, desc.inputs):
            if not np.array_equal(x, saved, equal_nan=True):
                raise PropertyFailure("backends", "mutation", f"{b} mutated an argument")
        assert_same_values(ref, out, f"backend {b!r}")
    return ref


# --------------------------------------------------------------------------- gradients


def gradient_typechecks(desc: ProgramDesc, wrt):
    from accel.ad.api import gradient_program
    from accel.ast.typecheck import typecheck
    from accel.frontend import arg_type, trace_program
    _, loss = desc.build()
    sig = tuple(arg_type(a, i) for i, a in enumerate(desc.inputs))
    try:
        prog = trace_program(loss, sig)
        g, _ = gradient_program(prog, wrt)
        typecheck(g)
    except Exception as e:
        raise PropertyFailure("gradient", f"gradient program {type(e).__name__}",
                              _describe(e)) from e
    return g


def _directional_fd(value, x0: list, t: list, scale: float):
    """Central difference of ``value`` along ``t`` at ``x0``, or None near a kink/jump."""
    def F(h):
        return value([x + h * d for x, d in zip(x0, t)])

    f0 = F(0.0)
    h1, h2 = 1e-3, 1e-4
    fp1, fm1, fp2, fm2 = F(h1), F(-h1), F(h2), F(-h2)
    fp3, fm3 = F(h2 / 2), F(-h2 / 2)
    vals = np.array([f0, fp1, fm1, fp2, fm2, fp3, fm3])
    if not np.all(np.isfinite(vals)):
        return None
    k1 = abs((fp1 - f0) / h1 - (f0 - fm1) / h1)
    k2 = abs((fp2 - f0) / h2 - (f0 - fm2) / h2)
    noise = 1e-11 * (1.0 + float(np.max(np.abs(vals)))) / h2
    if k2 > 0.35 * k1 + 10 * noise + 1e-9 * scale:
        return None  # one-sided slopes differ and do not converge: a kink or jump
    c2 = (fp2 - fm2) / (2 * h2)
    c3 = (fp3 - fm3) / h2
    return (4 * c3 - c2) / 3


def check_gradient(desc: ProgramDesc, backends=None, directions: int = 2, seed: int = 0,
                   modes=("store", "recompute")):
    """Reverse == forward == finite differences for ``desc.loss`` (see the module doc)."""
    if not desc.differentiable:
        raise Skip("not differentiable")
    args = desc.args()
    wrt = tuple(i for i, a in enumerate(args) if a.dtype.kind == "f")
    if not wrt:
        raise Skip("no floating parameter")
    gradient_typechecks(desc, wrt)
    prog, loss = desc.build()
    run = A.compile(loss, backend="interpreter")
    try:
        v = float(run(*args))
    except Exception as e:
        raise PropertyFailure("runs", f"interpreter {type(e).__name__}", _describe(e)) from e
    grads = {}
    for mode in modes:
        try:
            g = A.run(A.gradientA(loss, wrt=wrt, mode=mode), *desc.args(),
                      backend="interpreter")
        except Exception as e:
            raise PropertyFailure("gradient", f"gradientA({mode}) {type(e).__name__}",
                                  _describe(e)) from e
        grads[mode] = g
    g = grads[modes[0]]
    for mode in modes[1:]:
        assert_same_values(g, grads[mode], f"gradientA mode={mode!r} vs {modes[0]!r}",
                           prop="gradient", rtol64=1e-8)
    for b in available_backends(backends):
        if b == "interpreter":
            continue
        try:
            gb = A.run(A.gradientA(loss, wrt=wrt), *desc.args(), backend=b)
        except Exception as e:
            raise PropertyFailure("gradient", f"{b} {type(e).__name__}", _describe(e)) from e
        assert_same_values(g, gb, f"gradient on backend {b!r}", prop="gradient", rtol64=1e-8)
    if not np.isfinite(v) or abs(v) > 1e8 or not all(np.all(np.isfinite(x)) for x in g):
        return "ok (non-finite or huge: no forward/finite-difference check)"

    rng = np.random.default_rng(seed)
    fd_done = 0
    for _ in range(directions):
        t_full = []
        for a in args:
            if a.dtype.kind == "f":
                d = rng.standard_normal(a.shape)
                t_full.append((d / max(1.0, float(np.max(np.abs(d), initial=0.0))))
                              .astype(a.dtype))
            else:
                t_full.append(None)
        ts = [t_full[i] for i in wrt]
        rev = float(sum(np.sum(gi * ti) for gi, ti in zip(g, ts)))
        scale = float(sum(np.sum(np.abs(gi * ti)) for gi, ti in zip(g, ts)))
        try:
            _, dout = A.jvp(loss, tuple(desc.args()), tuple(t_full), backend="interpreter")
        except Exception as e:
            raise PropertyFailure("gradient", f"jvp {type(e).__name__}", _describe(e)) from e
        fwd = float(dout)
        if not abs(rev - fwd) <= 1e-7 * (abs(rev) + abs(fwd)) + 1e-9 * (1.0 + scale):
            raise PropertyFailure("gradient", "reverse != forward",
                                  f"<gradientA, t> = {rev!r} but jvp = {fwd!r}")

        def value(xs):
            full = list(desc.args())
            for i, x in zip(wrt, xs):
                full[i] = x
            return float(run(*full))

        fd = _directional_fd(value, [args[i] for i in wrt], ts, scale)
        if fd is None:
            continue
        fd_done += 1
        if not abs(fd - rev) <= 1e-5 * (abs(rev) + scale) + 1e-6 * (1.0 + abs(v)):
            raise PropertyFailure("gradient", "reverse != finite differences",
                                  f"<gradientA, t> = {rev!r} but finite differences give "
                                  f"{fd!r}")
    _check_dot_product(desc, prog, args, wrt, rng)
    return "ok" if fd_done else "ok (kink: no finite differences)"


def _check_dot_product(desc, prog, args, wrt, rng):
    """``<vjp(ct), t> == <ct, jvp(t)>`` for the program's (non-scalar, maybe tuple) results,
    with ``A.vjp`` traced inside a program and ``A.jvp`` on NumPy arrays."""
    outs = A.run(prog, *desc.args(), backend="interpreter")
    tuple_result = isinstance(outs, tuple)
    cts = [rng.standard_normal(np.shape(o)) for o in leaves(outs)]
    n = len(args)

    def pull(*xs):
        _, pullback = A.vjp(prog, *xs[:n])
        return pullback(tuple(xs[n:]) if tuple_result else xs[n])

    try:
        vj = A.run(pull, *desc.args(), *cts, backend="interpreter")
    except Exception as e:
        raise PropertyFailure("gradient", f"vjp {type(e).__name__}", _describe(e)) from e
    t_full = [rng.standard_normal(a.shape) if a.dtype.kind == "f" else None for a in args]
    try:
        _, tout = A.jvp(prog, tuple(desc.args()), tuple(t_full), backend="interpreter")
    except Exception as e:
        raise PropertyFailure("gradient", f"jvp {type(e).__name__}", _describe(e)) from e
    lhs = float(sum(np.sum(vj[i] * t_full[i]) for i in wrt))
    rhs = float(sum(np.sum(c * t) for c, t in zip(cts, leaves(tout))))
    scale = float(sum(np.sum(np.abs(vj[i] * t_full[i])) for i in wrt)) + \
        float(sum(np.sum(np.abs(c * t)) for c, t in zip(cts, leaves(tout))))
    if not np.isfinite(scale):
        return
    if not abs(lhs - rhs) <= 1e-7 * scale + 1e-9:
        raise PropertyFailure("gradient", "vjp/jvp dot product",
                              f"<vjp(ct), t> = {lhs!r} but <ct, jvp(t)> = {rhs!r}")


def check_second_order(desc: ProgramDesc, backends=None, seed: int = 0):
    """The gradient differentiates again: with ``S = <w, gradientA(loss)>`` for random
    weights ``w``, reverse over reverse (``gradientA(S)``) agrees with forward over
    reverse (``<w, jvp(gradientA(loss))(t)> = <gradientA(S), t>``, the Hessian being
    symmetric) and with finite differences of ``S`` away from kinks; every backend in
    ``backends`` runs ``gradientA(S)`` like the interpreter."""
    if not desc.differentiable:
        raise Skip("not differentiable")
    args = desc.args()
    wrt = tuple(i for i, a in enumerate(args) if a.dtype.kind == "f")
    if not wrt:
        raise Skip("no floating parameter")
    _, loss = desc.build()
    rng = np.random.default_rng(seed)
    ws = [rng.standard_normal(args[i].shape) for i in wrt]
    g = A.gradientA(loss, wrt=wrt)

    def weighted(*xs):
        total = None
        for gi, w in zip(leaves(g(*xs)), ws):
            s = A.sum_all(A.zip_with(lambda p, q: p * q, gi, A.use(w)))
            total = s if total is None else A.zip_with(lambda p, q: p + q, total, s)
        return total

    s_run = A.compile(weighted, backend="interpreter")
    try:
        v = float(s_run(*args))
        rr = A.run(A.gradientA(weighted, wrt=wrt), *desc.args(), backend="interpreter")
    except Exception as e:
        raise PropertyFailure("second_order", f"reverse over reverse {type(e).__name__}",
                              _describe(e)) from e
    rr = leaves(rr)
    for b in available_backends(backends):
        if b == "interpreter":
            continue
        try:
            rb = A.run(A.gradientA(weighted, wrt=wrt), *desc.args(), backend=b)
        except Exception as e:
            raise PropertyFailure("second_order", f"{b} {type(e).__name__}",
                                  _describe(e)) from e
        assert_same_values(tuple(rr), tuple(leaves(rb)), f"reverse over reverse on {b!r}",
                           prop="second_order", rtol64=1e-8)
    if not np.isfinite(v) or abs(v) > 1e8 or not all(np.all(np.isfinite(x)) for x in rr):
        raise Skip("non-finite or huge")
    ts = [rng.standard_normal(args[i].shape) for i in wrt]
    t_full = [None] * len(args)
    for i, t in zip(wrt, ts):
        t_full[i] = t
    rev = float(sum(np.sum(r * t) for r, t in zip(rr, ts)))
    scale = float(sum(np.sum(np.abs(r * t)) for r, t in zip(rr, ts)))
    try:
        _, gdot = A.jvp(g, tuple(desc.args()), tuple(t_full), backend="interpreter")
    except Exception as e:
        raise PropertyFailure("second_order", f"forward over reverse {type(e).__name__}",
                              _describe(e)) from e
    fwd = float(sum(np.sum(w * d) for w, d in zip(ws, leaves(gdot))))
    fscale = float(sum(np.sum(np.abs(w * d)) for w, d in zip(ws, leaves(gdot))))
    if not abs(rev - fwd) <= 1e-7 * (scale + fscale) + 1e-9:
        raise PropertyFailure("second_order", "reverse over reverse != forward over reverse",
                              f"<gradientA(S), t> = {rev!r} but <w, jvp(gradient)(t)> = "
                              f"{fwd!r}")

    def value(xs):
        full = list(desc.args())
        for i, x in zip(wrt, xs):
            full[i] = x
        return float(s_run(*full))

    fd = _directional_fd(value, [args[i] for i in wrt], ts, scale)
    if fd is None:
        return "ok (kink: no finite differences)"
    if not abs(fd - rev) <= 1e-5 * (abs(rev) + scale) + 1e-6 * (1.0 + abs(v)):
        raise PropertyFailure("second_order", "reverse over reverse != finite differences",
                              f"<gradientA(S), t> = {rev!r} but finite differences give "
                              f"{fd!r}")
    return "ok"


PROPERTIES = {"backends": check_backends, "gradient": check_gradient,
              "second_order": check_second_order}
