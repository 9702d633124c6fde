"""Soak test: thousands of random programs through the differential properties.

    python -m accel.testing.soak --n 2000 [--backends interpreter,fused] [--seed S]
    python -m accel.testing.soak --n 300 --backends interpreter,cuda --cudasim

Program ``i`` is drawn from ``random.Random(f"{seed}:{i}")`` (so any program can be
regenerated alone with ``--seed S --start i --n 1``); every ``--grad-every``-th one is
differentiable and also goes through the gradient property.  The command prints, per
property, how many programs passed, passed with a note (a kink skipped the finite
differences, ...), were skipped or failed, the features the programs covered, and for
the first ``--show`` kinds of failure a *minimal* failing program: the recorded choice
sequence is shrunk (delete blocks of choices, lower single choices) while the program
still fails the same way.  Exit status 1 if anything failed.
"""

from __future__ import annotations

import argparse
import collections
import random
import signal
import sys
import time
import traceback

from .programs import ProgramDesc, generate_program
from .sources import RandomSource, ReplaySource
from .properties import PropertyFailure, Skip, available_backends, check_backends, check_gradient


class _Timeout(Exception):
    pass


def _alarm(seconds: float):
    if seconds and hasattr(signal, "SIGALRM"):
        def handler(signum, frame):
            raise _Timeout(f"no result after {seconds:g} s")
        signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, seconds)


def _cancel_alarm():
    if hasattr(signal, "SIGALRM"):
        signal.setitimer(signal.ITIMER_REAL, 0)


def run_property(name: str, desc: ProgramDesc, backends, timeout: float = 0.0):
    """``("pass"|"note"|"skip", detail)`` or ``("fail", kind, message)``."""
    _alarm(timeout)
    try:
        if name == "backends":
            check_backends(desc, backends)
            return ("pass", "")
        r = check_gradient(desc, backends)
        return ("pass", "") if r == "ok" else ("note", r)
    except Skip as e:
        return ("skip", str(e))
    except PropertyFailure as e:
        if "no result after" in str(e):  # our alarm, caught and wrapped by a backend
            return ("fail", f"{name}: timeout", str(e))
        return ("fail", f"{e.prop}: {e.kind}", str(e))
    except _Timeout as e:
        return ("fail", f"{name}: timeout", str(e))
    except Exception as e:  # a crash of the property itself is a failure too
        tb = traceback.format_exc(limit=-3)
        return ("fail", f"{name}: {type(e).__name__}", f"{e}\n{tb}")
    finally:
        _cancel_alarm()


def properties_for(desc: ProgramDesc) -> list[str]:
    return ["backends", "gradient"] if desc.differentiable else ["backends"]


def _shortlex(choices) -> tuple:
    return (len(choices), tuple(choices))


