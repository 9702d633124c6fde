"""Comparison with the golden reference outputs, using ADBench's metric.

Two numbers are *near* when ``|x - y| / max(1, |x| + |y|) <= tol`` (tol = 1e-8, as
ADBench's default).  References are looked up in every available golden directory:
the shared data set's (``$ADBENCH_DATA/golden``, default ``/work/shared/adbench/golden``)
and the copy shipped in ``adbench/data/golden``; a file passes when it matches every
reference found, and fails when none is found.
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass, field

import numpy as np

from . import ba as _ba
from .io import read_values

TOL = 1e-8
PACKAGE_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
SHARED_DATA = os.environ.get("ADBENCH_DATA", "/work/shared/adbench")

__all__ = ["TOL", "metric", "max_metric", "golden_roots", "gmm_reference_key", "CheckResult",
           "check_gmm", "check_ba", "read_ba_reference", "PACKAGE_DATA", "SHARED_DATA"]


def metric(x, y) -> np.ndarray:
    """ADBench's elementwise closeness ``|x - y| / max(1, |x| + |y|)``."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return np.abs(x - y) / np.maximum(1.0, np.abs(x) + np.abs(y))


def max_metric(x, y) -> float:
    x, y = np.ravel(x), np.ravel(y)
    if x.shape != y.shape:
        return float("inf")
    if x.size == 0:
        return 0.0
    m = metric(x, y)
    return float("inf") if np.isnan(m).any() else float(m.max())


def golden_roots() -> list:
    """The golden directories that exist, shared data set first."""
    out = []
    for root in (os.path.join(SHARED_DATA, "golden"), os.path.join(PACKAGE_DATA, "golden")):
        if os.path.isdir(root) and os.path.abspath(root) not in [os.path.abspath(r)
                                                                 for r in out]:
            out.append(root)
    return out


@dataclass
class CheckResult:
    """The outcome of checking one output against the references."""

    ok: bool
    worst: float = 0.0                    # max metric over everything compared
    details: list = field(default_factory=list)

    def add(self, source: str, what: str, value: float, ok: bool | None = None):
        ok = value <= TOL if ok is None else ok
        self.details.append((source, what, value, ok))
        if np.isfinite(value):
            self.worst = max(self.worst, value)
        else:
            self.worst = float("inf")
        self.ok = self.ok and ok

    def fail(self, source: str, message: str):
        self.details.append((source, message, float("nan"), False))
        self.ok = False

    def summary(self) -> str:
        srcs = sorted({s for s, *_ in self.details})
        bad = [f"{w} ({s})" for s, w, v, ok in self.details if not ok]
        text = f"max metric {self.worst:.2e} vs {', '.join(srcs) or 'nothing'}"
        return text + ("" if not bad else "; failed: " + "; ".join(bad))


def _source(root: str) -> str:
    return "shipped" if os.path.abspath(root).startswith(os.path.abspath(PACKAGE_DATA)) \
        else "shared"


# --------------------------------------------------------------------------- GMM


_SIZES = {1000: "1k", 10000: "10k", 2500000: "2.5M"}


def gmm_reference_key(inp) -> str | None:
    """The file's key in the golden set: ``test.txt`` or ``<size>/gmm_d{D}_K{K}.txt``."""
    base = os.path.basename(inp.path)
    if base == "test.txt" and (inp.d, inp.k, inp.n) == (2, 3, 1):
        return "test.txt"
    size = _SIZES.get(inp.n)
    if size is None or base != f"gmm_d{inp.d}_K{inp.k}.txt":
        return None
    return f"{size}/{base}"


def _summary_rows(root) -> dict:
    path = os.path.join(root, "gmm", "gmm_reference_summary.tsv")
    if not os.path.exists(path):
        return {}
    with open(path) as fh:
        return {r["file"]: r for r in csv.DictReader(fh, delimiter="\t")}


