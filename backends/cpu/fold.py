"""Fold steps (``KFold``: fold the innermost dimension of ``src`` with ``f``, from ``z``
or, for fold1, from the first element): the kernels and their launch rule.

Phases (the rule that picks one is :func:`launch`, beside the kernels):

* ``f``: (row, chunk) tasks, ``mode`` chunks per row; with several chunks ``comb``
  then combines each row's partials in chunk order (only associativity is assumed).
  Few long rows are cut into ``FOLD_CHUNKS`` chunks, a fixed number, so results do not
  depend on the thread count.  A chunk of at least ``FOLD_LANE_MIN`` elements of a fold
  by ``+ * max min`` runs in ``FOLD_LANES`` interleaved accumulators (``_fold_lanes``).
* ``b``: rows in blocks of up to 16 (independent accumulator chains, SLP-vectorized;
  sums of outer products also ``FOLD_PLANES`` rows of the dimension before the last),
  for small element functions that call no ``mathlib`` function (its polynomial
  vectorizes along a row only: phase ``f`` computes it into a buffer; a (2000, 500)
  sum of ``exp`` took 5.2 ms in blocks, 2.7 ms on the buffer, two threads).
* ``o``, ``oc``/``combc``: the interchanged loops, when the source is laid out along
  the rows (sums over points: :func:`outer_major`), by tiles of rows or, for few
  rows, by chunks of elements combined in order.

The constants are read at run time (tests may lower them); the chunkings are part of
the semantics through floating-point reassociation, so they are fixed numbers.
"""

from __future__ import annotations

from dataclasses import replace

from accel.ast import nodes as N
from accel.ast.traverse import children
from accel.ast.types import TupleT, leaves
from accel.backends.numba.host import shape_of, size_of
from accel.backends.numba.kernelgen import at, fast_comb, out_names, store_at
from accel.backends.numba.literals import CAST, cast, typed_const
from accel.backends.numba.trees import flat, rebuild
from accel.errors import ShapeError
from accel.fusion.contraction import contraction
from accel.fusion.kernels import KFold
from accel.simplify.rounds import tidy

from . import contract, intervals
from .branches import FALSE, TRUE, decide, index_branch
from .unravel import counted
from .emitter import (PAR_TASKS_PER_THREAD, KernelGen, chunk_task, count_ops, increment,
                      row_counter, work_bufs)
from .plan import Launch, dtypes, inner_length, num_threads

FOLD_CHUNKS = 64  # chunks of a long fold (two-level reduction)
FOLD_CHUNK_MIN_N = 4096  # inner length from which a fold with few rows is chunked
FOLD_CHUNK_MAX_ROWS = 64  # ... "few rows"
FOLD_OUTER_CHUNK_MAX_ROWS = 8192  # ... for interchanged folds (tiles would each read the
#                                   whole source; chunks of elements read it once)
FOLD_TILE = 1024  # most rows per task of an interchanged fold (accumulators stay in cache)
FOLD_WIDTHS = (16, 8, 2, 1)  # rows folded together by phase ``b`` (independent accumulator chains)
FOLD_BLOCK_ACCS = 16  # most accumulator variables of a block of rows (width x scalar leaves)
FOLD_PLANES = 2  # rows of the second to last dimension in a block of sums of outer products
FOLD_PLANE_MAX_OPS = 6  # ... for element functions of at most this many operations
FOLD_BLOCK_MAX_OPS = 48  # ... for element functions of at most this many operations
FOLD_J_CHUNK = 64  # elements folded into a tile of an interchanged fold at a time
FOLD_SRC_BUF = 32  # source elements computed at a time by phase f when vectorizable math
FOLD_LANES = 4  # interleaved accumulators of phase f's long chunks (``_fold_lanes``)
FOLD_LANE_MIN = 1024  # ... from this many elements in a chunk


