"""CPU backend speed: fused elementwise chains, folds, scans, backpermute and permute,
against NumPy and against a hand-written numba loop for the same job (our practical limit
on this machine).  Ratios come from one run; compile times cold (fresh cache directory)
and warm (same process, and a second process reading the disk cache) are reported.

Run: python benchmarks/cpu_kernels.py [--n 4000000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numba
import numpy as np

os.environ.setdefault("ACCEL_CACHE_DIR", tempfile.mkdtemp(prefix="accel-bench-"))

import accel as A  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # also when imported as a module
from timing import best  # noqa: E402 - sibling script


# --- the jobs: (accel program, numpy version, hand-written numba version)

def chain_accel(a, b):
    return A.zip_with(lambda x, y: A.sin(x) * y + A.exp(x * 0.5) - x * y * y, a, b)


def chain_np(a, b):
    return np.sin(a) * b + np.exp(a * 0.5) - a * b * b


@numba.njit(parallel=True, error_model="numpy")
def chain_nb(a, b):
    out = np.empty_like(a)
    for i in numba.prange(a.size):
        x, y = a[i], b[i]
        out[i] = np.sin(x) * y + np.exp(x * 0.5) - x * y * y
    return out


def sumsq_accel(a):
    return A.sum_all(A.map(lambda x: x * x, a))


def sumsq_np(a):
    return np.dot(a, a)


@numba.njit(parallel=True, error_model="numpy")
def sumsq_nb(a):
    s = 0.0
    for i in numba.prange(a.size):
        s += a[i] * a[i]
    return s


def rows_accel(m):
    return A.sum(A.map(A.exp, m))


def rows_np(m):
    return np.exp(m).sum(axis=1)


@numba.njit(parallel=True, error_model="numpy")
def rows_nb(m):
    out = np.empty(m.shape[0])
    for i in numba.prange(m.shape[0]):
        s = 0.0
        for j in range(m.shape[1]):
            s += np.exp(m[i, j])
        out[i] = s
    return out


def scan_accel(m):
    return A.scanl1(lambda p, q: p + q, m)


def scan_np(m):
    return np.cumsum(m, axis=1)


@numba.njit(parallel=True, error_model="numpy")
def scan_nb(m):
    out = np.empty_like(m)
    for i in numba.prange(m.shape[0]):
        s = 0.0
        for j in range(m.shape[1]):
            s += m[i, j]
            out[i, j] = s
    return out


def gather_accel(a, ix):
    return A.backpermute(ix.shape, lambda i: ix[i], a)


def gather_np(a, ix):
    return a[ix]


@numba.njit(parallel=True, error_model="numpy")
def gather_nb(a, ix):
    out = np.empty(ix.size)
    for i in numba.prange(ix.size):
        out[i] = a[ix[i]]
    return out


def hist_accel(a, ix):
    return A.permute(lambda p, q: p + q, A.fill((1024,), 0.0), lambda i: ix[i], a)


def hist_np(a, ix):
    out = np.zeros(1024)
    np.add.at(out, ix, a)
    return out


@numba.njit(error_model="numpy")
def hist_nb(a, ix):
    out = np.zeros(1024)
    for i in range(a.size):
        out[ix[i]] += a[i]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=4_000_000)
    opts = ap.parse_args()
    n = opts.n
    rng = np.random.default_rng(0)
    a, b = rng.random(n), rng.random(n)
    m = rng.random((n // 1000, 1000))
    ix = rng.integers(0, n, size=n)
    hx = rng.integers(0, 1024, size=n)
    jobs = [
        ("fused chain", chain_accel, chain_np, chain_nb, (a, b)),
        ("sum of squares (1-D fold)", sumsq_accel, sumsq_np, sumsq_nb, (a,)),
        ("row sums of exp (fold)", rows_accel, rows_np, rows_nb, (m,)),
        ("row prefix sums (scan)", scan_accel, scan_np, scan_nb, (m,)),
        ("gather (backpermute)", gather_accel, gather_np, gather_nb, (a, ix)),
        ("histogram (permute +)", hist_accel, hist_np, hist_nb, (a, hx)),
    ]
    print(f"n = {n:,}, numba threads = {numba.get_num_threads()}")
    print(f"{'job':28} {'cold s':>7} {'accel ms':>9} {'numpy ms':>9} {'numba ms':>9} "
          f"{'np/accel':>8} {'accel/nb':>8}")
    for name, fa, fn, fb, args in jobs:
        t0 = time.perf_counter()
        c = A.compile(fa)
        res = c(*args)
        cold = time.perf_counter() - t0
        ref = fn(*args)
        assert np.allclose(res, ref, rtol=1e-6), name
        ta, tn, tb = (best(g, *args, repeat=7) for g in (c, fn, fb))
        print(f"{name:28} {cold:7.2f} {ta*1e3:9.2f} {tn*1e3:9.2f} {tb*1e3:9.2f} "
              f"{tn/ta:8.2f} {ta/tb:8.2f}")
    # warm start in a new process: the disk cache
    code = ("import time, numpy as np; t=time.perf_counter(); import accel as A; "
            "import benchmarks.cpu_kernels as B; a=np.random.rand(1000); "
            "A.compile(B.chain_accel)(a, a); print(time.perf_counter()-t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ), cwd=os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__))))
    print(f"second process, import + compile (disk cache) + run of the fused chain: "
          f"{out.stdout.strip() or out.stderr.strip()[-300:]} s")


if __name__ == "__main__":
    main()
