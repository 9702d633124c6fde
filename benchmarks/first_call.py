"""First-result latency of the cpu backend, tiered and compiled-only (issue 22).

Each measurement runs in a fresh process with an empty compile cache (a new
``ACCEL_CACHE_DIR``), then once more with the cache that run left behind ("warm"):

- ``first``: seconds from the program's ``A.compile`` to its first result (tracing, AD,
  fusion, code generation and either the NumPy tier or numba compilation; ``--corpus``
  also prints ``cpu``, the process's CPU seconds by then, interpreter start included,
  which a loaded machine inflates less);
- ``tier``: which tier ran the first call;
- ``numpy_call``: a later call on the NumPy tier (tiered runs; median of up to 5 calls
  made while the kernels compile);
- ``ready``: seconds from ``A.compile`` until calls run compiled kernels (``wait()``);
- ``steady``: the minimum of 5 compiled calls afterwards;
- ``state``: how the tiered run's kernels arrived (``ready``: from the worker; ``local``:
  the worker failed and the caller compiled them).

``--corpus`` measures only ``first`` (and the tier that produced it) for the gradient of
every corpus program's natural formulation at its default size, tiered, in a fresh
process with an empty cache and again with that cache, and prints the median and the
maximum; a process ends after its first result (the worker is stopped, so the "warm"
run has the program cache but only the kernels that were compiled by then; with
``--fill`` a compiled-only run compiles them all between the two).

Child processes run with bytecode caching on (``PYTHONPYCACHEPREFIX``: one private
directory for the whole run, filled by importing accel once first), as an installed
package has it, even when the calling environment sets ``PYTHONDONTWRITEBYTECODE``.

Run: ``python benchmarks/first_call.py [--only gmm mlp] [--modes tiered compiled]``
or ``python benchmarks/first_call.py --corpus [names...]``.
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
    if name.startswith("corpus:"):
        from benchmarks.corpus import by_name
        (p,) = by_name([name.split(":", 1)[1]])
        f = next(iter(p.accel.values()))
        args = p.args("default")
        g = A.compile(A.gradientA(f, wrt=p.wrt))
        return (lambda: g(*args)), g, args
    from benchmarks.corpus import nn
    (mlp,) = [p for p in nn.PROGRAMS if p.name == "mlp"]
    args = mlp.args("small" if name == "mlp" else "default")
    g = A.compile(A.gradientA(nn.mlp_replicate, wrt=mlp.wrt))
    return (lambda: g(*args)), g, args


def child(name: str, first_only: bool = False) -> None:
    t0 = time.perf_counter()
    call, prog, sig = _program(name)
    call()
    first = time.perf_counter() - t0
    cpu = time.process_time()  # this process's CPU time so far (less sensitive to load)
    if first_only:
        s = prog.stats(*sig)
        print(json.dumps(dict(program=name, first=first, cpu=cpu, tier=s["tier"],
                              estimate=s.get("numpy_estimate_seconds"))), flush=True)
        return
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


PYCACHE = os.path.join(tempfile.gettempdir(), "accel-first-call-pycache")


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPYCACHEPREFIX=PYCACHE, **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def measure(name: str, mode: str, cache: str, first_only: bool = False) -> dict:
    env = _env(ACCEL_CACHE_DIR=cache, ACCEL_TIERED="1" if mode == "tiered" else "0")
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name]
                         + (["--first-only"] if first_only else []),
                         env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", default=["mlp", "gmm"],
                   help="programs: mlp (small sizes), mlp-default, gmm")
    p.add_argument("--modes", nargs="*", default=["tiered", "compiled"])
    p.add_argument("--corpus", nargs="*", help="corpus programs (none: all): first results")
    p.add_argument("--fill", action="store_true",
                   help="--corpus: compile the kernels before the warm run (slow)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--first-only", action="store_true", help=argparse.SUPPRESS)
    opts = p.parse_args()
    if opts.child:
        child(opts.child, opts.first_only)
        return
    subprocess.run([sys.executable, "-c", "import accel.backends.cpu, accel.adbench.gmm"],
                   env=_env(), check=True)  # the bytecode cache
    print(f"load average at start: {os.getloadavg()}", flush=True)
    if opts.corpus is not None:
        corpus(opts.corpus, opts.fill)
        print(f"load average at end: {os.getloadavg()}")
        return
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


def corpus(names, fill: bool = False) -> None:
    sys.path.insert(0, ROOT)
    from benchmarks.corpus import by_name
    names = [p.name for p in by_name(names or None)] + (["adbench-gmm"] if not names else [])
    firsts: dict = {"cold": [], "warm": []}
    print("program          cache  first(s)  cpu(s) tier      numpy estimate(s)", flush=True)
    for name in names:
        cache = tempfile.mkdtemp(prefix="accel-first-call-")
        prog = "gmm" if name == "adbench-gmm" else f"corpus:{name}"
        for warmth in ("cold", "warm"):
            if warmth == "warm" and fill:  # compile every kernel the call uses, first
                measure(prog, "compiled", cache)
            try:
                r = measure(prog, "tiered", cache, first_only=True)
            except RuntimeError as e:
                print(f"{name:16s} {warmth:5s} failed: {str(e)[-300:]}", flush=True)
                continue
            firsts[warmth].append(r["first"])
            est = r.get("estimate")
            print(f"{name:16s} {warmth:5s} {r['first']:8.2f} {r['cpu']:7.2f} "
                  f"{r['tier'] or '-':9s} "
                  f"{'-' if est is None else format(est, '.3f'):>17s}", flush=True)
    for warmth, xs in firsts.items():
        if xs:
            print(f"{warmth}: median {statistics.median(xs):.2f} s, max {max(xs):.2f} s "
                  f"({len(xs)} programs)", flush=True)


if __name__ == "__main__":
    main()
