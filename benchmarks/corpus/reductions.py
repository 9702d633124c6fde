"""Whole-array reductions, scans and scatters: logsumexp, cumulative sum, histogram.

logsumexp shifts by the maximum (``A.maximum``) as a user writes it; JAX's
``jax.scipy.special.logsumexp`` stops the gradient at its shift.  The cumulative sum
is ``scanl1 (+)`` under ``sin``; the histogram is a ``permute (+)`` of weights into
bins chosen by a second (non-differentiated) array, JAX ``.at[].add`` or
``segment_sum``.
"""

from __future__ import annotations

import numpy as np

import accel as A

from .program import Program, add, dims, square

BINS = 100


def logsumexp(x):
    m = A.the(A.maximum(x))
    s = A.the(A.sum(A.map(lambda v: A.exp(v - m), x)))
    return A.unit(A.log(s) + m)


def jax_logsumexp(x):
    from jax.scipy.special import logsumexp as lse
    return lse(x)


def torch_logsumexp(x):
    import torch
    return torch.logsumexp(x, 0)


def np_logsumexp(x):
    m = x.max()
    return float(np.log(np.exp(x - m).sum()) + m)


def _lse_inputs(size, rng):
    (n,) = dims(size, (7,), (50000,), (1_000_000,))
    return (rng.standard_normal(n) * 3.0,)


def cumsum_scan(x):
    return A.sum_all(A.map(A.sin, A.scanl1(add, x)))


def jax_cumsum(x):
    import jax.numpy as jnp
    return jnp.sum(jnp.sin(jnp.cumsum(x)))


def torch_cumsum(x):
    import torch
    return torch.sum(torch.sin(torch.cumsum(x, 0)))


def np_cumsum(x):
    return float(np.sin(np.cumsum(x)).sum())


def _cumsum_inputs(size, rng):
    (n,) = dims(size, (6,), (50000,), (1_000_000,))
    return (rng.standard_normal(n) * 0.1,)


def histogram_permute(x, w):
    h = A.permute(add, A.fill((BINS,), 0.0), lambda i: A.to_int(x[i] * BINS), w)
    return A.sum_all(A.map(square, h))


def jax_histogram_at(x, w):
    import jax.numpy as jnp
    h = jnp.zeros(BINS, dtype=w.dtype).at[(x * BINS).astype(jnp.int32)].add(w)
    return jnp.sum(h * h)


def jax_histogram_segment(x, w):
    import jax
    import jax.numpy as jnp
    h = jax.ops.segment_sum(w, (x * BINS).astype(jnp.int32), num_segments=BINS)
    return jnp.sum(h * h)


def np_histogram(x, w):
    h = np.bincount((x * BINS).astype(np.int64), weights=w, minlength=BINS)
    return float((h * h).sum())


def _histogram_inputs(size, rng):
    (n,) = dims(size, (9,), (50000,), (1_000_000,))
    return rng.random(n), rng.standard_normal(n)


PROGRAMS = [
    Program(name="logsumexp", accel={"maximum-shift": logsumexp},
            jax={"scipy.logsumexp": jax_logsumexp}, torch={"logsumexp": torch_logsumexp},
            inputs=_lse_inputs, wrt=(0,), reference=np_logsumexp, note="1M"),
    Program(name="cumsum", accel={"scanl1": cumsum_scan}, jax={"cumsum": jax_cumsum},
            torch={"cumsum": torch_cumsum}, inputs=_cumsum_inputs, wrt=(0,),
            reference=np_cumsum, note="sum(sin(cumsum(x))), 1M"),
    Program(name="histogram", accel={"permute": histogram_permute},
            jax={".at[].add": jax_histogram_at, "segment_sum": jax_histogram_segment},
            inputs=_histogram_inputs, wrt=(1,), reference=np_histogram,
            note=f"1M weights into {BINS} bins, gradient in the weights"),
]
