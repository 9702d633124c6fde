"""Loops in reverse mode, beside JAX: an RNN, an ODE integrator and a Newton iteration.

Each program runs T steps of ``A.awhile`` over m = 10000 elements (state ``(t, y)``,
the step counter in the state); the gradient is ``gradientA`` w.r.t. the parameters
and the initial state.  JAX runs the same loop with ``lax.scan`` (RNN) or
``lax.fori_loop`` (ODE, Newton), ``jit(grad)`` and ``jit`` for the primal.  Prints
times for T = 100, 200, 400, the gradient/primal ratios and JAX's.
Run: python benchmarks/loops.py [--backend cpu] [--m 10000]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import accel as A
from timing import best  # sibling script

HERE = os.path.dirname(os.path.abspath(__file__))
DT = 0.01


def _loop(T, step):
    """``awhile`` over ``(t, y)`` for T steps of ``y <- step(t, y)``."""
    def run(y0):
        def body(s):
            t, y = s
            return (A.unit(A.the(t) + 1), step(A.the(t), y))
        return A.awhile(lambda s: A.unit(A.the(s[0]) < T), body, (A.unit(0), y0))[1]
    return run


def rnn(T):
    """``h <- tanh(W * h + xs[t])`` (W a vector, elementwise), loss ``sum(h_T^2)``."""
    def loss(W, h0, xs):
        h = _loop(T, lambda t, h: A.generate(
            (A.size(h),), lambda i: A.tanh(W[i] * h[i] + xs[t, i])))(h0)
        return A.sum(A.map(lambda v: v * v, h))
    return loss


def ode(T):
    """Explicit Euler for ``y' = -k y + sin y``, loss ``sum(y_T)``."""
    def loss(k, y0):
        y = _loop(T, lambda t, y: A.zip_with(
            lambda kv, yv: yv + DT * (A.sin(yv) - kv * yv), k, y))(y0)
        return A.sum(y)
    return loss


def newton(T):
    """T Newton steps for ``x^3 + a x - b = 0`` from ``x0``, loss ``sum(x_T)``."""
    def loss(a, b, x0):
        def step(t, x):
            return A.generate((A.size(x),), lambda i: x[i] - (x[i] * x[i] * x[i] + a[i] * x[i]
                                                              - b[i])
                              / (3.0 * x[i] * x[i] + a[i]))
        return A.sum(_loop(T, step)(x0))
    return loss


def jax_programs(T):
    import jax
    import jax.numpy as jnp
    from jax import lax

    def rnn_j(W, h0, xs):
        h, _ = lax.scan(lambda h, x: (jnp.tanh(W * h + x), None), h0, xs)
        return jnp.sum(h * h)

    def ode_j(k, y0):
        return jnp.sum(lax.fori_loop(0, T, lambda t, y: y + DT * (jnp.sin(y) - k * y), y0))

    def newton_j(a, b, x0):
        return jnp.sum(lax.fori_loop(0, T, lambda t, x: x - (x ** 3 + a * x - b)
                                     / (3.0 * x * x + a), x0))
    return [(f, jax.jit(f), jax.jit(jax.grad(f, argnums=w)))
            for f, w in ((rnn_j, (0, 1)), (ode_j, (0, 1)), (newton_j, (0, 1)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--m", type=int, default=10000)
    ap.add_argument("--no-jax", action="store_true")
    opts = ap.parse_args()
    import jax
    jax.config.update("jax_enable_x64", True)
    m = opts.m
    rng = np.random.default_rng(0)
    print(f"{'program':8} {'T':>4} {'primal ms':>10} {'grad ms':>9} {'ratio':>6} "
          f"{'jax primal':>10} {'jax grad':>9} {'jax ratio':>9}")
    for T in (100, 200, 400):
        W, h0 = rng.normal(size=m) * 0.5, rng.normal(size=m)
        xs = rng.normal(size=(T, m))
        k, y0 = rng.uniform(0.5, 1.5, size=m), rng.normal(size=m)
        a, b, x0 = rng.uniform(1, 2, size=m), rng.normal(size=m), rng.normal(size=m)
        cases = (("rnn", rnn(T), (0, 1), (W, h0, xs)), ("ode", ode(T), (0, 1), (k, y0)),
                 ("newton", newton(T), (0, 1), (a, b, x0)))
        jaxes = jax_programs(T) if not opts.no_jax else [None] * 3
        for (name, f, wrt, args), jx in zip(cases, jaxes):
            p = A.compile(f, backend=opts.backend)
            g = A.compile(A.gradientA(f, wrt=wrt), backend=opts.backend)
            tp, tg = best(p, *args, repeat=10), best(g, *args, repeat=10)
            line = f"{name:8} {T:>4} {tp * 1e3:10.1f} {tg * 1e3:9.1f} {tg / tp:6.1f}"
            if jx is not None:
                _, jp, jg = jx

                def jp_(*xs):
                    return jp(*xs).block_until_ready()

                def jg_(*xs):
                    return [v.block_until_ready() for v in jg(*xs)]
                jtp, jtg = best(jp_, *args, repeat=10), best(jg_, *args, repeat=10)
                line += f" {jtp * 1e3:10.1f} {jtg * 1e3:9.1f} {jtg / jtp:9.1f}"
            print(line, flush=True)


if __name__ == "__main__":
    import sys
    sys.path.insert(0, HERE)
    main()
