"""Bundle adjustment: the sum of squared reprojection and weight residuals.

accel: a ``generate`` over observations that reads its camera and point by index and
evaluates ADBench's projection (``accel.adbench.ba.reprojerr``); the gradient is with
respect to the cameras, points and weights, so every read is scattered back.  JAX and
NumPy: the same model vectorised over observations (gathers ``cams[obs[:, 0]]``),
written once over an array namespace.
"""

from __future__ import annotations

import numpy as np

import accel as A
from accel.adbench import ba as adba

from .program import Program, dims

N_CAM = 11


def ba_generate(cams, pts, ws, feats, obs):
    def term(i):
        ci, pi = obs[i, 0], obs[i, 1]
        cam = tuple(cams[ci, j] for j in range(N_CAM))
        x = tuple(pts[pi, j] for j in range(3))
        rx, ry = adba.reprojerr(cam, x, ws[i], (feats[i, 0], feats[i, 1]))
        we = 1.0 - ws[i] * ws[i]
        return rx * rx + ry * ry + we * we
    return A.sum_all(A.generate((ws.shape[0],), term))


def _loss(xp, cams, pts, ws, feats, obs):
    """The same loss over ``xp`` = numpy or jax.numpy, vectorised over observations."""
    cam, x = cams[obs[:, 0]], pts[obs[:, 1]]
    r, c, f, x0, kappa = cam[:, 0:3], cam[:, 3:6], cam[:, 6], cam[:, 7:9], cam[:, 9:11]
    xo = x - c
    sqtheta = xp.sum(r * r, axis=1)
    zero = sqtheta == 0.0
    theta = xp.sqrt(xp.where(zero, 1.0, sqtheta))
    v = r / theta[:, None]
    ct, st = xp.cos(theta)[:, None], xp.sin(theta)[:, None]
    rotated = xo * ct + xp.cross(v, xo) * st + v * (xp.sum(v * xo, axis=1)[:, None] * (1.0 - ct))
    xcam = xp.where(zero[:, None], xo + xp.cross(r, xo), rotated)
    p = xcam[:, 0:2] / xcam[:, 2:3]
    rsq = xp.sum(p * p, axis=1)
    dist = 1.0 + kappa[:, 0] * rsq + kappa[:, 1] * rsq * rsq
    proj = p * (dist * f)[:, None] + x0
    err = ws[:, None] * (proj - feats)
    we = 1.0 - ws * ws
    return xp.sum(err * err) + xp.sum(we * we)


def jax_ba(cams, pts, ws, feats, obs):
    import jax.numpy as jnp
    return _loss(jnp, cams, pts, ws, feats, obs)


def np_ba(cams, pts, ws, feats, obs):
    return float(_loss(np, cams, pts, ws, feats, obs))


def _inputs(size, rng):
    n, m, p = dims(size, (2, 3, 5), (10, 200, 2000), (50, 20000, 100000))
    cams = np.concatenate([rng.standard_normal((n, 3)) * 0.1,          # rotation
                           rng.standard_normal((n, 3)) * 0.2 + [0.0, 0.0, -8.0],  # center
                           1.0 + rng.random((n, 1)),                     # focal length
                           rng.standard_normal((n, 2)) * 0.01,           # principal point
                           rng.standard_normal((n, 2)) * 0.01], axis=1)  # distortion
    pts = rng.standard_normal((m, 3))
    obs = np.stack([np.arange(p) % n, rng.integers(0, m, p)], axis=1).astype(np.int64)
    return cams, pts, 0.5 + rng.random(p), rng.standard_normal((p, 2)) * 0.1, obs


PROGRAMS = [
    Program(name="ba", accel={"generate": ba_generate},
            jax={"vectorised": jax_ba}, inputs=_inputs, wrt=(0, 1, 2), reference=np_ba,
            note="50 cameras, 20000 points, 100000 observations"),
]