def emit(s: KFold, check: bool):
    """Phase ``f`` over (row, chunk) tasks, ``mode`` chunks per row: each task folds its
    chunk into ``p`` (chunk 0 from z, the others from their first element; with one
    chunk per row the host passes the output as ``p``).  ``comb`` then combines the
    partials of each row sequentially in chunk order (only associativity is assumed).
    Folds with small element functions also get either phase ``b`` (rows in blocks) or,
    when their source is laid out along the rows (``outer_major``), the interchanged
    phases ``o`` and ``oc``/``combc``; the host picks a phase per run from the sizes."""
    g = KernelGen(check, hoist=True)
    elt, ts, (m, n, nch), dims = g.rows(s, ("mode",))
    outs, parts = out_names(0, s.out.type), work_bufs("p", s.out.type)
    g.work = outs + parts
    g.begin("f")
    mathlib = not isinstance(elt, TupleT) and _calls_mathlib(s.src)
    reassoc = _reassociable(s, len(dims))
    buffered = mathlib and not reassoc
    buf = g.fresh("buf") if buffered else None
    if buffered:
        g.emit(f"{buf} = np.empty({FOLD_SRC_BUF}, dtype={CAST[ts[0].name]})")
    tk = g.fresh("tk")
    counter = row_counter(g, dims)
    g.loop(tk, "range(lo, hi)")
    r, c, lo, hi, ix = chunk_task(g, tk, n, nch, dims, counter)
    acc = [g.fresh("acc") for _ in ts]
    st = g.fresh("st")
    if s.z is not None:
        g.emit(f"if {c} == 0:")
        g.ind += 1
        g.set_vars(acc, ts, g.exp(s.z))
        g.emit(f"{st} = {lo}")
        g.ind -= 1
        g.emit("else:")
        g.ind += 1
    g.set_vars(acc, ts, g.apply(s.src, (tuple(ix + [lo]),)))
    g.emit(f"{st} = {lo} + 1")
    if s.z is not None:
        g.ind -= 1
    if reassoc:
        _fold_reassociated(g, s, acc, ix, st, hi)
    elif buffered and _laned(s, len(dims)) and counted(s.src, len(dims)) is None:
        g.emit(f"if {hi} - {st} >= {FOLD_LANE_MIN}:")
        g.ind += 1
        _fold_buffered_lanes(g, s, acc, ix, st, hi, buf)
        g.ind -= 1
        g.emit("else:")
        g.ind += 1
        _fold_buffered(g, s, acc, ix, st, hi, buf)
        g.ind -= 1
    elif buffered:
        _fold_buffered(g, s, acc, ix, st, hi, buf)
    else:
        def step(src, j):
            x = g.apply(src, (tuple(ix + [j]),))
            g.update(acc, ts, g.apply(s.f, (rebuild(elt, iter(acc)), x)))
        if _laned(s, len(dims)):
            g.emit(f"if {hi} - {st} >= {FOLD_LANE_MIN}:")
            g.ind += 1
            _fold_lanes(g, s, acc, ts, ix, st, hi)
            g.ind -= 1
            g.emit("else:")
            g.ind += 1
            _inner_loop(g, s, len(dims), st, hi, step)
            g.ind -= 1
        else:
            _inner_loop(g, s, len(dims), st, hi, step)
    g.store(parts, tk, tuple(acc))
    # rows in blocks (each block's element functions emitted up to 16 times: only
    # for small ones), by rows or interchanged (see outer_major)
    blocked = len(dims) > 0 and _block_ops(s) <= FOLD_BLOCK_MAX_OPS and len(ts) <= 4
    outer = blocked and outer_major(s)
    # (a block's element functions read across rows, which LLVM does not vectorize:
    # there a mathlib call is scalar, slower than libm's, so such a source stays on
    # phase f's vectorized buffer; interchanged loops read along the rows: they keep it)
    blocked = blocked and (outer or not mathlib)
    if outer:
        _fold_interchanged(g, s, dims, outs, m, n)
        _fold_interchanged_chunked(g, s, dims, outs, parts, m, n, nch)
    elif blocked:
        _fold_blocked(g, s, dims, outs, n)
        if counted(s.src, len(dims)) is None:  # (dividing sources: segments, phase f)
            _fold_interchanged_chunked(g, s, dims, outs, parts, m, n, nch)
    product = contraction(s)
    if product is not None:
        contract.emit(g, s, product, outs, parts, dims, n, nch)
    g.begin("comb", ranged=False)
    r, c = g.fresh("r"), g.fresh("c")
    g.loop(r, f"range({m})")
    acc = [g.fresh("acc") for _ in ts]
    g.set_vars(acc, ts, tuple(at(p, f"{r} * {nch}") for p in parts))
    g.loop(c, f"range(1, {nch})")
    nxt = tuple(at(p, f"{r} * {nch} + {c}") for p in parts)
    g.update(acc, ts, g.apply(s.f, (rebuild(elt, iter(acc)), rebuild(elt, iter(nxt)))))
    g.ind -= 1
    g.store(outs, r, tuple(acc))
    return g, {"outer": outer, "blocked": blocked, "contract": product}


def _block_ops(s: KFold) -> int:
    """The operations of an element of a block of rows: of the source with its guard
    decided when bounds may decide it (``intervals``), as they do for the blocks away
    from the borders (the window guard of a convolution's adjoint, 53 operations
    guarded, is 10 without)."""
    src = s.src
    found = intervals.guard(src)
    if found is not None:
        src = tidy(decide(src, found[0], TRUE))
    ops, loops = count_ops(src, s.f)
    return ops + loops


def _calls_mathlib(e) -> bool:
    """Whether ``e`` applies ``exp``, ``log`` or ``tanh`` (``mathlib``: fast only when vectorized;
    a scalar call is slower than libm's)."""
    stack, seen = [e], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, N.PrimApp) and x.op in ("exp", "log", "tanh"):
            return True
        stack.extend(children(x))
    return False


def _fold_buffered(g: KernelGen, s: KFold, acc: list, ix: list, st: str, hi: str,
                   buf: str) -> None:
    """The loop of phase ``f`` over ``[st, hi)`` for a source calling ``exp`` or ``log``:
    ``FOLD_SRC_BUF`` source elements at a time into ``buf`` (a loop LLVM vectorizes),
    then combined in order (the same result).  A single row's combinations form one
    chain that no vector unit can split, and the scalar ``mathlib`` functions are slower
    than libm's (the sum of 1000 logs: 5.9 us scalar, 2.6 us buffered, 3.3 us libm)."""
    ts = leaves(s.out.type.elt)
    jb, je, j = g.fresh("jb"), g.fresh("je"), g.fresh("j")
    g.loop(jb, f"range({st}, {hi}, {FOLD_SRC_BUF})")
    g.emit(f"{je} = min({jb} + {FOLD_SRC_BUF}, {hi})")
    g.loop(j, f"range({jb}, {je})")
    x = g.apply(s.src, (tuple(ix + [j]),))
    g.emit(store_at(buf, f"{j} - {jb}", x))
    g.ind -= 1
    g.loop(j, f"range({jb}, {je})")
    g.update(acc, ts, g.apply(s.f, (acc[0], at(buf, f"{j} - {jb}"))))
    g.ind -= 2


