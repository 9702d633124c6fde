"""Generate steps (``KGenerate``: ``out[i] = f(i)``, several outputs sharing ``f``): the
kernel and its launch rule.

Phase ``g``: rank 0 and 1 loop over elements; rank >= 2 over tiles of the last two
dimensions.  Rank >= 3 also has phase ``s`` (whole slices of the last two dimensions),
which the host launches instead when a slice is one tile.

Index-set splitting: a branch on ``i < e`` (or ``<=``, ``>``, ``>=``; ``i`` the element
index of rank 1, the column of a tile of rank >= 2), ``e`` a term not depending on the
index, splits the element (column) loop at ``e`` into two loops, each with the branch
decided (``branches.index_branch``).  Reverse mode writes such branches wherever an
adjoint covers a domain other than its primal's (``W[i] * h[i]`` with ``W`` and ``h``
of unrelated lengths: ``W``'s adjoint is ``if i < size h then ... else 0``); decided,
they leave a loop LLVM vectorizes.  Measured on the RNN of ``benchmarks/loops.py``:
its reverse step's ``W`` adjoint (10^4 elements, a ``tanh`` each) 68 us -> 17 us a step;
the corpus RNN's ``W`` adjoint (128 x 128, the column bound read from the loop tape's
record of the state's shape) 21 -> 8 us a step.

Windows: tests of the index plus a constant against sizes from both sides (``0 <= i + d
< n``, ``branches.window``: the adjoint of shifted reads) are all decided in the window's
interior, which runs as one loop, while both borders run the function as written in a
second loop; the rows of a tile are split the same way.  The 5-point stencil's adjoint
(ten such tests an element): 3.0 -> 1.0 ms over 1024 x 1024.
"""

from __future__ import annotations

from accel.ast import nodes as N
from accel.backends.numba.host import shape_of, size_of
from accel.backends.numba.kernelgen import out_names
from accel.fusion.kernels import KGenerate
from accel.simplify.rounds import tidy

from .branches import BELOW, FALSE, SHIFT, TRUE, decide, index_branch, window
from .emitter import KernelGen, advance_row, row_counter
from .plan import Launch, dtypes

TILE_ROWS = 32  # tiles of rank >= 2 generates (last two dimensions)
TILE_COLS = 256
SPLIT_DEPTH = 2  # nested splits of one loop: at most 2**SPLIT_DEPTH copies of its body