def check_gmm(inp, objective: float, gradient) -> CheckResult:
    """Check a GMM objective and flat gradient against every reference available."""
    res = CheckResult(True)
    key = gmm_reference_key(inp)
    gradient = np.ravel(gradient)
    if len(gradient) != inp.n_independents:
        res.fail("layout", f"gradient length {len(gradient)} != {inp.n_independents}")
    found = False
    for root in golden_roots() if key else []:
        src = _source(root)
        stem = key[:-4]
        fpath = os.path.join(root, "gmm", f"{stem}_F_reference.txt")
        jpath = os.path.join(root, "gmm", f"{stem}_J_reference.txt")
        if os.path.exists(fpath) and os.path.exists(jpath):
            found = True
            res.add(src, "objective", max_metric(objective, read_values(fpath)))
            ref = read_values(jpath)
            if len(ref) != len(gradient):
                res.fail(src, f"gradient length {len(gradient)} != reference {len(ref)}")
            else:
                res.add(src, "gradient", max_metric(gradient, ref))
            continue
        row = _summary_rows(root).get(key)
        if row is None:
            continue
        found = True
        src += " summary"
        res.add(src, "objective", max_metric(objective, float(row["objective"])))
        glen = int(row["grad_len"])
        if glen != len(gradient):
            res.fail(src, f"gradient length {len(gradient)} != reference {glen}")
            continue
        idx = [0, glen // 3, glen // 2, 2 * glen // 3, glen - 1]
        cols = ["g[0]", "g[len//3]", "g[len//2]", "g[2*len//3]", "g[len-1]"]
        res.add(src, "sampled entries",
                max_metric(gradient[idx], [float(row[c]) for c in cols]))
        stats = [gradient.sum(), np.sqrt(np.sum(gradient * gradient)), np.abs(gradient).max()]
        res.add(src, "sum/L2/max|g|",
                max_metric(stats, [float(row[c]) for c in ("grad_sum", "grad_l2",
                                                           "grad_maxabs")]))
    if not found:
        res.fail("-", "no reference found" + (f" for {key}" if key else
                                              " (unknown file name/size)"))
    return res


# --------------------------------------------------------------------------- BA


def read_ba_reference(path) -> dict:
    """The sections of ``ba_reference_block.txt``: name -> dict of arrays."""
    sections, cur = {}, None
    with open(path) as fh:
        for ln in fh:
            ln = ln.strip()
            if not ln or ln.startswith("#"):
                continue
            if ln.startswith("[") and ln.endswith("]"):
                cur = sections.setdefault(ln[1:-1], {})
                continue
            key, *vals = ln.split()
            cur[key] = np.array([float(v) for v in vals])
    return sections


def _ba_shapes(root) -> dict:
    path = os.path.join(root, "ba", "ba_jacobian_shapes.tsv")
    if not os.path.exists(path):
        return {}
    with open(path) as fh:
        return {r["file"]: r for r in csv.DictReader(fh, delimiter="\t")}


def check_ba(inp, reproj, w_err, J) -> CheckResult:
    """Check BA residuals and the CSR Jacobian: every block equals the reference block,
    and the structure (dimensions, row pointers, columns) is exactly ADBench's."""
    res = CheckResult(True)
    n, m, p = inp.n, inp.m, inp.p
    nrows, ncols, nnz = inp.shape
    # Structure, from the rule (independent of any reference file).
    if (J.nrows, J.ncols) != (nrows, ncols):
        res.fail("structure", f"dimensions {J.nrows}x{J.ncols} != {nrows}x{ncols}")
    rows, cols = _ba.csr_structure(n, m, p)
    if len(J.rows) != len(rows) or not np.array_equal(J.rows, rows):
        res.fail("structure", "row pointers differ from ADBench's")
    if len(J.cols) != len(cols) or not np.array_equal(J.cols, cols):
        res.fail("structure", "column indices differ from ADBench's")
    if len(J.vals) != nnz:
        res.fail("structure", f"{len(J.vals)} values, expected {nnz}")
        return res
    base = os.path.basename(inp.path)
    section = "test.txt" if base == "test.txt" else \
        "ba1..ba20" if re.fullmatch(r"ba\d+_n\d+_m\d+_p\d+\.txt", base) else None
    found = False
    for root in golden_roots():
        path = os.path.join(root, "ba", "ba_reference_block.txt")
        if not os.path.exists(path):
            continue
        ref = read_ba_reference(path).get(section) if section else None
        if ref is None:
            continue
        found = True
        src = _source(root)
        shape = _ba_shapes(root).get(base)
        if shape is not None:
            want = tuple(int(shape[c]) for c in ("n", "m", "p", "nrows(=3p)",
                                                 "ncols(=11n+3m+p)", "nnz(=31p)"))
            if want != (n, m, p, nrows, ncols, nnz):
                res.fail(src, f"shape {(n, m, p, nrows, ncols, nnz)} != reference {want}")
        block = np.concatenate([ref["J_row0"], ref["J_row1"]])
        vals = np.asarray(J.vals)
        res.add(src, "Jacobian blocks",
                float(metric(vals[:2 * _ba.BLOCK * p].reshape(p, -1), block[None]).max()))
        res.add(src, "d(w_err)/dw", max_metric(vals[2 * _ba.BLOCK * p:],
                                               np.full(p, ref["dwerr_dw"][0])))
        res.add(src, "reproj_err", float(metric(np.reshape(reproj, (p, 2)),
                                                ref["reproj_err"][None]).max()))
        res.add(src, "w_err", max_metric(w_err, np.full(p, ref["w_err"][0])))
    if not found:
        res.fail("-", "no reference block found")
    return res
