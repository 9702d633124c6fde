"""GradBench's ``ht`` eval: ADBench's hand tracking (skinned hand model) residuals.

``objective`` is the ``3 n`` residuals between the ``n`` data points and the posed hand
model's surface: the model vertex ``correspondences[i]`` ("simple": ``us`` is empty) or
the point ``u0 v0 + u1 v1 + (1 - u0 - u1) v2`` of triangle ``correspondences[i]``
("complicated").  The hand is posed as ADBench does (GradBench's ``ht.hpp``): ``theta``
(26) becomes a 3 x (bones + 3) pose matrix (global angle-axis rotation, unit scale,
translation, then xzy Euler angles per bone); each bone's posed relative transform is
its base relative times the Euler rotation; absolutes follow the parent chain; vertices
are the weight-blended bone transforms (times the inverse base absolutes) applied to the
base positions, mirrored if the model is, then rotated and translated globally.

``jacobian`` is the dense ``3 n x (2 + 26)`` (complicated) or ``3 n x 26`` (simple)
Jacobian, computed by columns as ADBench's tools do: one forward-mode ``A.jvp`` pass per
column, the passes an ``A.awhile`` over the column number.  In the complicated case the
first two columns are the derivatives with respect to every point's ``u0`` (resp. ``u1``)
at once -- each residual depends only on its own point's ``u`` -- then come ``theta``'s.

The parent chain is an ``A.awhile`` over the bones (the eval's loop), so one compiled
program serves any model.  Pose-parameter placement, a fixed map from ``theta`` to the
pose matrix, is decoded to an integer index array; nothing on the derivative path is
computed in NumPy.
"""

from __future__ import annotations

import numpy as np

import accel as A

from .evalfn import PROGRAMS, EvalFunction, InputError, field, floats

N_THETA = 26


def _pick(r, c, rows):
    """The entry ``rows[r][c]`` of a small matrix of scalar ``Exp`` values."""
    def row(cols):
        out = cols[-1]
        for k in range(len(cols) - 2, -1, -1):
            out = A.cond(c == k, cols[k], out)
        return out
    out = row(rows[-1])
    for k in range(len(rows) - 2, -1, -1):
        out = A.cond(r == k, row(rows[k]), out)
    return out


def _euler(tx, ty, tz):
    """ADBench's ``Rz Ry Rx`` as rows of scalar expressions."""
    cx, sx, cy, sy, cz, sz = A.cos(tx), A.sin(tx), A.cos(ty), A.sin(ty), A.cos(tz), A.sin(tz)
    return ((cz * cy, -sz * cx + cz * sy * sx, sz * sx + cz * sy * cx),
            (sz * cy, cz * cx + sz * sy * sx, -cz * sx + sz * sy * cx),
            (-sy, cy * sx, cy * cx))


def _angle_axis(x, y, z):
    """ADBench's angle-axis rotation (the identity below a norm of 1e-4) as rows."""
    norm = A.sqrt(x * x + y * y + z * z)
    small = norm < 1e-4
    safe = A.cond(small, 1.0, norm)
    x, y, z = x / safe, y / safe, z / safe
    s, c = A.sin(norm), A.cos(norm)
    rows = ((x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s),
            (x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s),
            (x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c))
    eye = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
    return tuple(tuple(A.cond(small, eye[i][j], rows[i][j]) for j in range(3))
                 for i in range(3))


