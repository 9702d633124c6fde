"""Pairwise squared distances: an RBF kernel sum and the k-means cost.

RBF: ``sum_ij exp(-||x_i - y_j||^2 / (2 D))``; k-means: ``sum_i min_k ||x_i - c_k||^2``
(gradient in the centroids).  accel: the (N, M, D) differences by ``replicate`` +
``zip_with`` and by ``generate`` + indexing.  JAX: the same broadcast, and the
expansion ``|x|^2 + |y|^2 - 2 x y^T`` through ``jnp.matmul`` (the runner keeps the
faster).
"""

from __future__ import annotations

import numpy as np

import accel as A

from .program import Program, dims


def _sqdist_replicate(x, y):
    n, m = x.shape[0], y.shape[0]
    diff = A.zip_with(lambda a, b: (a - b) * (a - b), A.replicate((A.All, m, A.All), x),
                      A.replicate((n, A.All, A.All), y))
    return A.sum(diff)


def _sqdist_generate(x, y):
    n, m, d = x.shape[0], y.shape[0], x.shape[1]

    def term(ix):
        v = x[ix[0], ix[2]] - y[ix[1], ix[2]]
        return v * v
    return A.sum(A.generate((n, m, d), term))


def _rbf(sqdist):
    def rbf(x, y):
        scale = -0.5 / A.to_float(x.shape[1])
        return A.sum_all(A.map(lambda s: A.exp(s * scale), sqdist(x, y)))
    return rbf


def _kmeans(sqdist):
    def kmeans(x, c):
        return A.sum_all(A.minimum(sqdist(x, c)))
    return kmeans


def _jax_sqdist_broadcast(x, y):
    import jax.numpy as jnp
    d = x[:, None, :] - y[None, :, :]
    return jnp.sum(d * d, axis=2)


def _jax_sqdist_matmul(x, y):
    import jax.numpy as jnp
    return (jnp.sum(x * x, axis=1)[:, None] + jnp.sum(y * y, axis=1)[None, :]
            - 2.0 * jnp.matmul(x, y.T))


def _jax_rbf(sqdist):
    def rbf(x, y):
        import jax.numpy as jnp
        return jnp.sum(jnp.exp(sqdist(x, y) * (-0.5 / x.shape[1])))
    return rbf


def _jax_kmeans(sqdist):
    def kmeans(x, c):
        import jax.numpy as jnp
        return jnp.sum(jnp.min(sqdist(x, c), axis=1))
    return kmeans


def _np_sqdist(x, y):
    d = x[:, None, :] - y[None, :, :]
    return (d * d).sum(axis=2)


def np_rbf(x, y):
    return float(np.exp(_np_sqdist(x, y) * (-0.5 / x.shape[1])).sum())


def np_kmeans(x, c):
    return float(_np_sqdist(x, c).min(axis=1).sum())


def _rbf_inputs(size, rng):
    n, m, d = dims(size, (4, 3, 2), (300, 200, 16), (1000, 1000, 32))
    return rng.standard_normal((n, d)), rng.standard_normal((m, d))


def _kmeans_inputs(size, rng):
    n, k, d = dims(size, (6, 3, 2), (1000, 20, 8), (10000, 100, 20))
    return rng.standard_normal((n, d)), rng.standard_normal((k, d))


PROGRAMS = [
    Program(name="pairwise_rbf",
            accel={"replicate": _rbf(_sqdist_replicate), "generate": _rbf(_sqdist_generate)},
            jax={"broadcast": _jax_rbf(_jax_sqdist_broadcast),
                 "matmul": _jax_rbf(_jax_sqdist_matmul)},
            inputs=_rbf_inputs, wrt=(0, 1), reference=np_rbf, note="1000 x 1000 points, D 32"),
    Program(name="kmeans",
            accel={"replicate": _kmeans(_sqdist_replicate),
                   "generate": _kmeans(_sqdist_generate)},
            jax={"broadcast": _jax_kmeans(_jax_sqdist_broadcast),
                 "matmul": _jax_kmeans(_jax_sqdist_matmul)},
            inputs=_kmeans_inputs, wrt=(1,), reference=np_kmeans,
            note="10000 x 20, k = 100, gradient in the centroids"),
]
