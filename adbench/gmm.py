"""ADBench's GMM objective and its gradient: in accel, and in plain NumPy.

The objective (README "GMM objective", thesis appendix B.1), for ``N`` points ``x_i``:

    F = - N*D/2 log(2 pi) + sum_i logsumexp_k(beta_ik) - N logsumexp(alpha)
        + sum_k [1/2 gamma^2 (||exp(q_k)||^2 + ||l_k||^2) - m sum(q_k)]
        - K [n' D (log gamma - 1/2 log 2) - multigammaln(n'/2, D)]            (n' = D+m+1)
    beta_ik = alpha_k + sum(q_k) - 1/2 ||Q_k (x_i - mu_k)||^2

The accel program :func:`objective` is written in the data-parallel style of the
thesis's appendix C.1 (replicate/zip_with broadcasting, the lower-triangular factors
built by a ``generate`` with index arithmetic into icf, logsumexp shifted by its maximum) and
differentiated with ``A.gradientA`` (:data:`gradient`).  (Building ``x_i - mu_k`` and the
triangular product with ``generate`` and indexing instead gives the same values but
runs about 2.5x slower on the ``cpu`` backend, whose AD turns each index into a scatter.)
Its parameters are

    alphas (K,), means (K, D), icf (K, D(D+1)/2), x (S, D), consts (5,)

with ``consts = [N, gamma, m, c, prior]`` (float64; see :func:`constants`).  The program
generates the N points as ``x[i mod S]``: ``S == N`` for ordinary files and ``S == 1``
for ADBench's replicate-point (2.5M) files, which are therefore never expanded in
memory.  The constant ``c = K [n' D (log gamma - log 2 / 2) - multigammaln(n'/2, D)]``
is computed in Python with ``math.lgamma`` (accel has no ``lgamma``, as Accelerate had
none) and passed in; ``N D/2 log(2 pi)`` is computed in the program.

``F`` is a sum of per-point terms plus the Wishart prior, so :class:`GMMRunner` may split
the points into chunks to bound memory: each chunk runs the same program with its own
``N`` and ``prior = 1`` for the first chunk only (``prior = 0`` drops the prior and
``c`` from the others); the chunk values and gradients are summed.
"""

from __future__ import annotations

import functools
import math

import numpy as np

import accel as A

__all__ = [
    "multigammaln", "wishart_constant", "constants", "objective", "gradient",
    "value_and_gradient", "flatten_gradient", "LSE_FLOOR", "unflatten_gradient",
    "numpy_objective", "numpy_gradient", "GMMRunner", "HALF_LOG_2PI",
]

HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def multigammaln(a: float, d: int) -> float:
    """``log Gamma_d(a)`` (SciPy's ``multigammaln``) via ``math.lgamma``."""
    return d * (d - 1) / 4 * math.log(math.pi) + math.fsum(
        math.lgamma(a + (1 - j) / 2) for j in range(1, d + 1))


def wishart_constant(d: int, k: int, gamma: float, m: int) -> float:
    """``K [n' D (log gamma - 1/2 log 2) - multigammaln(n'/2, D)]`` with ``n' = D + m + 1``."""
    n1 = d + m + 1
    return k * (n1 * d * (math.log(gamma) - 0.5 * math.log(2.0)) - multigammaln(0.5 * n1, d))


def constants(d: int, k: int, n: int, gamma: float, m: int, prior: float = 1.0) -> np.ndarray:
    """The ``consts`` argument of :func:`objective`: ``[N, gamma, m, c, prior]``.

    ``prior`` weights the Wishart prior and its constant ``c`` (1 normally; 0 for all
    but one chunk when the points are split into chunks).
    """
    return np.array([float(n), float(gamma), float(m), wishart_constant(d, k, gamma, m),
                     float(prior)])


# --------------------------------------------------------------------------- accel


def _ltri_index(d, r, c):
    """Position in ``l_k`` of Q_k's entry (r, c), r > c (column-major strict lower part)."""
    return (c * (2 * d - c - 1)) // 2 + (r - c - 1)


#: Shifts below this are clamped in :func:`logsumexp` (see there).
LSE_FLOOR = -700.0


