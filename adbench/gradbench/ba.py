"""GradBench's ``ba`` eval: ADBench's bundle adjustment residuals and sparse Jacobian.

The input is one camera, point, weight and feature, duplicated ``n``, ``m`` and ``p``
times, with observation ``i`` pairing camera ``i mod n`` and point ``i mod m`` (the
expansion the eval's C++ does while decoding; here too, outside the timed call).  The
programs are :mod:`accel.adbench.ba`'s: the residuals, and the Jacobian computed per
observation by ``A.gradientE`` of each residual component over its 15 parameters,
assembled in ADBench's CSR layout, which is GradBench's.  As the eval asks, only a
summary is sent back: the first two reprojection errors and the first weight error
with their repeat counts, and the first 30 and the last entry of each CSR array.
"""

from __future__ import annotations

import numpy as np

from ..ba import N_CAM, jacobian, residuals
from .evalfn import PROGRAMS, EvalFunction, InputError, field, floats, integer

#: Entries of each CSR array sent back: the first ``HEAD`` and the last one.
HEAD = 2 * (N_CAM + 4)


def _decode(inp) -> tuple:
    n = integer(field(inp, "n"), "n", lo=1)
    m = integer(field(inp, "m"), "m", lo=1)
    p = integer(field(inp, "p"), "p", lo=1)
    cam = floats(field(inp, "cam"), "cam", 1)
    x = floats(field(inp, "x"), "x", 1)
    feat = floats(field(inp, "feat"), "feat", 1)
    w = floats(field(inp, "w"), "w", 0)
    if cam.shape != (N_CAM,) or x.shape != (3,) or feat.shape != (2,):
        raise InputError(f"ba: expected cam (11,), x (3,), feat (2,); got {cam.shape}, "
                         f"{x.shape}, {feat.shape}")
    i = np.arange(p, dtype=np.int64)
    return (np.tile(cam, (n, 1)), np.tile(x, (m, 1)), np.full(p, float(w)),
            np.tile(feat, (p, 1)), np.stack([i % n, i % m], axis=1))


def _encode_objective(out) -> dict:
    (rx, ry), werr = out
    return {"reproj_error": {"elements": [float(rx[0]), float(ry[0])], "repeated": len(rx)},
            "w_err": {"element": float(werr[0]), "repeated": len(werr)}}


def _summary(a) -> list:
    return np.concatenate([a[:HEAD], a[-1:]]).tolist()


def _encode_jacobian(out) -> dict:
    rows, cols, vals = out
    return {"rows": _summary(rows), "cols": _summary(cols), "vals": _summary(vals)}


FUNCTIONS = {
    "objective": EvalFunction(decode=_decode, encode=_encode_objective,
                              run=lambda *a: PROGRAMS.get(("ba", "objective"),
                                                          lambda: residuals)(*a)),
    "jacobian": EvalFunction(decode=_decode, encode=_encode_jacobian,
                             run=lambda *a: PROGRAMS.get(("ba", "jacobian"),
                                                         lambda: jacobian)(*a)),
}