def vertices(theta, pmap, parents, base_relatives, inverse_base_absolutes, base_positions,
             weights, mirror):
    """The posed model's vertices, shape ``(vertices, 3)``.

    ``pmap[r, c]`` is the ``theta`` index of pose entry ``(r, c)`` (``-1``: zero; column 1
    is the unit scale); ``mirror`` is ``-1.0`` for a mirrored model, else ``1.0``.
    """
    nb = base_relatives.shape[0]
    pose = A.generate(pmap.shape, lambda ix: A.cond(
        ix[1] == 1, 1.0 + 0.0 * theta[0],
        A.cond(pmap[ix] >= 0, theta[A.max(pmap[ix], 0)], 0.0 * theta[0])))

    # Each bone's Euler rotation, materialised once (the products below read it 12 times).
    rotations = A.generate((nb, 3, 3), lambda ix: _pick(ix[1], ix[2], _euler(
        pose[0, ix[0] + 3], pose[2, ix[0] + 3], pose[1, ix[0] + 3])))

    def posed_relative(ix):
        b, i, j = ix
        rotated = sum(base_relatives[b, i, k] * rotations[b, k, A.min(j, 2)] for k in range(3))
        return A.cond(j == 3, base_relatives[b, i, 3], rotated)

    relatives = A.generate(base_relatives.shape, posed_relative)

    def chain(st):
        absolutes, ii = st
        i = A.the(ii)
        p = parents[i]
        own = A.generate((4, 4), lambda ix: A.cond(
            p < 0, relatives[i, ix[0], ix[1]],
            sum(absolutes[A.max(p, 0), ix[0], k] * relatives[i, k, ix[1]] for k in range(4))))
        absolutes = A.generate(absolutes.shape, lambda ix: A.cond(
            ix[0] == i, own[ix[1], ix[2]], absolutes[ix]))
        return absolutes, A.map(lambda v: v + 1, ii)

    absolutes, _ = A.awhile(lambda st: A.unit(A.the(st[1]) < nb), chain,
                            (relatives, A.unit(A.to_int(0))))
    transforms = A.generate(absolutes.shape, lambda ix: sum(
        absolutes[ix[0], ix[1], k] * inverse_base_absolutes[ix[0], k, ix[2]]
        for k in range(4)))
    nv = base_positions.shape[0]
    skinned = A.sum(A.generate((nv, 3, nb), lambda ix: weights[ix[0], ix[2]] * sum(
        transforms[ix[2], ix[1], k] * base_positions[ix[0], k] for k in range(4))))
    m = A.the(mirror)
    local = A.generate((nv, 3), lambda ix: A.cond(ix[1] == 0, m, 1.0) * skinned[ix])
    rot = A.generate((3, 3), lambda ix: _pick(ix[0], ix[1], _angle_axis(
        pose[0, 0], pose[1, 0], pose[2, 0])))
    return A.generate((nv, 3), lambda ix: sum(
        rot[ix[1], k] * local[ix[0], k] for k in range(3)) + pose[ix[1], 2])


