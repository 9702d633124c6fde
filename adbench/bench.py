"""``python -m accel.adbench bench``: ADBench-style timings.

For every input file and tool, the objective and the gradient (GMM) or Jacobian (BA) are
each run up to ``--max-runs`` times (10) or until ``--max-seconds`` (5 s) have passed,
whichever comes first, and the minimum time is reported (ADBench's rule).  The first
call of a compiled tool is timed separately: ``compile_s`` is that first call minus the
best steady run (tracing, AD, fusion, numba compilation).

Tools: accel (the ``cpu`` backend when available, else ``fused``; ``--backend`` picks
another, e.g. ``fused,cpu``), NumPy (objective, and the hand-written gradient for GMM /
forward-mode dual numbers for BA), and, when importable, JAX (``jax.jit`` of
``jax.value_and_grad``; GMM: the triangular products as a batched ``jnp.matmul`` and as
an ``einsum``, both timed per file, the faster kept and named in the ``note`` column;
BA: ``vmap(jacrev)``) and PyTorch (autograd; BA:
``torch.func.vmap(jacrev)``).  Every tool's result is compared with NumPy's using
ADBench's metric.  Peak memory is the ``tracemalloc`` peak of one extra run (Python and
NumPy allocations, which include every buffer of accel's cpu backend: its buffer pools are
emptied first) for accel and NumPy; XLA's and ATen's allocators are not traced, so JAX
and PyTorch get no traced peak.  The process's maximum resident set size is printed at
the end.

Writes ``bench.csv`` and (with matplotlib) ``bench.png``: time against the number of
independent variables, log-log, one line per tool, like the thesis's appendix D.
"""

from __future__ import annotations

import csv
import glob
import os
import resource
import sys
import time
import tracemalloc

import numpy as np

from . import DEFAULT_BACKEND
from . import ba as _ba
from . import gmm as _gmm
from . import io as _io
from .check import PACKAGE_DATA, max_metric

DEFAULT_FILES = [os.path.join(PACKAGE_DATA, p) for p in (
    "gmm/test.txt", "gmm/1k/gmm_d2_K5.txt", "gmm/1k/gmm_d10_K5.txt",
    "ba/test.txt", "ba/ba1_n49_m7776_p31843.txt")]

FIELDS = ["task", "file", "n_independents", "tool", "what", "seconds", "runs",
          "compile_s", "traced_peak_mb", "max_metric_vs_numpy", "note"]


def add_arguments(p, default_out):
    p.add_argument("--files", nargs="*", default=None, metavar="FILE",
                   help="GMM/BA input files or globs (default: the shipped small files)")
    p.add_argument("--max-seconds", type=float, default=5.0,
                   help="time budget per measurement (default 5)")
    p.add_argument("--max-runs", type=int, default=10, help="runs per measurement (10)")
    p.add_argument("--backend", default=None,
                   help="accel backend(s), comma-separated (default: cpu if available, "
                        "else fused)")
    p.add_argument("--tools", default="accel,numpy,jax,torch",
                   help="comma-separated subset of accel,numpy,jax,torch")
    p.add_argument("--no-memory", action="store_true", help="skip the tracemalloc runs")
    p.add_argument("--out", default=default_out, help="directory for bench.csv / bench.png")


# --------------------------------------------------------------------------- timing


def measure(fn, max_runs=10, max_seconds=5.0):
    """(min seconds, runs): run up to ``max_runs`` times or until ``max_seconds``."""
    times = []
    start = time.perf_counter()
    while len(times) < max_runs:
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        times.append(t1 - t0)
        if t1 - start >= max_seconds:
            break
    return min(times), len(times)


def traced_peak_mb(fn) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2 ** 20
    finally:
        tracemalloc.stop()


def max_rss_mb() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 2 ** 20 if sys.platform == "darwin" else r / 2 ** 10


def kind_of(path) -> str:
    """``gmm`` or ``ba`` from the file's name or directory."""
    parts = os.path.abspath(path).split(os.sep)
    base = parts[-1]
    if base.startswith("gmm"):
        return "gmm"
    if base.startswith("ba"):
        return "ba"
    for d in reversed(parts[:-1]):
        if d in ("gmm", "ba"):
            return d
    raise ValueError(f"{path}: cannot tell whether this is a GMM or a BA file (put it under "
                     "a gmm/ or ba/ directory or name it gmm_* / ba*)")


