"""Readers and writers for ADBench's GMM and BA files (see /work/shared/adbench/README.md).

Readers are strict and line-oriented: every record sits on its own line with exactly
the expected number of values, and any deviation raises :class:`InputFormatError`
naming the file and the 1-based line number.  Blank lines are ignored.

* GMM: :func:`read_gmm` returns a :class:`GMMInput`.  Files that store a single data
  point while the header says ``N > 1`` (ADBench's 2.5M files) are read in
  *replicate-point* mode: ``x_stored`` keeps the one stored row and ``x`` is a
  read-only broadcast view of shape ``(N, D)`` (no 2.5M x D copy is made).
* BA: :func:`read_ba` returns a :class:`BAInput` holding the one camera / point /
  weight / feature and the header's ``n m p`` (the header wins over the file name);
  ``cams``, ``points``, ``weights``, ``features`` and ``obs`` expand them by
  ADBench's rule.

Writers produce ADBench's ``_F_`` / ``_J_`` files; numbers are written with
``repr`` (shortest text that round-trips the float64 exactly).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from accel import AccelError

__all__ = [
    "InputFormatError", "GMMInput", "BAInput", "BASparseJacobian",
    "read_gmm", "read_ba", "read_values", "read_ba_jacobian",
    "write_gmm_objective", "write_gmm_gradient", "write_ba_objective", "write_ba_jacobian",
    "output_names",
]


class InputFormatError(AccelError, ValueError):
    """A malformed or truncated ADBench input file; the message names the file and line."""

    def __init__(self, path, line, message: str):
        self.path = str(path)
        self.line = line
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


# --------------------------------------------------------------------------- line reader


class _Lines:
    """The non-blank lines of a text file, as (1-based line number, tokens)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read()
        except OSError as e:
            raise InputFormatError(self.path, None, f"cannot read file: {e.strerror}") from None
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError as e:
            line = raw[:e.start].count(b"\n") + 1
            raise InputFormatError(self.path, line, "not a plain ASCII text file") from None
        self.lines = [(i + 1, ln.split()) for i, ln in enumerate(text.split("\n"))
                      if ln.strip()]
        self.pos = 0
        self.last_line = text.count("\n") + (0 if text.endswith("\n") or not text else 1)

    def remaining(self) -> int:
        return len(self.lines) - self.pos

    def next(self, what: str, count: int):
        """The tokens of the next record, which must have exactly ``count`` values."""
        if self.pos >= len(self.lines):
            raise InputFormatError(self.path, self.last_line + 1,
                                   f"unexpected end of file: expected {what}")
        lineno, toks = self.lines[self.pos]
        self.pos += 1
        if len(toks) != count:
            raise InputFormatError(self.path, lineno,
                                   f"expected {what} ({count} value{'s' * (count != 1)}), "
                                   f"found {len(toks)} value{'s' * (len(toks) != 1)}")
        return lineno, toks

    def floats(self, what: str, count: int) -> np.ndarray:
        lineno, toks = self.next(what, count)
        return _floats(self.path, lineno, toks, what)

    def ints(self, what: str, count: int) -> list:
        lineno, toks = self.next(what, count)
        out = []
        for t in toks:
            try:
                out.append(int(t))
            except ValueError:
                raise InputFormatError(self.path, lineno,
                                       f"expected an integer in {what}, found {t!r}") from None
        return out

    def expect_end(self, what: str):
        if self.pos < len(self.lines):
            lineno, _ = self.lines[self.pos]
            raise InputFormatError(self.path, lineno, f"unexpected extra data after {what}")


def _floats(path, lineno, toks, what) -> np.ndarray:
    try:
        vals = np.array([float(t) for t in toks], dtype=np.float64)
    except ValueError:
        bad = next(t for t in toks if not _is_float(t))
        raise InputFormatError(path, lineno, f"expected a number in {what}, found {bad!r}") \
            from None
    if not np.all(np.isfinite(vals)):
        raise InputFormatError(path, lineno, f"non-finite number in {what}")
    return vals


def _is_float(t) -> bool:
    try:
        float(t)
        return True
    except ValueError:
        return False


def _positive(path, lineno, names, values):
    for name, v in zip(names, values):
        if v <= 0:
            raise InputFormatError(path, lineno, f"{name} must be positive, found {v}")


# --------------------------------------------------------------------------- GMM