def _fold_buffered_lanes(g: KernelGen, s: KFold, acc: list, ix: list, st: str, hi: str,
                         buf: str) -> None:
    """``_fold_buffered`` for a long chunk of a fold that may run in lanes (``_laned``):
    each whole buffer of ``FOLD_SRC_BUF`` source elements is folded into
    ``FOLD_LANES`` lanes (lane ``t`` takes the buffer's elements ``t``, ``t + L``, ..;
    the first buffer starts them), the lanes are combined pairwise into ``acc``, and
    the elements after the last whole buffer follow in order.  Buffered in one chain,
    the sum of 10^6 ``exp`` waited an add's latency per element: 1.13 ms on two
    threads, against 0.74 ms for a generate computing the same ``exp`` and storing it.
    The order is fixed by the chunk's bounds alone."""
    ts = leaves(s.out.type.elt)
    L, B = FOLD_LANES, FOLD_SRC_BUF
    lanes = [[g.fresh("ln")] for _ in range(L)]
    e, jb, j, u, u0 = (g.fresh(x) for x in ("e", "jb", "j", "u", "u"))
    g.emit(f"{e} = {st} + (({hi} - {st}) // {B}) * {B}")
    g.loop(jb, f"range({st}, {e}, {B})")
    g.loop(j, f"range({jb}, {jb} + {B})")
    x = g.apply(s.src, (tuple(ix + [j]),))
    g.emit(store_at(buf, f"{j} - {jb}", x))
    g.ind -= 1
    g.emit(f"if {jb} == {st}:")
    g.ind += 1
    for t, ln in enumerate(lanes):
        g.set_vars(ln, ts, (at(buf, str(t)),))
    g.emit(f"{u0} = {L}")
    g.ind -= 1
    g.emit("else:")
    g.emit(f"    {u0} = 0")
    g.loop(u, f"range({u0}, {B}, {L})")
    for t, ln in enumerate(lanes):
        g.update(ln, ts, g.apply(s.f, (ln[0], at(buf, f"{u} + {t}" if t else u))))
    g.ind -= 2
    _combine_lanes(g, s, acc, ts, lanes)
    _fold_buffered(g, s, acc, ix, e, hi, buf)


def _combine_lanes(g: KernelGen, s: KFold, acc: list, ts: list, lanes: list) -> None:
    """Combine the lanes pairwise, ``(l0 . l1) . (l2 . l3)``, then into ``acc``."""
    while len(lanes) > 1:
        nxt = []
        for a, b in zip(lanes[::2], lanes[1::2]):
            g.update(a, ts, g.apply(s.f, (a[0], b[0])))
            nxt.append(a)
        lanes = nxt
    g.update(acc, ts, g.apply(s.f, (acc[0], lanes[0][0])))


def _laned(s: KFold, rank: int) -> bool:
    """Whether phase ``f`` may fold a long chunk in ``FOLD_LANES`` interleaved lanes: a
    scalar fold whose combination is an associative and commutative primitive
    (``fast_comb``) and whose source divides its inner index by at most one divisor
    (``unravel``; ``_fold_segments``)."""
    unr = counted(s.src, rank)
    return fast_comb(s.f) is not None and (unr is None or len(unr[1]) == 1)


def _reassociable(s: KFold, rank: int) -> bool:
    """Whether phase ``f`` folds with reassociating adds (``_fold_reassociated``): a
    scalar floating-point sum that could run in lanes (``_laned``)."""
    ts = leaves(s.out.type.elt)
    return (len(ts) == 1 and ts[0].is_float and fast_comb(s.f) == "add"
            and _laned(s, rank))


def _fold_reassociated(g: KernelGen, s: KFold, acc: list, ix: list, st: str,
                       hi: str) -> None:
    """Sum elements ``st .. hi-1`` into ``acc`` with adds LLVM may reassociate (the
    header's ``_radd``), in one loop (by segments for a source dividing its inner
    index: ``_fold_segments``).  LLVM then vectorizes the loop, a ``mathlib`` call in
    the source included, with interleaved vector accumulators: one thread, 10^6
    elements, ``sum(exp(x - m))`` 3.24 -> 2.40 ms (the buffered lanes before it; a
    generate storing the same ``exp`` takes 2.37), a dot product of 16,384 elements
    8.0 -> 3.9 us (four scalar lanes before).  The sum's order is LLVM's choice for the
    chunk, fixed by the compiled code and the chunk's bounds, not by threads; the fold
    assumes only associativity of its combination (and ``+`` is commutative)."""
    if counted(s.src, len(ix)) is not None:
        _fold_segments(g, s, acc, leaves(s.out.type.elt), ix, st, hi, reassoc=True)
        return
    j = g.fresh("j")
    g.loop(j, f"range({st}, {hi})")
    x = flat(g.apply(s.src, (tuple(ix + [j]),)))[0]
    g.emit(f"{acc[0]} = _radd({acc[0]}, {x})")
    g.ind -= 1


def _neutral(op: str, t) -> str:
    """The neutral element of ``op`` (``fast_comb``) on scalars of type ``t``."""
    if op in ("add", "mul"):
        return typed_const(1 if op == "mul" else 0, t)
    if t.is_float:
        return cast(t, "-np.inf" if op == "max" else "np.inf")
    bits = 63 if t.name == "int64" else 31
    return typed_const(-(1 << bits) if op == "max" else (1 << bits) - 1, t)