# --------------------------------------------------------------------------- tools


def accel_tool_name(backend: str) -> str:
    """``accel-<backend>``, with ``+ftz`` when the cpu backend flushes subnormals
    (``ACCEL_FLUSH_SUBNORMALS``, as XLA always does on CPUs): the mode changes results
    and speed, so it is part of the name in the CSV and the plot."""
    from accel.backends.cpu import fpmode
    return f"accel-{backend}{'+ftz' if backend == 'cpu' and fpmode.flush_subnormals() else ''}"


class Tool:
    """A named pair of callables ``objective()`` and ``derivative()`` for one input."""

    compiled = False
    traced = True  # tracemalloc sees its allocations
    release = None  # forgets reusable buffers before the memory run
    note = ""  # which formulation a baseline uses, when it had a choice

    def __init__(self, name):
        self.name = name


def _gmm_tools(inp, names, backends):
    tools = []
    x = inp.x
    if "accel" in names:
        for be in backends:
            runner = _gmm.GMMRunner(be, tiered=False)  # time the kernels
            t = Tool(accel_tool_name(be))
            t.compiled = True
            t.objective = lambda r=runner: r.objective(inp)
            t.derivative = lambda r=runner: r.value_and_gradient(inp)[1]
            t.release = lambda r=runner: (r.f.release_buffers(), r.vg.release_buffers())
            tools.append(t)
    if "numpy" in names:
        t = Tool("numpy")
        t.objective = lambda: _gmm.numpy_objective(inp.alphas, inp.means, inp.icf,
                                                   inp.x_stored, inp.gamma, inp.m, inp.n)
        t.derivative = lambda: _gmm.flatten_gradient(*_gmm.numpy_gradient(
            inp.alphas, inp.means, inp.icf, inp.x_stored, inp.gamma, inp.m, inp.n)[1:])
        tools.append(t)
    if "jax" in names:
        t = _jax_gmm(inp, x)
        if t is not None:
            tools.append(t)
    if "torch" in names:
        t = _torch_gmm(inp, x)
        if t is not None:
            tools.append(t)
    return tools


def _ba_tools(inp, names, backends):
    tools = []
    arrays = (inp.cams, inp.points, inp.weights, inp.features, inp.obs)
    if "accel" in names:
        for be in backends:
            runner = _ba.BARunner(be, tiered=False)  # time the kernels
            t = Tool(f"accel-{be}")
            t.compiled = True
            t.objective = lambda r=runner: r.residuals(inp, arrays)[0]
            t.derivative = lambda r=runner: r.jacobian(inp, arrays).vals
            t.release = lambda r=runner: (r.res.release_buffers(), r.entries.release_buffers())
            tools.append(t)
    if "numpy" in names:
        t = Tool("numpy")
        t.objective = lambda: _ba.numpy_residuals(*arrays)[0]
        t.derivative = lambda: _ba.numpy_jacobian(*arrays).vals
        tools.append(t)
    if "jax" in names:
        t = _jax_ba(inp, arrays)
        if t is not None:
            tools.append(t)
    if "torch" in names:
        t = _torch_ba(inp, arrays)
        if t is not None:
            tools.append(t)
    return tools


# --------------------------------------------------------------------------- JAX


def _import_jax():
    try:
        import jax
    except Exception:  # noqa: BLE001 - optional dependency, any import failure means "absent"
        return None
    jax.config.update("jax_enable_x64", True)
    return jax


def _jax_lx_matmul(jnp, lmat, xc):
    """``L_k (x_i - mu_k)`` as a batched matrix product (K, N, D) x (K, D, D)^T."""
    return jnp.transpose(jnp.matmul(jnp.transpose(xc, (1, 0, 2)), jnp.swapaxes(lmat, 1, 2)),
                         (1, 0, 2))


def _jax_lx_einsum(jnp, lmat, xc):
    return jnp.einsum("krc,nkc->nkr", lmat, xc)


