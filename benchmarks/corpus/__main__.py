"""``python -m benchmarks.corpus``: measure the corpus and print one table.

Not a test: it times, and the times depend on the machine and its load.  With
``--cold`` every run compiles from scratch (a fresh ``ACCEL_CACHE_DIR``); otherwise the
first-call column includes whatever the disk cache already holds.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time


def parse(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.corpus", description=__doc__)
    p.add_argument("--only", nargs="+", metavar="NAME", help="programs to run (default all)")
    p.add_argument("--size", choices=("small", "default"), default="default")
    p.add_argument("--repeat", type=int, default=5, help="timed calls after warm-up (5)")
    p.add_argument("--backend", default="cpu", help="accel backend (cpu)")
    p.add_argument("--cold", action="store_true",
                   help="compile from scratch: a fresh ACCEL_CACHE_DIR for this run")
    p.add_argument("--natural", action="store_true",
                   help="only each program's first (natural) accel formulation")
    p.add_argument("--no-jax", action="store_true", help="skip JAX even if installed")
    p.add_argument("--out", default=os.path.join(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), "out"), help="directory for corpus.csv / corpus.png "
                                                  "(default benchmarks/out, git-ignored)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    if args.cold:  # before accel compiles anything: the cache directory is read per compile
        os.environ["ACCEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="accel-corpus-cold-")
    from . import by_name
    from .measure import import_jax, import_torch, measure_program
    from .report import bar_chart, out_dir, row_line, table, write_csv
    programs = by_name(args.only)
    jax = None if args.no_jax else import_jax()
    torch = import_torch()
    print(f"corpus: {len(programs)} programs, size {args.size}, backend {args.backend}, "
          f"repeat {args.repeat}, {os.cpu_count()} cpus, {platform.processor() or '?'}; "
          f"JAX {jax.__version__ if jax else 'absent'}, "
          f"PyTorch {torch.__version__ if torch else 'absent'}; compile cache "
          f"{'cold (fresh directory)' if args.cold else 'as found (warm if run before)'}; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}",
          flush=True)
    rows = []
    t0 = time.perf_counter()
    d = out_dir(args.out)
    for prog in programs:
        new = measure_program(prog, args.size, args.repeat, args.backend, jax, torch,
                              log=lambda s: print(s, file=sys.stderr, flush=True),
                              natural_only=args.natural)
        for r in new:   # as they come, and the CSV rewritten: an interrupted run keeps them
            print(row_line(r), file=sys.stderr, flush=True)
        rows.extend(new)
        write_csv(rows, os.path.join(d, "corpus.csv"))
    print(table(rows))
    print(f"wrote {os.path.join(d, 'corpus.csv')}")
    png = bar_chart(rows, os.path.join(d, "corpus.png"))
    if png:
        print(f"wrote {png}")
    print(f"total {time.perf_counter() - t0:.0f} s")
    bad = [r for r in rows if r.get("metric_vs_jax", 0.0) > 1e-8]
    for r in bad:
        print(f"WARNING {r['program']}/{r['formulation']}: gradient metric vs JAX "
              f"{r['metric_vs_jax']:.1e} > 1e-8")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
