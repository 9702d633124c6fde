"""ADBench's bundle adjustment (BA): residuals and the sparse Jacobian, in accel and NumPy.

Per observation i (camera ``c = cams[obs[i, 0]]``, point ``X = pts[obs[i, 1]]``, weight
``w_i``, feature ``m_i``), as in ADBench's code (README "BA objective", thesis B.2):

    Xcam = rodrigues(r, X - C);  p = Xcam[0:2] / Xcam[2]
    proj = p (1 + k1 |p|^2 + k2 |p|^4) f + x0
    reproj_err_i = w_i (proj - m_i);   w_err_i = 1 - w_i^2

The accel Jacobian (:func:`jacobian`) follows the thesis's appendix C.2: ``A.gradientE``
is applied to each of the two residual components, as a function of the 11 camera
parameters, the 3 point coordinates and the weight (the feature is an argument too, its
partials are dropped), mapped over all observations in parallel; a second ``generate``
assembles ADBench's CSR arrays (row pointers, column indices, values) from the 2x15
blocks and ``gradientE(werr)``.  Inputs:

    cams (n, 11), pts (m, 3), ws (p,), feats (p, 2) float64; obs (p, 2) int64.

:func:`numpy_residuals` and :func:`numpy_jacobian` are the NumPy reference: the same
formulas vectorised over observations, differentiated by hand-written forward mode
(dual numbers carrying the 15 tangents).
"""

from __future__ import annotations

import numpy as np

import accel as A
from .io import BASparseJacobian

__all__ = ["N_CAM", "BLOCK", "reprojerr", "werr", "residuals", "jacobian", "jacobian_entries",
           "blocks",
           "csr_structure", "numpy_residuals", "numpy_blocks", "numpy_jacobian",
           "BARunner"]

N_CAM = 11
BLOCK = N_CAM + 3 + 1   # entries in each reprojection-error row


# --------------------------------------------------------------------------- scalar model
# Written once over "scalars" that support + - * / (accel Exp values, or the NumPy dual
# numbers below); ``ops`` supplies sqrt/sin/cos and the conditional.


