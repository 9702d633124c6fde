"""Compile every CUDA kernel of a program corpus to PTX, without a GPU.

    python -m accel.backends.cuda.ptxcheck [--cc 9.0] [--quick] [--quiet]

The corpus is the backend-parity corpus (``tests/test_backend_parity.py``'s
``CORPUS``: primal programs and gradients), the ADBench GMM gradient and BA Jacobian
on tiny inputs, and a few programs that reach the scatter strategies and primitives
the others do not (compare-and-swap and lock permutes, integer atomics, float32, every
primitive).  Each program is traced, optimised and fused as ``A.run`` would, and the
kernels of its generated module (with and without bounds checks) are compiled by
``numba.cuda.compile_ptx`` for the given compute capability, with the argument types
the runtime launches them with.  It prints the number of kernels compiled and exits
1 if any failed (3 if PTX compilation is unavailable here).

PTX compilation needs numba-cuda with NVRTC/NVVM (``numba-cuda[cu13]``) and does not
work under the simulator: when ``NUMBA_ENABLE_CUDASIM`` is set, the check re-runs
itself in a subprocess without it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
UNAVAILABLE = 3  # exit status when cuda.compile_ptx cannot work here


# --------------------------------------------------------------------------- corpus


def extra_corpus() -> dict:
    import accel as A

    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, 23)
    ix = rng.integers(0, 23, 17).astype(np.int64)
    xi = rng.integers(-50, 50, 17).astype(np.int32)
    xf = x[:17].astype(np.float32)
    m = rng.uniform(-1, 1, (4, 9))
    mi = rng.integers(-9, 9, (3, 10)).astype(np.int32)

    def _f32(v):
        return A.to_float(v, A.float32)

    def prims(a, b):
        def one(v, w):
            return (A.sin(v) + A.cos(w) + A.tan(v) + A.asin(v * 0.5) + A.acos(w * 0.5)
                    + A.atan(v) + A.sinh(v) + A.cosh(w) + A.tanh(v) + A.exp(v) + A.expm1(w)
                    + A.log(abs(v) + 1.0) + A.log1p(abs(w)) + A.sqrt(abs(v)) + A.floor(v)
                    + A.ceil(w) + A.round(v) + A.truncate(w) + A.atan2(v, w) + v // w
                    + v % w + v ** w + A.max(v, w) + A.min(v, w) - v / w)
        return (A.zip_with(one, a, b),
                A.zip_with(one, A.map(_f32, a), A.map(_f32, b)),
                A.zip_with(lambda v, w: A.to_int(v * 1e10) // A.to_int(w * 100.0 + 1.0)
                           + A.to_int(v * 1e30) % 3, a, b),
                A.zip_with(lambda v, w: A.to_int(v * 1e3, A.int32) // A.to_int(w, A.int32)
                           + A.to_int(v, A.int32) % 3, a, b))

    return {
        "x_prims": (prims, (x, x[::-1].copy())),
        "x_permute_cas_max": (lambda a, t: A.permute(lambda p, q: A.max(p, q),
                                                     A.fill((5,), -np.inf),
                                                     lambda i: t[i] % 5,
                                                     A.backpermute((17,), lambda i: i, a)),
                              (x, ix)),
        "x_permute_cas_f32_mul": (lambda a, t: A.permute(lambda p, q: p * q,
                                                         A.fill((4,), _f32(1.0)),
                                                         lambda i: t[i] % 4,
                                                         A.map(_f32, a)), (xf, ix)),
        "x_permute_int_atomics": (lambda a, t: (
            A.permute(lambda p, q: A.max(p, q), A.fill((6,), A.to_int(0, A.int32)),
                      lambda i: t[i] % 6, a),
            A.permute(lambda p, q: p + q, A.fill((6,), A.to_int(0, A.int32)),
                      lambda i: t[i] % 6, a),
            A.permute(lambda p, q: p + q + p * q, A.fill((6,), 0),
                      lambda i: t[i] % 6, A.map(A.to_int, a))), (xi, ix)),
        "x_bool_int_reductions": (lambda a, k: (
            A.fold(lambda p, q: p & q, True, A.map(lambda v: v > -0.9, a)),
            A.scanl(lambda p, q: p | q, False, A.map(lambda v: v > 0.9, a)),
            A.fold1(lambda p, q: A.max(p, q), k),
            A.scanr1(lambda p, q: p + q, k)), (m, mi)),
        "x_permute_winner": (lambda a, t: (
            A.permute(lambda new, old: new, A.fill((5,), 0.5), lambda i: t[i] % 5,
                      A.backpermute((17,), lambda i: i, a)),
            A.permute(lambda new, old: new, A.fill((3,), (0.0, 0)), lambda i: t[i] % 3,
                      A.generate((17,), lambda i: (a[i], t[i])))), (x, ix)),
        "x_permute_lock_tuple": (lambda a, t: A.permute(
            lambda p, q: (p[0] + q[0], A.max(p[1], q[1])),
            A.fill((3,), (0.0, 0)), lambda i: t[i] % 3,
            A.generate((17,), lambda i: (a[i], t[i]))), (x, ix)),
    }


def corpus(quick: bool = False, adbench: bool = False) -> dict:
    """name -> (program, arguments); ``quick`` leaves out the (slow to compile) ADBench
    programs unless ``adbench``."""
    progs = {}
    spec = importlib.util.spec_from_file_location(
        "_accel_parity_corpus", ROOT / "tests" / "test_backend_parity.py")
    if spec is not None and os.path.exists(spec.origin):
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        progs.update(mod.CORPUS)
    progs.update(extra_corpus())
    if quick and not adbench:
        return progs
    from accel.adbench import ba, gmm
    from accel.adbench import io as aio
    data = ROOT / "adbench" / "data"
    g = aio.read_gmm(str(data / "gmm" / "test.txt"))
    progs["gmm_gradient"] = (gmm.gradient, (g.alphas, g.means, g.icf, g.x,
                                            gmm.constants(g.d, g.k, g.n, g.gamma, g.m)))
    b = aio.read_ba(str(data / "ba" / "test.txt"))
    progs["ba_jacobian"] = (ba.jacobian, (b.cams, b.points, b.weights, b.features, b.obs))
    progs["ba_residuals"] = (ba.residuals, (b.cams, b.points, b.weights, b.features, b.obs))
    return progs


def kernel_program(fn, args):
    """The fused kernel program ``A.run(fn, *args)`` would hand to a backend."""
    from accel.frontend import arg_type, trace_program
    from accel.fusion.fuse import fuse
    from accel.pipeline import convert_args, optimise
    args = convert_args(args)
    sig = tuple(arg_type(a, i) for i, a in enumerate(args))
    return fuse(optimise(trace_program(fn, sig)))


# --------------------------------------------------------------------------- compilation


def signature(descriptors: list):
    import numba
    out = []
    for kind, dt in descriptors:
        t = numba.from_dtype(np.dtype(dt))
        out.append(numba.types.Array(t, 1, "C") if kind == "array" else t)
    return tuple(out)


def compile_program(kp, cc=(9, 0), check_bounds: bool = False, block: int = 128) -> list:
    """Compile every kernel of ``kp``'s generated module to PTX; ``[(name, ptx), ...]``."""
    from numba import cuda

    from accel.backends.numba import cache

    from . import codegen
    gen = codegen.generate(kp.body, check_bounds, block)
    mod = cache.load(gen.source, kind="cuda")
    done: dict = {}
    for plan in gen.plans.values():
        if plan.fn in done:
            continue
        fn = getattr(mod, plan.fn)
        ptx, _ = cuda.compile_ptx(fn.py_func, signature(plan.args), cc=cc)
        done[plan.fn] = ptx
    return sorted(done.items())


