"""The corpus's outputs: the printed table, the CSV and the bar chart."""

from __future__ import annotations

import csv
import math
import os

FIELDS = ["program", "formulation", "size", "accel_grad_s", "jax_grad_s",
          "jax_over_accel_grad", "accel_primal_s", "jax_primal_s", "jax_over_accel_primal",
          "accel_grad_over_primal", "jax_grad_over_primal", "accel_first_grad_s",
          "accel_first_primal_s", "jax_first_grad_s", "kernels", "primal_kernels",
          "metric_vs_jax", "jax_formulation", "jax_all", "torch_formulation", "torch_grad_s",
          "torch_primal_s"]


def geomean(xs) -> float:
    xs = [x for x in xs if x and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _ms(v):
    return f"{v * 1e3:9.2f}" if isinstance(v, float) else f"{'-':>9s}"


def _num(v, fmt):
    return format(v, fmt) if isinstance(v, (int, float)) else "-"


def row_line(r) -> str:
    """One row of :func:`table`."""
    return (f"{r['program']:14s} {r['formulation']:13s} {_ms(r['accel_grad_s']):>10s} "
            f"{_ms(r.get('jax_grad_s')):>9s} {_num(r.get('jax_over_accel_grad'), '9.2f'):>9s} "
            f"{_ms(r['accel_primal_s']):>10s} {_ms(r.get('jax_primal_s')):>9s} "
            f"{_num(r['accel_grad_over_primal'], '9.1f'):>9s} "
            f"{_num(r.get('jax_grad_over_primal'), '8.1f'):>8s} "
            f"{r['accel_first_grad_s']:8.1f} {r['kernels']:5d} "
            f"{_num(r.get('metric_vs_jax'), '8.1e'):>8s}  {r.get('jax_formulation', '-')}")


def table(rows) -> str:
    head = (f"{'program':14s} {'formulation':13s} {'accel grad':>10s} {'JAX grad':>9s} "
            f"{'JAX/accel':>9s} {'accel prim':>10s} {'JAX prim':>9s} {'g/p accel':>9s} "
            f"{'g/p JAX':>8s} {'1st call':>8s} {'kern':>5s} {'vs JAX':>8s}  JAX formulation")
    lines = [head, "(times in ms: minimum over repeats after warm-up; 1st call in s, "
                   "accel gradient, compile or cache load included)"]
    lines.extend(row_line(r) for r in rows)
    ratios = [r.get("jax_over_accel_grad") for r in rows]
    if any(ratios):
        first = {}
        for r in rows:
            first.setdefault(r["program"], r)
        lines.append(f"geometric mean of JAX/accel (gradient): {geomean(ratios):.3f} over "
                     f"{len([x for x in ratios if x])} rows; "
                     f"{geomean([r.get('jax_over_accel_grad') for r in first.values()]):.3f} "
                     f"over the {len(first)} programs' first (natural) formulations")
        lines.append(f"geometric mean of JAX/accel (primal): "
                     f"{geomean([r.get('jax_over_accel_primal') for r in rows]):.3f}")
    return "\n".join(lines)


def write_csv(rows, path):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    return path


def bar_chart(rows, path):
    """JAX time / accel time (gradient and primal) per row, log scale; None (with a
    message) when matplotlib is not importable."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # noqa: BLE001 - optional dependency
        print("(matplotlib not importable: no chart)")
        return None
    sel = [r for r in rows if r.get("jax_over_accel_grad")]
    if not sel:
        return None
    labels = [f"{r['program']}/{r['formulation']}" for r in sel]
    xs = range(len(sel))
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(sel)), 5))
    ax.bar([x - 0.2 for x in xs], [r["jax_over_accel_grad"] for r in sel], 0.4,
           label="gradient")
    ax.bar([x + 0.2 for x in xs], [r["jax_over_accel_primal"] for r in sel], 0.4,
           label="primal")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=70, ha="right", fontsize=8)
    ax.set_ylabel("JAX time / accel time (above 1: accel faster)")
    ax.set_title(f"accel vs JAX, geometric mean (gradient) "
                 f"{geomean([r['jax_over_accel_grad'] for r in sel]):.2f}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def out_dir(path):
    os.makedirs(path, exist_ok=True)
    return path
