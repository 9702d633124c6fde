"""Folds that are matrix products (``accel.fusion.contraction``) run as BLAS calls.

A fold recognised as ``out[b, p, q] = c * sum_k X[b, p, k] * Y[b, k, q]`` gets one more
phase, ``mm``: its tasks are (batch, row) pairs of the output, and each range of tasks
is cut into runs of consecutive rows of one batch, each computed by one ``np.dot``
(numba calls the BLAS ``gemm`` SciPy ships) into the output's rows, then scaled by
``c`` and multiplied element by element by the factors of the output's index.  When the
batch is the leading dimension of the output and of both arrays (or there is none), the
operands and the output rows are slices of the buffers; otherwise (a batch inside, as
GMM's (N, K, D) arrays batched over K) each run gathers its rows, the batch's other
matrix and its output rows through strides into contiguous scratch, O(rows * K) copies
against O(rows * K * Q) multiply-adds.
Measured on this 2-core machine, one thread: a 256^3 product takes 0.66 ms in BLAS, and
the gradient of ``sum((a @ b)^2)`` at 256 (three products) 2.7-3.3 ms against 7.5-30 ms
for the fold's own phases (the three formulations of the corpus), at 512 21-58 ms
against 160-710 ms.  The parallelism is the range
functions' own (a parallel driver over chunks of rows, as every phase); BLAS itself is
kept to one thread (``OPENBLAS_NUM_THREADS``, set by the backend's ``__init__``),
because OpenBLAS's threads spin while they wait, and on a shared machine its two-thread
256^3 product took 26 ms.

The host picks the phase (:func:`usable`) only when the fold's domain is the arrays'
own: each array dimension equals the extent of the index component it is read at and
every guard of the source holds everywhere (see ``Contraction``), and when the product
is big enough for a BLAS call to pay (``MM_MIN_WORK`` multiply-adds per batch,
``MM_MIN_K`` terms per sum); otherwise the fold's other phases run, so results never
depend on the choice beyond floating-point reassociation.
"""

from __future__ import annotations

from accel.ast import nodes as N
from accel.ast.types import int64
from accel.backends.numba.kernelgen import Site, at, store_at
from accel.backends.numba.trees import flat
from accel.fusion.contraction import Contraction, fits, product
from accel.fusion.kernels import KFold

from .emitter import KernelGen

MM_MIN_WORK = 4096  # multiply-adds per batch from which a product calls BLAS
MM_MIN_K = 8  # ... and terms per sum
MM_SUM_CHUNKS = 8  # chunks of a long sum split over tasks (``_emit_split_sum``)
MM_SPLIT_MIN_K = 128  # ... from this many terms per chunk (measured: the split was 1.1x
#                      slower at K = 512, 1.2x faster at 1024, 2.4x at 4000, 3.7x at 20000)


def roles(c: Contraction, rank: int) -> tuple:
    """``(P, Q)``: the index components of the output's rows and columns in the
    per-batch matrix product (``Q`` None for a matrix-vector product), and which array
    supplies the rows (``"a"`` or ``"b"``)."""
    dims = [d for d in range(rank) if d != c.batch]
    p = dims[0]
    q = dims[1] if len(dims) > 1 else None
    return p, q, ("a" if p == c.m else "b")