def logsumexp(v):
    """``c + log(sum(exp(v - c)))`` with ``c = floor(max(v))`` over the innermost dimension
    (thesis C.1 shifts by ``max(v)``).

    Any shift gives the same value; one within 1 of the maximum keeps ``exp`` from
    overflowing, and the sum's largest term is in [1, e).  ``floor`` carries no derivative,
    so the gradient skips the shift's adjoint, which is ``1 - sum(softmax) = 0`` in exact
    arithmetic but costs the maximum's tie-split dual (three kernels; JAX's logsumexp
    stops the gradient at its shift for the same reason).

    Shifts are clamped at :data:`LSE_FLOOR`: ``exp(-700) < 1e-304`` is far below half an
    ulp of the sum, so the value is unchanged, and a clamped term's derivative is exactly
    0.  Unclamped, GMM components far from a point give softmax weights in the subnormal
    range, and every multiply of the gradient touching one takes a microcode assist on
    x86 (the D = 32 gradients ran 15-25% slower).
    """
    n = v.shape[-1]
    spec = tuple(A.All for _ in range(len(v.shape) - 1)) + (n,)
    mx = A.map(A.floor, A.maximum(v))
    shifted = A.zip_with(lambda a, b: A.exp(A.max(a - b, LSE_FLOOR)), v, A.replicate(spec, mx))
    return A.zip_with(lambda s, b: A.log(s) + b, A.sum(shifted), mx)


def objective(alphas, means, icf, x, consts):
    """ADBench's GMM objective (a rank-0 float64 array); see the module docstring."""
    k, d = means.shape
    s = x.shape[0]
    n = A.to_int(consts[0])
    gamma, wis_m, wis_c, prior = consts[1], consts[2], consts[3], consts[4]

    qs = A.backpermute((k, d), lambda ix: ix, icf)              # log-diagonals q_k
    qdiags = A.map(A.exp, qs)                                   # exp(q_k)
    sum_qs = A.sum(qs)                                          # (K,)
    nl = icf.shape[1] - d
    ls = A.backpermute((k, nl), lambda ix: (ix[0], ix[1] + d), icf)  # strict lower parts

    # x_i - mu_k for every (point, component, coordinate), as the thesis's shiftedX:
    # the points (x[i mod S], a gather that needs no derivative) replicated over the
    # components, minus the means replicated over the points.
    xs = A.backpermute((n, d), lambda ix: (ix[0] % s, ix[1]), x)
    xc = A.zip_with(lambda a, b: a - b, A.replicate((A.All, k, A.All), xs),
                    A.replicate((n, A.All, A.All), means))          # (N, K, D)

    # Q_k (x_i - mu_k) = exp(q_k) * xc + L_k xc.  L_k (strictly lower triangular, K x D x D)
    # is a generate with index arithmetic into icf's l-part; the product is a
    # sum over the innermost dimension of L_k replicated over points times xc replicated
    # over rows (the thesis's lxprod).
    def lower(ix):
        kk, r, c = ix
        return A.cond(c < r, icf[kk, d + _ltri_index(d, r, c)], 0.0)

    lmats = A.generate((k, d, d), lower)
    lx = A.sum(A.zip_with(lambda a, b: a * b, A.replicate((n, A.All, A.All, A.All), lmats),
                          A.replicate((A.All, A.All, d, A.All), xc)))   # (N, K, D)
    qx = A.zip_with(lambda a, b: a + b,
                    A.zip_with(lambda a, b: a * b, A.replicate((n, A.All, A.All), qdiags), xc),
                    lx)
    sqn = A.sum(A.map(lambda v: v * v, qx))                     # (N, K)
    beta = A.zip_with(lambda a, b: a - 0.5 * b,
                      A.replicate((n, A.All), A.zip_with(lambda a, b: a + b, alphas, sum_qs)),
                      sqn)                                      # (N, K)
    slse = A.the(A.sum_all(logsumexp(beta)))
    lse_alpha = A.the(logsumexp(alphas))

    # Wishart prior: sum_k 1/2 gamma^2 (||exp q_k||^2 + ||l_k||^2) - m sum(q_k)
    sq_q = A.sum(A.map(lambda v: v * v, qdiags))
    sq_l = A.sum(A.map(lambda v: v * v, ls))
    per_k = A.generate((k,), lambda i: 0.5 * gamma * gamma * (sq_q[i] + sq_l[i])
                       - wis_m * sum_qs[i])
    wishart = A.the(A.sum_all(per_k))

    nf = A.to_float(n)
    c1 = nf * A.to_float(d) * HALF_LOG_2PI
    return A.unit(-c1 + slse - nf * lse_alpha + prior * (wishart - wis_c))


#: The gradient program: with respect to alphas, means and icf (not x or consts).
gradient = A.gradientA(objective, wrt=(0, 1, 2))
value_and_gradient = A.value_and_gradientA(objective, wrt=(0, 1, 2))