def _fold_segments(g: KernelGen, s: KFold, acc: list, ts: list, ix: list, st: str,
                   hi: str, reassoc: bool = False) -> None:
    """Fold elements ``st .. hi-1`` of a source that divides the inner index by one
    divisor ``d`` (``j // d``, ``j % d``: a flattened window) segment by segment: a
    segment is a run of elements with one quotient (up to ``d`` of them, consecutive
    remainders), folded ``FOLD_LANES`` elements at a time into lanes seeded with the
    combination's neutral element, the segment's last few into ``acc``; the lanes are
    combined into ``acc`` at the end.  No division and no branch per element, reads
    consecutive within a segment: a convolution's kernel adjoint (25 sums of 258,000
    products) measured 11.4 ms in one counted chain against 1.8 ms so (serial, by
    hand).  The order is fixed by the chunk's bounds and ``d`` alone.  A divisor that
    is not positive folds in the counted chain (``_inner_loop``).  With ``reassoc`` (a
    float sum, ``_fold_reassociated``) a segment is one loop of reassociating adds
    into ``acc`` instead of lanes."""
    body, ((d, q, r),) = counted(s.src, len(ix))
    src = N.Lam(s.src.params, body)
    L = FOLD_LANES
    op = fast_comb(s.f)
    dv = flat(g.exp(d))[0]
    g.emit(f"if {dv} > 0:")
    g.ind += 1
    lanes = [] if reassoc else [[g.fresh("ln")] for _ in range(L)]
    for ln in lanes:
        g.emit(f"{ln[0]} = {_neutral(op, ts[0])}")
    qa, ra, jj, sg, tt = (g.fresh(x) for x in ("q", "r", "jj", "sg", "tt"))
    rts = [g.fresh("rt") for _ in range(L)]
    g.emit(f"{qa} = {st} // {dv}")
    g.emit(f"{ra} = {st} - {qa} * {dv}")
    g.emit(f"{jj} = {st}")
    g.emit(f"while {jj} < {hi}:")
    g.ind += 1
    g.emit(f"{sg} = min({hi} - {jj}, {dv} - {ra})")
    g.emit(f"{tt} = 0")

    def element(t: int):
        g.emit(f"{rts[t]} = {ra} + {tt} + {t}")
        olds = [g.bind(q, qa), g.bind(r, rts[t])]
        x = g.apply(src, (tuple(ix + [f"({jj} + {tt} + {t})"]),))
        g.unbind(olds)
        return x
    if reassoc:
        g.loop(tt, f"range({sg})")
        g.emit(f"{acc[0]} = _radd({acc[0]}, {flat(element(0))[0]})")
        g.ind -= 1
    else:
        g.emit(f"while {tt} + {L} <= {sg}:")
        g.ind += 1
        xs = [element(t) for t in range(L)]
        for ln, x in zip(lanes, xs):
            g.update(ln, ts, g.apply(s.f, (ln[0], x)))
        g.emit(f"{tt} += {L}")
        g.ind -= 1
        g.emit(f"while {tt} < {sg}:")
        g.ind += 1
        g.update(acc, ts, g.apply(s.f, (acc[0], element(0))))
        g.emit(f"{tt} += 1")
        g.ind -= 1
    g.emit(f"{jj} += {sg}")
    g.emit(f"{ra} = 0")
    g.emit(f"{qa} += 1")
    g.ind -= 1
    if lanes:
        _combine_lanes(g, s, acc, ts, lanes)
    g.ind -= 1
    g.emit("else:")
    g.ind += 1

    def step(f, j):
        x = g.apply(f, (tuple(ix + [j]),))
        g.update(acc, ts, g.apply(s.f, (acc[0], x)))
    _inner_loop(g, s, len(ix), st, hi, step)
    g.ind -= 1


def _fold_lanes(g: KernelGen, s: KFold, acc: list, ts: list, ix: list, st: str,
                hi: str) -> None:
    """Fold elements ``st .. hi-1`` (at least ``FOLD_LANES``) into ``acc`` in
    ``FOLD_LANES`` lanes: lane ``t`` folds elements ``st + t``, ``st + t + L``, ...; the
    lanes are combined pairwise and into ``acc``, then the last few elements in order.
    A single chain waits an add's latency per element and does not vectorize without
    reassociation; independent lanes do both (sums of 10^6 elements 3-4x faster).  The
    order is fixed by the chunk's bounds alone, so results do not depend on threads."""
    if counted(s.src, len(ix)) is not None:
        _fold_segments(g, s, acc, ts, ix, st, hi)
        return
    lanes = [[g.fresh("ln")] for _ in range(FOLD_LANES)]
    for t, ln in enumerate(lanes):
        g.set_vars(ln, ts, g.apply(s.src, (tuple(ix + [f"({st} + {t})"]),)))
    e, j = g.fresh("e"), g.fresh("j")
    L = FOLD_LANES
    g.emit(f"{e} = {st} + {L} + (({hi} - {st} - {L}) // {L}) * {L}")
    g.loop(j, f"range({st} + {L}, {e}, {L})")
    for t, ln in enumerate(lanes):
        x = g.apply(s.src, (tuple(ix + [f"({j} + {t})" if t else j]),))
        g.update(ln, ts, g.apply(s.f, (ln[0], x)))
    g.ind -= 1
    _combine_lanes(g, s, acc, ts, lanes)
    g.loop(j, f"range({e}, {hi})")
    g.update(acc, ts, g.apply(s.f, (acc[0], g.apply(s.src, (tuple(ix + [j]),)))))
    g.ind -= 1


def _inner_loop(g: KernelGen, s: KFold, rank: int, start: str, end: str, step,
                positive: bool = False) -> None:
    """The loop ``for j in range(start, end)`` of a fold, ``step(src, j)`` emitting its
    body for the source function ``src``; ``j // c`` and ``j % c`` of the source follow
    ``j`` by counters (``unravel``) when every divisor is positive at run time (known to
    be with ``positive``: no divided loop for the other case)."""
    unravelled = counted(s.src, rank)
    j = g.fresh("j")
    if unravelled is not None:
        body, divs = unravelled
        ds = [flat(g.exp(d))[0] for d, _, _ in divs]
        g.emit(f"if {' and '.join(f'{d} > 0' for d in ds)}:" if not positive else "if True:")
        g.ind += 1
        olds = []
        for d, (_, q, rv) in zip(ds, divs):
            qa, ra = g.fresh("q"), g.fresh("r")
            g.emit(f"{qa} = {start} // {d}")
            g.emit(f"{ra} = {start} - {qa} * {d}")
            olds += [g.bind(q, qa), g.bind(rv, ra)]
        g.loop(j, f"range({start}, {end})")
        step(N.Lam(s.src.params, body), j)
        for d, (_, q, rv) in zip(ds, divs):
            qa, ra = g.env[q.name], g.env[rv.name]
            g.emit(f"{ra} += 1")
            g.emit(f"if {ra} == {d}:")
            g.emit(f"    {ra} = 0")
            g.emit(f"    {qa} += 1")
        g.unbind(olds)
        g.ind -= 2
        if positive:
            return
        g.emit("else:")
        g.ind += 1
    g.loop(j, f"range({start}, {end})")
    step(s.src, j)
    g.ind -= 1
    if unravelled is not None:
        g.ind -= 1