@dataclass
class GMMInput:
    """One GMM instance (float64 arrays, ADBench's layout)."""

    path: str
    d: int
    k: int
    n: int
    alphas: np.ndarray      # (K,)
    means: np.ndarray       # (K, D)
    icf: np.ndarray         # (K, D(D+1)/2): D logs of the diagonal, then the strict lower part
    x_stored: np.ndarray    # (S, D): the points stored in the file (S == N, or S == 1)
    gamma: float
    m: int
    replicated: bool = False

    @property
    def x(self) -> np.ndarray:
        """All N points, shape (N, D); a read-only broadcast view in replicate mode."""
        if self.x_stored.shape[0] == self.n:
            return self.x_stored
        return np.broadcast_to(self.x_stored[0], (self.n, self.d))

    @property
    def n_independents(self) -> int:
        """The gradient length K + K*D + K*D(D+1)/2."""
        return self.k * (self.d + 1) * (self.d + 2) // 2

    @property
    def name(self) -> str:
        return os.path.splitext(os.path.basename(self.path))[0]


def read_gmm(path, replicate: bool | None = None) -> GMMInput:
    """Read an ADBench GMM file.

    ``replicate``: ``None`` (default) detects replicate-point mode (exactly one stored
    point while ``N > 1``); ``True`` requires it; ``False`` requires all N points.
    """
    f = _Lines(path)
    p = f.path
    hline = f.lines[0][0] if f.lines else 1
    d, k, n = f.ints("the header 'D K N'", 3)
    _positive(p, hline, ("D", "K", "N"), (d, k, n))
    alphas = np.empty(k)
    for i in range(k):
        alphas[i] = f.floats(f"alpha {i + 1} of {k}", 1)[0]
    means = np.empty((k, d))
    for i in range(k):
        means[i] = f.floats(f"mean {i + 1} of {k}", d)
    icf_sz = d * (d + 1) // 2
    icf = np.empty((k, icf_sz))
    for i in range(k):
        icf[i] = f.floats(f"icf row {i + 1} of {k}", icf_sz)
    rest = f.remaining()  # the points and the final 'gamma m' line
    if replicate is None:
        replicate = n > 1 and rest == 2
    stored = 1 if replicate else n
    x = np.empty((stored, d))
    for i in range(stored):
        x[i] = f.floats(f"data point {i + 1} of {stored}"
                        + (" (replicate-point file)" if replicate else ""), d)
    lineno, toks = f.next("the final line 'gamma m'", 2)
    gamma = float(_floats(p, lineno, toks[:1], "gamma")[0])
    try:
        m = int(toks[1])
    except ValueError:
        raise InputFormatError(p, lineno, f"expected the integer m in the final line "
                                          f"'gamma m', found {toks[1]!r}") from None
    f.expect_end("the final line 'gamma m'")
    return GMMInput(p, d, k, n, alphas, means, icf, x, gamma, m, replicated=stored != n)


# --------------------------------------------------------------------------- BA


@dataclass
class BAInput:
    """One (compressed) BA instance: the values and the expansion rule."""

    path: str
    n: int
    m: int
    p: int
    cam: np.ndarray         # (11,)
    point: np.ndarray       # (3,)
    weight: float
    feature: np.ndarray     # (2,)
    note: str = ""

    @property
    def cams(self) -> np.ndarray:
        """(n, 11): every camera is the stored one."""
        return np.tile(self.cam, (self.n, 1))

    @property
    def points(self) -> np.ndarray:
        """(m, 3): every point is the stored one."""
        return np.tile(self.point, (self.m, 1))

    @property
    def weights(self) -> np.ndarray:
        """(p,): every weight is the stored one."""
        return np.full(self.p, self.weight)

    @property
    def features(self) -> np.ndarray:
        """(p, 2): every feature is the stored one."""
        return np.tile(self.feature, (self.p, 1))

    @property
    def obs(self) -> np.ndarray:
        """(p, 2) int64: observation i uses camera i mod n and point i mod m."""
        i = np.arange(self.p, dtype=np.int64)
        return np.stack([i % self.n, i % self.m], axis=1)

    @property
    def name(self) -> str:
        return os.path.splitext(os.path.basename(self.path))[0]

    @property
    def shape(self) -> tuple:
        """(nrows, ncols, nnz) of the Jacobian."""
        return 3 * self.p, 11 * self.n + 3 * self.m + self.p, 31 * self.p