#: JAX's formulations of the triangular products; :func:`_jax_gmm` times both on each
#: file and keeps the faster gradient as the baseline (the comparison is JAX's best).
JAX_GMM_FORMULATIONS = {"batched matmul": _jax_lx_matmul, "einsum": _jax_lx_einsum}


def _jax_gmm(inp, x):
    jax = _import_jax()
    if jax is None:
        return None
    import jax.numpy as jnp
    from jax.scipy.special import logsumexp
    d, k = inp.d, inp.k
    _, _, rows, cols, pos = _gmm._unpack_icf(inp.icf, d)
    const = inp.n * d * _gmm.HALF_LOG_2PI + _gmm.wishart_constant(d, k, inp.gamma, inp.m)
    gamma, m, n = inp.gamma, inp.m, inp.n

    def make(lx_of):
        def objective(alphas, means, icf, xs):
            qs, ls = icf[:, :d], icf[:, d:]
            lmat = jnp.zeros((k, d, d)).at[:, rows, cols].set(ls[:, pos])
            xc = xs[:, None, :] - means[None]
            qx = jnp.exp(qs)[None] * xc + lx_of(jnp, lmat, xc)
            beta = alphas + qs.sum(axis=1) - 0.5 * jnp.sum(qx * qx, axis=2)
            prior = 0.5 * gamma * gamma * (jnp.sum(jnp.exp(qs) ** 2) + jnp.sum(ls ** 2)) \
                - m * jnp.sum(qs)
            return jnp.sum(logsumexp(beta, axis=1)) - n * logsumexp(alphas) + prior - const
        return objective

    args = [jnp.asarray(a) for a in (inp.alphas, inp.means, inp.icf, np.ascontiguousarray(x))]
    timed = {}
    for name, lx_of in JAX_GMM_FORMULATIONS.items():
        obj = make(lx_of)
        vg = jax.jit(jax.value_and_grad(obj, argnums=(0, 1, 2)))
        jax.block_until_ready(vg(*args))
        best, _ = measure(lambda vg=vg: jax.block_until_ready(vg(*args)), 3, 2.0)
        timed[name] = (best, obj, vg)
    choice = min(timed, key=lambda nm: timed[nm][0])
    _, objective, vg = timed[choice]
    f = jax.jit(objective)
    t = Tool("jax")
    t.traced = False
    t.compiled = True
    t.note = "GMM formulation " + choice + " (" + ", ".join(
        f"{nm} {v[0] * 1e3:.3g} ms" for nm, v in timed.items()) + ")"
    t.objective = lambda: float(f(*args))
    t.derivative = lambda: _gmm.flatten_gradient(*[np.asarray(g) for g in vg(*args)[1]])
    return t


class _JaxOps:
    def __init__(self, jnp):
        self.jnp = jnp
        self.sqrt, self.sin, self.cos = jnp.sqrt, jnp.sin, jnp.cos

    def cond_zero(self, s, if_zero, otherwise):
        # both branches are evaluated under vmap; ADBench's data never has r == 0
        return tuple(self.jnp.where(s == 0.0, a, b) for a, b in zip(if_zero(), otherwise()))


def _jax_ba(inp, arrays):
    jax = _import_jax()
    if jax is None:
        return None
    import jax.numpy as jnp
    ops = _JaxOps(jnp)
    cams, pts, ws, feats, obs = [jnp.asarray(a) for a in arrays]

    def reproj(cam, x, w, feat):
        return jnp.stack(_ba._reprojerr(ops, cam, x, w, feat))

    def residuals(cams, pts, ws, feats, obs):
        r = jax.vmap(reproj)(cams[obs[:, 0]], pts[obs[:, 1]], ws, feats)
        return r, 1.0 - ws * ws

    def blocks(cams, pts, ws, feats, obs):
        jc, jx, jw = jax.vmap(jax.jacrev(reproj, argnums=(0, 1, 2)))(
            cams[obs[:, 0]], pts[obs[:, 1]], ws, feats)
        return jnp.concatenate([jc, jx, jw[:, :, None]], axis=2), -2.0 * ws

    fr, fb = jax.jit(residuals), jax.jit(blocks)
    t = Tool("jax")
    t.traced = False
    t.compiled = True
    t.objective = lambda: np.asarray(fr(cams, pts, ws, feats, obs)[0])
    t.derivative = lambda: _assemble_vals(*[np.asarray(a) for a in
                                            fb(cams, pts, ws, feats, obs)])
    return t