def emit(s: KGenerate, check: bool):
    """Phase ``g``: rank 0 and 1 loop over elements; rank >= 2 over tiles of
    ``TILE_ROWS x TILE_COLS`` of the last two dimensions (times the outer indices), so
    that no division is needed per element and gathers along either of the last two
    dimensions stay cache-friendly.  Rank >= 3 also gets phase ``s`` (:func:`_slices`),
    which the runtime launches instead when a slice is one tile."""
    g = KernelGen(check, hoist=True)
    rank = len(s.shape.type.items)
    dims = [g.slot(("out", d)) for d in range(rank)]
    outs = [out_names(k, o.type) for k, o in enumerate(s.outs)]
    g.work = [b for bs in outs for b in bs]
    g.begin("g")

    def body(ix, k, f=s.f):
        v = g.apply(f, (tuple(ix),))
        comps = (v,) if len(s.outs) == 1 else v
        for bufs, c in zip(outs, comps):
            g.store(bufs, k, c)

    if rank == 0:
        k = g.fresh("k")
        g.loop(k, "range(lo, hi)")
        body([], k)
        return g, {}
    if rank == 1:
        _split_loop(g, s.f, "lo", "hi", SPLIT_DEPTH, lambda f, k: body([k], k, f), 0)
        return g, {}
    R, C = dims[-2], dims[-1]
    nrt, nct = g.slot(("nrt",)), g.slot(("nct",))
    t, ct, q, rt, o = (g.fresh(x) for x in ("t", "ct", "q", "rt", "o"))
    i0, i1, j0, j1, rb, k = (g.fresh(x) for x in ("i", "i", "j", "j", "rb", "k"))
    g.loop(t, "range(lo, hi)")
    g.emit(f"{ct} = {t} % {nct}")
    g.emit(f"{q} = {t} // {nct}")
    g.emit(f"{rt} = {q} % {nrt}")
    g.emit(f"{o} = {q} // {nrt}")
    oix = g.unravel(o, dims[:-2])
    g.emit(f"{i0} = {rt} * {TILE_ROWS}")
    g.emit(f"{i1} = min({i0} + {TILE_ROWS}, {R})")
    g.emit(f"{j0} = {ct} * {TILE_COLS}")
    g.emit(f"{j1} = min({j0} + {TILE_COLS}, {C})")

    def row(f, i, depth=SPLIT_DEPTH):
        g.emit(f"{rb} = ({o} * {R} + {i}) * {C}")

        def element(f, j):
            g.emit(f"{k} = {rb} + {j}")
            body(oix + [i, j], k, f)
        _split_loop(g, f, j0, j1, depth, element, rank - 1)
    # (rows are split only at a window, see ``_window_rows``: a single branch on the row
    # is invariant in the column loop, which LLVM unswitches; splitting rows at it was
    # no faster on the RNN's 128 x 128 adjoint)
    w = window(s.f, rank - 2)
    if w is None:
        _split_loop(g, s.f, i0, i1, 0, row, rank - 2)
    else:
        _window_rows(g, s.f, w, i0, i1, row)
    if rank >= 3:
        slices(g, dims, body)
    return g, {}


def _split_loop(g: KernelGen, f: N.Lam, lo: str, hi: str, depth: int, body,
                comp: int) -> None:
    """``for k in range(lo, hi): body(f, k)``, split at ``index_branch(f, (comp,))`` (see
    the module docstring) into loops with ``f``'s branch decided, ``depth`` times.  The
    split point is computed only for a non-empty range: it may read an element (which
    ``f`` reads for every index, so not when there is none)."""
    w = window(f, comp) if depth else None
    if w is not None:
        _window_loop(g, f, w, lo, hi, depth, body, comp)
        return
    sp = index_branch(f, (comp,), reads=True) if depth else None
    if sp is None:
        k = g.fresh("k")
        g.loop(k, f"range({lo}, {hi})")
        body(f, k)
        g.ind -= 1
        return
    test, op, e, _ = sp
    mid = g.fresh("m")
    g.emit(f"{mid} = {lo}")
    g.emit(f"if {hi} > {lo}:")
    g.ind += 1
    v = g.exp(e)
    g.emit(f"{mid} = min(max({v} + {SHIFT[op]}, {lo}), {hi})")
    g.ind -= 1
    below, above = (TRUE, FALSE) if BELOW[op] else (FALSE, TRUE)
    _split_loop(g, tidy(decide(f, test, below)), lo, mid, depth - 1, body, comp)
    _split_loop(g, tidy(decide(f, test, above)), mid, hi, depth - 1, body, comp)


def _window_bounds(g: KernelGen, w, lo: str, hi: str):
    """Names of ``[a, b)``, the interior of window ``w`` (``branches.window``) within
    ``[lo, hi)`` (``lo <= a <= b <= hi``)."""
    _, lower, upper = w
    a, b = g.fresh("wa"), g.fresh("wb")
    g.emit(f"{a} = {lo}")
    for e, shift in lower:
        g.emit(f"{a} = max({a}, {g.exp(e)} + {shift})")
    g.emit(f"{a} = min({a}, {hi})")
    g.emit(f"{b} = {hi}")
    for e, shift in upper:
        g.emit(f"{b} = min({b}, {g.exp(e)} + {shift})")
    g.emit(f"{b} = max({b}, {a})")
    return a, b


