"""First-result latency of the cpu backend, tiered and compiled-only (issue 22).

Each measurement runs in a fresh process with an empty compile cache (a new
``ACCEL_CACHE_DIR``), then once more with the cache that run left behind ("warm"):

- ``first``: seconds from the program's ``A.compile`` to its first result (tracing, AD,
  fusion, code generation and either the NumPy tier or numba compilation);
- ``tier``: which tier ran the first call;
- ``numpy_call``: a later call on the NumPy tier (tiered runs; median of up to 5 calls
  made while the kernels compile);
- ``ready``: seconds from ``A.compile`` until calls run compiled kernels (``wait()``);
- ``steady``: the minimum of 5 compiled calls afterwards;
- ``state``: how the tiered run's kernels arrived (``ready``: from the worker; ``local``:
  the worker failed and the caller compiled them).

Run: ``python benchmarks/first_call.py [--only gmm mlp] [--modes tiered compiled]``.
A benchmark, not a test: cold numba compilations take minutes on a loaded machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _program(name):
    """``(call, compiled program, arguments of its signature)`` for ``name``, compiled
    with the current tiering."""

    import accel as A
    if name == "gmm":
        from accel.adbench import gmm
        from accel.adbench.io import read_gmm
        inp = read_gmm(os.path.join(ROOT, "adbench", "data", "gmm", "1k", "gmm_d2_K5.txt"))
        r = gmm.GMMRunner("cpu", tiered=None)
        sig = (inp.alphas, inp.means, inp.icf, inp.x_stored,
               gmm.constants(inp.d, inp.k, inp.n, inp.gamma, inp.m))
        return (lambda: r.value_and_gradient(inp)), r.vg, sig
    sys.path.insert(0, ROOT)
    from benchmarks.corpus import nn
    (mlp,) = [p for p in nn.PROGRAMS if p.name == "mlp"]
    args = mlp.args("small" if name == "mlp" else "default")
    g = A.compile(A.gradientA(nn.mlp_replicate, wrt=mlp.wrt))
    return (lambda: g(*args)), g, args


def child(name: str) -> None:
    t0 = time.perf_counter()
    call, prog, sig = _program(name)
    call()
    first = time.perf_counter() - t0
    tier = prog.stats(*sig)["tier"]
    numpy_calls = []
    while (tier == "numpy" and len(numpy_calls) < 5
           and prog.stats(*sig)["compile_state"] == "compiling"):
        t = time.perf_counter()
        call()
        numpy_calls.append(time.perf_counter() - t)
    prog.wait()
    ready = time.perf_counter() - t0
    steady = []
    for _ in range(5):
        t = time.perf_counter()
        call()
        steady.append(time.perf_counter() - t)
    s = prog.stats(*sig)
    assert s["tier"] == "compiled", s["tier"]
    print(json.dumps(dict(program=name, first=first, tier=tier, ready=ready,
                          numpy_call=statistics.median(numpy_calls) if numpy_calls else None,
                          steady=min(steady), kernels=s["kernels"],
                          switch=s.get("switch_seconds"), state=s.get("compile_state"),
                          background=s.get("background_compile_seconds"))))


def measure(name: str, mode: str, cache: str) -> dict:
    env = dict(os.environ, ACCEL_CACHE_DIR=cache, ACCEL_TIERED="1" if mode == "tiered" else "0")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name],
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", default=["mlp", "gmm"],
                   help="programs: mlp (small sizes), mlp-default, gmm")
    p.add_argument("--modes", nargs="*", default=["tiered", "compiled"])
    p.add_argument("--child", help=argparse.SUPPRESS)
    opts = p.parse_args()
    if opts.child:
        child(opts.child)
        return
    print(f"load average at start: {os.getloadavg()}", flush=True)
    print("program      mode      cache  first(s) tier     numpy call(s) ready(s) "
          "steady(ms) kernels state", flush=True)
    for name in opts.only:
        for mode in opts.modes:
            cache = tempfile.mkdtemp(prefix="accel-first-call-")
            for warmth in ("cold", "warm"):
                r = measure(name, mode, cache)
                nc = f"{r['numpy_call']:.3f}" if r["numpy_call"] is not None else "-"
                print(f"{name:12s} {mode:9s} {warmth:5s} {r['first']:8.2f} {r['tier']:8s} "
                      f"{nc:>13s} {r['ready']:8.1f} {r['steady'] * 1e3:10.3f} {r['kernels']:7d} "
                      f"{r['state'] or '-'}",
                      flush=True)
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
