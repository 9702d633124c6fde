"""Gradient cost vs primal cost on the interpreter as inputs grow (issue: reverse AD).

The program mixes map, zip_with, a fold and data-dependent indexing; reverse
mode should cost a constant factor of the primal at every size.
Run: python benchmarks/ad_complexity.py [--backend interpreter]
"""

import argparse

import numpy as np

import accel as A
from timing import best  # sibling script


def loss(x, w, ix):
    y = A.map(lambda v: A.sin(v) * v, x)
    z = A.zip_with(lambda u, v: u * v + A.exp(v * 0.1), y, w)
    g = A.map(lambda j: z[j] * x[j], ix)  # data-dependent gather
    rows = A.sum(A.reshape((A.size(g) // 10, 10), g))
    return A.sum_all(A.map(lambda r: r * r, rows))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="interpreter")
    ap.add_argument("--mode", default="store", choices=["store", "recompute"])
    opts = ap.parse_args()
    primal = A.compile(loss, backend=opts.backend)
    grad = A.compile(A.gradientA(loss, wrt=(0, 1), mode=opts.mode), backend=opts.backend)
    rng = np.random.default_rng(0)
    print(f"{'n':>9} {'primal s':>10} {'gradient s':>11} {'ratio':>6}")
    for n in (10**3, 10**4, 10**5, 10**6):
        x, w = rng.normal(size=n), rng.normal(size=n)
        ix = rng.integers(0, n, size=n)
        primal(x, w, ix)
        grad(x, w, ix)
        tp, tg = best(primal, x, w, ix), best(grad, x, w, ix)
        print(f"{n:>9} {tp:>10.4f} {tg:>11.4f} {tg / tp:>6.2f}")


if __name__ == "__main__":
    main()
