"""Run GradBench evals against accel and the other tools on this machine, in one run.

    python -m accel.adbench.gradbench.compare [--out DIR] [--min-runs R] [--min-seconds S]
        [--tools accel,jax,pytorch,manual] [--set EVAL="eval args"] EVAL...

For each eval, every tool runs through GradBench's runner (``--gradbench DIR``, default
``../shared/gradbench`` from the working directory) on the same inputs (``SIZES`` below,
small to moderate; ``--set`` replaces an eval's arguments): accel (this package), GradBench's
JAX tool (``--multithreaded``) and PyTorch tool where they implement the eval and their
library is installed (otherwise skipped with a message), and the hand-written C++
derivatives (``manual``, single-threaded).  It prints, per eval and input, each tool's
minimum time and the ratio accel / tool (above 1: accel is slower), the geometric mean
of the ratios over each eval's derivative function, and writes ``DIR/gradbench.csv`` and a
log-log plot per eval (``DIR/gradbench-EVAL.png``: time against input size, the product
of the numbers in the input's description; skipped if matplotlib is missing).

Every tool runs on one thread unless ``--threaded`` is given (accel with
``NUMBA_NUM_THREADS=1``, JAX and PyTorch without ``--multithreaded``, which pins them to the
first CPU, the C++ without OpenMP): on a machine shared with other work, a parallel launch
waits for every worker thread to be scheduled, and accel's many short kernel launches then
measure the scheduler rather than the program.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import math
import os
import re
import shlex
import subprocess
import sys
import tempfile

#: Each eval's inputs for the comparison (GradBench's eval arguments).
SIZES = {
    "hello": "",
    "lse": "-n 10000 100000 1000000",
    "llsq": "-n 256 1024 4096 -m 128",
    "gmm": "-d 2 10 20 -k 5 25 -n 1000",
    "kmeans": "-k 10 100 -n 10000 -d 8 16",
    "det": "-l 5 6 7",
    "ba": "--min 1 --max 3",
    "ode": "-n 1000 10000 -s 1 10",
    "lstm": "-l 2 4 -c 1024",
    "ht": "--model small --max 10",
}

#: The function whose times the summary's geometric mean is over (the derivative).
DERIVATIVE = {"hello": "double", "lse": "gradient", "llsq": "gradient", "gmm": "jacobian",
              "kmeans": "dir", "det": "gradient", "ba": "jacobian",
              "ode": "gradient", "lstm": "jacobian", "ht": "jacobian"}

TOOLS = ("accel", "jax", "pytorch", "manual")
GOLDEN = {"hello", "gmm", "lstm", "ba", "ht", "kmeans", "ode", "llsq", "det", "lse"}


def tool_command(tool: str, ev: str, gb: str, threaded: bool):
    """The command running ``tool`` for eval ``ev``, or a reason why it cannot run here."""
    if tool == "accel":
        pin = [] if threaded else ["env", "NUMBA_NUM_THREADS=1"]
        return pin + [sys.executable, "-m", "accel.adbench.gradbench"]
    if tool == "manual":
        if ev not in GOLDEN:
            return f"GradBench has no hand-written C++ {ev}"
        return ["manual"] + (["--multithreaded"] if threaded else [])
    lib = {"jax": "jax", "pytorch": "torch"}[tool]
    folder = os.path.join(gb, "python", "gradbench", "gradbench", "tools", tool)
    if not os.path.exists(os.path.join(folder, f"{ev}.py")):
        return f"GradBench's {tool} tool does not implement {ev}"
    if importlib.util.find_spec(lib) is None:
        return f"{lib} is not installed"
    cmd = ["env", "PYTHONPATH=" + os.path.join(gb, "python", "gradbench"), sys.executable,
           os.path.join(folder, "run.py")]
    return cmd + (["--multithreaded"] if threaded else [])


def run_one(gb: str, ev: str, args: list, cmd: list, timeout: float) -> dict:
    """GradBench's runner on one eval and tool: its JSON summary (rows may be empty)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        p = subprocess.run([sys.executable, os.path.join(gb, "run"), "--python",
                            sys.executable, "--json", out, "--timeout", str(timeout), ev,
                            *args, "--", *cmd], capture_output=True, text=True)
        last = (p.stdout.strip().splitlines() or [""])[-1]
        if not os.path.exists(out):
            return {"rows": [], "status": last or p.stderr.strip()[-300:]}
        with open(out) as f:
            data = json.load(f)
    data["status"] = last
    return data