def residuals_simple(theta, model, correspondences, points):
    """``points[i] - vertex[correspondences[i]]``, flattened to ``(3 n,)``."""
    pos = vertices(theta, *model)
    n = points.shape[0]
    return A.generate((3 * n,), lambda r: points[r // 3, r % 3]
                      - pos[correspondences[r // 3], r % 3])


def residuals_complicated(theta, us, model, correspondences, triangles, points):
    """``points[i]`` minus the point ``us[i]`` of triangle ``correspondences[i]``, flattened."""
    pos = vertices(theta, *model)
    n = points.shape[0]

    def err(r):
        i, j = r // 3, r % 3
        t = correspondences[i]
        u0, u1 = us[i, 0], us[i, 1]
        hand = (u0 * pos[triangles[t, 0], j] + u1 * pos[triangles[t, 1], j]
                + (1.0 - u0 - u1) * pos[triangles[t, 2], j])
        return points[i, j] - hand

    return A.generate((3 * n,), err)


def objective_simple(theta, pmap, parents, rel, inv, base, weights, mirror, corr, points):
    return residuals_simple(theta, (pmap, parents, rel, inv, base, weights, mirror),
                            corr, points)


def objective_complicated(theta, us, pmap, parents, rel, inv, base, weights, mirror, corr,
                          triangles, points):
    return residuals_complicated(theta, us, (pmap, parents, rel, inv, base, weights, mirror),
                                 corr, triangles, points)


def _columns(ncols, column, rows):
    """The ``(rows, ncols)`` matrix whose column ``k`` is ``column(k)`` (an ``A.awhile``)."""
    def step(st):
        jac, kk = st
        k = A.the(kk)
        col = column(k)
        jac = A.generate(jac.shape, lambda ix: A.cond(ix[1] == k, col[ix[0]], jac[ix]))
        return jac, A.map(lambda v: v + 1, kk)

    init = (A.fill((rows, ncols), 0.0), A.unit(A.to_int(0)))
    jac, _ = A.awhile(lambda st: A.unit(A.the(st[1]) < ncols), step, init)
    return jac


def _unit(shape, hot):
    """A float array of ``shape`` that is 1 where ``hot(index)`` holds, else 0."""
    return A.generate(shape, lambda ix: A.cond(hot(ix), 1.0, 0.0))


def jacobian_simple(theta, pmap, parents, rel, inv, base, weights, mirror, corr, points):
    model = (pmap, parents, rel, inv, base, weights, mirror)

    def column(k):
        _, d = A.jvp(lambda th: residuals_simple(th, model, corr, points), (theta,),
                     (_unit(theta.shape, lambda i: i == k),))
        return d

    return _columns(N_THETA, column, 3 * points.shape[0])


def jacobian_complicated(theta, us, pmap, parents, rel, inv, base, weights, mirror, corr,
                         triangles, points):
    model = (pmap, parents, rel, inv, base, weights, mirror)

    def column(k):
        dth = _unit(theta.shape, lambda i: i + 2 == k)
        dus = _unit(us.shape, lambda ix: ix[1] == k)
        _, d = A.jvp(lambda th, u: residuals_complicated(th, u, model, corr, triangles,
                                                         points), (theta, us), (dth, dus))
        return d

    return _columns(N_THETA + 2, column, 3 * points.shape[0])


def pose_map(bones: int) -> np.ndarray:
    """ADBench's ``to_pose_params`` placement: pose entry -> ``theta`` index (-1: none)."""
    pmap = np.full((3, bones + 3), -1, dtype=np.int64)
    pmap[:, 0] = [0, 1, 2]
    pmap[:, 2] = [3, 4, 5]
    i_theta, col = 6, 5
    for _finger in range(5):
        for i in range(2, 5):
            pmap[0, col] = i_theta
            i_theta += 1
            if i == 2:
                pmap[1, col] = i_theta
                i_theta += 1
            col += 1
        col += 1
    return pmap


def _ints(value, what, ndim):
    a = np.asarray(value)
    if a.ndim != ndim or (a.size and a.dtype.kind not in "iu"):
        raise InputError(f"input field {what!r}: expected rank-{ndim} integers, got {a!r:.80}")
    return np.ascontiguousarray(a, dtype=np.int64)


def _decode(inp) -> tuple:
    theta = floats(field(inp, "theta"), "theta", 1)
    data = field(inp, "data")
    model = field(data, "model")
    parents = _ints(field(model, "parents"), "parents", 1)
    nb = parents.shape[0]
    rel = floats(field(model, "base_relatives"), "base_relatives", 3)
    inv = floats(field(model, "inverse_base_absolutes"), "inverse_base_absolutes", 3)
    base = floats(field(model, "base_positions"), "base_positions", 2)
    weights = floats(field(model, "weights"), "weights", 2)
    triangles = _ints(field(model, "triangles"), "triangles", 2)
    corr = _ints(field(data, "correspondences"), "correspondences", 1)
    points = floats(field(data, "points"), "points", 2)
    us = np.asarray(field(inp, "us"), dtype=np.float64)
    n, nv = corr.shape[0], base.shape[0]
    want = {"theta": (N_THETA,), "base_relatives": (nb, 4, 4),
            "inverse_base_absolutes": (nb, 4, 4), "base_positions": (nv, 4),
            "weights": (nv, nb), "points": (n, 3)}
    got = {"theta": theta.shape, "base_relatives": rel.shape,
           "inverse_base_absolutes": inv.shape, "base_positions": base.shape,
           "weights": weights.shape, "points": points.shape}
    bad = [f"{f} {got[f]} (expected {want[f]})" for f in want if got[f] != want[f]]
    if us.size and us.shape != (n, 2):
        bad.append(f"us {us.shape} (expected empty or {(n, 2)})")
    if nb + 3 < 25 or np.any(parents >= np.arange(nb)):
        bad.append(f"need >= 22 bones, each after its parent; got parents {parents.tolist()}")
    if bad:
        raise InputError("ht: wrong shapes: " + ", ".join(bad))
    mirror = np.array(-1.0 if field(model, "is_mirrored") else 1.0)
    common = (pose_map(nb), parents, rel, inv, base, weights, mirror, corr)
    if us.size:
        return (theta, np.ascontiguousarray(us)) + common + (triangles, points)
    return (theta,) + common + (points,)


#: (function, variant) -> program; the variant is told by the decoded arity.
_PROGRAMS = {("objective", "simple"): objective_simple,
             ("objective", "complicated"): objective_complicated,
             ("jacobian", "simple"): jacobian_simple,
             ("jacobian", "complicated"): jacobian_complicated}


def _run(kind):
    def run(*args):
        variant = "complicated" if len(args) == 12 else "simple"
        return PROGRAMS.get(("ht", kind, variant), lambda: _PROGRAMS[kind, variant])(*args)
    return run


def _encode_jacobian(jac) -> list:
    return np.asarray(jac).tolist()


FUNCTIONS = {
    "objective": EvalFunction(decode=_decode, encode=lambda e: np.asarray(e).tolist(),
                              run=_run("objective")),
    "jacobian": EvalFunction(decode=_decode, encode=_encode_jacobian, run=_run("jacobian")),
}
