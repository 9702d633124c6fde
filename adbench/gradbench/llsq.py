"""GradBench's ``llsq`` eval: a linear least-squares objective and its gradient.

    y(x) = 1/2 sum_{i<n} (s_i - sum_{j<m} x_j t_i^j)^2,  t_i = -1 + 2i/(n-1),  s_i = sign(t_i)

``n`` enters the program as a rank-0 int64 array (so one compiled program serves every
``n`` and ``m``); the powers ``t_i^j`` are a product scan (they do not depend on ``x``,
so the gradient does not differentiate them), and the gradient is ``A.gradientA``.
"""

from __future__ import annotations

import numpy as np

import accel as A

from .evalfn import PROGRAMS, EvalFunction, field, floats, integer, scalar, tolist


def _t(i, n):
    return -1.0 + A.to_float(i) * 2.0 / (A.to_float(n) - 1.0)


def objective(x, nn):
    n = A.the(nn)
    m = x.shape[0]
    # t_i^j as a running product along j (a scan), as the eval's C++ and JAX tools do
    pw = A.scanl1(lambda a, b: a * b,
                  A.generate((n, m), lambda ix: A.cond(ix[1] == 0, 1.0, _t(ix[0], n))))
    fit = A.sum(A.zip_with(lambda p, xv: p * xv, pw, A.replicate((n, A.All), x)))

    def residual(i):
        t = _t(i, n)
        s = A.cond(t > 0.0, 1.0, A.cond(t < 0.0, -1.0, 0.0))
        r = s - fit[i]
        return r * r

    return A.unit(0.5 * A.the(A.sum_all(A.generate((n,), residual))))


gradient = A.gradientA(objective, wrt=0)


def _decode(inp) -> tuple:
    x = floats(field(inp, "x"), "x", 1)
    n = integer(field(inp, "n"), "n", lo=2)
    return x, np.array(n, dtype=np.int64)


FUNCTIONS = {
    "primal": EvalFunction(decode=_decode, encode=scalar,
                           run=lambda x, n: PROGRAMS.get(("llsq", "primal"),
                                                         lambda: objective)(x, n)),
    "gradient": EvalFunction(decode=_decode, encode=tolist,
                             run=lambda x, n: PROGRAMS.get(("llsq", "gradient"),
                                                           lambda: gradient)(x, n)),
}