def _assemble_vals(blk, dw):
    return np.concatenate([np.ravel(blk), dw])


# --------------------------------------------------------------------------- PyTorch


def _import_torch():
    try:
        import torch
    except Exception:  # noqa: BLE001 - optional dependency
        return None
    return torch


def _torch_gmm(inp, x):
    torch = _import_torch()
    if torch is None:
        return None
    d, k = inp.d, inp.k
    _, _, rows, cols, pos = _gmm._unpack_icf(inp.icf, d)
    rows, cols, pos = (torch.as_tensor(a) for a in (rows, cols, pos))
    const = inp.n * d * _gmm.HALF_LOG_2PI + _gmm.wishart_constant(d, k, inp.gamma, inp.m)
    gamma, m, n = inp.gamma, inp.m, inp.n
    xs = torch.as_tensor(np.ascontiguousarray(x))

    def objective(alphas, means, icf):
        qs, ls = icf[:, :d], icf[:, d:]
        lmat = torch.zeros((k, d, d), dtype=torch.float64)
        lmat = lmat.index_put((torch.arange(k)[:, None], rows[None], cols[None]), ls[:, pos])
        xc = xs[:, None, :] - means[None]
        qx = torch.exp(qs)[None] * xc + torch.einsum("krc,nkc->nkr", lmat, xc)
        beta = alphas + qs.sum(dim=1) - 0.5 * torch.sum(qx * qx, dim=2)
        prior = 0.5 * gamma * gamma * (torch.sum(torch.exp(qs) ** 2) + torch.sum(ls ** 2)) \
            - m * torch.sum(qs)
        return torch.sum(torch.logsumexp(beta, dim=1)) - n * torch.logsumexp(alphas, 0) \
            + prior - const

    params = [torch.as_tensor(a) for a in (inp.alphas, inp.means, inp.icf)]

    def derivative():
        ps = [p.clone().requires_grad_(True) for p in params]
        objective(*ps).backward()
        return _gmm.flatten_gradient(*[p.grad.numpy() for p in ps])

    t = Tool("torch")
    t.traced = False

    def value():
        with torch.no_grad():
            return float(objective(*params))
    t.objective = value
    t.derivative = derivative
    return t


class _TorchOps:
    def __init__(self, torch):
        self.torch = torch
        self.sqrt, self.sin, self.cos = torch.sqrt, torch.sin, torch.cos

    def cond_zero(self, s, if_zero, otherwise):
        return tuple(self.torch.where(s == 0.0, a, b) for a, b in zip(if_zero(), otherwise()))


def _torch_ba(inp, arrays):
    torch = _import_torch()
    if torch is None or not hasattr(torch, "func"):
        return None
    ops = _TorchOps(torch)
    cams, pts, ws, feats, obs = [torch.as_tensor(a) for a in arrays]

    def reproj(cam, x, w, feat):
        return torch.stack(_ba._reprojerr(ops, cam, x, w, feat))

    def residuals():
        with torch.no_grad():
            return torch.func.vmap(reproj)(cams[obs[:, 0]], pts[obs[:, 1]], ws, feats).numpy()

    def jacobian():
        jc, jx, jw = torch.func.vmap(torch.func.jacrev(reproj, argnums=(0, 1, 2)))(
            cams[obs[:, 0]], pts[obs[:, 1]], ws, feats)
        blk = torch.cat([jc, jx, jw[:, :, None]], dim=2)
        return _assemble_vals(blk.detach().numpy(), (-2.0 * ws).numpy())

    t = Tool("torch")
    t.traced = False
    t.objective = residuals
    t.derivative = jacobian
    return t


# --------------------------------------------------------------------------- driver


def expand_files(specs) -> list:
    out = []
    for s in specs:
        hits = sorted(glob.glob(s))
        out.extend(hits if hits else [s])
    return out