def _cross(a, b):
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def _dot(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def _rodrigues(ops, r, x):
    sqtheta = _dot(r, r)

    def rotate():
        theta = ops.sqrt(sqtheta)
        ct, st = ops.cos(theta), ops.sin(theta)
        inv = 1.0 / theta
        v = (r[0] * inv, r[1] * inv, r[2] * inv)
        vx = _cross(v, x)
        tmp = _dot(v, x) * (1.0 - ct)
        return tuple(x[j] * ct + vx[j] * st + v[j] * tmp for j in range(3))

    def small():
        rx = _cross(r, x)
        return tuple(x[j] + rx[j] for j in range(3))

    return ops.cond_zero(sqtheta, small, rotate)


def _project(ops, cam, x):
    r, c, f, x0, kappa = cam[0:3], cam[3:6], cam[6], cam[7:9], cam[9:11]
    xo = (x[0] - c[0], x[1] - c[1], x[2] - c[2])
    xcam = _rodrigues(ops, r, xo)
    p = (xcam[0] / xcam[2], xcam[1] / xcam[2])
    rsq = p[0] * p[0] + p[1] * p[1]
    dist = 1.0 + kappa[0] * rsq + kappa[1] * rsq * rsq
    return (p[0] * dist * f + x0[0], p[1] * dist * f + x0[1])


def _reprojerr(ops, cam, x, w, feat):
    proj = _project(ops, cam, x)
    return (w * (proj[0] - feat[0]), w * (proj[1] - feat[1]))


class _AccelOps:
    sqrt, sin, cos = staticmethod(A.sqrt), staticmethod(A.sin), staticmethod(A.cos)

    @staticmethod
    def cond_zero(s, if_zero, otherwise):
        # Only the taken branch is evaluated (A.cond), as in ADBench's `if`.
        return A.cond(s == 0.0, if_zero(), otherwise())


def reprojerr(cam, x, w, feat):
    """The two reprojection residuals of one observation (accel scalars; tuples in)."""
    return _reprojerr(_AccelOps, cam, x, w, feat)


def werr(w):
    """The weight residual ``1 - w^2``."""
    return 1.0 - w * w


# --------------------------------------------------------------------------- accel programs


def _observation(cams, pts, ws, feats, obs, i):
    ci, pi = obs[i, 0], obs[i, 1]
    cam = tuple(cams[ci, j] for j in range(N_CAM))
    x = tuple(pts[pi, j] for j in range(3))
    return cam, x, ws[i], (feats[i, 0], feats[i, 1])


def residuals(cams, pts, ws, feats, obs):
    """``((reproj_x, reproj_y), w_err)``: three (p,) arrays."""
    p = ws.shape[0]
    rep = A.generate((p,), lambda i: reprojerr(*_observation(cams, pts, ws, feats, obs, i)))
    return rep, A.map(werr, ws)


def _d_reproj0(cam, x, w, feat):
    return reprojerr(cam, x, w, feat)[0]


def _d_reproj1(cam, x, w, feat):
    return reprojerr(cam, x, w, feat)[1]


def _block(cams, pts, ws, feats, obs, i):
    """The 30 Jacobian entries of observation i: row 2i then row 2i+1, 15 each."""
    args = _observation(cams, pts, ws, feats, obs, i)
    out = []
    for fn in (_d_reproj0, _d_reproj1):
        dcam, dx, dw, _dfeat = A.gradientE(fn)(*args)
        out.extend(dcam)
        out.extend(dx)
        out.append(dw)
    return tuple(out)


def blocks(cams, pts, ws, feats, obs):
    """The packed Jacobian blocks: an array of p 30-tuples, and d(w_err)/dw (p,)."""
    p = ws.shape[0]
    grads = A.generate((p,), lambda i: _block(cams, pts, ws, feats, obs, i))
    return grads, A.map(A.gradientE(werr), ws)


def _pick(items, t, lo=0):
    """``items[t]`` for a run-time index ``t``: a balanced tree of ``A.cond``."""
    if len(items) == 1:
        return items[0]
    mid = len(items) // 2
    return A.cond(t < lo + mid, _pick(items[:mid], t, lo), _pick(items[mid:], t, lo + mid))


def _entries(cams, pts, ws, feats, obs, first):
    """CSR column indices and values of the observations ``obs`` (global indices
    ``first ..``): their 30 block entries each, in observation order, then one
    weight-row entry each.  Integer arithmetic is in ``obs``'s type (int32 halves the
    memory of the column indices of large problems)."""
    it = obs.type.elt
    n, m, p = A.to_int(cams.shape[0], it), A.to_int(pts.shape[0], it), ws.shape[0]
    grads, dwerr = blocks(cams, pts, ws, feats, obs)
    nblock = 2 * BLOCK * p
    wcol = N_CAM * n + 3 * m + first          # column of the first observation's weight

    def entry(i):
        def in_block():
            o = i // (2 * BLOCK)          # observation
            j = i % BLOCK                  # column slot within the row
            jj = A.to_int(j, it)
            ci, pi = obs[o, 0], obs[o, 1]
            col = A.cond(j < N_CAM, N_CAM * ci + jj,
                         A.cond(j < N_CAM + 3, N_CAM * n + 3 * pi + (jj - N_CAM),
                                wcol + A.to_int(o, it)))
            return col, _pick(grads[o], i % (2 * BLOCK))

        def w_row():
            wi = i - nblock
            return wcol + A.to_int(wi, it), dwerr[wi]

        return A.cond(i < nblock, in_block(), w_row())

    colsvals = A.generate((nblock + p,), entry)
    return A.map(lambda cv: cv[0], colsvals), A.map(lambda cv: cv[1], colsvals)


def jacobian(cams, pts, ws, feats, obs):
    """ADBench's CSR Jacobian ``(rows, cols, vals)`` (row pointers and column indices in
    ``obs``'s integer type, float64 values)."""
    p = ws.shape[0]
    it = obs.type.elt
    nblock = 2 * BLOCK * p
    rows = A.generate((3 * p + 1,), lambda i: A.to_int(
        A.cond(i <= 2 * p, BLOCK * i, nblock + (i - 2 * p)), it))
    cols, vals = _entries(cams, pts, ws, feats, obs, A.to_int(0, it))
    return rows, cols, vals


def jacobian_entries(cams, pts, ws, feats, obs, first):
    """:func:`jacobian`'s ``(cols, vals)`` for a chunk of observations whose first has
    the global index ``first`` (a rank-0 array of ``obs``'s type): the chunk's block
    entries, then its weight-row entries (see :class:`BARunner`)."""
    return _entries(cams, pts, ws, feats, obs, A.the(first))


def csr_structure(n: int, m: int, p: int, obs=None):
    """The expected ``(rows, cols)`` of the CSR Jacobian (NumPy); ``obs`` defaults to
    ADBench's rule (observation i uses camera i mod n and point i mod m)."""
    i = np.arange(p, dtype=np.int64)
    cam, pt = (i % n, i % m) if obs is None else (obs[:, 0], obs[:, 1])
    rows = np.concatenate([BLOCK * np.arange(2 * p + 1, dtype=np.int64),
                           2 * BLOCK * p + np.arange(1, p + 1, dtype=np.int64)])
    row = np.empty((p, BLOCK), dtype=np.int64)
    row[:, :N_CAM] = N_CAM * cam[:, None] + np.arange(N_CAM)
    row[:, N_CAM:N_CAM + 3] = N_CAM * n + 3 * pt[:, None] + np.arange(3)
    row[:, N_CAM + 3] = N_CAM * n + 3 * m + i
    cols = np.empty(2 * BLOCK * p + p, dtype=np.int64)
    cols[:2 * BLOCK * p].reshape(p, 2, BLOCK)[:] = row[:, None, :]
    cols[2 * BLOCK * p:] = N_CAM * n + 3 * m + i
    return rows, cols


# --------------------------------------------------------------------------- NumPy


class _Dual:
    """A forward-mode dual number over NumPy: value (p,) and tangents (T, p)."""

    __slots__ = ("v", "d")
    __array_priority__ = 1000

    def __init__(self, v, d):
        self.v, self.d = v, d

    @staticmethod
    def lift(x):
        return x if isinstance(x, _Dual) else _Dual(x, 0.0)

    def __add__(self, o):
        o = _Dual.lift(o)
        return _Dual(self.v + o.v, self.d + o.d)

    __radd__ = __add__

    def __sub__(self, o):
        o = _Dual.lift(o)
        return _Dual(self.v - o.v, self.d - o.d)

    def __rsub__(self, o):
        return _Dual.lift(o) - self

    def __mul__(self, o):
        o = _Dual.lift(o)
        return _Dual(self.v * o.v, self.d * o.v + self.v * o.d)

    __rmul__ = __mul__

    def __truediv__(self, o):
        o = _Dual.lift(o)
        q = self.v / o.v
        return _Dual(q, (self.d - q * o.d) / o.v)

    def __rtruediv__(self, o):
        return _Dual.lift(o) / self


class _NumpyOps:
    @staticmethod
    def sqrt(x):
        s = np.sqrt(x.v)
        return _Dual(s, x.d / (2.0 * s))

    @staticmethod
    def sin(x):
        return _Dual(np.sin(x.v), x.d * np.cos(x.v))

    @staticmethod
    def cos(x):
        return _Dual(np.cos(x.v), -x.d * np.sin(x.v))

    @staticmethod
    def cond_zero(s, if_zero, otherwise):
        zero = s.v == 0.0
        if not zero.any():
            return otherwise()
        if zero.all():
            return if_zero()
        with np.errstate(divide="ignore", invalid="ignore"):
            a, b = if_zero(), otherwise()
        return tuple(_Dual(np.where(zero, x.v, y.v), np.where(zero, x.d, y.d))
                     for x, y in zip(a, b))


class _PlainOps:
    sqrt, sin, cos = staticmethod(np.sqrt), staticmethod(np.sin), staticmethod(np.cos)

    @staticmethod
    def cond_zero(s, if_zero, otherwise):
        zero = s == 0.0
        if not np.any(zero):
            return otherwise()
        with np.errstate(divide="ignore", invalid="ignore"):
            a, b = if_zero(), otherwise()
        return tuple(np.where(zero, x, y) for x, y in zip(a, b))


def _gather(cams, pts, ws, feats, obs):
    c = np.ascontiguousarray(cams[obs[:, 0]].T)     # (11, p)
    x = np.ascontiguousarray(pts[obs[:, 1]].T)      # (3, p)
    return c, x, ws, np.ascontiguousarray(feats.T)


def numpy_residuals(cams, pts, ws, feats, obs):
    """``(reproj_err (p, 2), w_err (p,))`` in vectorised NumPy."""
    c, x, w, f = _gather(cams, pts, ws, feats, obs)
    e0, e1 = _reprojerr(_PlainOps, tuple(c), tuple(x), w, tuple(f))
    return np.stack([e0, e1], axis=1), 1.0 - ws * ws


def numpy_blocks(cams, pts, ws, feats, obs, chunk: int = 4096):
    """``(blocks (p, 2, 15), dwerr (p,))``: forward mode with 15 tangents per observation."""
    p = ws.shape[0]
    out = np.empty((p, 2, BLOCK))
    eye = np.eye(BLOCK)
    for a in range(0, p, chunk):
        b = min(p, a + chunk)
        c, x, w, f = _gather(cams, pts, ws[a:b], feats[a:b], obs[a:b])
        ins = [_Dual(v, eye[j][:, None]) for j, v in enumerate(list(c) + list(x) + [w])]
        e = _reprojerr(_NumpyOps, tuple(ins[:N_CAM]), tuple(ins[N_CAM:N_CAM + 3]),
                       ins[N_CAM + 3], tuple(f))
        for r in range(2):
            out[a:b, r, :] = np.broadcast_to(e[r].d, (BLOCK, b - a)).T
    return out, -2.0 * ws


def numpy_jacobian(cams, pts, ws, feats, obs) -> BASparseJacobian:
    """The CSR Jacobian assembled from :func:`numpy_blocks`."""
    n, m, p = cams.shape[0], pts.shape[0], ws.shape[0]
    blk, dw = numpy_blocks(cams, pts, ws, feats, obs)
    rows, cols = csr_structure(n, m, p, obs)
    vals = np.concatenate([blk.ravel(), dw])
    return BASparseJacobian(3 * p, N_CAM * n + 3 * m + p, rows, cols, vals)


# --------------------------------------------------------------------------- runner


class BARunner:
    """Residuals and CSR Jacobian of BA instances on an accel backend.

    The Jacobian is computed in chunks of at most ``chunk`` observations
    (:func:`jacobian_entries`), each written into place in the CSR arrays, so the
    per-observation blocks of only one chunk are alive at a time; column indices are
    int32 when every index fits.  ba20 (29M observations) then peaks below 15 GB, where
    one program over all observations with int64 indices needed 22 GB.  ``tiered`` is
    ``A.compile``'s (the cpu backend's first calls on NumPy; benchmarks pass False).
    """

    def __init__(self, backend: str = "fused", chunk: int = 1 << 20,
                 tiered: bool | None = None):
        self.backend = backend
        self.chunk = chunk
        self.res = A.compile(residuals, backend=backend, tiered=tiered)
        self.entries = A.compile(jacobian_entries, backend=backend, tiered=tiered)

    @staticmethod
    def arrays(inp):
        return inp.cams, inp.points, inp.weights, inp.features, inp.obs

    def residuals(self, inp, arrays=None):
        (rx, ry), we = self.res(*(arrays or self.arrays(inp)))
        return np.stack([rx, ry], axis=1), we

    def jacobian(self, inp, arrays=None) -> BASparseJacobian:
        cams, pts, ws, feats, obs = arrays or self.arrays(inp)
        n, m, p = cams.shape[0], pts.shape[0], ws.shape[0]
        ncols, nnz = N_CAM * n + 3 * m + p, 2 * BLOCK * p + p
        it = np.int32 if max(ncols, nnz) < 2 ** 31 else np.int64
        obs = np.asarray(obs).astype(it, copy=False)
        nblock = 2 * BLOCK * p
        rows = np.concatenate([BLOCK * np.arange(2 * p + 1, dtype=it),
                               nblock + np.arange(1, p + 1, dtype=it)])
        if p <= self.chunk:  # one chunk: its arrays are already in CSR order
            cols, vals = self.entries(cams, pts, ws, feats, obs, np.array(0, dtype=it))
            return BASparseJacobian(3 * p, ncols, rows, cols, vals)
        cols, vals = np.empty(nnz, dtype=it), np.empty(nnz)
        for a in range(0, p, self.chunk):
            b = min(p, a + self.chunk)
            c, v = self.entries(cams, pts, ws[a:b], feats[a:b], obs[a:b],
                                np.array(a, dtype=it))
            k = 2 * BLOCK * (b - a)
            cols[2 * BLOCK * a:2 * BLOCK * b], vals[2 * BLOCK * a:2 * BLOCK * b] = c[:k], v[:k]
            cols[nblock + a:nblock + b], vals[nblock + a:nblock + b] = c[k:], v[k:]
            del c, v  # their buffers go back to the runner for the next chunk
        return BASparseJacobian(3 * p, ncols, rows, cols, vals)