def _inside(f: N.Lam, w) -> N.Lam:
    """``f`` with the tests of window ``w`` decided: its values in the interior."""
    for t in w[0]:
        f = decide(f, t, TRUE)
    return tidy(f)


def _window_loop(g: KernelGen, f: N.Lam, w, lo: str, hi: str, depth: int, body,
                 comp: int) -> None:
    """``for k in range(lo, hi): body(f, k)`` as the interior of window ``w`` with its
    tests decided (split further, ``depth - 1`` times) and one loop over both borders
    running ``f`` as it is (two copies of the body, not one per border)."""
    a, b = _window_bounds(g, w, lo, hi)
    q, k = g.fresh("q"), g.fresh("k")
    g.loop(q, f"range({hi} - {b} + {a} - {lo})")
    g.emit(f"{k} = {lo} + {q} if {q} < {a} - {lo} else {b} + ({q} - ({a} - {lo}))")
    body(f, k)
    g.ind -= 1
    _split_loop(g, _inside(f, w), a, b, depth - 1, body, comp)


def _window_rows(g: KernelGen, f: N.Lam, w, lo: str, hi: str, row) -> None:
    """The rows ``[lo, hi)`` of a tile: those inside window ``w`` (on the row) with its
    tests decided and the columns split, the border rows as they are (one column loop,
    no split: a few rows)."""
    a, b = _window_bounds(g, w, lo, hi)
    i = g.fresh("k")
    g.loop(i, f"range({lo}, {hi})")
    g.emit(f"if {a} <= {i} < {b}:")
    g.ind += 1
    row(_inside(f, w), i)
    g.ind -= 1
    g.emit("else:")
    g.ind += 1
    row(f, i, 0)
    g.ind -= 2


def slices(g: KernelGen, dims: list, body) -> None:
    """Phase ``s``: tasks are whole slices of the last two dimensions, for when a slice is
    one tile (the same tasks as phase ``g``).  The outer index advances by a counter, so
    there is no division per task, and the loop bounds are invariant: small slices, the
    GMM's (points, K, D) arrays with D = 2, are 25-30% faster (phase ``g`` spends two
    divisions and its loops' set-up on every 10-element tile)."""
    g.begin("s")
    R, C, outer = dims[-2], dims[-1], dims[:-2]
    o, i, j, rb, k = (g.fresh(x) for x in ("o", "i", "j", "rb", "k"))
    if len(outer) == 1:
        g.loop(o, "range(lo, hi)")
        oix = [o]
    else:
        pr, oix = row_counter(g, outer)
        g.loop(o, "range(lo, hi)")
        advance_row(g, o, pr, oix, outer)
    g.loop(i, f"range({R})")
    g.emit(f"{rb} = ({o} * {R} + {i}) * {C}")
    g.loop(j, f"range({C})")
    g.emit(f"{k} = {rb} + {j}")
    body(oix + [i, j], k)


def launch(s: KGenerate, plan, ev) -> Launch:
    """Phase ``g`` over elements or tiles; ``s`` instead when a slice is one tile
    (rank >= 3: the same tasks)."""
    shape = shape_of(ev(s.shape), "generate")
    size = size_of(shape)
    vals: dict = {}
    phases = []
    outs = [(shape, size, dtypes(o.type)) for o in s.outs]
    work = [("o", k) for k in range(sum(len(o[2]) for o in outs))]
    if len(shape) >= 2:
        nrt = -(-shape[-2] // TILE_ROWS)
        nct = -(-shape[-1] // TILE_COLS)
        vals[("nrt",)], vals[("nct",)] = nrt, nct
        one_tile = len(shape) >= 3 and nrt == nct == 1  # phase s: same tasks
        phases.append(("s" if one_tile else "g", size_of(shape[:-2]) * nrt * nct, size))
    else:
        phases.append(("g", size, size))
    return Launch(shape, size, outs, work, phases, vals)