def emit(g: KernelGen, s: KFold, c: Contraction, outs: list, parts: list, dims: list,
         n: str, nch: str) -> None:
    """Phase ``mm`` of fold ``s`` (``g`` has its other phases; ``outs`` the output
    buffer, ``parts`` its partials, ``dims``/``n`` the atoms of the rows' extents and
    the inner length, ``nch`` of the chunk count), and ``mmk``/``mmc`` when the sum may
    be split (``split_sum``)."""
    rank = len(dims)
    p, q, rows_from = roles(c, rank)
    xa, ya = (c.a, c.b) if rows_from == "a" else (c.b, c.a)
    xaxes, yaxes = (c.a_axes, c.b_axes) if rows_from == "a" else (c.b_axes, c.a_axes)
    xfix, yfix = (c.a_fixed, c.b_fixed) if rows_from == "a" else (c.b_fixed, c.a_fixed)
    if _strided(c):
        _emit_strided(g, c, outs, dims, n, (xa, xaxes, xfix), (ya, yaxes, yfix), p, q)
        return
    if split_sum(c, rank):
        _emit_split_sum(g, c, outs, parts, dims, n, nch, (xa, xfix), (ya, yfix), p, q)
    x, y = g.array(xa).leaves[0], g.array(ya).leaves[0]
    g.begin("mm")
    x0, y0 = _offset(g, xa, xfix), _offset(g, ya, yfix)
    scale = None
    if c.scale:
        scale = flat(g.exp(product(c.scale)))[0]
    P, K = dims[p], n
    Q = dims[q] if q is not None else "1"
    t, bt, r0, r1 = g.fresh("t"), g.fresh("bt"), g.fresh("r0"), g.fresh("r1")
    X, Y, out = g.fresh("X"), g.fresh("Y"), g.fresh("O")
    g.emit(f"{t} = lo")
    g.emit(f"while {t} < hi:")
    g.ind += 1
    xb = f"{x0} + {bt} * {P} * {K}"
    if _by_batch(c, len(dims)):  # a task is a whole batch (see ``_axpy_rows``)
        g.emit(f"{bt} = {t}")
        g.emit(f"{r0} = 0")
        g.emit(f"{r1} = {P}")
        _axpy_rows(g, c, rank, p, x, xb, y, f"{y0} + {bt} * {K}", outs[0], bt, r0, r1, P,
                   K, scale, t)
        g.emit(f"{t} += 1")
        g.ind -= 1
        return
    g.emit(f"{bt} = {t} // {P}")
    g.emit(f"{r0} = {t} - {bt} * {P}")
    g.emit(f"{r1} = min({P}, {r0} + hi - {t})")
    # rows r0:r1 of the batch's (P, K) matrix X, as a contiguous array
    if [a for a in xaxes if a != c.batch] == [p, rank]:  # laid out (P, K): rows are a slice
        g.emit(f"{X} = {x}[{xb} + {r0} * {K}:{xb} + {r1} * {K}].reshape(({r1} - {r0}, {K}))")
    else:  # laid out (K, P): a copy of the columns
        g.emit(f"{X} = np.ascontiguousarray({x}[{xb}:{xb} + {K} * {P}].reshape(({K}, {P}))"
               f"[:, {r0}:{r1}].T)")
    yb = f"{y0} + {bt} * {K} * {Q}"
    ylay = [a for a in yaxes if a != c.batch]
    if q is None or ylay == [rank, q]:  # (K, Q)
        g.emit(f"{Y} = {y}[{yb}:{yb} + {K} * {Q}].reshape(({K}, {Q}))")
    else:  # (Q, K): its transpose, Fortran-ordered, which BLAS takes as it is
        g.emit(f"{Y} = {y}[{yb}:{yb} + {K} * {Q}].reshape(({Q}, {K})).T")
    ob = f"{bt} * {P} * {Q}"
    o = outs[0]
    g.emit(f"{out} = {o}[{ob} + {r0} * {Q}:{ob} + {r1} * {Q}].reshape(({r1} - {r0}, {Q}))")
    _multiply(g, c, rank, p, q, X, Y, out, K, scale, bt, r0, r1, Q)
    g.emit(f"{t} += {r1} - {r0}")
    g.ind -= 1


def split_sum(c: Contraction, rank: int) -> bool:
    """Whether the product may run with its sum split into chunks (``_emit_split_sum``):
    no batch, a matrix product (not matrix-vector), both arrays laid out with the summed
    dimension first, (K, P) and (K, Q), as the gradient of a product with respect to its
    right operand reads them (``A^T dY``)."""
    if c.batch is not None or rank != 2:
        return False
    p, q, rows_from = roles(c, rank)
    xaxes, yaxes = (c.a_axes, c.b_axes) if rows_from == "a" else (c.b_axes, c.a_axes)
    return q is not None and list(xaxes) == [rank, p] and list(yaxes) == [rank, q]


