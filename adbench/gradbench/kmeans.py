"""GradBench's ``kmeans`` eval: the k-means cost and the Newton direction ``J / H``.

``cost(P, C) = sum_i min_j ||C_j - P_i||^2``.  ``dir`` differentiates it twice with
accel's own AD, as the eval intends: the gradient ``J`` by ``A.gradientA`` (reverse),
and the Hessian's diagonal ``H`` (the Hessian is diagonal) as the forward derivative of
that gradient program along the all-ones direction (``A.jvp`` of the reverse-mode
program, which yields ``J`` and ``H`` in one pass); then ``J / H`` elementwise.
"""

from __future__ import annotations

import accel as A

from .evalfn import PROGRAMS, EvalFunction, InputError, field, floats, scalar, tolist


def cost(points, centroids):
    n, d = points.shape
    k = centroids.shape[0]
    diff = A.zip_with(lambda p, c: p - c, A.replicate((A.All, k, A.All), points),
                      A.replicate((n, A.All, A.All), centroids))       # (n, k, d)
    dist = A.sum(A.map(lambda v: v * v, diff))                          # (n, k)
    return A.unit(A.the(A.sum_all(A.minimum(dist))))


gradient = A.gradientA(cost, wrt=1)


def direction(points, centroids):
    zeros = A.fill(points.shape, 0.0)  # (constant tangents: the simplifier drops the
    ones = A.fill(centroids.shape, 1.0)  # points' and keeps no array of them)
    j, h = A.jvp(gradient, (points, centroids), (zeros, ones))
    return A.zip_with(lambda a, b: a / b, j, h)


def _decode(inp) -> tuple:
    p = floats(field(inp, "points"), "points", 2)
    c = floats(field(inp, "centroids"), "centroids", 2)
    if p.shape[1] != c.shape[1] or c.shape[0] == 0:
        raise InputError(f"kmeans: points {p.shape} and centroids {c.shape} must have the "
                         "same dimension, and there must be a centroid")
    return p, c


FUNCTIONS = {
    "cost": EvalFunction(decode=_decode, encode=scalar,
                         run=lambda p, c: PROGRAMS.get(("kmeans", "cost"), lambda: cost)(p, c)),
    "dir": EvalFunction(decode=_decode, encode=tolist,
                        run=lambda p, c: PROGRAMS.get(("kmeans", "dir"),
                                                      lambda: direction)(p, c)),
}