def run_bench(args) -> int:
    names = {t.strip() for t in args.tools.split(",") if t.strip()}
    backends = [b.strip() for b in (args.backend or DEFAULT_BACKEND).split(",")]
    files = expand_files(args.files) if args.files else DEFAULT_FILES
    os.makedirs(args.out, exist_ok=True)
    rows = []
    try:
        from tqdm import tqdm
        bar = tqdm(total=len(files), unit="file", leave=False, disable=None, file=sys.stderr)
    except ImportError:  # pragma: no cover
        bar = None
    errors = 0
    for path in files:
        try:
            kind = kind_of(path)
            if kind == "gmm":
                inp = _io.read_gmm(path)
                tools = _gmm_tools(inp, names, backends)
                nind = inp.n_independents
            else:
                inp = _io.read_ba(path)
                tools = _ba_tools(inp, names, backends)
                nind = inp.shape[1]
        except ValueError as e:          # InputFormatError is a ValueError too
            print(f"ERROR {path}: {e}")
            errors += 1
            continue
        label = os.path.relpath(os.path.abspath(path),
                                os.path.dirname(os.path.dirname(os.path.abspath(path))))
        ref = {}
        for tool in sorted(tools, key=lambda t: t.name != "numpy"):   # numpy first
            for what in ("objective", "derivative"):
                fn = getattr(tool, what)
                t0 = time.perf_counter()
                try:
                    result = fn()
                except Exception as e:  # noqa: BLE001 - report and go on with other tools
                    print(f"{label}: {tool.name} {what} failed: {type(e).__name__}: {e}")
                    continue
                first = time.perf_counter() - t0
                best, runs = measure(fn, args.max_runs, args.max_seconds)
                best = min(best, first)
                compile_s = max(0.0, first - best) if tool.compiled else 0.0
                peak = float("nan")
                if not args.no_memory and tool.traced:
                    if tool.release is not None:
                        tool.release()
                    peak = traced_peak_mb(fn)
                res = np.ravel(np.asarray(result, dtype=np.float64))
                if tool.name == "numpy":
                    ref[what] = res
                err = max_metric(res, ref[what]) if what in ref else float("nan")
                rows.append(dict(task=kind, file=label, n_independents=nind, tool=tool.name,
                                 what="objective" if what == "objective" else
                                 ("gradient" if kind == "gmm" else "jacobian"),
                                 seconds=best, runs=runs, compile_s=compile_s,
                                 traced_peak_mb=peak, max_metric_vs_numpy=err,
                                 note=tool.note))
                r = rows[-1]
                print(f"{label:34s} {tool.name:14s} {r['what']:9s} {best:10.3e} s "
                      f"({runs} runs{f', compile {compile_s:.2f} s' if tool.compiled else ''}"
                      f"{'' if args.no_memory else f', peak {peak:.1f} MB'}) "
                      f"metric vs numpy {err:.1e}"
                      f"{'; ' + tool.note if tool.note and what != 'objective' else ''}",
                      flush=True)
        if bar is not None:
            bar.update()
    if bar is not None:
        bar.close()
    csv_path = os.path.join(args.out, "bench.csv")
    with open(csv_path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"\nwrote {csv_path}; process max RSS {max_rss_mb():.0f} MB")
    print_ratios(rows)
    print_versus(rows)
    png = plot(rows, os.path.join(args.out, "bench.png"))
    if png:
        print(f"wrote {png}")
    bad = [r for r in rows if np.isfinite(r["max_metric_vs_numpy"])
           and r["max_metric_vs_numpy"] > 1e-8]
    for r in bad:
        print(f"WARNING {r['file']} {r['tool']} {r['what']}: metric vs numpy "
              f"{r['max_metric_vs_numpy']:.1e} > 1e-8")
    return 1 if bad or errors else 0


