"""GradBench's ``gmm`` eval: the GMM log posterior and its gradient.

GradBench's GMM is ADBench's with three corrections (its README): the precision matrix
is ``Q^T Q`` (the same ``Q (x - mu)`` products ADBench computes), and the Wishart prior
is over the precision matrices with the sign fixed, so the objective is

    -N D/2 log(2 pi) + sum_i logsumexp_k(beta_ik) - N logsumexp(alpha) - W + c

where ``W`` and ``c`` are ADBench's Wishart sum and constant.  That is ADBench's
objective (:func:`accel.adbench.gmm.objective`) with the prior weighted by ``-1``
(its ``consts`` carry that weight), so this module reuses that program and its
``A.value_and_gradientA`` gradient; ``q`` and ``l`` are ADBench's ``icf`` rows split in
two (``l`` column by column in both).
"""

from __future__ import annotations

import numpy as np

from ..gmm import constants, gradient, objective
from .evalfn import PROGRAMS, EvalFunction, InputError, field, floats, integer, scalar

#: The weight of ADBench's (prior - constant) term that gives GradBench's objective.
PRIOR_WEIGHT = -1.0


def _decode(inp) -> tuple:
    d = integer(field(inp, "d"), "d", lo=1)
    k = integer(field(inp, "k"), "k", lo=1)
    n = integer(field(inp, "n"), "n", lo=1)
    m = integer(field(inp, "m"), "m", lo=0)
    gamma = float(field(inp, "gamma"))
    x = floats(field(inp, "x"), "x", 2)
    alpha = floats(field(inp, "alpha"), "alpha", 1)
    mu = floats(field(inp, "mu"), "mu", 2)
    q = floats(field(inp, "q"), "q", 2)
    ltri = np.asarray(field(inp, "l"), dtype=np.float64).reshape(k, -1) if k else None
    want = {"x": (n, d), "alpha": (k,), "mu": (k, d), "q": (k, d), "l": (k, d * (d - 1) // 2)}
    got = {"x": x.shape, "alpha": alpha.shape, "mu": mu.shape, "q": q.shape, "l": ltri.shape}
    bad = [f"{f} {got[f]} (expected {want[f]})" for f in want if got[f] != want[f]]
    if bad:
        raise InputError("gmm: wrong shapes: " + ", ".join(bad))
    icf = np.ascontiguousarray(np.concatenate([q, ltri], axis=1))
    return alpha, mu, icf, x, constants(d, k, n, gamma, m, prior=PRIOR_WEIGHT)


def _encode_gradient(g) -> dict:
    g_alpha, g_mu, g_icf = g
    d = g_mu.shape[1]
    return {"alpha": g_alpha.tolist(), "mu": g_mu.tolist(), "q": g_icf[:, :d].tolist(),
            "l": g_icf[:, d:].tolist()}


FUNCTIONS = {
    "objective": EvalFunction(decode=_decode, encode=scalar,
                              run=lambda *a: PROGRAMS.get(("gmm", "objective"),
                                                          lambda: objective)(*a)),
    "jacobian": EvalFunction(decode=_decode, encode=_encode_gradient,
                             run=lambda *a: PROGRAMS.get(("gmm", "jacobian"),
                                                         lambda: gradient)(*a)),
}