def _emit_split_sum(g: KernelGen, c: Contraction, outs: list, parts: list, dims: list, n: str,
                    nch: str, xs: tuple, ys: tuple, p: int, q: int) -> None:
    """Phases ``mmk`` and ``mmc``: ``out = X^T Y`` over a long sum (X laid out (K, P), Y
    (K, Q)) by chunks of the sum.  Task ``t`` multiplies rows ``k0:k1`` of both, whose
    slices are contiguous and whose transpose BLAS takes as it is, into partial ``t``;
    ``mmc`` adds the partials in order, then scales.  By rows of the output (phase
    ``mm``), every task copied its columns of X out of the (K, P) layout first: a
    (20000, 64)^T (20000, 64) product took 18.7 ms that way and 5.0 ms split (K = 10000,
    P = 16, Q = 256: 14.3 and 3.4 ms), on two threads."""
    (xa, xfix), (ya, yfix) = xs, ys
    x, y = g.array(xa).leaves[0], g.array(ya).leaves[0]
    P, Q, K = dims[p], dims[q], n
    g.begin("mmk")
    x0, y0 = _offset(g, xa, xfix), _offset(g, ya, yfix)
    t, k0, k1, X, Y, out = (g.fresh(v) for v in ("t", "k0", "k1", "X", "Y", "O"))
    part = parts[0]
    g.loop(t, "range(lo, hi)")
    g.emit(f"{k0} = ({t} * {K}) // {nch}")
    g.emit(f"{k1} = (({t} + 1) * {K}) // {nch}")
    g.emit(f"{X} = {x}[{x0} + {k0} * {P}:{x0} + {k1} * {P}].reshape(({k1} - {k0}, {P})).T")
    g.emit(f"{Y} = {y}[{y0} + {k0} * {Q}:{y0} + {k1} * {Q}].reshape(({k1} - {k0}, {Q}))")
    g.emit(f"{out} = {part}[{t} * {P} * {Q}:({t} + 1) * {P} * {Q}].reshape(({P}, {Q}))")
    g.emit(f"if {k1} == {k0}:")
    g.emit(f"    {out}[:] = 0")
    g.emit("else:")
    g.emit(f"    np.dot({X}, {Y}, {out})")
    g.ind -= 1
    g.begin("mmc", ranged=False)
    r, tt = g.fresh("r"), g.fresh("t")
    o = outs[0]
    g.loop(r, f"range({P} * {Q})")
    g.emit(store_at(o, r, at(part, r)))
    g.loop(tt, f"range(1, {nch})")
    g.emit(store_at(o, r, f"{at(o, r)} + {at(part, f'{tt} * {P} * {Q} + {r}')}"))
    g.ind -= 2
    view = g.fresh("O")
    g.emit(f"{view} = {o}[:{P} * {Q}].reshape(({P}, {Q}))")
    if c.scale:
        g.emit(f"{view} *= {flat(g.exp(product(c.scale)))[0]}")
    _post(g, c, 2, p, q, "0", "0", P, Q, view)


def _multiply(g: KernelGen, c: Contraction, rank: int, p: int, q, X: str, Y: str, out: str,
              K: str, scale, bt: str, r0: str, r1: str, Q: str) -> None:
    """``out = scale * X . Y`` (zero for an empty sum), then the output-index factors."""
    g.emit(f"if {K} == 0:")
    g.emit(f"    {out}[:] = 0")
    g.emit("else:")
    g.emit(f"    np.dot({X}, {Y}, {out})")
    if scale is not None:
        g.emit(f"{out} *= {scale}")
    _post(g, c, rank, p, q, bt, r0, r1, Q, out)


