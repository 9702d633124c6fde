"""The GMM objective of ADBench in three accel formulations.

``adbench``: the project's own program (``accel.adbench.gmm.objective``: replicate +
zip_with broadcasting, L_k built by a ``generate`` over (K, D, D)).  ``backpermute``:
what a user porting the NumPy code writes: every operand gathered to its full
(N, K, D) or (N, K, D, D) shape by ``backpermute`` and multiplied elementwise.
``indexing``: one ``generate`` per array, reading ``icf``, ``x`` and ``means`` by
index (L_k's entries read from ``icf`` inside the (N, K, D, D) product).  The two
user formulations shift their logsumexps by the maximum.  JAX: L_k scattered into a
(K, D, D) array, ``Q x`` by a batched ``jnp.matmul`` over (K, N, D) x (K, D, D)^T or
by ``einsum("krc,nkc->nkr")`` (the runner keeps the faster).
"""

from __future__ import annotations

import numpy as np

import accel as A
from accel.adbench import gmm as adgmm

from .program import Program, dims, mul, square


def _ltri(d, r, c):
    """Position in icf's strict lower part of L's entry (r, c), r > c (column-major, as
    ADBench stores it)."""
    return (c * (2 * d - c - 1)) // 2 + (r - c - 1)


def _lse(v):
    """logsumexp over the innermost dimension, shifted by the maximum."""
    spec = tuple(A.All for _ in range(len(v.shape) - 1)) + (v.shape[-1],)
    mx = A.maximum(v)
    e = A.map(A.exp, A.zip_with(lambda a, b: a - b, v, A.replicate(spec, mx)))
    return A.zip_with(lambda s, m: A.log(s) + m, A.sum(e), mx)


def _total(alphas, icf, beta, consts, d):
    """``-N D/2 log 2 pi + sum_i lse(beta_i) - N lse(alpha) + prior - c``."""
    n = beta.shape[0]
    k = icf.shape[0]
    gamma, wm, wc = consts[1], consts[2], consts[3]
    qs = A.backpermute((k, d), lambda ix: ix, icf)
    ls = A.backpermute((k, icf.shape[1] - d), lambda ix: (ix[0], ix[1] + d), icf)
    prior = (0.5 * gamma * gamma * (A.the(A.sum_all(A.map(lambda q: A.exp(2.0 * q), qs)))
                                    + A.the(A.sum_all(A.map(square, ls))))
             - wm * A.the(A.sum_all(qs)))
    nf = A.to_float(n)
    return A.unit(-nf * A.to_float(d) * adgmm.HALF_LOG_2PI + A.the(A.sum_all(_lse(beta)))
                  - nf * A.the(_lse(alphas)) + prior - wc)


def gmm_backpermute(alphas, means, icf, x, consts):
    k, d = means.shape
    n = x.shape[0]
    sum_qs = A.sum(A.backpermute((k, d), lambda ix: ix, icf))
    xc = A.zip_with(lambda a, b: a - b,
                    A.backpermute((n, k, d), lambda ix: (ix[0], ix[2]), x),
                    A.backpermute((n, k, d), lambda ix: (ix[1], ix[2]), means))
    lmats = A.generate((k, d, d), lambda ix: A.cond(
        ix[2] < ix[1], icf[ix[0], d + _ltri(d, ix[1], ix[2])], 0.0))
    l4 = A.backpermute((n, k, d, d), lambda ix: (ix[1], ix[2], ix[3]), lmats)
    x4 = A.backpermute((n, k, d, d), lambda ix: (ix[0], ix[1], ix[3]), xc)
    lx = A.sum(A.zip_with(mul, l4, x4))
    qd = A.backpermute((n, k, d), lambda ix: (ix[1], ix[2]), A.map(A.exp, icf))
    qx = A.zip_with(lambda a, b: a + b, A.zip_with(mul, qd, xc), lx)
    sqn = A.sum(A.map(square, qx))
    beta = A.zip_with(lambda s, q: s - 0.5 * q,
                      A.backpermute((n, k), lambda ix: ix[1],
                                    A.zip_with(lambda a, b: a + b, alphas, sum_qs)), sqn)
    return _total(alphas, icf, beta, consts, d)


