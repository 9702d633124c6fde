"""How much a background compilation slows the caller's NumPy-tier calls: thread or process.

The question behind ``backends/cpu/tiered.py``: while numba compiles a program's kernels,
the caller's calls run on the fused NumPy evaluator.  Compiling in a thread of the same
process shares the GIL (numba holds it for most of a compilation); compiling in a worker
process does not.  For one program, in a fresh process with an empty compile cache:

- ``alone``: a NumPy-tier call with nothing compiling;
- ``thread``: the calls made (back to back) while a thread compiles the kernels, by a
  compiled-only program's first call (traced beforehand, so the thread only compiles);
- ``process``: the calls made while the tiered program's worker process compiles them;

each with the median and maximum call time, and the seconds until compiled kernels were
ready.  Run: ``python benchmarks/compile_contention.py [--program gmm|mlp] [--mode
thread|process]`` (each mode in its own process).  A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _program(name):
    """``(program, args)``."""
    import accel as A
    if name == "gmm":
        from accel.adbench import gmm
        from accel.adbench.io import read_gmm
        inp = read_gmm(os.path.join(ROOT, "adbench", "data", "gmm", "1k", "gmm_d2_K5.txt"))
        return gmm.value_and_gradient, (inp.alphas, inp.means, inp.icf, inp.x_stored,
                                         gmm.constants(inp.d, inp.k, inp.n, inp.gamma, inp.m))
    sys.path.insert(0, ROOT)
    from benchmarks.corpus import nn
    (mlp,) = [p for p in nn.PROGRAMS if p.name == "mlp"]
    return A.gradientA(nn.mlp_replicate, wrt=mlp.wrt), tuple(mlp.args("small"))


def child(name: str, mode: str) -> None:
    import accel as A
    f, args = _program(name)
    fg = A.compile(f, backend="fused")
    fg(*args)
    t = time.perf_counter()
    fg(*args)
    alone = time.perf_counter() - t
    done = threading.Event()
    t0 = time.perf_counter()
    if mode == "thread":
        c = A.compile(f, tiered=False)
        c.stats(*args)  # trace and generate here: the thread only compiles

        def compile_in_thread():
            c(*args)
            done.set()
        threading.Thread(target=compile_in_thread, daemon=True).start()
        call = fg
    else:
        c = A.compile(f, tiered=True)
        c(*args)
        threading.Thread(target=lambda: (c.wait(), done.set()), daemon=True).start()
        call = c
    ts = []
    while not done.is_set():
        t = time.perf_counter()
        call(*args)
        ts.append(time.perf_counter() - t)
    ready = time.perf_counter() - t0
    print(f"{name} {mode}: alone {alone * 1e3:.1f} ms; {len(ts)} calls while compiling: "
          f"median {statistics.median(ts) * 1e3:.1f} ms, max {max(ts) * 1e3:.1f} ms; "
          f"compiled after {ready:.1f} s; load {os.getloadavg()[0]:.1f}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--program", nargs="*", default=["gmm"], choices=["gmm", "mlp"])
    p.add_argument("--mode", nargs="*", default=["thread", "process"],
                   choices=["thread", "process"])
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    opts = p.parse_args()
    if opts.child:
        child(*opts.child)
        return
    for name in opts.program:
        for mode in opts.mode:
            env = dict(os.environ, ACCEL_CACHE_DIR=tempfile.mkdtemp(prefix="accel-contention-"),
                       ACCEL_COMPILE_LOG="0")
            subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name, mode],
                           env=env, check=True)


if __name__ == "__main__":
    main()