def _fold_blocked(g: KernelGen, s: KFold, dims: list, outs: list, n: str):
    """Phase ``b``: the row-by-row fold (one chunk per row) on up to 16 rows at a
    time, adjacent along the last dimension: one loop over ``j`` updates all their
    accumulators.  The rows' chains of combinations are independent, so the CPU overlaps
    them (a single row's fold waits for each combination in turn: an add's latency per
    element), and reads that do not depend on the row's last index are shared.  Each row
    still combines its elements in order ``0 .. n-1``: the result is exactly phase ``f``'s.
    Rows left over at the end of a segment or a task are folded one by one."""
    g.begin("b")
    ix = [g.fresh("i") for _ in dims]
    for v, a in zip(ix, g.unravel("lo", dims)):
        g.emit(f"{v} = {a}")
    _row_blocks(g, s, dims, outs, "lo", "hi", ix, None, n)


def _chunk_partials(g: KernelGen, s: KFold, dims: list, parts: list, m: str, n: str,
                    nch: str, c: str, base: str, jlo: str, jhi: str) -> None:
    """Start chunk ``c`` (``jlo .. jhi-1`` of the folded dimension) of every row in the
    partials ``p[c * m + row]``: chunk 0 from the seed, the others from their first
    element (every chunk has elements: the host chunks only folds with ``n >=
    FOLD_CHUNKS``)."""
    r = g.fresh("r")
    g.emit(f"{jlo} = ({c} * {n}) // {nch}")
    g.emit(f"{jhi} = (({c} + 1) * {n}) // {nch}")
    g.emit(f"{base} = {c} * {m}")
    ix = [g.fresh("i") for _ in dims]
    for v in ix:
        g.emit(f"{v} = 0")
    g.loop(r, f"range({m})")
    if s.z is not None:
        g.emit(f"if {c} == 0:")
        g.ind += 1
        g.store(parts, f"{base} + {r}", g.exp(s.z))
        g.ind -= 1
        g.emit("else:")
        g.ind += 1
    g.store(parts, f"{base} + {r}", g.apply(s.src, (tuple(ix + [jlo]),)))
    if s.z is not None:
        g.ind -= 1
    increment(g, ix, dims)
    g.ind -= 1


def _combine_chunks(g: KernelGen, s: KFold, outs: list, parts: list, m: str,
                    nch: str) -> None:
    """Phase ``combc``: each row's partials ``p[c * m + row]`` combined in chunk order."""
    elt = s.out.type.elt
    ts = leaves(elt)
    r, c = g.fresh("r"), g.fresh("c")
    g.begin("combc", ranged=False)
    acc = [g.fresh("acc") for _ in ts]
    g.loop(r, f"range({m})")
    g.set_vars(acc, ts, tuple(at(p, r) for p in parts))
    g.loop(c, f"range(1, {nch})")
    nxt = tuple(at(p, f"{c} * {m} + {r}") for p in parts)
    g.update(acc, ts, g.apply(s.f, (rebuild(elt, iter(acc)), rebuild(elt, iter(nxt)))))
    g.ind -= 1
    g.store(outs, r, tuple(acc))