def probe(cc=(9, 0)) -> str | None:
    """None if ``cuda.compile_ptx`` works here, else why not."""
    try:
        from numba import cuda

        def k(a):
            a[0] = 1.0
        cuda.compile_ptx(k, (signature([("array", "float64")])), cc=cc)
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"
    return None


def run(cc=(9, 0), verbose: bool = True, quick: bool = False, adbench: bool = False) -> tuple:
    """``(kernels compiled, failures)`` over the corpus, with and without bounds checks
    (``quick``: a smaller corpus, without bounds checks)."""
    n, failures = 0, []
    for name, (fn, args) in corpus(quick, adbench).items():
        t0 = time.perf_counter()
        try:
            kp = kernel_program(fn, args)
        except Exception as e:  # noqa: BLE001 - reported, not fatal
            failures.append((name, f"tracing failed: {type(e).__name__}: {e}"))
            continue
        counts = []
        for check in ((False,) if quick else (False, True)):
            try:
                ptxs = compile_program(kp, cc, check)
            except Exception as e:  # noqa: BLE001
                failures.append((f"{name} (check_bounds={check})",
                                 f"{type(e).__name__}: {str(e)[:2000]}"))
                continue
            bad = [k for k, p in ptxs if ".entry" not in p]
            if bad:
                failures.append((name, f"no .entry in the PTX of {bad}"))
            n += len(ptxs)
            counts.append(len(ptxs))
        if verbose:
            print(f"  {name:28s} kernels {counts}  {time.perf_counter() - t0:6.2f} s",
                  flush=True)
    return n, failures


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m accel.backends.cuda.ptxcheck",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--cc", default="9.0", help="compute capability (default 9.0)")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="parity and extra corpus only, without the bounds-checked variants")
    ap.add_argument("--adbench", action="store_true",
                    help="with --quick: include the GMM and BA programs")
    ns = ap.parse_args(argv)
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
        cmd = [sys.executable, "-m", "accel.backends.cuda.ptxcheck"] + list(argv or sys.argv[1:])
        return subprocess.call(cmd, env=env, cwd=os.getcwd())
    cc = tuple(int(p) for p in ns.cc.split("."))
    from . import cuda_module
    cuda_module()
    why = probe(cc)
    if why is not None:
        print(f"PTX compilation is unavailable here ({why}); install numba-cuda[cu13]",
              file=sys.stderr)
        return UNAVAILABLE
    t0 = time.perf_counter()
    n, failures = run(cc, verbose=not ns.quiet, quick=ns.quick, adbench=ns.adbench)
    for name, msg in failures:
        print(f"FAILED {name}: {msg}", file=sys.stderr)
    print(f"{n} kernels compiled to PTX for compute capability {cc[0]}.{cc[1]} "
          f"({len(failures)} failures, {time.perf_counter() - t0:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