def print_ratios(rows):
    """Time of each tool relative to NumPy, per file and quantity."""
    base = {(r["file"], r["what"]): r["seconds"] for r in rows if r["tool"] == "numpy"}
    tools = sorted({r["tool"] for r in rows if r["tool"] != "numpy"})
    if not base or not tools:
        return
    print("\ntime / numpy time:")
    print(f"  {'file':34s} {'what':9s} " + " ".join(f"{t:>14s}" for t in tools))
    keys = sorted(base, key=lambda k: (k[0], k[1] != "objective"))
    by = {(r["file"], r["what"], r["tool"]): r["seconds"] for r in rows}
    for f, what in keys:
        cells = []
        for t in tools:
            s = by.get((f, what, t))
            cells.append(f"{s / base[(f, what)]:14.2f}" if s else f"{'-':>14s}")
        print(f"  {f:34s} {what:9s} " + " ".join(cells))


def _geomean(xs) -> float:
    return float(np.exp(np.mean(np.log(xs))))


def print_versus(rows):
    """Each other tool's time over accel's (above 1: accel is faster) per file, and
    accel's derivative/objective time ratio, with geometric means: the issue's targets."""
    accel = sorted({r["tool"] for r in rows if r["tool"].startswith("accel")})
    if not accel:
        return
    ref = accel[-1]  # accel-cpu(+ftz) when measured, else the last backend
    others = sorted({r["tool"] for r in rows} - {ref})
    by = {(r["file"], r["what"], r["tool"]): r["seconds"] for r in rows}
    keys = sorted({(r["file"], r["what"]) for r in rows if r["tool"] == ref
                   and r["what"] != "objective"})
    if not keys:
        return
    print(f"\ntime / {ref} time (derivatives), and {ref}'s derivative / objective time:")
    print(f"  {'file':34s} {'what':9s} " + " ".join(f"{t:>14s}" for t in others)
          + f" {'deriv/obj':>10s}")
    cols: dict = {t: [] for t in others + ["deriv/obj"]}
    for f, what in keys:
        cells = []
        for t in others:
            s = by.get((f, what, t))
            if s:
                cols[t].append(s / by[(f, what, ref)])
            cells.append(f"{cols[t][-1]:14.2f}" if s else f"{'-':>14s}")
        obj = by.get((f, "objective", ref))
        if obj:
            cols["deriv/obj"].append(by[(f, what, ref)] / obj)
        cells.append(f"{cols['deriv/obj'][-1]:10.2f}" if obj else f"{'-':>10s}")
        print(f"  {f:34s} {what:9s} " + " ".join(cells))
    print(f"  {'geometric mean':34s} {'':9s} "
          + " ".join(f"{_geomean(v):14.2f}" if v else f"{'-':>14s}" for t, v in cols.items()
                     if t != "deriv/obj")
          + (f" {_geomean(cols['deriv/obj']):10.2f}" if cols["deriv/obj"] else ""))
    for t in others:
        if cols[t]:
            print(f"  {ref} faster than {t} on {sum(v > 1 for v in cols[t])} of "
                  f"{len(cols[t])}")
    grads = [by[(f, w, ref)] / by[(f, "objective", ref)] for f, w in keys
             if w == "gradient" and (f, "objective", ref) in by]
    if grads:  # the GMM target (a BA Jacobian has a row per residual: no such bound)
        print(f"  GMM gradient/objective <= 3 on {sum(v <= 3 for v in grads)} of "
              f"{len(grads)} (max {max(grads):.2f})")


def plot(rows, path):
    """A log-log plot per task (time vs independent variables), or None without
    matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001 - optional dependency
        print("(matplotlib not importable: no plot)")
        return None
    panels = [(task, what) for task, what in (("gmm", "gradient"), ("ba", "jacobian"),
                                              ("gmm", "objective"), ("ba", "objective"))
              if any(r["task"] == task and r["what"] == what for r in rows)]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (task, what) in zip(axes[0], panels):
        sel = [r for r in rows if r["task"] == task and r["what"] == what]
        for tool in sorted({r["tool"] for r in sel}):
            pts = sorted((r["n_independents"], r["seconds"]) for r in sel if r["tool"] == tool)
            xs, ys = zip(*pts)
            ax.loglog(xs, ys, "--o" if tool.startswith("accel") else "-o", label=tool)
        ax.set_title(f"{task.upper()} {what}")
        ax.set_xlabel("independent variables")
        ax.set_ylabel("seconds (min over runs)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
