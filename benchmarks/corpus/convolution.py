"""Convolutions and a stencil: reads at shifted indices.

1-D: ``y[i] = sum_k x[i+k] w[k]`` ("valid"), loss ``sum(y^2)``, as a ``generate`` that
indexes both arrays and as a ``backpermute`` window gather times a replicated filter.
2-D: the same over an image and a small kernel (rank-4 ``generate``, two sums).
Stencil: the 5-point Laplacian of a grid's interior, loss ``sum(lap^2)``, as a
``generate`` with shifted reads and as five shifted ``backpermute`` views.
JAX formulations: ``jnp.convolve`` / ``lax.conv_general_dilated`` and a sum of shifted
slices (the runner keeps the faster).  ``jnp.convolve`` is measured only at the small
sizes: at the default size (1M points, float64) ``jit(grad)`` of it with respect to the
signal crashed the process with a segmentation fault in XLA (JAX 0.10.2, this machine,
2026-11-27, reproduced outside the corpus), which would end the whole run.
"""

from __future__ import annotations

import numpy as np

import accel as A

from .program import Program, dims, mul, square

# ---------------------------------------------------------------- 1-D


def conv1d_generate(x, w):
    width = w.shape[0]
    m = x.shape[0] - width + 1
    y = A.sum(A.generate((m, width), lambda ix: x[ix[0] + ix[1]] * w[ix[1]]))
    return A.sum_all(A.map(square, y))


def conv1d_backpermute(x, w):
    width = w.shape[0]
    m = x.shape[0] - width + 1
    windows = A.backpermute((m, width), lambda ix: ix[0] + ix[1], x)
    y = A.sum(A.zip_with(mul, windows, A.replicate((m, A.All), w)))
    return A.sum_all(A.map(square, y))


def jax_conv1d_convolve(x, w):
    import jax.numpy as jnp
    return jnp.sum(jnp.convolve(x, w[::-1], mode="valid") ** 2)


def jax_conv1d_slices(x, w):
    import jax.numpy as jnp
    m = x.shape[0] - w.shape[0] + 1
    y = sum(w[k] * x[k:k + m] for k in range(w.shape[0]))
    return jnp.sum(y * y)


def np_conv1d(x, w):
    return float((np.convolve(x, w[::-1], mode="valid") ** 2).sum())


def _conv1d_inputs(size, rng):
    n, width = dims(size, (9, 3), (20000, 16), (1_000_000, 16))
    return rng.standard_normal(n), rng.standard_normal(width)


# ---------------------------------------------------------------- 2-D


def conv2d_generate(img, ker):
    kh, kw = ker.shape
    oh, ow = img.shape[0] - kh + 1, img.shape[1] - kw + 1
    prods = A.generate((oh, ow, kh, kw),
                       lambda ix: img[ix[0] + ix[2], ix[1] + ix[3]] * ker[ix[2], ix[3]])
    return A.sum_all(A.map(square, A.sum(A.sum(prods))))


def jax_conv2d_lax(img, ker):
    import jax.numpy as jnp
    from jax import lax
    out = lax.conv_general_dilated(img[None, None], ker[None, None], (1, 1), "VALID")
    return jnp.sum(out ** 2)


def jax_conv2d_slices(img, ker):
    import jax.numpy as jnp
    kh, kw = ker.shape
    oh, ow = img.shape[0] - kh + 1, img.shape[1] - kw + 1
    y = sum(ker[a, b] * img[a:a + oh, b:b + ow] for a in range(kh) for b in range(kw))
    return jnp.sum(y * y)


def np_conv2d(img, ker):
    kh, kw = ker.shape
    oh, ow = img.shape[0] - kh + 1, img.shape[1] - kw + 1
    y = sum(ker[a, b] * img[a:a + oh, b:b + ow] for a in range(kh) for b in range(kw))
    return float((y * y).sum())


def _conv2d_inputs(size, rng):
    h, w, k = dims(size, (5, 6, 2), (96, 96, 5), (512, 512, 5))
    return rng.standard_normal((h, w)), rng.standard_normal((k, k))


# ---------------------------------------------------------------- stencil


def stencil_generate(u):
    h, w = u.shape[0] - 2, u.shape[1] - 2

    def lap(ix):
        i, j = ix[0] + 1, ix[1] + 1
        return u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j]
    return A.sum_all(A.map(square, A.generate((h, w), lap)))


def stencil_backpermute(u):
    h, w = u.shape[0] - 2, u.shape[1] - 2

    def shifted(di, dj):
        return A.backpermute((h, w), lambda ix: (ix[0] + 1 + di, ix[1] + 1 + dj), u)
    nsum = A.zip_with(lambda a, b: a + b, A.zip_with(lambda a, b: a + b, shifted(-1, 0),
                                                      shifted(1, 0)),
                      A.zip_with(lambda a, b: a + b, shifted(0, -1), shifted(0, 1)))
    lap = A.zip_with(lambda s, c: s - 4.0 * c, nsum, shifted(0, 0))
    return A.sum_all(A.map(square, lap))


def jax_stencil(u):
    import jax.numpy as jnp
    c = u[1:-1, 1:-1]
    lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c
    return jnp.sum(lap * lap)


def np_stencil(u):
    c = u[1:-1, 1:-1]
    lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c
    return float((lap * lap).sum())


def _stencil_inputs(size, rng):
    h, w = dims(size, (5, 4), (200, 200), (1024, 1024))
    return (rng.standard_normal((h, w)),)


PROGRAMS = [
    Program(name="conv1d", accel={"generate": conv1d_generate,
                                  "backpermute": conv1d_backpermute},
            jax={"convolve": jax_conv1d_convolve, "slices": jax_conv1d_slices},
            jax_skip={"default": ("convolve",)},
            inputs=_conv1d_inputs, wrt=(0, 1), reference=np_conv1d,
            note="1M points, width 16"),
    Program(name="conv2d", accel={"generate": conv2d_generate},
            jax={"lax.conv": jax_conv2d_lax, "slices": jax_conv2d_slices},
            inputs=_conv2d_inputs, wrt=(0, 1), reference=np_conv2d,
            note="512 x 512 image, 5 x 5 kernel"),
    Program(name="stencil", accel={"generate": stencil_generate,
                                   "backpermute": stencil_backpermute},
            jax={"slices": jax_stencil}, inputs=_stencil_inputs, wrt=(0,),
            reference=np_stencil, note="5-point Laplacian, 1024 x 1024"),
]