def block_widths(s: KFold) -> tuple:
    """The widths of the blocks of rows of fold ``s``: ``FOLD_WIDTHS`` capped so that a
    block's accumulators (its width times the element's scalar leaves) are at most
    ``FOLD_BLOCK_ACCS``, four vector registers of four doubles per leaf.  A block of 16
    rows of 2x2 matrix products (4-tuples) held 64 accumulators, more than the 16 AVX2
    registers, and its phase ``o`` was 900 lines of Python that numba took about 10 s to
    compile; capped at 4 rows it is about a quarter of that."""
    cap = max(1, FOLD_BLOCK_ACCS // len(leaves(s.out.type.elt)))
    cap = 1 << (cap.bit_length() - 1)  # a power of two
    return tuple(sorted({min(w, cap) for w in FOLD_WIDTHS}, reverse=True))


def _row_blocks(g: KernelGen, s: KFold, dims: list, outs: list, first: str, end: str,
                ix: list, jlo: str | None, jhi: str) -> None:
    """Fold rows ``first .. end-1`` (multi-index variables ``ix`` of row ``first``, which
    this advances) over ``j`` in ``jlo .. jhi-1``, up to 16 adjacent rows at a time
    (``FOLD_WIDTHS``: D = 10 is a block of 8 and a pair) with their accumulators in
    variables; for sums of outer products (``plane_blocked``), ``FOLD_PLANES`` rows of
    the dimension before the last too (``_plane_block``), wherever the range holds them
    whole.  ``jlo`` None: whole rows, from the seed (or element 0); else the
    accumulators continue from the rows' values in the output.  A guard around the
    source that bounds over a block's indices can decide (``intervals``: a window's
    border test) is decided for the blocks whose bounds prove it; the other rows are
    folded one at a time with it (a block of 16 guarded rows compiled for minutes)."""
    r = g.fresh("r")
    pre, last = ix[:-1], ix[-1]
    rank = len(dims)
    widths = block_widths(s)
    branch = index_branch(s.src, range(rank))
    uniform = _uniform_rows(g, branch, rank)
    boxed = intervals.guard(s.src) if branch is None else None
    g.emit(f"{r} = {first}")
    g.emit(f"while {r} < {end}:")
    g.ind += 1
    if boxed is not None:  # the blocks whose bounds prove the guard fold without it
        proofs = {w: intervals.holds(g, s.src.params[0], boxed[0], boxed[1], intervals.row_box(
            [pre + [last if t == 0 else f"({last} + {t})"] for t in range(w)])
            + [(jlo or "0", f"{jhi} - 1")]) for w in widths if w > 1}
        if None in proofs.values():
            boxed = None
        else:
            guarded, s = s, replace(s, src=tidy(decide(s.src, boxed[0], TRUE)))
    # blocks count quotients and remainders by positive divisors (``unravel``); rows of
    # a source dividing by anything else go one at a time (16 rows of divided loop
    # compiled for a minute, for a case sizes never make)
    unr = counted(s.src, rank)
    pos = "".join(f" and {flat(g.exp(d))[0]} > 0" for d, _, _ in unr[1]) if unr else ""
    planes = plane_blocked(s) and boxed is None
    if planes:  # FOLD_PLANES whole rows of the last dimension at a time, when they are here
        h, d, ip = FOLD_PLANES, dims[-1], ix[-2]
        g.emit(f"if {last} == 0 and {end} - {r} >= {h} * {d} and {dims[-2]} - {ip} >= {h}"
               f"{uniform(rank - 2, ip, h)}{uniform(rank - 1, '0', d)}{pos}:")
        g.ind += 1
        c = g.fresh("c")
        g.emit(f"{c} = 0")
        g.emit(f"while {c} < {d}:")
        g.ind += 1
        for width in widths:
            g.emit("else:" if width == 1 else
                   f"{'if' if width == widths[0] else 'elif'} {d} - {c} >= {width}:")
            g.ind += 1
            _plane_block(g, s, outs, r, ix, d, c, width, jlo, jhi, branch)
            g.emit(f"{c} += {width}")
            g.ind -= 1
        g.ind -= 1
        g.emit(f"{r} += {h} * {d}")
        g.emit(f"{ip} += {h - 1}")  # and one more below, with the carry
        g.emit(f"{last} = {d}")
        g.ind -= 1
    for width in widths:
        proof = f" and {proofs[width]}" if boxed is not None and width > 1 else ""
        proof += pos if width > 1 else ""
        if width == widths[0]:
            g.emit(f"{'elif' if planes else 'if'} {end} - {r} >= {width} and "
                   f"{dims[-1]} - {last} >= {width}{uniform(rank - 1, last, width)}{proof}:")
        elif width > 1:
            g.emit(f"elif {end} - {r} >= {width} and {dims[-1]} - {last} >= {width}"
                   f"{uniform(rank - 1, last, width)}{proof}:")
        else:
            g.emit("else:")
        g.ind += 1
        # row t's last index is the atom ``(last + t)``: its reads are at a shared
        # offset plus t (``KernelGen.read``), consecutive loads that SLP vectorizes;
        # with a guard the blocks' bounds did not prove, one row at a time, guarded
        _fold_rows(g, guarded if boxed is not None and width == 1 else s, outs,
                   [(f"{r} + {t}", pre + [last if t == 0 else f"({last} + {t})"])
                    for t in range(width)], jlo, jhi, branch, positive=width > 1)
        g.emit(f"{r} += {width}")
        g.emit(f"{last} += {width}")
        g.ind -= 1
    g.emit(f"if {last} == {dims[-1]}:")
    g.ind += 1
    g.emit(f"{last} = 0")
    increment(g, pre, dims[:-1])
    g.ind -= 2


def _uniform_rows(g: KernelGen, branch, rank: int):
    """For ``index_branch``'s ``branch`` of a fold's source on a row index (or None):
    ``uniform(k, lo, n)``, an extra condition (``" and ..."``, or ``""``) that the
    branch goes the same way for every row whose index component ``k`` runs over
    ``lo .. lo+n-1`` (the others fixed).  The test is monotone in its index, so its
    ends decide; the size term is evaluated here, once."""
    if branch is None:
        return lambda k, lo, n: ""
    _, op, e, bk = branch
    v = g.fresh("e")
    g.emit(f"{v} = {flat(g.exp(e))[0]}")
    py = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]

    def uniform(k, lo, n):
        if k != bk or n == 1:
            return ""
        return f" and (({lo}) {py} {v}) == (({lo}) + {n} - 1 {py} {v})"
    return uniform


def _plane_block(g: KernelGen, s: KFold, outs: list, r: str, ix: list, d: str, c: str,
                 width: int, jlo: str | None, jhi: str, branch) -> None:
    """Fold the ``FOLD_PLANES x width`` rows ``(.., ix[-2] + u, c + t)`` (``r``: the
    position of row ``(.., ix[-2], 0)``) together (``_fold_rows``), as
    ``_row_blocks`` does for one row of blocks.  A read that does not depend on
    ``ix[-2]`` is loaded once for all ``u`` (LLVM merges the equal loads), one that
    does not depend on the last index once for all ``t``: a sum of outer products
    makes ``FOLD_PLANES * width`` multiply-adds per ``FOLD_PLANES + width`` loads (a
    GEMM micro-kernel; with one plane it is ``width`` per ``width + 1``).  The GMM's
    ``sum_i x[i, k, c] * y[i, k, r]`` (D = 32, K = 100, 327 points): 4.8 -> 2.8 ms; four
    planes were no faster than two, and compile for twice as long."""
    pre, ip = ix[:-2], ix[-2]
    rows = []
    for u in range(FOLD_PLANES):
        p = g.fresh("pp")
        g.emit(f"{p} = {r} + {u} * {d} + {c}")
        plane = ip if u == 0 else f"({ip} + {u})"
        rows += [(f"{p} + {t}", pre + [plane, c if t == 0 else f"({c} + {t})"])
                 for t in range(width)]
    _fold_rows(g, s, outs, rows, jlo, jhi, branch, positive=True)


def _fold_rows(g: KernelGen, s: KFold, outs: list, rows: list, jlo: str | None,
               jhi: str, branch=None, positive: bool = False) -> None:
    """Fold the block ``rows`` ((output position, multi-index atoms) per row) over ``j``
    in ``jlo .. jhi-1`` with their accumulators in variables, one loop over ``j`` for
    all of them.  ``jlo`` None: from the seed (or element 0); else from the rows'
    values in the output.  ``branch`` (``index_branch`` on a row index, going the same
    way for all the rows): the block is folded with it decided, as its first row's
    test says.  ``positive``: the source's divisors (``unravel``) are known positive."""
    if branch is not None:
        test = branch[0]
        p = s.src.params
        g.emit(f"if {flat(g.apply(N.Lam(p, test), (tuple(rows[0][1] + ['0']),)))[0]}:")
        for value in (TRUE, FALSE):
            g.ind += 1
            decided = replace(s, src=tidy(decide(s.src, test, value)))
            _fold_rows(g, decided, outs, rows, jlo, jhi, positive=positive)
            g.ind -= 1
            if value is TRUE:
                g.emit("else:")
        return
    elt = s.out.type.elt
    ts = leaves(elt)
    accs = [[g.fresh("acc") for _ in ts] for _ in rows]
    if jlo is not None:
        for acc, (pos, _) in zip(accs, rows):
            g.set_vars(acc, ts, tuple(at(o, pos) for o in outs))
        start = jlo
    elif s.z is not None:
        z = g.exp(s.z)
        for acc in accs:
            g.set_vars(acc, ts, z)
        start = "0"
    else:
        for acc, (_, row) in zip(accs, rows):
            g.set_vars(acc, ts, g.apply(s.src, (tuple(row + ["0"]),)))
        start = "1"
    def step(src, j):
        with g.reusing():  # the rows' shared reads and offsets once
            for acc, (_, row) in zip(accs, rows):
                x = g.apply(src, (tuple(row + [j]),))
                g.update(acc, ts, g.apply(s.f, (rebuild(elt, iter(acc)), x)))
    _inner_loop(g, s, len(rows[0][1]), start, jhi, step, positive)
    for acc, (pos, _) in zip(accs, rows):
        g.store(outs, pos, tuple(acc))