def size_of(description: str) -> float:
    """An input's size for the plots: the product of the numbers in its description."""
    nums = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", description)]
    return math.prod(nums) if nums else 1.0


def geomean(xs) -> float:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")


def report(ev: str, results: dict) -> list:
    """Print the eval's table; return its CSV rows."""
    tools = [t for t in TOOLS if t in results]
    rows, table = [], {}
    for t in tools:
        for r in results[t]["rows"]:
            key = (r["function"], r["description"])
            table.setdefault(key, {})[t] = r
            rows.append({"eval": ev, "function": r["function"], "description": r["description"],
                         "tool": t, "valid": r["valid"], "min_s": r["min_s"],
                         "median_s": r["median_s"], "runs": r["runs"]})
    others = [t for t in tools if t != "accel"]
    head = f"{'function':10s} {'input':24s}" + "".join(f" {t:>11s}" for t in tools) + "".join(
        f" {'accel/' + t:>14s}" for t in others)
    print(f"\n== {ev}\n{head}")
    ratios = {t: [] for t in others}
    for (fn, desc), by in table.items():
        line = f"{fn:10s} {desc:24s}"
        for t in tools:
            r = by.get(t)
            line += f" {r['min_s'] * 1e3:9.3f}ms" if r else f" {'-':>11s}"
            if r and not r["valid"]:
                line += "!"
        for t in others:
            a, o = by.get("accel"), by.get(t)
            if a and o and o["min_s"] > 0:
                q = a["min_s"] / o["min_s"]
                line += f" {q:14.2f}"
                if fn == DERIVATIVE.get(ev):
                    ratios[t].append(q)
            else:
                line += f" {'-':>14s}"
        print(line)
    for t in others:
        if ratios[t]:
            print(f"   accel/{t} on {DERIVATIVE[ev]}: geometric mean {geomean(ratios[t]):.2f} "
                  f"over {len(ratios[t])} inputs")
    return rows


def plot(ev: str, rows: list, path: str) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fns = sorted({r["function"] for r in rows})
    fig, axes = plt.subplots(1, len(fns), figsize=(5 * len(fns), 4), squeeze=False)
    for ax, fn in zip(axes[0], fns):
        for t in TOOLS:
            pts = sorted((size_of(r["description"]), r["min_s"]) for r in rows
                         if r["tool"] == t and r["function"] == fn and r["min_s"] > 0)
            if pts:
                ax.plot(*zip(*pts), marker="o", label=t)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{ev}: {fn}")
        ax.set_xlabel("input size (product of the description's numbers)")
        ax.set_ylabel("seconds (minimum over runs)")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("evals", nargs="+", choices=sorted(SIZES))
    ap.add_argument("--gradbench", default=os.path.join("..", "shared", "gradbench"))
    ap.add_argument("--out", default="gradbench-compare")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--min-runs", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=0.5)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--threaded", action="store_true",
                    help="let every tool use all cores (default: one thread each)")
    ap.add_argument("--set", action="append", default=[], metavar='EVAL="ARGS"',
                    help="replace an eval's input arguments")
    a = ap.parse_args(argv)
    gb = os.path.abspath(a.gradbench)
    if not os.path.exists(os.path.join(gb, "run")):
        ap.error(f"no GradBench runner at {gb}/run (use --gradbench)")
    sizes = dict(SIZES)
    for s in a.set:
        ev, _, args = s.partition("=")
        sizes[ev] = args
    os.makedirs(a.out, exist_ok=True)
    all_rows = []
    for ev in a.evals:
        args = shlex.split(sizes[ev])
        if ev != "hello":
            args += ["--min-runs", str(a.min_runs), "--min-seconds", str(a.min_seconds)]
        results = {}
        for t in a.tools.split(","):
            cmd = tool_command(t, ev, gb, a.threaded)
            if isinstance(cmd, str):
                print(f"[{ev}] skipping {t}: {cmd}", flush=True)
                continue
            print(f"[{ev}] running {t} ...", flush=True)
            results[t] = run_one(gb, ev, args, cmd, a.timeout)
            print(f"[{ev}] {t}: {results[t]['status']}", flush=True)
        rows = report(ev, results)
        all_rows += rows
        png = os.path.join(a.out, f"gradbench-{ev}.png")
        if rows and plot(ev, rows, png):
            print(f"   plot: {png}")
    path = os.path.join(a.out, "gradbench.csv")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["eval", "function", "description", "tool", "valid",
                                          "min_s", "median_s", "runs"])
        w.writeheader()
        w.writerows(all_rows)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