def gmm_indexing(alphas, means, icf, x, consts):
    k, d = means.shape
    n = x.shape[0]
    sum_qs = A.sum(A.generate((k, d), lambda ix: icf[ix[0], ix[1]]))
    xc = A.generate((n, k, d), lambda ix: x[ix[0], ix[2]] - means[ix[1], ix[2]])

    def lterm(ix):
        i, kk, r, c = ix
        return A.cond(c < r, icf[kk, d + _ltri(d, r, c)] * xc[i, kk, c], 0.0)
    lx = A.sum(A.generate((n, k, d, d), lterm))
    qx = A.generate((n, k, d), lambda ix: A.exp(icf[ix[1], ix[2]]) * xc[ix[0], ix[1], ix[2]]
                    + lx[ix[0], ix[1], ix[2]])
    sqn = A.sum(A.map(square, qx))
    beta = A.generate((n, k), lambda ix: alphas[ix[1]] + sum_qs[ix[1]] - 0.5 * sqn[ix[0], ix[1]])
    return _total(alphas, icf, beta, consts, d)


def _jax_gmm(lx_of):
    def objective(alphas, means, icf, x, consts):
        import jax.numpy as jnp
        from jax.scipy.special import logsumexp
        k, d = means.shape
        n = x.shape[0]
        rows, cols = np.tril_indices(d, -1)
        qs, ls = icf[:, :d], icf[:, d:]
        lmat = jnp.zeros((k, d, d), icf.dtype).at[:, rows, cols].set(ls[:, _ltri(d, rows, cols)])
        xc = x[:, None, :] - means[None]                       # (N, K, D)
        qx = jnp.exp(qs)[None] * xc + lx_of(jnp, lmat, xc)
        beta = alphas + qs.sum(axis=1) - 0.5 * jnp.sum(qx * qx, axis=2)
        gamma, wm, wc = consts[1], consts[2], consts[3]
        prior = 0.5 * gamma * gamma * (jnp.sum(jnp.exp(qs) ** 2) + jnp.sum(ls ** 2)) \
            - wm * jnp.sum(qs)
        return (-n * d * adgmm.HALF_LOG_2PI + jnp.sum(logsumexp(beta, axis=1))
                - n * logsumexp(alphas) + prior - wc)
    return objective


def _lx_matmul(jnp, lmat, xc):
    """(K, N, D) @ (K, D, D)^T, back to (N, K, D)."""
    return jnp.transpose(jnp.matmul(jnp.transpose(xc, (1, 0, 2)), jnp.swapaxes(lmat, 1, 2)),
                         (1, 0, 2))


def _lx_einsum(jnp, lmat, xc):
    return jnp.einsum("krc,nkc->nkr", lmat, xc)


def np_gmm(alphas, means, icf, x, consts):
    return adgmm.numpy_objective(alphas, means, icf, x, float(consts[1]), float(consts[2]))


def _inputs(size, rng):
    n, d, k = dims(size, (6, 3, 2), (200, 5, 8), (1000, 20, 50))
    return (rng.standard_normal(k), rng.standard_normal((k, d)),
            rng.standard_normal((k, d * (d + 1) // 2)) * 0.3, rng.standard_normal((n, d)),
            adgmm.constants(d, k, n, 1.0, 0))


PROGRAMS = [
    Program(name="gmm", accel={"adbench": adgmm.objective, "backpermute": gmm_backpermute,
                               "indexing": gmm_indexing},
            jax={"batched matmul": _jax_gmm(_lx_matmul), "einsum": _jax_gmm(_lx_einsum)},
            inputs=_inputs, wrt=(0, 1, 2), reference=np_gmm, note="N 1000, D 20, K 50"),
]