def _axpy_rows(g: KernelGen, c: Contraction, rank: int, p: int, x: str, xb: str, y: str,
               yb: str, o: str, bt: str, r0: str, r1: str, P: str, K: str, scale, t: str):
    """A matrix-vector product whose matrix is laid out (K, P) (``out = X^T y``, the
    gradient of ``X w``): ``out = sum_k y[k] X[k, :]``, one contiguous row of X at a time,
    a whole batch per task, instead of copying X's columns for BLAS (a whole copy of X
    per call: the least-squares gradient took 2 ms against 0.5 ms; in slices of a few
    dozen columns per task, 1.6 ms against 0.16 ms for one pass over X)."""
    kk, rr, yk, ob, xk = (g.fresh(v) for v in ("kk", "rr", "yk", "ob", "xk"))
    g.emit(f"{ob} = {bt} * {P}")
    g.emit(f"for {rr} in range({r0}, {r1}):")
    g.emit("    " + store_at(o, f"{ob} + {rr}", "0"))
    g.emit(f"for {kk} in range({K}):")
    g.emit(f"    {yk} = {at(y, f'{yb} + {kk}')}")
    g.emit(f"    {xk} = {xb} + {kk} * {P}")
    g.emit(f"    for {rr} in range({r0}, {r1}):")
    g.emit("        " + store_at(o, f"{ob} + {rr}",
                                  f"{at(o, f'{ob} + {rr}')} + {yk} * {at(x, f'{xk} + {rr}')}"))
    if scale is not None or c.post:
        out = g.fresh("O")
        g.emit(f"{out} = {o}[{ob} + {r0}:{ob} + {r1}].reshape(({r1} - {r0}, 1))")
        if scale is not None:
            g.emit(f"{out} *= {scale}")
        _post(g, c, rank, p, None, bt, r0, r1, "1", out)


def _strided(c: Contraction) -> bool:
    """Whether ``mm`` gathers its operands through strides (``_emit_strided``): a batch
    that is not the leading dimension of the output and of both arrays."""
    return c.batch is not None and not (c.batch == 0 and c.a_axes[0] == 0
                                        and c.b_axes[0] == 0)


def _by_batch(c: Contraction, rank: int) -> bool:
    """Whether ``mm``'s tasks are whole batches: a matrix-vector product whose matrix is
    laid out (K, P) (``_axpy_rows``); otherwise (and always when strided) they are
    (batch, row) pairs."""
    p, q, rows_from = roles(c, rank)
    xaxes = c.a_axes if rows_from == "a" else c.b_axes
    return not _strided(c) and q is None and [a for a in xaxes if a != c.batch] == [rank, p]


def _post(g: KernelGen, c: Contraction, rank: int, p: int, q, bt: str, r0: str, r1: str,
          Q: str, out: str) -> None:
    """The factors of the output's index: each element of rows ``r0:r1``, after its sum."""
    if c.post:
        rr, cc = g.fresh("rr"), g.fresh("cc")
        g.emit(f"for {rr} in range({r0}, {r1}):")
        g.emit(f"    for {cc} in range({Q}):")
        g.ind += 2
        ix = ["0"] * (rank + 1)  # the folded component is not read
        ix[p] = rr
        if q is not None:
            ix[q] = cc
        if c.batch is not None:
            ix[c.batch] = bt
        v = flat(g.apply(N.Lam((c.index,), product(c.post)), (tuple(ix),)))[0]
        g.emit(f"{out}[{rr} - {r0}, {cc}] *= {v}")
        g.ind -= 2


def _strides(dims: list) -> list:
    """The C-order strides (atoms' products, as code) of an array of extents ``dims``."""
    out = []
    for j in range(len(dims)):
        out.append(" * ".join(dims[j + 1:]) or "1")
    return out