def shrink(desc: ProgramDesc, fails, budget: int = 200, **gen_kw) -> tuple[ProgramDesc, int]:
    """A smaller program (by its choice sequence) for which ``fails(desc)`` still holds.

    ``budget`` bounds the calls of ``fails``; returns ``(program, calls made)``.
    """
    best = desc
    tried = 0
    seen = set()

    def attempt(choices) -> bool:
        nonlocal best, tried
        if tried >= budget:
            return False
        cand = generate_program(ReplaySource(choices), differentiable=desc.differentiable,
                                **gen_kw)
        if _shortlex(cand.choices) >= _shortlex(best.choices) or cand.choices in seen:
            return False
        seen.add(cand.choices)
        tried += 1
        if fails(cand):
            best = cand
            return True
        return False

    improved = True
    while improved and tried < budget:
        improved = False
        for i in range(min(len(best.choices), 12)):  # early choices: sizes and counts
            if i < len(best.choices) and best.choices[i] and attempt(
                    best.choices[:i] + (0,) + best.choices[i + 1:]):
                improved = True
        for k in (16, 8, 4, 2, 1):
            i = 0
            while i + k <= len(best.choices) and tried < budget:
                c = list(best.choices)
                if attempt(c[:i] + c[i + k:]):
                    improved = True
                else:
                    i += 1
        i = 0
        while i < len(best.choices) and tried < budget:
            cur = best.choices[i]
            for v in (0, 1, cur // 2, cur - 1):
                if i >= len(best.choices) or not 0 <= v < best.choices[i]:
                    continue
                c = list(best.choices)
                c[i] = v
                if attempt(c):
                    improved = True
                    break
            i += 1
    return best, tried


def soak(n: int, backends, seed: int = 0, start: int = 0, grad_every: int = 3,
         show: int = 3, shrink_budget: int = 200, timeout: float = 600.0, out=sys.stdout,
         progress: bool = True, **gen_kw) -> dict:
    """Run ``n`` programs; print and return the counts and the (shrunk) failures."""
    counts = {p: collections.Counter() for p in ("backends", "gradient")}
    features = collections.Counter()
    failures: dict = {}  # kind -> [(index, desc, message)]
    t0 = time.time()
    for i in range(start, start + n):
        diff = grad_every > 0 and i % grad_every == grad_every - 1
        desc = generate_program(RandomSource(random.Random(f"{seed}:{i}")),
                                differentiable=diff, **gen_kw)
        features.update(desc.features)
        for prop in properties_for(desc):
            r = run_property(prop, desc, backends, timeout)
            counts[prop][r[0]] += 1
            if r[0] == "note":
                counts[prop]["note: " + r[1]] += 1
            if r[0] == "fail":
                failures.setdefault(r[1], []).append((i, desc, r[2]))
        if progress and (i - start + 1) % 100 == 0:
            nf = sum(len(v) for v in failures.values())
            print(f"  ... {i - start + 1} programs, {nf} failures, {time.time() - t0:.0f} s",
                  file=out, flush=True)
    elapsed = time.time() - t0

    print(f"\nsoak: {n} programs (seed {seed}, start {start}), backends "
          f"{','.join(backends)}, {elapsed:.1f} s", file=out)
    for prop, c in counts.items():
        total = c["pass"] + c["note"] + c["skip"] + c["fail"]
        if not total:
            continue
        print(f"  {prop:9s}: {total} run, {c['pass']} passed, {c['note']} passed with a note, "
              f"{c['skip']} skipped, {c['fail']} failed", file=out)
        for k, v in sorted(c.items()):
            if k.startswith("note: "):
                print(f"             {v} x {k[6:]}", file=out)
    print(f"  features: {len(features)} distinct; rarest: "
          + ", ".join(f"{k}={v}" for k, v in sorted(features.items(), key=lambda kv: kv[1])[:8]),
          file=out)
    shrunk = {}
    if failures:
        print(f"\n{sum(len(v) for v in failures.values())} failures in {len(failures)} kinds:",
              file=out)
        for kind, items in sorted(failures.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(items):5d} x {kind}   (programs {[i for i, _, _ in items[:8]]})",
                  file=out)
        for kind, items in list(sorted(failures.items(), key=lambda kv: -len(kv[1])))[:show]:
            i, desc, msg = min(items, key=lambda it: len(it[1].source))
            prop = kind.split(":")[0]

            def fails(d, prop=prop, kind=kind):
                r = run_property(prop, d, backends, timeout)
                return r[0] == "fail" and r[1] == kind

            small, tried = shrink(desc, fails, shrink_budget, **gen_kw)
            r = run_property(prop, small, backends, timeout)
            shrunk[kind] = small
            print(f"\n=== {kind}: program {i}, shrunk with {tried} candidates "
                  f"({len(desc.source.splitlines())} -> {len(small.source.splitlines())} "
                  f"lines)", file=out)
            print(r[2] if r[0] == "fail" else msg, file=out)
            print(small.reproducer(), file=out)
    return {"counts": counts, "failures": failures, "shrunk": shrunk, "features": features,
            "elapsed": elapsed}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m accel.testing.soak", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="number of programs (default 1000)")
    ap.add_argument("--backends", default=None,
                    help="comma-separated backends to compare with the interpreter "
                         "(default: every available one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="index of the first program")
    ap.add_argument("--grad-every", type=int, default=3,
                    help="every k-th program is differentiable (0: none)")
    ap.add_argument("--show", type=int, default=3, help="failure kinds to shrink and print")
    ap.add_argument("--shrink-budget", type=int, default=200)
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds per property run (numba compiles can take minutes)")
    ap.add_argument("--max-stmts", type=int, default=6, help="array statements per program")
    ap.add_argument("--depth", type=int, default=3, help="expression depth")
    ap.add_argument("--known-bugs", action="store_true",
                    help="also generate the constructs of the open regressions")
    ap.add_argument("--cudasim", action="store_true",
                    help="run the cuda backend on numba's CUDA simulator (sets "
                         "NUMBA_ENABLE_CUDASIM=1 before numba.cuda is imported)")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args(argv)
    if a.cudasim:
        import os
        os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
    requested = None if a.backends is None else [b for b in a.backends.split(",") if b]
    backends = available_backends(requested)
    missing = sorted(set(requested or ()) - set(backends))
    if missing:
        print(f"soak: backends not available here, skipped: {', '.join(missing)}",
              file=sys.stderr)
    if "interpreter" not in backends:
        backends.insert(0, "interpreter")
    res = soak(a.n, backends, a.seed, a.start, a.grad_every, a.show, a.shrink_budget,
               a.timeout, progress=not a.quiet, max_stmts=a.max_stmts, depth=a.depth,
               avoid_known_bugs=not a.known_bugs)
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