def _fold_interchanged(g: KernelGen, s: KFold, dims: list, outs: list, m: str, n: str):
    """Phase ``o``: the fold with its loops interchanged, for sources that are contiguous
    along the rows rather than along the folded dimension (AD's folds over replicated
    dimensions: sums over points of per-point contributions).  A task is a tile of
    ``tile`` rows (at most ``FOLD_TILE``; fewer when that gives every thread work),
    initialised in the output and then folded over ``FOLD_J_CHUNK`` elements at a time:
    the chunk's part of the source stays in cache while the tile's rows go over it in
    blocks of rows (``_row_blocks``).  Each row still
    combines its elements in order ``0 .. n-1``, so the result is exactly the row-by-row
    fold's."""
    g.begin("o")
    t, r0, r1, r, jc, je = (g.fresh(x) for x in ("t", "r", "r", "r", "jc", "je"))
    tile = g.slot(("tile",))
    g.loop(t, "range(lo, hi)")
    g.emit(f"{r0} = {t} * {tile}")
    g.emit(f"{r1} = min({r0} + {tile}, {m})")
    base = g.unravel(r0, dims)
    bix = [g.fresh("b") for _ in dims]
    for v, a in zip(bix, base):
        g.emit(f"{v} = {a}")
    ix = [g.fresh("i") for _ in dims]
    for v, b in zip(ix, bix):
        g.emit(f"{v} = {b}")
    g.loop(r, f"range({r0}, {r1})")  # every row from the seed or its element 0
    g.store(outs, r, g.exp(s.z) if s.z is not None else g.apply(s.src, (tuple(ix + ["0"]),)))
    increment(g, ix, dims)
    g.ind -= 1
    g.loop(jc, f"range({0 if s.z is not None else 1}, {n}, {FOLD_J_CHUNK})")
    g.emit(f"{je} = min({jc} + {FOLD_J_CHUNK}, {n})")
    _fold_tile(g, s, dims, outs, r0, r1, bix, ix, jc, je)
    g.ind -= 2


def _fold_tile(g: KernelGen, s: KFold, dims: list, outs: list, r0: str, r1: str, bix: list,
               ix: list, jlo: str, jhi: str) -> None:
    """Fold elements ``jlo .. jhi-1`` into the rows ``r0 .. r1-1`` of ``outs`` (row
    ``r0``'s multi-index: the atoms ``bix``; ``ix``: variables for ``_row_blocks``), in
    blocks of rows.  (Counted loops over segments of the last dimension, which LLVM's
    loop vectorizer handles, were 1.5-2.5x slower than SLP-vectorized blocks for D = 32.)"""
    for v, b in zip(ix, bix):
        g.emit(f"{v} = {b}")
    _row_blocks(g, s, dims, outs, r0, r1, ix, jlo, jhi)


def _fold_interchanged_chunked(g: KernelGen, s: KFold, dims: list, outs: list, parts: list,
                               m: str, n: str, nch: str):
    """Phases ``oc`` and ``combc``: long rows by chunks of the folded dimension, the rows
    in blocks.  Task ``c`` folds chunk ``c`` of every row into partials ``p[c * m +
    row]`` (up to 16 rows in one loop over the chunk, as phase ``o`` or ``b`` folds
    them: its part of the source is read from memory once, and reads that do not depend
    on the row are shared), then ``combc`` combines each row's partials in chunk order,
    as phase ``comb`` does for row-by-row chunks.  Interchanged folds run it for up to
    ``FOLD_OUTER_CHUNK_MAX_ROWS`` rows (a sum over all points into a (K, D) or (K, D, D)
    array), blocked ones for the few long rows the host chunks: row by row (phase
    ``f``), each chunk of each row read the shared operand again (a 1-D convolution's
    kernel adjoint, 16 sums of 10^6 products, read 16 times what it needed)."""
    g.begin("oc")
    c, base, jlo, jhi, st = (g.fresh(x) for x in ("c", "o", "jlo", "jhi", "st"))
    g.loop(c, "range(lo, hi)")
    _chunk_partials(g, s, dims, parts, m, n, nch, c, base, jlo, jhi)
    g.emit(f"{st} = {jlo} if {c} == 0 else {jlo} + 1" if s.z is not None
           else f"{st} = {jlo} + 1")
    ix = [g.fresh("i") for _ in dims]
    _fold_tile(g, s, dims, parts, base, f"{base} + {m}", ["0"] * len(dims), ix, st, jhi)
    g.ind -= 1
    _combine_chunks(g, s, outs, parts, m, nch)