def read_ba(path) -> BAInput:
    """Read an ADBench BA file (the header's ``n m p`` win over the file name)."""
    f = _Lines(path)
    p_ = f.path
    hline = f.lines[0][0] if f.lines else 1
    n, m, p = f.ints("the header 'n m p'", 3)
    _positive(p_, hline, ("n", "m", "p"), (n, m, p))
    cam = f.floats("the camera (r1 r2 r3 C1 C2 C3 f u0 v0 k1 k2)", 11)
    point = f.floats("the 3-D point", 3)
    weight = float(f.floats("the weight", 1)[0])
    feature = f.floats("the 2-D feature", 2)
    f.expect_end("the feature line")
    note = ""
    base = os.path.basename(p_)
    if "_p" in base:
        try:
            p_name = int(base.rsplit("_p", 1)[1].split(".")[0])
            if p_name != p:
                note = f"header p = {p} differs from the file name's p = {p_name}; using {p}"
        except ValueError:
            pass
    return BAInput(p_, n, m, p, cam, point, weight, feature, note)


# --------------------------------------------------------------------------- writers


def output_names(input_path, out_dir, tool: str = "accel") -> tuple:
    """``(<out>/<name>_F_<tool>.txt, <out>/<name>_J_<tool>.txt)``."""
    name = os.path.splitext(os.path.basename(os.fspath(input_path)))[0]
    return (os.path.join(out_dir, f"{name}_F_{tool}.txt"),
            os.path.join(out_dir, f"{name}_J_{tool}.txt"))


def _fmt(values) -> list:
    return [repr(float(v)) for v in np.asarray(values, dtype=np.float64).ravel()]


def write_gmm_objective(path, value: float):
    """The GMM ``_F_`` file: the objective value."""
    with open(path, "w") as fh:
        fh.write(repr(float(value)) + "\n")


def write_gmm_gradient(path, gradient):
    """The GMM ``_J_`` file: the gradient, one value per line (ADBench layout)."""
    with open(path, "w") as fh:
        _write_lines(fh, np.asarray(gradient, dtype=np.float64).ravel(), "\n")


def _write_lines(fh, values, sep, chunk: int = 1 << 16, fmt=None):
    fmt = fmt or (lambda v: repr(float(v)))
    first = True
    for s in range(0, len(values), chunk):
        part = values[s:s + chunk]
        text = sep.join(map(fmt, part.tolist()))
        if text:
            fh.write(("" if first else sep) + text)
            first = False
    fh.write("\n")


def write_ba_objective(path, reproj_err, w_err):
    """The BA ``_F_`` file: the two headed sections, one value per line."""
    with open(path, "w") as fh:
        fh.write("Reprojection error:\n")
        _write_lines(fh, np.asarray(reproj_err, dtype=np.float64).ravel(), "\n")
        fh.write("Zach weight error:\n")
        _write_lines(fh, np.asarray(w_err, dtype=np.float64).ravel(), "\n")


@dataclass
class BASparseJacobian:
    """ADBench's CSR Jacobian: ``rows`` (nrows+1), ``cols`` (nnz), ``vals`` (nnz)."""

    nrows: int
    ncols: int
    rows: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    extra: dict = field(default_factory=dict)

    @property
    def nnz(self) -> int:
        return int(len(self.cols))


def write_ba_jacobian(path, J: BASparseJacobian):
    """The BA ``_J_`` file in ADBench's CSR layout (rows, cols and vals on one line each)."""
    with open(path, "w") as fh:
        fh.write(f"{J.nrows} {J.ncols}\n{len(J.rows)}\n")
        _write_lines(fh, np.asarray(J.rows), " ", fmt=str)
        fh.write(f"{len(J.cols)}\n")
        _write_lines(fh, np.asarray(J.cols), " ", fmt=str)
        _write_lines(fh, np.asarray(J.vals, dtype=np.float64), " ")


# --------------------------------------------------------------------------- output readers


def read_values(path) -> np.ndarray:
    """Every number in a text file (header lines such as 'Reprojection error:' skipped)."""
    vals = []
    with open(path) as fh:
        for lineno, ln in enumerate(fh, 1):
            toks = ln.split()
            if not toks or toks[-1].endswith(":"):
                continue
            vals.append(_floats(path, lineno, toks, "a value line"))
    return np.concatenate(vals) if vals else np.zeros(0)


def read_ba_jacobian(path) -> BASparseJacobian:
    """Read a CSR ``_J_`` file written by :func:`write_ba_jacobian` (or ADBench)."""
    f = _Lines(path)
    nrows, ncols = f.ints("'nrows ncols'", 2)
    (nr,) = f.ints("the row-pointer count", 1)
    rows = np.array(f.ints("the row pointers", nr), dtype=np.int64)
    (nc,) = f.ints("the column count", 1)
    cols = np.array(f.ints("the column indices", nc), dtype=np.int64)
    vals = f.floats("the values", nc)
    f.expect_end("the values")
    return BASparseJacobian(nrows, ncols, rows, cols, vals)

