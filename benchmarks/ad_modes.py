"""The thesis's section 5.3.1 choice, measured: store expression temporaries in arrays
(``mode="store"``) or recompute them in the dual pass (``mode="recompute"``).

Times the GMM gradient (a shipped ADBench file) and the mixed map/fold/gather loss of
``ad_complexity.py`` on the cpu backend, both modes, in one run.
Run: python benchmarks/ad_modes.py [--backend cpu]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import accel as A
from accel.adbench import gmm
from accel.adbench import io as aio
from timing import best  # sibling script

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cpu")
    opts = ap.parse_args()
    from ad_complexity import loss  # noqa: E402 - sibling script
    inp = aio.read_gmm(os.path.join(HERE, "..", "adbench", "data", "gmm", "1k",
                                    "gmm_d10_K5.txt"))
    gargs = (inp.alphas, inp.means, inp.icf, inp.x_stored,
             gmm.constants(inp.d, inp.k, inp.n, inp.gamma, inp.m))
    rng = np.random.default_rng(0)
    n = 1_000_000
    largs = (rng.normal(size=n), rng.normal(size=n), rng.integers(0, n, size=n))
    print(f"{'program':24} {'mode':10} {'kernels':>7} {'compile s':>9} {'run ms':>8}")
    for name, f, wrt, args in (("gmm d10 K5 N1000", gmm.objective, (0, 1, 2), gargs),
                               ("map/fold/gather 1e6", loss, (0, 1), largs)):
        for mode in ("store", "recompute"):
            c = A.compile(A.gradientA(f, wrt=wrt, mode=mode), backend=opts.backend)
            t0 = time.perf_counter()
            c(*args)
            cold = time.perf_counter() - t0
            k = c.stats(*args)["kernels"]
            print(f"{name:24} {mode:10} {k:>7} {cold:9.2f} {best(c, *args) * 1e3:8.2f}")


if __name__ == "__main__":
    import sys
    sys.path.insert(0, HERE)
    main()