def outer_major(s: KFold) -> bool:
    """Whether the interchanged loop (phase ``o``) suits the fold's source: some read
    has the folded index as its first index (consecutive elements of a row are far apart
    in memory: a row-by-row fold would fetch a cache line per element), some read has the
    row's last index as its own last index (a block of consecutive rows reads adjacent
    elements: vector loads) and no read has the
    folded index last while the row's last index sits elsewhere (such a read is
    contiguous only along the row, as a dot product's).  AD's sums over points of
    per-point contributions (``sum_i a[i, k, c] * b[i, k, r]``) are of this kind; its
    transposed products (``sum_r l[k, r, c] * y[i, k, r]``) read little memory per row
    and fold best in blocks of rows (phase ``b``)."""
    rank = len(s.shape.type.items)
    if rank == 0:
        return False
    good = bad = major = 0
    for pos in _read_positions(s):
        if pos[-1] == rank - 1:
            good += 1
        elif pos[-1] == rank and rank - 1 in pos:
            bad += 1
        if len(pos) > 1 and pos[0] == rank:
            major += 1
    return good > 0 and bad == 0 and major > 0


def _read_positions(s: KFold) -> list:
    """For each array read of the fold's source (with a tuple index), which component of
    the source's index (rows, then the folded index) each of its index components is:
    ``a[i, k, j]`` in ``\\(i, k, r, j) -> ...`` gives ``[0, 1, 3]`` (None: not one)."""
    p = s.src.params[0]
    env: dict = {}

    def resolve(e):  # through let-bound variables and projections of tuples
        while True:
            if isinstance(e, N.Var) and e.name in env:
                e = env[e.name]
            elif isinstance(e, N.Prj):
                t = resolve(e.tup)
                if not isinstance(t, N.Tuple):
                    return N.Prj(e.index, t) if t is not e.tup else e
                e = t.items[e.index]
            else:
                return e

    def position(e):  # which index component of the source ``e`` is, or None
        e = resolve(e)
        if isinstance(e, N.Prj) and isinstance(e.tup, N.Var) and e.tup.name == p.name:
            return e.index
        return None

    out = []
    stack = [s.src.body]
    while stack:
        x = stack.pop()
        if isinstance(x, N.Let):
            env[x.var.name] = x.bound
        if isinstance(x, N.Index) and isinstance(x.array, N.Avar):
            ix = resolve(x.index)
            if isinstance(ix, N.Tuple) and ix.items:
                out.append([position(c) for c in ix.items])
        stack.extend(children(x))
    return out


def plane_blocked(s: KFold) -> bool:
    """Whether ``_row_blocks`` also blocks ``FOLD_PLANES`` adjacent rows of the second to
    last dimension (``_plane_block``): for small element functions with a read that
    depends on the rows' last index but not on the one before (``x[j, k, c]`` in
    ``g[k, r, c] = sum_j x[j, k, c] * y[j, k, r]``: a sum of outer products)."""
    rank = len(s.shape.type.items)
    if rank < 2 or len(leaves(s.out.type.elt)) != 1:
        return False
    ops, loops = count_ops(s.src, s.f)
    if loops or ops > FOLD_PLANE_MAX_OPS:
        return False
    return any(None not in pos and rank - 2 not in pos and rank - 1 in pos
               for pos in _read_positions(s))


def launch(s: KFold, plan, ev) -> Launch:
    """Chunk the rows when there are few long ones; then the interchanged phase (tiles of
    rows, or chunks of elements), the blocked phase or phase ``f``, as the kernels the
    step has (``plan.outer``, ``plan.blocked``) and the sizes allow."""
    shape = shape_of(ev(s.shape), "fold")
    n = inner_length(ev(s.n), "fold")
    size = size_of(shape)
    if s.z is None and n == 0:
        raise ShapeError(f"fold1: the innermost dimension is empty (shape "
                         f"{shape + (0,)})")
    outs = [(shape, size, dtypes(s.out.type))]
    work = [("o", k) for k in range(sum(len(o[2]) for o in outs))]
    mm = None if plan.contract is None else contract.usable(plan.contract, shape, n, ev)
    kch = contract.MM_SUM_CHUNKS  # chunks of a long sum (phase mmk)
    if mm is not None and "mmk" in plan.parallel and n >= kch * contract.MM_SPLIT_MIN_K:
        # a product over a long sum, by chunks of the sum (``contract.split_sum``)
        vals = {("n",): n, ("mode",): kch, ("tile",): 1}
        work += [("b", size * kch, dt) for dt in dtypes(s.out.type)]
        return Launch(shape, size, outs, work, [("mmk", kch, size * n), ("mmc", None, 0)],
                      vals)
    if mm is not None:  # a matrix product: BLAS (``contract``)
        vals = {("n",): n, ("mode",): 1, ("tile",): 1}
        return Launch(shape, size, outs, work + work, [("mm", mm, size * n)], vals)
    rows = FOLD_OUTER_CHUNK_MAX_ROWS if plan.outer else FOLD_CHUNK_MAX_ROWS
    chunk = n >= max(FOLD_CHUNK_MIN_N, FOLD_CHUNKS) and size < rows
    nch = FOLD_CHUNKS if chunk else 1
    vals: dict = {("n",): n, ("mode",): nch}
    phases = []
    if nch == 1:  # each row folds straight into the output
        work += work
    else:
        work += [("b", size * nch, dt) for dt in dtypes(s.out.type)]
    tile = 1
    if plan.outer and nch == 1 and n > 1:  # interchanged loops, tiles of rows
        tasks = PAR_TASKS_PER_THREAD * num_threads()
        tile = max(8, min(FOLD_TILE, -(-size // tasks)))
        phases.append(("o", -(-size // tile), size * n))
    elif plan.outer and nch > 1:  # interchanged, a chunk of elements per task
        phases += [("oc", nch, size * n), ("combc", None, 0)]
    elif plan.blocked and nch == 1 and n > 1:  # (outer folds are blocked too)
        phases.append(("b", size, size * n))
    elif nch > 1 and "oc" in plan.parallel and shape[-1] >= FOLD_WIDTHS[1]:
        # few long rows in blocks that fill a vector, a chunk of elements per task
        phases += [("oc", nch, size * n), ("combc", None, 0)]
    else:
        phases.append(("f", size * nch, size * n))
        if nch > 1:
            phases.append(("comb", None, 0))
    vals[("tile",)] = tile
    return Launch(shape, size, outs, work, phases, vals)
