"""Command line: ``python -m accel.adbench {gmm,ba,bench} ...``.

    python -m accel.adbench gmm [FILE...] [--backend B] [--out DIR] [--check]
    python -m accel.adbench ba  [FILE...] [--backend B] [--out DIR] [--check]
    python -m accel.adbench bench [--files FILE...] [--max-seconds 5] [--out DIR]

Without FILE arguments ``gmm`` and ``ba`` run on the small ADBench files shipped in
``adbench/data``.  Outputs are ``<name>_F_accel.txt`` and ``<name>_J_accel.txt`` in
``--out`` (default: ``adbench_out`` in the system's temporary directory).  ``--check``
compares with the golden references (ADBench's metric, tolerance 1e-8), prints PASS or
FAIL per file and exits with status 1 if any file fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from accel import AccelError, BackendError

from . import DEFAULT_BACKEND
from . import check as _check
from . import io as _io

PACKAGE_DATA = _check.PACKAGE_DATA

# The shipped 2.5M replicate-point file (gmm/2.5M/gmm_d2_K5.txt) is left out of the
# default set: it takes minutes on the NumPy-evaluated backends; name it to check it.
DEFAULT_GMM = [os.path.join(PACKAGE_DATA, "gmm", p) for p in
               ("test.txt", "1k/gmm_d2_K5.txt", "1k/gmm_d10_K5.txt")]
DEFAULT_BA = [os.path.join(PACKAGE_DATA, "ba", p) for p in
              ("test.txt", "ba1_n49_m7776_p31843.txt")]


def _progress(total, desc, unit):
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency of the CLI only
        return None
    return tqdm(total=total, desc=desc, unit=unit, unit_scale=True, leave=False,
                disable=None, file=sys.stderr)


def _rel(path) -> str:
    path = os.path.abspath(path)
    for root in (PACKAGE_DATA, _check.SHARED_DATA):
        root = os.path.abspath(root)
        if path.startswith(root + os.sep):
            return os.path.relpath(path, os.path.dirname(root))
    return os.path.relpath(path)


def _status(ok: bool, label: str, text: str) -> str:
    return f"{'PASS' if ok else 'FAIL'}  {label}  {text}"


# --------------------------------------------------------------------------- gmm


def run_gmm(args) -> int:
    from .gmm import GMMRunner
    backend = args.backend or DEFAULT_BACKEND
    files = args.files or DEFAULT_GMM
    os.makedirs(args.out, exist_ok=True)
    runner = GMMRunner(backend, chunk=args.chunk)
    failures = 0
    print(f"GMM on backend {backend!r}; outputs in {args.out}")
    for path in files:
        label = _rel(path)
        try:
            inp = _io.read_gmm(path, replicate={"auto": None, "yes": True,
                                                "no": False}[args.replicate])
            bar = _progress(inp.n, os.path.basename(path), "pt")
            t0 = time.perf_counter()
            value, grad = runner.value_and_gradient(
                inp, progress=None if bar is None else bar.update)
            dt = time.perf_counter() - t0
            if bar is not None:
                bar.close()
        except (AccelError, OSError) as e:
            failures += 1
            print(f"ERROR {label}: {e}")
            continue
        fpath, jpath = _io.output_names(path, args.out)
        if not args.no_write:
            _io.write_gmm_objective(fpath, value)
            _io.write_gmm_gradient(jpath, grad)
        info = (f"D={inp.d} K={inp.k} N={inp.n}{' (replicated)' if inp.replicated else ''} "
                f"F={value:.12g} |J|={len(grad)} in {dt:.2f}s")
        if args.check:
            res = _check.check_gmm(inp, value, grad)
            failures += not res.ok
            print(_status(res.ok, label, f"{info}; {res.summary()}"))
        else:
            print(f"done  {label}  {info}")
    return 1 if failures else 0


# --------------------------------------------------------------------------- ba


def run_ba(args) -> int:
    from .ba import BARunner
    backend = args.backend or DEFAULT_BACKEND
    files = args.files or DEFAULT_BA
    os.makedirs(args.out, exist_ok=True)
    runner = BARunner(backend)
    failures = 0
    print(f"BA on backend {backend!r}; outputs in {args.out}")
    for path in files:
        label = _rel(path)
        try:
            inp = _io.read_ba(path)
            if inp.note:
                print(f"note  {label}: {inp.note}")
            bar = _progress(4 if not args.no_write else 2, os.path.basename(path), "step")
            t0 = time.perf_counter()
            arrays = runner.arrays(inp)
            reproj, w_err = runner.residuals(inp, arrays)
            bar and bar.update()
            J = runner.jacobian(inp, arrays)
            bar and bar.update()
            dt = time.perf_counter() - t0
            fpath, jpath = _io.output_names(path, args.out)
            if not args.no_write:
                _io.write_ba_objective(fpath, reproj, w_err)
                bar and bar.update()
                _io.write_ba_jacobian(jpath, J)
                bar and bar.update()
            if bar is not None:
                bar.close()
        except (AccelError, OSError, MemoryError) as e:
            failures += 1
            print(f"ERROR {label}: {e}")
            continue
        info = f"n={inp.n} m={inp.m} p={inp.p} J {J.nrows}x{J.ncols} nnz={J.nnz} in {dt:.2f}s"
        if args.check:
            res = _check.check_ba(inp, reproj, w_err, J)
            failures += not res.ok
            print(_status(res.ok, label, f"{info}; {res.summary()}"))
        else:
            print(f"done  {label}  {info}")
    return 1 if failures else 0


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    default_out = os.path.join(tempfile.gettempdir(), "adbench_out")
    p = argparse.ArgumentParser(
        prog="python -m accel.adbench",
        description="ADBench's GMM and BA tasks in accel: objectives, gradients and sparse "
                    "Jacobians, checks against golden references, and benchmarks.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, what in (("gmm", "GMM objective and gradient"),
                       ("ba", "BA residuals and sparse Jacobian")):
        s = sub.add_parser(name, help=f"compute the {what} of ADBench files")
        s.add_argument("files", nargs="*", metavar="FILE",
                       help="input files (default: the small files shipped in adbench/data)")
        s.add_argument("--backend", default=None,
                       help="accel backend (default: cpu when available, else fused)")
        s.add_argument("--out", default=default_out, help=f"output directory ({default_out})")
        s.add_argument("--check", action="store_true",
                       help="compare with the golden references (exit 1 on failure)")
        s.add_argument("--no-write", action="store_true", help="do not write output files")
        if name == "gmm":
            s.add_argument("--chunk", type=int, default=None,
                           help="points per program run (default: chosen from N*K*D*D)")
            s.add_argument("--replicate", choices=("auto", "yes", "no"), default="auto",
                           help="replicate-point reading (auto: one stored point, N > 1)")
    b = sub.add_parser("bench", help="ADBench-style timings of accel, NumPy, JAX, PyTorch")
    from .bench import add_arguments
    add_arguments(b, default_out)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "gmm":
            return run_gmm(args)
        if args.command == "ba":
            return run_ba(args)
        from .bench import run_bench
        return run_bench(args)
    except BackendError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
