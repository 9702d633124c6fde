"""What the general ``permute`` rule costs next to the fast paths, and next to JAX.

The loss ``sum(sin(permute comb defaults idx x))`` over ``n`` sources and ``m`` targets
(random targets, every tenth source ignored), its gradient with respect to ``x`` and the
defaults, on one backend:

- accel, ``+`` and ``*`` (the O(n + m) fast paths);
- accel, ``\\x y -> x * y * 2`` and log-add-exp (the grouped rule of
  ``accel/ad/permute_general.py``: a radix sort over the bits of ``m``, two segmented scans);
- JAX (``jit(grad)``): ``segment_sum``; a product as ``exp(segment_sum(log x))``
  (``segment_prod`` has no gradient for repeated indices); a log-sum-exp by segment
  (``segment_max`` then ``segment_sum`` of the shifted exponentials: JAX has no segment
  reduction with a user operator), the same losses.

Times are the minimum of 5 calls after a warm-up (compilation not timed).
Run: python benchmarks/permute_general.py [--backend cpu] [--n 1000000] [--m 1000]
"""

from __future__ import annotations

import argparse

import numpy as np

import accel as A
from timing import best  # sibling script


def accel_loss(comb):
    def f(x, d, idx):
        m = d.shape[0]
        r = A.permute(comb, d, lambda i: A.cond(i % 10 != 9, idx[i] % m, A.ignore), x)
        return A.sum_all(A.map(A.sin, r))
    return f


#: name -> (combination, scale of the sources: x*y*2 of values near 1/2 stays near 1)
ACCEL = {
    "sum (+, fast path)": (lambda x, y: x + y, 1.0),
    "product (*, fast path)": (lambda x, y: x * y, 1.0),
    "x*y*2 (general)": (lambda x, y: x * y * 2, 0.5),
    "log-add-exp (general)": (lambda x, y: A.max(x, y) + A.log1p(A.exp(-abs(x - y))), 1.0),
}


def jax_losses():
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def seg(x, d, idx, kind):
        m = d.shape[0]
        keep = jnp.arange(x.shape[0]) % 10 != 9
        ids = jnp.where(keep, idx % m, m)  # segment m is dropped
        if kind == "sum":
            r = d + jax.ops.segment_sum(x, ids, m + 1)[:m]
        elif kind == "prod":
            # segment_prod's gradient raises NotImplementedError unless the indices are
            # unique (JAX 0.10), so the product goes through logarithms (x > 0)
            r = d * jnp.exp(jax.ops.segment_sum(jnp.log(x), ids, m + 1)[:m])
        else:
            mx = jnp.maximum(jax.ops.segment_max(x, ids, m + 1)[:m], d)
            mx = jax.lax.stop_gradient(mx)
            s = jax.ops.segment_sum(jnp.exp(x - mx[ids % m]) * keep, ids, m + 1)[:m]
            r = mx + jnp.log(s + jnp.exp(d - mx))
        return jnp.sum(jnp.sin(r))

    out = {}
    for kind in ("sum", "prod", "logsumexp"):
        g = jax.jit(jax.grad(lambda x, d, idx, k=kind: seg(x, d, idx, k), argnums=(0, 1)))
        out[f"jax segment_{kind}"] = lambda *a, g=g: jax.block_until_ready(g(*a))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--m", type=int, default=1000)
    opts = ap.parse_args()
    rng = np.random.default_rng(0)
    x = rng.uniform(0.999, 1.001, opts.n)  # products of many factors stay finite
    d = rng.uniform(0.5, 1.0, opts.m)
    idx = rng.integers(0, opts.m, opts.n)
    print(f"n = {opts.n}, m = {opts.m}, backend {opts.backend}")
    print(f"{'gradient of':28} {'primal ms':>9} {'gradient ms':>11} {'ratio':>6}")
    for name, (comb, scale) in ACCEL.items():
        f = accel_loss(comb)
        p = A.compile(f, backend=opts.backend)
        g = A.compile(A.gradientA(f, wrt=(0, 1)), backend=opts.backend)
        xs = x * scale
        tp, tg = best(p, xs, d, idx), best(g, xs, d, idx)
        print(f"{'accel ' + name:28} {tp * 1e3:9.2f} {tg * 1e3:11.2f} {tg / tp:6.1f}")
    for name, g in jax_losses().items():
        print(f"{name:28} {'':>9} {best(g, x, d, idx) * 1e3:11.2f}")


if __name__ == "__main__":
    main()
