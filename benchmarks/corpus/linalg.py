"""Matrix products (three shapes) and least squares.

The loss of a product is ``sum((a @ b)^2)``.  In accel a product is written three
ways a user would write it: the Accelerate idiom (``replicate`` both operands to
(m, n, k), ``zip_with`` and ``sum``), a ``generate`` that indexes both operands, and
``backpermute`` gathers of both.  JAX: ``jnp.matmul``.
"""

from __future__ import annotations

import accel as A

from .program import Program, dims, mul, square


def matmul_replicate(a, b):
    m, n = a.shape[0], b.shape[1]
    prod = A.zip_with(mul, A.replicate((A.All, n, A.All), a),
                      A.replicate((m, A.All, A.All), A.transpose(b)))
    return A.sum_all(A.map(square, A.sum(prod)))


def matmul_generate(a, b):
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    prod = A.generate((m, n, k), lambda ix: a[ix[0], ix[2]] * b[ix[2], ix[1]])
    return A.sum_all(A.map(square, A.sum(prod)))


def matmul_backpermute(a, b):
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    a3 = A.backpermute((m, n, k), lambda ix: (ix[0], ix[2]), a)
    b3 = A.backpermute((m, n, k), lambda ix: (ix[2], ix[1]), b)
    return A.sum_all(A.map(square, A.sum(A.zip_with(mul, a3, b3))))


def jax_matmul(a, b):
    import jax.numpy as jnp
    return jnp.sum(jnp.matmul(a, b) ** 2)


def torch_matmul(a, b):
    import torch
    return torch.sum(torch.matmul(a, b) ** 2)


def np_matmul(a, b):
    return float(((a @ b) ** 2).sum())


def _matmul(name, tiny, small, default):
    def inputs(size, rng):
        m, k, n = dims(size, tiny, small, default)
        return rng.standard_normal((m, k)), rng.standard_normal((k, n))
    return Program(name=name, accel={"replicate": matmul_replicate,
                                     "generate": matmul_generate,
                                     "backpermute": matmul_backpermute},
                   jax={"matmul": jax_matmul}, torch={"matmul": torch_matmul},
                   inputs=inputs, wrt=(0, 1), reference=np_matmul,
                   note=f"(m, k, n) = {default}")


# ---------------------------------------------------------------- least squares


def lstsq_replicate(x, w, y):
    n = x.shape[0]
    pred = A.sum(A.zip_with(mul, x, A.replicate((n, A.All), w)))
    return A.sum_all(A.map(lambda r: 0.5 * r * r, A.zip_with(lambda p, t: p - t, pred, y)))


def lstsq_generate(x, w, y):
    n, p = x.shape
    pred = A.sum(A.generate((n, p), lambda ix: x[ix[0], ix[1]] * w[ix[1]]))
    return A.sum_all(A.generate((n,), lambda i: 0.5 * (pred[i] - y[i]) * (pred[i] - y[i])))


def jax_lstsq(x, w, y):
    import jax.numpy as jnp
    r = jnp.matmul(x, w) - y
    return 0.5 * jnp.sum(r * r)


def torch_lstsq(x, w, y):
    import torch
    r = torch.matmul(x, w) - y
    return 0.5 * torch.sum(r * r)


def np_lstsq(x, w, y):
    r = x @ w - y
    return float(0.5 * (r * r).sum())


def _lstsq_inputs(size, rng):
    n, p = dims(size, (5, 3), (400, 100), (2000, 500))
    return rng.standard_normal((n, p)), rng.standard_normal(p), rng.standard_normal(n)


PROGRAMS = [
    _matmul("matmul_square", (3, 4, 5), (64, 64, 64), (256, 256, 256)),
    _matmul("matmul_tall", (6, 3, 2), (2000, 16, 16), (20000, 64, 64)),
    _matmul("matmul_inner", (2, 7, 3), (16, 1000, 16), (64, 16384, 64)),
    Program(name="least_squares", accel={"replicate": lstsq_replicate,
                                         "generate": lstsq_generate},
            jax={"matmul": jax_lstsq}, torch={"matmul": torch_lstsq},
            inputs=_lstsq_inputs, wrt=(1,), reference=np_lstsq,
            note="X (2000, 500), gradient in w"),
]

__all__ = ["PROGRAMS"]