def flatten_gradient(g_alphas, g_means, g_icf) -> np.ndarray:
    """ADBench's gradient layout: alphas, then means row by row, then icf rows."""
    return np.concatenate([np.ravel(g_alphas), np.ravel(g_means), np.ravel(g_icf)])


def unflatten_gradient(flat, d: int, k: int):
    flat = np.asarray(flat)
    t = d * (d + 1) // 2
    return flat[:k], flat[k:k + k * d].reshape(k, d), flat[k + k * d:].reshape(k, t)


# --------------------------------------------------------------------------- NumPy


def _unpack_icf(icf, d):
    """(Qdiag (K, D), L (K, D, D) strictly lower) from the icf rows."""
    k = icf.shape[0]
    qdiag = np.exp(icf[:, :d])
    rows, cols = np.tril_indices(d, -1)          # row-major order of the strict lower part
    pos = _ltri_index(d, rows, cols)             # their positions in l_k (column-major)
    lmat = np.zeros((k, d, d))
    lmat[:, rows, cols] = icf[:, d + pos]
    return qdiag, lmat, rows, cols, pos


def _chunks(n, size):
    for s in range(0, n, size):
        yield s, min(n, s + size)


def _chunk_size(k, d, budget=1 << 24):
    return max(1, budget // max(1, k * d * max(d, 4)))


def _lse(v, axis=-1):
    mx = np.max(v, axis=axis, keepdims=True)
    return (mx + np.log(np.sum(np.exp(v - mx), axis=axis, keepdims=True))).squeeze(axis)


def numpy_objective(alphas, means, icf, x, gamma, m, n=None) -> float:
    """The GMM objective in vectorised NumPy (points processed in chunks).

    ``x`` is (S, D); the N = ``n`` (default S) points are ``x[i mod S]``.
    """
    k, d = means.shape
    s = x.shape[0]
    n = s if n is None else n
    qdiag, lmat, *_ = _unpack_icf(icf, d)
    sum_qs = icf[:, :d].sum(axis=1)
    total = 0.0
    for a, b in _chunks(n, _chunk_size(k, d)):
        xs = x[np.arange(a, b) % s]
        xc = xs[:, None, :] - means[None, :, :]                  # (B, K, D)
        qx = qdiag[None] * xc + np.einsum("krc,bkc->bkr", lmat, xc)
        beta = alphas + sum_qs - 0.5 * np.sum(qx * qx, axis=2)  # (B, K)
        total += float(np.sum(_lse(beta)))
    prior = 0.5 * gamma * gamma * (np.sum(qdiag ** 2) + np.sum(icf[:, d:] ** 2)) \
        - m * np.sum(sum_qs)
    return (-n * d * HALF_LOG_2PI + total - n * float(_lse(alphas)) + prior
            - wishart_constant(d, k, gamma, m))


def numpy_gradient(alphas, means, icf, x, gamma, m, n=None):
    """The hand-written (manual) gradient: ``(objective, g_alphas, g_means, g_icf)``.

    With ``beta_ik`` as above, ``w_ik = softmax_k(beta_ik)`` and ``y = Q_k (x_i - mu_k)``:
    d/dalpha_k = sum_i w_ik - N softmax(alpha)_k; d/dmu_k = sum_i w_ik Q_k^T y;
    d/dq_kr = sum_i w_ik (1 - y_r (x_i - mu_k)_r exp(q_kr)) + gamma^2 exp(2 q_kr) - m;
    d/dL_k[r, c] = -sum_i w_ik y_r (x_i - mu_k)_c + gamma^2 L_k[r, c].
    """
    k, d = means.shape
    s = x.shape[0]
    n = s if n is None else n
    qdiag, lmat, rows, cols, pos = _unpack_icf(icf, d)
    sum_qs = icf[:, :d].sum(axis=1)
    g_alpha = np.zeros(k)
    g_means = np.zeros((k, d))
    g_qd = np.zeros((k, d))            # sum_i w_ik y_r xc_r  (times qdiag later)
    g_l = np.zeros((k, d, d))          # sum_i w_ik y_r xc_c
    total = 0.0
    for a, b in _chunks(n, _chunk_size(k, d)):
        xs = x[np.arange(a, b) % s]
        xc = xs[:, None, :] - means[None, :, :]                  # (B, K, D)
        y = qdiag[None] * xc + np.einsum("krc,bkc->bkr", lmat, xc)
        beta = alphas + sum_qs - 0.5 * np.sum(y * y, axis=2)
        mx = beta.max(axis=1, keepdims=True)
        e = np.exp(beta - mx)
        se = e.sum(axis=1, keepdims=True)
        total += float(np.sum(np.log(se) + mx))
        w = e / se                                               # (B, K)
        g_alpha += w.sum(axis=0)
        wy = w[:, :, None] * y                                   # (B, K, D)
        # Q^T (w y): diagonal part plus L^T
        qty = qdiag[None] * wy + np.einsum("krc,bkr->bkc", lmat, wy)
        g_means += qty.sum(axis=0)
        g_qd += np.einsum("bkr,bkr->kr", wy, xc)
        g_l += np.einsum("bkr,bkc->krc", wy, xc)
    sa = np.exp(alphas - alphas.max())
    sa /= sa.sum()
    g_alpha -= n * sa
    wsum = g_alpha + n * sa                                      # sum_i w_ik
    g_icf = np.zeros_like(icf)
    g_icf[:, :d] = (wsum[:, None] - g_qd * qdiag
                    + gamma * gamma * qdiag * qdiag - m)
    g_icf[:, d + pos] = -g_l[:, rows, cols] + gamma * gamma * icf[:, d + pos]
    prior = 0.5 * gamma * gamma * (np.sum(qdiag ** 2) + np.sum(icf[:, d:] ** 2)) \
        - m * np.sum(sum_qs)
    f = (-n * d * HALF_LOG_2PI + total - n * float(_lse(alphas)) + prior
         - wishart_constant(d, k, gamma, m))
    return f, g_alpha, g_means, g_icf


# --------------------------------------------------------------------------- runner


@functools.lru_cache(maxsize=256)
def _chunk_constants(d: int, k: int, n: int, gamma: float, m: int, prior: float) -> np.ndarray:
    """:func:`constants`, once per chunk shape: its ``lgamma`` sums took about 8 us of a
    0.18 ms gradient call on 1000 points (JAX's closure computes its constant once too).
    The array is only ever read (backends never write to their inputs)."""
    return constants(d, k, n, gamma, m, prior)


class GMMRunner:
    """Objective and gradient of GMM instances on an accel backend, chunked over points.

    ``chunk`` bounds the number of points per program run (``None``: about ``budget``
    elements per run of the largest array the backend materialises: (points, K, D, D)
    for the NumPy-evaluated backends, whose temporaries are whole arrays, and
    (points, K, D) for the fusing ``cpu`` and ``cuda`` backends, which never build the
    (points, K, D, D) products).  Both programs are compiled once per backend and reused for
    every chunk and every file of the same ranks.  ``tiered`` is ``A.compile``'s (the cpu
    backend's first calls on NumPy while the kernels compile; benchmarks pass False).
    """

    def __init__(self, backend: str = "fused", chunk: int | None = None,
                 budget: int | None = None, tiered: bool | None = None):
        self.backend = backend
        self.chunk = chunk
        self.fusing = backend in ("cpu", "cuda")
        self.budget = budget or (1 << 20 if self.fusing else 1 << 17)
        self.f = A.compile(objective, backend=backend, tiered=tiered)
        self.vg = A.compile(value_and_gradient, backend=backend, tiered=tiered)

    def chunks(self, inp):
        per_point = inp.k * inp.d * (1 if self.fusing else inp.d)
        size = self.chunk or max(1, self.budget // max(1, per_point))
        s = inp.x_stored.shape[0]
        out = []
        for a, b in _chunks(inp.n, size):
            if s == inp.n:
                xs = inp.x_stored[a:b]
            else:  # replicate-point: every point is x_stored[i mod S]
                xs = inp.x_stored if s == 1 else inp.x_stored[np.arange(a, b) % s]
            out.append((xs, b - a, 1.0 if a == 0 else 0.0))
        return out

    def _args(self, inp, xs, nb, prior):
        return (inp.alphas, inp.means, inp.icf, xs,
                _chunk_constants(inp.d, inp.k, nb, inp.gamma, inp.m, prior))

    def objective(self, inp, progress=None) -> float:
        total = 0.0
        for xs, nb, prior in self.chunks(inp):
            total += float(self.f(*self._args(inp, xs, nb, prior)))
            if progress is not None:
                progress(nb)
        return total

    def value_and_gradient(self, inp, progress=None):
        """``(objective, flat gradient in ADBench's layout)``."""
        total = 0.0
        gsum = None
        for xs, nb, prior in self.chunks(inp):
            v, g = self.vg(*self._args(inp, xs, nb, prior))
            total += float(v)
            flat = flatten_gradient(*g)
            gsum = flat if gsum is None else gsum + flat
            if progress is not None:
                progress(nb)
        return total, gsum