def _emit_strided(g: KernelGen, c: Contraction, outs: list, dims: list, n: str, xs: tuple,
                  ys: tuple, p: int, q) -> None:
    """Phase ``mm`` for a batch that is not every buffer's leading dimension: each run
    of rows of one batch gathers X (rows, K), Y (K, Q) and multiplies into scratch that
    is scattered to the output (see the module docstring)."""
    rank = len(dims)
    (xa, xaxes, xfix), (ya, yaxes, yfix) = xs, ys
    x, y = g.array(xa).leaves[0], g.array(ya).leaves[0]
    g.begin("mm")
    x0, y0 = _offset(g, xa, xfix), _offset(g, ya, yfix)
    xst = dict(zip(xaxes, _strides(g.array(xa).dims[len(xfix):])))
    yst = dict(zip(yaxes, _strides(g.array(ya).dims[len(yfix):])))
    ost = dict(enumerate(_strides(dims)))
    scale = flat(g.exp(product(c.scale)))[0] if c.scale else None
    P, K = dims[p], n
    Q = dims[q] if q is not None else "1"
    t, bt, r0, r1 = g.fresh("t"), g.fresh("bt"), g.fresh("r0"), g.fresh("r1")
    X, Y, out = g.fresh("X"), g.fresh("Y"), g.fresh("O")
    rr, kk, cc, base = g.fresh("rr"), g.fresh("kk"), g.fresh("cc"), g.fresh("base")
    dt = f"{x}.dtype"
    g.emit(f"{Y} = np.empty(({K}, {Q}), dtype={dt})")
    g.emit(f"{t} = lo")
    g.emit(f"{bt} = -1")
    g.emit(f"while {t} < hi:")
    g.ind += 1
    b_new = g.fresh("b")
    g.emit(f"{b_new} = {t} // {P}")
    g.emit(f"{r0} = {t} - {b_new} * {P}")
    g.emit(f"{r1} = min({P}, {r0} + hi - {t})")
    g.emit(f"if {b_new} != {bt}:")  # the batch's (K, Q) matrix, once per batch
    g.ind += 1
    g.emit(f"{bt} = {b_new}")
    yq = f" + {cc} * {yst[q]}" if q is not None else ""
    g.emit(f"for {kk} in range({K}):")
    g.emit(f"    {base} = {y0} + {bt} * {yst[c.batch]} + {kk} * {yst[rank]}")
    g.emit(f"    for {cc} in range({Q}):")
    g.emit(f"        {Y}[{kk}, {cc}] = {at(y, base + yq)}")
    g.ind -= 1
    g.emit(f"{X} = np.empty(({r1} - {r0}, {K}), dtype={dt})")
    g.emit(f"for {rr} in range({r0}, {r1}):")
    g.emit(f"    {base} = {x0} + {bt} * {xst[c.batch]} + {rr} * {xst[p]}")
    g.emit(f"    for {kk} in range({K}):")
    g.emit(f"        {X}[{rr} - {r0}, {kk}] = {at(x, f'{base} + {kk} * {xst[rank]}')}")
    g.emit(f"{out} = np.empty(({r1} - {r0}, {Q}), dtype={dt})")
    _multiply(g, c, rank, p, q, X, Y, out, K, scale, bt, r0, r1, Q)
    o = outs[0]
    oq = f" + {cc} * {ost[q]}" if q is not None else ""
    g.emit(f"for {rr} in range({r0}, {r1}):")
    g.emit(f"    {base} = {bt} * {ost[c.batch]} + {rr} * {ost[p]}")
    g.emit(f"    for {cc} in range({Q}):")
    g.emit("        " + store_at(o, base + oq, f"{out}[{rr} - {r0}, {cc}]"))
    g.emit(f"{t} += {r1} - {r0}")
    g.ind -= 1


def usable(c: Contraction, shape: tuple, n: int, ev) -> int | None:
    """The number of ``mm`` tasks if BLAS computes the fold for these extents (see the
    module docstring), else None."""
    ext = tuple(shape) + (n,)
    if not fits(c, ext, ev):
        return None
    p, q, _ = roles(c, len(shape))
    batches = ext[c.batch] if c.batch is not None else 1
    work = ext[p] * (ext[q] if q is not None else 1) * n
    if work < MM_MIN_WORK or n < MM_MIN_K:
        return None
    return batches if _by_batch(c, len(shape)) else batches * ext[p]


def _offset(g: KernelGen, arr: N.Avar, fixed: tuple) -> str:
    """The flat offset of the sub-array of ``arr`` at the leading indices ``fixed``,
    emitted first in a range function: out of bounds, the function records the failure
    (``OutOfBoundsError`` on the host, checked or not) and runs none of its tasks.  The
    host's choice of the phase reads sizes only (``fits``), so a loop that reads row
    ``t`` of an array keeps one plan for every ``t``."""
    if not fixed:
        return "0"
    dims = g.array(arr).dims
    ix = [flat(g.exp(f))[0] for f in fixed]
    g.emit(f"if not ({g.in_bounds(ix, dims)}):")
    g.ind += 1
    g.record(Site(f"index into array {arr.name}", arr, len(ix)), ix)
    g.emit("hi = lo")
    g.ind -= 1
    lin = ix[0]
    for i, d in zip(ix[1:], dims[1:]):
        lin = f"({lin}) * {d} + {i}"
    size = " * ".join(dims[len(fixed):]) or "1"
    return g.assign(int64, f"np.int64({lin}) * {size}")
