"""Timing one corpus program: accel (each formulation) against JAX's fastest formulation.

Every time is the minimum over ``repeat`` calls after one warm-up call (which is timed
separately as the first call: tracing, AD, fusion and compilation, or a load from the
disk cache).  JAX's formulations are each timed (``jax.jit`` of the loss and of
``jax.grad``); the one with the fastest gradient is the baseline.  Correctness is
ADBench's metric ``max |a - j| / max(1, |a| + |j|)`` between accel's gradient and the
baseline's, over every differentiated parameter.
"""

from __future__ import annotations

import time

import numpy as np

import accel as A
from accel.adbench.check import max_metric


def best_of(fn, repeat, budget=10.0):
    """(first call seconds, min seconds over up to ``repeat`` later calls, result of
    the first call); stops early once ``budget`` seconds have been spent."""
    t0 = time.perf_counter()
    out = fn()
    first = time.perf_counter() - t0
    ts = []
    start = time.perf_counter()
    while len(ts) < repeat:
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget:
            break
    return first, min(ts), out


def import_jax():
    try:
        import jax
    except Exception:  # noqa: BLE001 - optional: any import failure means "absent"
        return None
    jax.config.update("jax_enable_x64", True)
    return jax


def import_torch():
    try:
        import torch
    except Exception:  # noqa: BLE001 - optional
        return None
    return torch


def _as_tuple(g):
    return g if isinstance(g, tuple) else (g,)


def measure_jax(jax, prog, args, repeat, size=None):
    """{formulation: (grad s, primal s, first grad s, gradient tuple)} for every JAX
    formulation of ``prog`` (but those ``prog.jax_skip`` names for ``size``)."""
    jargs = [jax.numpy.asarray(a) for a in args]
    out = {}
    skip = prog.jax_skip.get(size, ())
    for name, f in prog.jax.items():
        if name in skip:
            continue
        jf = jax.jit(f)
        jg = jax.jit(jax.grad(f, argnums=prog.wrt))
        first, tg, g = best_of(lambda: jax.block_until_ready(jg(*jargs)), repeat)
        _, tp, _ = best_of(lambda: jax.block_until_ready(jf(*jargs)), repeat)
        out[name] = (tg, tp, first, tuple(np.asarray(x) for x in g))
    return out


def measure_torch(torch, prog, args, repeat):
    """{formulation: (grad s, primal s)} with PyTorch autograd (eager)."""
    out = {}
    targs = [torch.as_tensor(a) for a in args]

    def grad_fn(f):
        ps = [t.clone().requires_grad_(i in prog.wrt) for i, t in enumerate(targs)]
        f(*ps).backward()
        return [ps[i].grad for i in prog.wrt]

    def primal(f):
        with torch.no_grad():
            return f(*targs)
    for name, f in prog.torch.items():
        _, tg, _ = best_of(lambda: grad_fn(f), repeat)
        _, tp, _ = best_of(lambda: primal(f), repeat)
        out[name] = (tg, tp)
    return out


def measure_program(prog, size, repeat, backend, jax=None, torch=None, log=print,
                    natural_only=False):
    """One row (a dict) per accel formulation of ``prog`` (only the first, natural one
    with ``natural_only``)."""
    args = prog.args(size)
    jres = measure_jax(jax, prog, args, repeat, size) if jax is not None and prog.jax else {}
    jbest = min(jres, key=lambda k: jres[k][0]) if jres else None
    tres = measure_torch(torch, prog, args, repeat) if torch is not None and prog.torch else {}
    tbest = min(tres, key=lambda k: tres[k][0]) if tres else None
    rows = []
    forms = list(prog.accel.items())
    for form, f in forms[:1] if natural_only else forms:
        log(f"  {prog.name}/{form}: compiling and timing ...")
        g = A.compile(A.gradientA(f, wrt=prog.wrt), backend=backend, tiered=False)
        p = A.compile(f, backend=backend, tiered=False)  # compiled-only: times the kernels
        first, tg, grad = best_of(lambda: g(*args), repeat)
        pfirst, tp, _ = best_of(lambda: p(*args), repeat)
        grad = _as_tuple(grad)
        row = dict(program=prog.name, formulation=form, size=size,
                   accel_grad_s=tg, accel_primal_s=tp,
                   accel_grad_over_primal=tg / tp,
                   accel_first_grad_s=first, accel_first_primal_s=pfirst,
                   kernels=g.stats(*args)["kernels"],
                   primal_kernels=p.stats(*args)["kernels"])
        if jbest is not None:
            jg, jp, jfirst, jgrad = jres[jbest]
            row.update(jax_formulation=jbest, jax_grad_s=jg, jax_primal_s=jp,
                       jax_grad_over_primal=jg / jp, jax_first_grad_s=jfirst,
                       jax_over_accel_grad=jg / tg, jax_over_accel_primal=jp / tp,
                       metric_vs_jax=max(max_metric(a, b) for a, b in zip(grad, jgrad)),
                       jax_all=";".join(f"{k}={v[0]:.3e}" for k, v in jres.items()))
        if tbest is not None:
            row.update(torch_formulation=tbest, torch_grad_s=tres[tbest][0],
                       torch_primal_s=tres[tbest][1])
        rows.append(row)
        if hasattr(g, "release_buffers"):
            g.release_buffers()
            p.release_buffers()
    return rows
